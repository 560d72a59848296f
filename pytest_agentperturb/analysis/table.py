"""The episode table as the analysis sees it: normalised columns, clean/perturbed pairs, populations.

:func:`normalise` turns any episode table (the store's rows, a user's CSV with
only ``model, suite, task, family, reward``) into one with every
:data:`~pytest_agentperturb.model.records.COLUMNS` column, proper dtypes and a
boolean ``baseline`` column and an integer ``repeat`` column; :func:`pairs`
joins each scored perturbed episode with the scored clean episode(s) of the
same run, model, suite, task and repeat (docs/design.md section 4,
"Metrics": the pairing rule, and section 4.1 for repeats), and
:func:`pairing_audit` counts what the pairing left out and why.
:func:`pooled` is the population of every real-model aggregate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..model.errors import AgentPerturbError
from ..model.keys import KEY_FIELDS
from ..model.records import COLUMNS, KINDS, SCHEMA, STORE_COLUMNS
from ..model.task import CLEAN, FAMILIES, IMAGE_OBJECTS, INSERTED, family_parts

if TYPE_CHECKING:
    import pandas as pd

#: Columns an ``analyze`` input must have (docs/design.md names them).
REQUIRED: tuple[str, ...] = ("model", "suite", "task", "family", "reward")
#: Usage counters compared between clean and perturbed episodes.
USAGE: tuple[str, ...] = ("input_tokens", "output_tokens", "reasoning_tokens", "tool_calls", "turns")
#: Key that pairs a perturbed episode with its clean episode: repeat r of a
#: perturbed item pairs with repeat r of the clean item (one repeat: repeat 0).
PAIR_KEY: tuple[str, ...] = tuple(k for k in KEY_FIELDS if k not in ("family", "seed"))  # the episode's, less the variant's
#: Fallback for tables without a ``baseline`` column: reference agents' model names start with this.
BASELINE_PREFIX = "reference/"
#: Why a perturbed episode or a clean score stayed out of a comparison (columns of :func:`pairing_audit`).
DROP_REASONS: tuple[str, ...] = ("clean_error", "perturbed_error", "no_clean", "no_variant")
#: Families the plugin offers to every task by default (docs/design.md section 2): only these can be a
#: "variant missing" of a task; image objects and an adapter's own objects go only where they apply.
OFFERED_EVERYWHERE: frozenset[str] = frozenset((*FAMILIES, *INSERTED))
DROP_LABELS: dict[str, str] = {"clean_error": "clean error", "perturbed_error": "perturbed error",
                               "no_clean": "no clean episode", "no_variant": "variant missing"}


def parse_bool(x: Any) -> bool | None:
    """``True``/``False`` from bools, 0/1 and their spellings; ``None`` for blanks.

    Raises:
        ValueError: for anything else (the caller names the column).
    """
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if isinstance(x, bool):
        return x
    if isinstance(x, (int, float)) and x in (0, 1):
        return bool(x)
    s = str(x).strip().lower()
    if s in ("", "none", "nan", "na", "<na>"):
        return None
    if s in ("1", "true", "t", "yes", "y", "1.0"):
        return True
    if s in ("0", "false", "f", "no", "n", "0.0"):
        return False
    raise ValueError(f"not a boolean: {x!r}")


_FLOAT_BOOLS = {0.0: False, 1.0: True}


def _bools(values: Iterable[Any]) -> list[bool | None]:
    """:func:`parse_bool` of each value (bools, None and the 0/1 of a number, without the call)."""
    fast = _FLOAT_BOOLS
    return [v if type(v) is bool or v is None else fast[v] if (type(v) is int or type(v) is float) and v in fast
            else parse_bool(v) for v in values]


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _text(v: Any) -> str:
    """A text cell: ``""`` for None and NaN, else ``str(v)``."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _fill(v: Any) -> Any:
    """``Series.fillna("")`` of one cell: ``""`` for None and NaN, else the value as it is."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _trajectory(v: Any) -> Any:
    """A trajectory cell: ``"[]"`` for None, ``""`` and NaN, else the value as it is (JSON text or a list)."""
    return "[]" if v is None or (isinstance(v, str) and v == "") or (isinstance(v, float) and math.isnan(v)) else v


def _number(v: Any) -> float:
    """A number cell: NaN for a blank, else ``float(v)``."""
    return v if type(v) is float else float("nan") if _blank(v) else float(v)


def _index(v: Any) -> int:
    """An integer cell (the repeat index): 0 for a blank."""
    return v if type(v) is int else 0 if _blank(v) else int(float(v))


#: The schema's columns by kind (:class:`~..model.records.Column`).
_TEXT, _NUMERIC, _BOOL = KINDS["text"], KINDS["number"], KINDS["bool"]
(_TARGET, _TYPE), (_TRAJECTORY,), (_BASELINE,), (_REPEAT,) = KINDS["part"], KINDS["trajectory"], KINDS["flag"], \
    KINDS["index"]
_KIND = {c.name: c.kind for c in SCHEMA}


class CellError(ValueError):
    """A cell that cannot be read as its column's kind: ``column`` names the column, ``kind`` what it must be."""

    def __init__(self, column: str, kind: str, reason: str) -> None:
        super().__init__(f"column {column!r}: {reason}")
        self.column, self.kind, self.reason = column, kind, reason


def _target_type(families: list[str], targets: list[Any], types: list[Any]) -> tuple[list[str], list[str]]:
    """``target`` and ``type`` of each episode: known ids (families, clean, built-in inserted objects) decide;
    other object ids keep what the table says (blank: ``"object"``)."""
    known = {*FAMILIES, CLEAN, *INSERTED, *IMAGE_OBJECTS}
    parts = {f: family_parts(f) for f in set(families) if f in known}
    return ([parts[f][0] if f in parts else (t or "object") for f, t in zip(families, targets)],
            [parts[f][1] if f in parts else (k or "object") for f, k in zip(families, types)])


def normalise_columns(columns: Mapping[str, Sequence[Any]], n: int, *, threshold: float = 1.0) -> dict[str, list[Any]]:
    """The normalised values of every stored column (:data:`~..model.records.STORE_COLUMNS`), column by column.

    The one implementation behind :func:`normalise` (a DataFrame) and
    :func:`normalise_rows` (plain dicts, without pandas: the task pages'
    worker).  ``columns`` maps a column to its ``n`` cells; an absent column
    is blank.  By the column's kind (:class:`~..model.records.Column`):
    text ``""`` for blank (``error`` stripped), numbers floats (NaN for
    blank), ``success``/``compliance`` parsed (``success`` from ``reward >=
    threshold`` where blank), ``target``/``type`` derived from ``family``,
    ``trajectory`` ``"[]"`` for blank, ``baseline`` a bool (blank: the model
    name starts with :data:`BASELINE_PREFIX`), ``repeat`` an int (blank: 0).

    Raises:
        CellError: a cell it cannot read (naming the column).
    """
    blank = [None] * n
    out: dict[str, list[Any]] = {}
    for c in _TEXT:
        out[c] = [v if type(v) is str else _text(v) for v in columns.get(c, blank)]
    out["error"] = [e.strip() for e in out["error"]]
    for c in _NUMERIC:
        try:   # a float or an int as it is read from the store, without the call
            out[c] = [v if type(v) is float else float(v) if type(v) is int else _number(v)
                      for v in columns.get(c, blank)]
        except (TypeError, ValueError) as exc:
            raise CellError(c, "number", str(exc)) from None
    for c in _BOOL:
        try:
            out[c] = _bools(columns.get(c, blank))
        except ValueError as exc:
            raise CellError(c, "bool", str(exc)) from None
    out["success"] = [bool(r >= threshold) if s is None and r == r else s
                      for s, r in zip(out["success"], out["reward"])]
    out[_TARGET], out[_TYPE] = _target_type(out["family"], [_fill(v) for v in columns.get(_TARGET, blank)],
                                            [_fill(v) for v in columns.get(_TYPE, blank)])
    out[_TRAJECTORY] = [_trajectory(v) for v in columns.get(_TRAJECTORY, blank)]
    try:
        given = _bools(columns.get(_BASELINE, blank))
    except ValueError as exc:
        raise CellError(_BASELINE, "bool", str(exc)) from None
    out[_BASELINE] = [m.startswith(BASELINE_PREFIX) if g is None else g for g, m in zip(given, out["model"])]
    try:
        out[_REPEAT] = [_index(v) for v in columns.get(_REPEAT, blank)]
    except (TypeError, ValueError) as exc:
        raise CellError(_REPEAT, "integer", str(exc)) from None
    return {c: out[c] for c in STORE_COLUMNS}


def normalise_rows(rows: Iterable[Mapping[str, Any]], *, threshold: float = 1.0) -> list[dict[str, Any]]:
    """What :func:`normalise` makes of store rows, as plain dicts, without pandas (the task pages' worker).

    Each row with every stored column normalised (:func:`normalise_columns`);
    other keys (``diff``, ``canaries`` ...) are kept as they are.

    Raises:
        ValueError: a cell that :func:`normalise` would refuse too (a number or boolean it cannot read).
    """
    out = [dict(r) for r in rows]
    values = normalise_columns({c: [r.get(c) for r in out] for c in STORE_COLUMNS}, len(out), threshold=threshold)
    names = tuple(values)
    for r, cells in zip(out, zip(*values.values())):
        r.update(zip(names, cells))
    return out


def _column(values: list[Any], index: Any) -> Any:
    """Values for a column, typed as ``Series.map`` types them (an empty column stays ``object``)."""
    import pandas as pd

    return values if values else pd.Series(values, index=index, dtype=object)


def normalise(df: pd.DataFrame, *, threshold: float = 1.0, source: str = "episode table") -> pd.DataFrame:
    """Every :data:`COLUMNS` column, typed, plus ``baseline``; derives what a short table lacks.

    ``target``/``type`` come from ``family``; ``success`` (when absent or
    blank) is ``reward >= threshold``; ``error``, ``operator``, labels and
    ``run_id`` default to empty strings; usage counters and ``reward``
    default to NaN (blank cells too: unknown usage is NULL, never 0).
    ``baseline`` is the table's ``baseline`` column where given; where that
    column is absent (or a cell is blank) it falls back to the model name
    starting with ``reference/`` (the offline reference agents).
    ``repeat`` (the repeat index under ``--agentperturb-repeats``) is an
    integer; a table without it (or a blank cell) is repeat 0.  The values
    are those of :func:`normalise_columns`.

    Raises:
        AgentPerturbError: naming ``source``, the column and the bad value.
    """
    import pandas as pd

    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise AgentPerturbError(
            f"{source}: missing column(s) {', '.join(missing)}; an episode table needs at least "
            f"{', '.join(REQUIRED)} (optional: {', '.join(c for c in COLUMNS if c not in REQUIRED)}, baseline)")
    try:
        values = normalise_columns({c: df[c].tolist() for c in STORE_COLUMNS if c in df.columns}, len(df),
                                   threshold=threshold)
    except CellError as exc:
        fix = {"number": "must be numeric", "integer": "must be an integer"}
        raise AgentPerturbError(f"{source}: column {exc.column!r} {fix[exc.kind]} ({exc.reason})"
                                if exc.kind in fix else f"{source}: {exc}; use true/false or 1/0") from None
    out = df.copy()
    index = out.index
    for c, cells in values.items():
        kind = _KIND[c]
        if kind == "number":
            out[c] = pd.Series(cells, index=index, dtype=float)
        elif kind == "bool":
            out[c] = pd.Series(cells, index=index, dtype=object)
        elif kind == "flag":
            out[c] = pd.Series(cells, index=index, dtype=bool)
        elif kind == "index":
            out[c] = pd.Series(cells, index=index, dtype=int)
        elif kind == "part":
            out[c] = cells
        else:   # text, as ``Series.map`` types it
            out[c] = _column(cells, index)
    return out[[*COLUMNS, *[c for c in out.columns if c not in COLUMNS]]]


def only(df: pd.DataFrame, names: Iterable[str]) -> pd.DataFrame:
    """``df`` with just those of ``names`` among its columns: the filters and copies after it move less."""
    return df[[c for c in dict.fromkeys(names) if c in df.columns]]


def with_repeat(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``repeat`` column (0 where a table has none)."""
    return df if "repeat" in df.columns else df.assign(repeat=0)


def scored(df: pd.DataFrame) -> pd.DataFrame:
    """Episodes that could be scored: ``error`` empty and a reward present."""
    return df[(df["error"] == "") & df["reward"].notna()]


def tokens(df: pd.DataFrame) -> pd.Series:
    """Tokens of each episode: input + output; NaN (unknown) when either is unknown.

    Output tokens are the provider's completion tokens, which already include
    the reasoning tokens, so ``reasoning_tokens`` is never added again.
    """
    return df["input_tokens"] + df["output_tokens"]


def pooled_models(df: pd.DataFrame) -> list[str]:
    """Models of real-model aggregates: the non-baseline models when the table has any, else every model."""
    if not len(df):
        return []
    if "baseline" not in df.columns:
        return sorted(str(m) for m in df["model"].unique())
    base = df.groupby("model", sort=True)["baseline"].any()
    real = [str(m) for m, b in base.items() if not b]
    return real or [str(m) for m in base.index]


def pooled(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``df`` (episodes or pairs) that enter real-model aggregates ("all models", suite average).

    Baselines (``baseline`` true) are left out whenever the table holds at
    least one non-baseline model; a table of baselines only pools them all.
    """
    if not len(df) or "baseline" not in df.columns or not df["baseline"].any() or df["baseline"].all():
        return df
    return df[~df["baseline"].astype(bool)]


def is_pairs(df: pd.DataFrame) -> bool:
    """Whether ``df`` is a :func:`pairs` table rather than an episode table."""
    return "reward_clean" in df.columns and "reward_pert" in df.columns


def as_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` if it already is a :func:`pairs` table, else its pairs."""
    return df if is_pairs(df) else pairs(df)


def pairs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per scored perturbed episode joined with its scored clean counterpart.

    Columns: the pair key, ``baseline, family, target, type, operator,
    seed, compliance, awareness, behaviour``, then ``<x>_clean`` and
    ``<x>_pert`` for reward, success, tokens and each usage counter, and
    ``delta = reward_clean - reward_pert`` (the paired drop).  The key
    holds the repeat index, so repeat r of a perturbed item pairs with
    repeat r of the clean item.  Several
    scored clean episodes of one key are averaged (success: mean >= 0.5;
    usage: mean of the known values).  A perturbed episode whose clean
    partner is missing or unscored, or which is unscored itself, forms no
    pair (:func:`pairing_audit` counts them).
    """
    import pandas as pd

    d = scored(with_repeat(only(df, (*PAIR_KEY, "baseline", "family", "target", "type", "operator", "seed",
                                     "compliance", "awareness", "behaviour", "error", "reward", "success",
                                     *USAGE)))).copy()
    d["tokens"] = tokens(d)
    d["success_f"] = d["success"].map(lambda v: float(bool(v)) if v is not None else float("nan"))
    vals = ["reward", "success_f", "tokens", *USAGE]
    clean = d[d["family"] == CLEAN].groupby(list(PAIR_KEY), sort=True)[vals].mean().reset_index()
    pert = d[d["family"] != CLEAN][[*PAIR_KEY, "baseline", "family", "target", "type", "operator", "seed",
                                    "compliance", "awareness", "behaviour", *vals]]
    m = pert.merge(clean, on=list(PAIR_KEY), suffixes=("_pert", "_clean"), how="inner")
    for side in ("clean", "pert"):
        m[f"success_{side}"] = m[f"success_f_{side}"] >= 0.5
        m = m.drop(columns=[f"success_f_{side}"])
    m["delta"] = m["reward_clean"] - m["reward_pert"]
    return m.sort_values([*PAIR_KEY, "family", "seed"], kind="mergesort").reset_index(drop=True) \
        if len(m) else pd.DataFrame(m)


def pairing_audit(df: pd.DataFrame) -> pd.DataFrame:
    """Per (run_id, model, suite, task, repeat, family): pairs formed and what the pairing left out, and why.

    Columns: the key, ``baseline, target, type, n_episodes`` (perturbed
    episodes), ``n_pairs`` and one count per :data:`DROP_REASONS`:
    ``perturbed_error`` (the perturbed episode is unscored), ``no_clean``
    (no clean episode of the task), ``clean_error`` (every clean episode of
    the task is unscored), ``no_variant`` (1 on a row of its own when a task
    with a scored clean episode has no episode of a family that the model
    ran on other tasks of the run and suite, e.g. a variant skipped by the
    validity checks: its clean score stays out of that family's comparison).
    Only the families offered to every task (:data:`OFFERED_EVERYWHERE`) can
    be missing: an image object or an adapter's own object is offered only to
    the tasks it applies to, so a task without it lacks nothing.
    """
    import numpy as np
    import pandas as pd

    key = list(PAIR_KEY)
    cols = [*key, "family", "baseline", "target", "type", "n_episodes", "n_pairs", *DROP_REASONS]
    if not len(df):
        return pd.DataFrame(columns=cols)
    df = with_repeat(only(df, (*key, "family", "baseline", "target", "type", "error", "reward")))
    ok = ((df["error"] == "") & df["reward"].notna()).to_numpy()
    is_clean = (df["family"] == CLEAN).to_numpy()
    c = df[is_clean].assign(_ok=ok[is_clean]).groupby(key, sort=False)["_ok"].any()
    p = df[~is_clean].assign(_ok=ok[~is_clean])
    if not len(p):
        return pd.DataFrame(columns=cols)
    kidx = pd.MultiIndex.from_frame(p[key])
    has_clean = kidx.isin(c.index)
    clean_ok = np.zeros(len(p), dtype=bool)
    clean_ok[has_clean] = c.reindex(kidx[has_clean]).to_numpy(dtype=bool)
    pok = p["_ok"].to_numpy(dtype=bool)
    p = p.assign(n_episodes=1, perturbed_error=(~pok).astype(int),
                 no_clean=(pok & ~has_clean).astype(int), clean_error=(pok & has_clean & ~clean_ok).astype(int),
                 n_pairs=(pok & clean_ok).astype(int), no_variant=0)
    grouped = p.groupby([*key, "family"], sort=True)
    counts = ["n_episodes", "n_pairs", "perturbed_error", "no_clean", "clean_error", "no_variant"]
    agg = pd.concat([grouped[["baseline", "target", "type"]].first(), grouped[counts].sum()], axis=1).reset_index()
    # variants missing: tasks with a scored clean episode x families the model ran in that run and suite
    have = set(zip(*(agg[c].tolist() for c in (*key, "family"))))
    fam_sets: dict[tuple[Any, ...], set[str]] = {}
    base_of: dict[tuple[Any, ...], bool] = {}
    parts: dict[str, tuple[str, str]] = {}
    for run_id, model, suite, f, b, t, k in zip(*(agg[c].tolist() for c in ("run_id", "model", "suite", "family",
                                                                             "baseline", "target", "type"))):
        fam_sets.setdefault((run_id, model, suite), set())
        if f in OFFERED_EVERYWHERE:
            fam_sets[(run_id, model, suite)].add(f)
        base_of.setdefault((run_id, model, suite), b)
        parts[f] = (t, k)
    fams = {r: sorted(v) for r, v in fam_sets.items()}
    gaps: list[dict[str, Any]] = []
    for (run_id, model, suite, task, repeat), good in c.items():
        if not good or (run_id, model, suite) not in fams:
            continue
        for f in fams[(run_id, model, suite)]:
            if (run_id, model, suite, task, repeat, f) not in have:
                t, k = parts[f]
                gaps.append({"run_id": run_id, "model": model, "suite": suite, "task": task, "repeat": repeat,
                             "family": f,
                             "baseline": bool(base_of[(run_id, model, suite)]), "target": t, "type": k,
                             "n_episodes": 0, "n_pairs": 0, "perturbed_error": 0, "no_clean": 0, "clean_error": 0,
                             "no_variant": 1})
    out = pd.concat([agg, pd.DataFrame(gaps, columns=cols)], ignore_index=True) if gaps else agg
    return out[cols]


def describe_drops(counts: dict[str, int]) -> str:
    """``"2 clean error, 1 variant missing"`` from reason counts (empty when nothing was dropped)."""
    return ", ".join(f"{int(counts[r])} {DROP_LABELS[r]}" for r in DROP_REASONS if counts.get(r))
