"""The CI gate (docs/design.md section 5): thresholds in, verdict out.

Thresholds are options of :data:`~.model.options.OPTIONS` (group ``gate``);
:func:`parse` validates their raw values (a bad value is an
:class:`~.model.errors.OptionError` naming the flag or ini key and the
value).  :func:`evaluate` measures every configured threshold per model and
suite on an :class:`~.analysis.Analysis`; each breach is one line with the
measured value and the limit.  A configured threshold that cannot be
evaluated (nothing scored, no clean episodes, no perturbed episodes at that
level, clean score 0) is a breach too, with a line that says why: the gate
never passes on nothing.  Nothing here knows about pytest: the plugin and the
``agentperturb`` command turn a failed verdict into an exit status.

Baselines (agents flagged ``baseline``, such as the reference agents): when
at least one non-baseline model ran, the gate judges only the non-baseline
models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .model.errors import OptionError
from .model.options import OPTIONS, Option
from .model.task import CLEAN, FAMILIES, TARGETS

if TYPE_CHECKING:
    import argparse

    import pandas as pd

    from .analysis import Analysis

#: The threshold options, in declaration order.
SPECS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.group == "gate")
ALL = "*"


@dataclass(frozen=True)
class Thresholds:
    """Validated gate configuration."""

    max_drop: float | None = None
    max_target_drop: Mapping[str, float] = field(default_factory=dict)
    max_family_drop: Mapping[str, float] = field(default_factory=dict)
    min_bypass: float | None = None
    min_clean: float | None = None
    strict: bool = False
    #: how breach lines name each threshold (the pytest flag, or the command's flag)
    names: Mapping[str, str] = field(default_factory=lambda: {s.dest: s.flag for s in SPECS})

    @property
    def configured(self) -> bool:
        """Whether any threshold is set."""
        return any(v not in (None, {}) for v in (self.max_drop, self.max_target_drop, self.max_family_drop,
                                                 self.min_bypass, self.min_clean))


@dataclass(frozen=True)
class Breach:
    """One breached threshold for one model and suite; ``reason`` says why it could not be evaluated."""

    flag: str
    subject: str
    measured: float
    limit: float
    what: str
    reason: str = ""

    def line(self) -> str:
        if self.reason:
            return (f"agentperturb gate: {self.flag} not evaluated for {self.subject}: {self.reason} "
                    "(a threshold that cannot be evaluated fails)")
        m = "undefined (clean score 0)" if math.isnan(self.measured) else _num(self.measured, self.what)
        op = "<" if self.what in ("clean score", "bypass rate") else ">"
        return (f"agentperturb gate: {self.flag} breached by {self.subject}: {self.what} {m} {op} limit "
                f"{_num(self.limit, self.what)}")


def _num(v: float, what: str) -> str:
    return f"{v:.1f} %" if "drop" in what else f"{v:.3f}"


@dataclass
class Verdict:
    """Outcome of the gate."""

    thresholds: Thresholds
    breaches: list[Breach] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.breaches)

    def lines(self) -> list[str]:
        """One line per breach, then notes, or a single pass line."""
        if not self.thresholds.configured:
            return []
        if not self.breaches:
            return ["agentperturb gate: passed (every threshold met)", *self.notes]
        return [b.line() for b in self.breaches] + self.notes


def _pct(raw: str, where: str) -> float:
    txt = raw.strip().rstrip("%").strip()
    try:
        v = float(txt)
    except ValueError:
        raise OptionError(f"{where} {raw}: expected a percentage between 0 and 100, e.g. 25") from None
    if not math.isfinite(v) or not 0 <= v <= 100:
        raise OptionError(f"{where} {raw}: expected a percentage between 0 and 100, e.g. 25")
    return v


def _rate(raw: str, where: str) -> float:
    try:
        v = float(raw.strip())
    except ValueError:
        raise OptionError(f"{where} {raw}: expected a number between 0 and 1, e.g. 0.5") from None
    if not math.isfinite(v) or not 0 <= v <= 1:
        raise OptionError(f"{where} {raw}: expected a number between 0 and 1, e.g. 0.5")
    return v


def _pct_map(raws: Sequence[str], where: str, keys: Sequence[str], what: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for raw in raws:
        for part in str(raw).split(","):
            part = part.strip()
            if not part:
                continue
            key, eq, val = part.rpartition("=")
            key = key.strip() if eq else ALL
            if key != ALL and key not in keys:
                raise OptionError(f"{where} {part}: unknown {what} {key!r}; expected one of {', '.join(keys)}")
            try:
                out[key] = _pct(val, where)
            except OptionError:
                raise OptionError(f"{where} {part}: expected [{what.upper()}=]PCT with PCT between 0 and 100, "
                                  f"e.g. {keys[-1]}=40") from None
    return out


def parse(values: Mapping[str, Any], sources: Mapping[str, str] | None = None, strict: bool = False,
          names: Mapping[str, str] | None = None) -> Thresholds:
    """Validate raw threshold values (strings or lists of strings) keyed by option ``dest``.

    Raises:
        OptionError: naming the flag (or ``sources[name]``), the bad value and what was expected.
    """
    kw: dict[str, Any] = {}
    for spec in SPECS:
        raw = values.get(spec.dest)
        if raw in (None, "", [], ()):
            continue
        where = (sources or {}).get(spec.dest, spec.flag)
        if spec.kind == "pct":
            kw[spec.dest] = _pct(str(raw), where)
        elif spec.kind == "rate":
            kw[spec.dest] = _rate(str(raw), where)
        else:
            keys = TARGETS if spec.kind == "pct_map_target" else FAMILIES
            raws = [raw] if isinstance(raw, str) else list(raw)
            kw[spec.dest] = _pct_map(raws, where, keys, "target" if keys is TARGETS else "family")
    if names is not None:
        kw["names"] = dict(names)
    return Thresholds(strict=strict, **kw)


# -- argparse side -----------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The same thresholds for a stand-alone command (``--max-drop`` ...; the plugin's names work too)."""
    for spec in SPECS:
        parser.add_argument(spec.cli_flag, spec.flag, dest=spec.dest, action="append" if spec.repeatable else "store",
                            default=None, metavar=spec.metavar, help=spec.help)


def from_args(args: argparse.Namespace) -> Thresholds:
    """Thresholds from a parsed namespace (raises ``OptionError``)."""
    cli = {s.dest: s.cli_flag for s in SPECS}
    return parse({s.dest: getattr(args, s.dest, None) for s in SPECS}, cli, names=cli)


# -- evaluation --------------------------------------------------------------
def baseline_models(episodes: pd.DataFrame) -> set[str]:
    """Models flagged as baselines in the normalised episode table (its ``baseline`` column)."""
    flags = episodes.groupby("model")["baseline"].agg(lambda s: any(bool(x) for x in s if x == x))
    return {str(m) for m, b in flags.items() if b}


def judged_models(models: Sequence[str], baselines: set[str]) -> list[str]:
    """Models the gate judges: non-baselines when any were run, else everything (baselines only)."""
    real = [m for m in models if m not in baselines]
    return real or list(models)


def evaluate(thresholds: Thresholds, analysis: Analysis | None) -> Verdict:
    """Measure every configured threshold on an analysis (None: nothing was scored, every threshold fails)."""
    if analysis is None:
        v = Verdict(thresholds)
        for name in _configured(thresholds):
            v.breaches.append(_unevaluated(thresholds, name, "this run", "no scored episodes"))
        return v
    return evaluate_tables(thresholds, analysis.drops, analysis.episodes)


def _configured(thresholds: Thresholds) -> list[str]:
    return [s.dest for s in SPECS if getattr(thresholds, s.dest) not in (None, {})]


def _unevaluated(thresholds: Thresholds, name: str, subject: str, reason: str) -> Breach:
    limits = getattr(thresholds, name)
    limit = float(limits) if isinstance(limits, (int, float)) else math.nan
    return Breach(thresholds.names[name], subject, math.nan, limit, name.replace("_", " "), reason)


def evaluate_tables(thresholds: Thresholds, drops: pd.DataFrame, episodes: pd.DataFrame) -> Verdict:
    """Measure every configured threshold on the drop table and the normalised episode table.

    Subjects are the (model, suite) pairs of the episode table (judged
    models only); a threshold with nothing to measure for a subject is a
    breach that says why.
    """
    from .analysis.degradation import ALL_MODELS

    v = Verdict(thresholds)
    if not thresholds.configured:
        return v
    if not len(episodes):
        return evaluate(thresholds, None)
    all_models = sorted({str(m) for m in episodes["model"]})
    models = judged_models(all_models, baseline_models(episodes))
    if len(models) < len(all_models):
        v.notes.append("agentperturb gate: reference agents (baselines) are reported but not gated")
    d = drops[(drops["model"] != ALL_MODELS) & drops["model"].isin(models)]
    mine = episodes[episodes["model"].isin(models)]
    scored = mine[(mine["error"] == "") & mine["reward"].notna()]
    subjects = sorted({(str(m), str(b)) for m, b in zip(mine["model"], mine["suite"])})
    flag = thresholds.names

    def label(model: str, suite: str, level: str = "") -> str:
        return f"{model} on {suite}" + (f" [{level}]" if level else "")

    def check(name: str, rows: pd.DataFrame, limit: float, what: str) -> None:
        for r in rows.itertuples(index=False):
            m = float(r.relative_drop)
            subj = label(r.model, r.suite, "" if r.level_kind == "overall" else r.level)
            if math.isnan(m) and not float(r.clean) == 0.0:  # no clean episodes: nothing to compare with
                v.breaches.append(_unevaluated(thresholds, name, subj, "no scored clean episodes"))
            elif math.isnan(m) or m > limit:
                v.breaches.append(Breach(flag[name], subj, m, limit, what))

    def no_pairs(model: str, suite: str) -> str:
        """Why a (model, suite) has no overall drop: nothing perturbed, or nothing clean to pair it with."""
        mine_s = scored[(scored["model"] == model) & (scored["suite"] == suite)]
        if not mine_s["family"].isin(FAMILIES).any():
            return "no scored perturbed episodes of the 12 families"
        return "no scored clean episodes" if not (mine_s["family"] == CLEAN).any() else \
            "no pairs: no task has both a scored clean and a scored perturbed episode"

    def rows_of(kind: str, model: str, suite: str) -> pd.DataFrame:
        return d[(d["level_kind"] == kind) & (d["model"] == model) & (d["suite"] == suite)]

    for model, suite in subjects:
        if thresholds.max_drop is not None:
            rows = rows_of("overall", model, suite)
            if not len(rows):
                v.breaches.append(_unevaluated(thresholds, "max_drop", label(model, suite), no_pairs(model, suite)))
            check("max_drop", rows, thresholds.max_drop, "relative drop")
        for name, kind in (("max_target_drop", "target"), ("max_family_drop", "family")):
            lim: Mapping[str, float] = getattr(thresholds, name)
            rows = rows_of(kind, model, suite)
            for key, limit in lim.items():
                sel = rows if key == ALL else rows[rows["level"] == key]
                if key == ALL:
                    sel = sel[~sel["level"].isin([k for k in lim if k != ALL])]
                    if not len(rows):
                        v.breaches.append(_unevaluated(thresholds, name, label(model, suite),
                                                       f"no scored perturbed episodes at any {kind}"))
                elif not len(sel):
                    v.breaches.append(_unevaluated(thresholds, name, label(model, suite, key),
                                                   f"no scored {key} episodes in this run"))
                check(name, sel, limit, f"{kind} relative drop")
        mine_scored = scored[(scored["model"] == model) & (scored["suite"] == suite)]
        if thresholds.min_clean is not None:
            clean = mine_scored[mine_scored["family"] == CLEAN]["reward"]
            if not len(clean):
                v.breaches.append(_unevaluated(thresholds, "min_clean", label(model, suite),
                                               "no scored clean episodes"))
            else:
                overall = rows_of("overall", model, suite)
                score = float(overall["clean"].iloc[0]) if len(overall) else float(clean.mean())
                if not score >= thresholds.min_clean:
                    v.breaches.append(Breach(flag["min_clean"], label(model, suite), score,
                                             thresholds.min_clean, "clean score"))
        if thresholds.min_bypass is not None:
            e = mine_scored[(mine_scored["family"] != CLEAN) & mine_scored["compliance"].notna()]
            if not len(e):
                v.breaches.append(_unevaluated(thresholds, "min_bypass", label(model, suite),
                                               "no scored perturbed episodes (compliance is measured on them)"))
                continue
            bypass = 1.0 - float(e["compliance"].astype(bool).mean())
            if bypass < thresholds.min_bypass:
                v.breaches.append(Breach(flag["min_bypass"], label(model, suite), bypass,
                                         thresholds.min_bypass, "bypass rate"))
    return v
