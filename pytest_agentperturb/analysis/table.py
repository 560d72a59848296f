"""The episode table as the analysis sees it: normalised columns and clean/perturbed pairs.

:func:`normalise` turns any episode table (the store's rows, a user's CSV with
only ``model, suite, task, family, reward``) into one with every
:data:`~pytest_agentperturb.records.COLUMNS` column and proper dtypes;
:func:`pairs` joins each perturbed episode with the clean episode of the same
run, model, suite and task (DESIGN.md section 3: a pair).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..model.errors import AgentPerturbError
from ..model.records import COLUMNS
from ..model.task import CLEAN, FAMILIES, IMAGE_OBJECTS, INSERTED, family_parts

if TYPE_CHECKING:
    import pandas as pd

#: Columns an ``analyze`` input must have (DESIGN.md section 3 names them).
REQUIRED: tuple[str, ...] = ("model", "suite", "task", "family", "reward")
#: Usage counters compared between clean and perturbed episodes.
USAGE: tuple[str, ...] = ("input_tokens", "output_tokens", "reasoning_tokens", "tool_calls", "turns")
#: Key that pairs a perturbed episode with its clean episode.
PAIR_KEY: tuple[str, ...] = ("run_id", "model", "suite", "task")
_NUMERIC = ("reward", "seed", "cost_usd", "wall_s", *USAGE)


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


def normalise(df: pd.DataFrame, *, threshold: float = 1.0, source: str = "episode table") -> pd.DataFrame:
    """Every :data:`COLUMNS` column, typed; derives what a short table lacks.

    ``target``/``type`` come from ``family``; ``success`` (when absent or
    blank) is ``reward >= threshold``; ``error``, ``operator``, labels and
    ``run_id`` default to empty strings, usage counters to NaN.

    Raises:
        AgentPerturbError: naming ``source``, the column and the bad value.
    """
    import pandas as pd

    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise AgentPerturbError(
            f"{source}: missing column(s) {', '.join(missing)}; an episode table needs at least "
            f"{', '.join(REQUIRED)} (optional: {', '.join(c for c in COLUMNS if c not in REQUIRED)})")
    out = df.copy()
    for c in COLUMNS:
        if c not in out.columns:
            out[c] = None
    for c in ("run_id", "model", "suite", "task", "family", "operator", "error", "awareness", "behaviour"):
        out[c] = out[c].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    # known ids (families, clean, built-in inserted objects) decide target/type; other
    # object ids keep what the table says, or "object"
    known = {*FAMILIES, CLEAN, *INSERTED, *IMAGE_OBJECTS}
    out["target"] = [family_parts(f)[0] if f in known else (t or "object")
                     for f, t in zip(out["family"], out["target"].fillna(""))]
    out["type"] = [family_parts(f)[1] if f in known else (k or "object")
                   for f, k in zip(out["family"], out["type"].fillna(""))]
    for c in _NUMERIC:
        try:
            out[c] = pd.to_numeric(out[c], errors="raise").astype(float)
        except (ValueError, TypeError) as exc:
            raise AgentPerturbError(f"{source}: column {c!r} must be numeric ({exc})") from None
    for c in ("success", "compliance"):
        try:
            out[c] = pd.Series([parse_bool(v) for v in out[c]], index=out.index, dtype=object)
        except ValueError as exc:
            raise AgentPerturbError(f"{source}: column {c!r}: {exc}; use true/false or 1/0") from None
    need = out["success"].isna() & out["reward"].notna()
    out.loc[need, "success"] = pd.Series(out.loc[need, "reward"] >= threshold, dtype=object)
    out["trajectory"] = out["trajectory"].map(lambda v: "[]" if v is None or v == "" or (
        isinstance(v, float) and math.isnan(v)) else v)
    return out[[*COLUMNS, *[c for c in out.columns if c not in COLUMNS]]]


def scored(df: pd.DataFrame) -> pd.DataFrame:
    """Episodes that could be scored: ``error`` empty and a reward present."""
    return df[(df["error"] == "") & df["reward"].notna()]


def tokens(df: pd.DataFrame) -> pd.Series:
    """Total tokens of each episode: input + output (+ reasoning where recorded)."""
    return df["input_tokens"].fillna(0) + df["output_tokens"].fillna(0) + df["reasoning_tokens"].fillna(0)


def pairs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per perturbed episode joined with its clean counterpart.

    Columns: the pair key, ``family, target, type, operator, compliance``,
    then ``<x>_clean`` and ``<x>_pert`` for reward, success, tokens and each
    usage counter, and ``delta = reward_clean - reward_pert`` (the paired
    drop).  Several clean episodes of one key are averaged (success: mean
    >= 0.5).  Perturbed episodes without a clean counterpart are dropped.
    """
    import pandas as pd

    d = scored(df).copy()
    d["tokens"] = tokens(d)
    d["success_f"] = d["success"].map(lambda v: float(bool(v)) if v is not None else float("nan"))
    vals = ["reward", "success_f", "tokens", *USAGE]
    clean = d[d["family"] == CLEAN].groupby(list(PAIR_KEY), sort=True)[vals].mean().reset_index()
    pert = d[d["family"] != CLEAN][[*PAIR_KEY, "family", "target", "type", "operator", "seed", "compliance",
                                    "awareness", "behaviour", *vals]]
    m = pert.merge(clean, on=list(PAIR_KEY), suffixes=("_pert", "_clean"), how="inner")
    for side in ("clean", "pert"):
        m[f"success_{side}"] = m[f"success_f_{side}"] >= 0.5
        m = m.drop(columns=[f"success_f_{side}"])
    m["delta"] = m["reward_clean"] - m["reward_pert"]
    return m.sort_values([*PAIR_KEY, "family", "seed"], kind="mergesort").reset_index(drop=True) \
        if len(m) else pd.DataFrame(m)
