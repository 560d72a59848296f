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

Maxima (drops and the regression against a baseline run) are judged by the
rule of ``--agentperturb-gate-on`` (:data:`RULES`): ``point`` compares the
estimate with the limit (today's behaviour, the default); ``conservative``
breaches when any part of the 95 % interval lies above the limit
(:func:`exceeds`); ``significant`` breaches a drop only when a one-sided test
at 2.5 % rejects "D <= limit" after Holm's correction over the levels of the
threshold (:func:`_candidate`, :func:`_decide`; docs/design.md section 5),
and the regression when the exact paired swap test (with, above limit 0,
the bootstrap p) rejects "change <= limit" (:func:`_regression_candidate`).
Where the clean score is 0 the threshold is not evaluated (it fails, with
the reason).  Notes say when a limit sits below what the run can detect.
Minima (clean score, bypass rate) are judged on the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .model.errors import OptionError
from .model.options import OPTIONS, Option
from .model.task import CLEAN, FAMILIES, TARGETS
from .model.undefined import NO_CLEAN_PASSES, detectable, na

if TYPE_CHECKING:
    import argparse

    import pandas as pd

    from .analysis import Analysis
    from .analysis.baseline import Comparison

#: The threshold options, in declaration order.
SPECS: tuple[Option, ...] = tuple(o for o in OPTIONS if o.group == "gate")
ALL = "*"
#: How a maximum is judged (``--agentperturb-gate-on``), and what each rule means in a breach line.
RULES: dict[str, str] = {
    "point": "the estimate is above the limit",
    "significant": "the whole 95 % interval lies above the limit",
    "conservative": "part of the 95 % interval lies above the limit",
}


@dataclass(frozen=True)
class Thresholds:
    """Validated gate configuration."""

    max_drop: float | None = None
    max_target_drop: Mapping[str, float] = field(default_factory=dict)
    max_family_drop: Mapping[str, float] = field(default_factory=dict)
    min_bypass: float | None = None
    min_clean: float | None = None
    max_regression: float | None = None
    gate_on: str = "point"
    strict: bool = False
    #: how breach lines name each threshold (the pytest flag, or the command's flag)
    names: Mapping[str, str] = field(default_factory=lambda: {s.dest: s.flag for s in SPECS})

    @property
    def configured(self) -> bool:
        """Whether any threshold is set."""
        return any(v not in (None, {}) for v in (self.max_drop, self.max_target_drop, self.max_family_drop,
                                                 self.min_bypass, self.min_clean, self.max_regression))


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
        m = na(NO_CLEAN_PASSES) if math.isnan(self.measured) else _num(self.measured, self.what)
        op = "<" if self.what in ("clean score", "bypass rate") else ">"
        return (f"agentperturb gate: {self.flag} breached by {self.subject}: {self.what} {m} {op} limit "
                f"{_num(self.limit, self.what)}")


def _num(v: float, what: str) -> str:
    return f"{v:.1f} %" if "drop" in what else f"{v:.3f}"


def _value(v: float, what: str, limit: bool = False) -> str:
    """A measured value or limit of a maximum: a change in D in signed points, a drop in percent."""
    if what.startswith("change"):
        return f"{v:.1f} points" if limit else f"{v:+.1f} points"
    return _num(v, what)


@dataclass(frozen=True)
class IntervalBreach(Breach):
    """A breached maximum judged with its 95 % interval: the line names the point value, the interval and the rule."""

    low: float = math.nan
    high: float = math.nan
    rule: str = "point"
    rule_flag: str = "--agentperturb-gate-on"
    method: str = ""            # the row's interval_method; "exact" is said after the interval

    def interval(self) -> str:
        """The interval as the line writes it (``no interval`` where it has no finite bounds)."""
        ex = " exact" if self.method == "exact" else ""
        return (f"95 % interval [{_value(self.low, self.what)}, {_value(self.high, self.what)}]{ex}"
                if math.isfinite(self.low) and math.isfinite(self.high) else "no interval")

    def line(self) -> str:
        if math.isnan(self.measured):
            m = "undefined (clean score 0, or no comparable pairs)"
        else:
            m = _value(self.measured, self.what)
        ci = self.interval()
        return (f"agentperturb gate: {self.flag} breached by {self.subject}: {self.what} {m} ({ci}) > limit "
                f"{_value(self.limit, self.what, limit=True)} under {self.rule_flag} {self.rule}: "
                f"{RULES.get(self.rule, self.rule)}")


@dataclass(frozen=True)
class SignificanceBreach(IntervalBreach):
    """A maximum breached under ``significant``: the test that decided, raw and adjusted p, the correction."""

    p_raw: float = math.nan
    p_adj: float = math.nan
    test: str = ""
    correction: str = ""
    detail: str = ""

    def line(self) -> str:
        ci = self.interval()
        extra = f"; {self.detail}" if self.detail else ""
        return (f"agentperturb gate: {self.flag} breached by {self.subject}: {self.what} "
                f"{_value(self.measured, self.what)} ({ci}) > limit {_value(self.limit, self.what, limit=True)} "
                f"under {self.rule_flag} significant: decided by {self.test}: p {self.p_raw:.3g}, "
                f"adjusted p {self.p_adj:.3g} ({self.correction}) <= 0.025{extra}")


def exceeds(rule: str, point: float, low: float, high: float, limit: float) -> bool:
    """Whether a maximum is breached under ``rule`` (an undefined estimate always is).

    ``point``: point > limit; ``significant``: low > limit (the whole
    interval above it); ``conservative``: high > limit (any part above it).
    Without a finite interval the interval rules fall back to the estimate.
    """
    if math.isnan(point):
        return True
    if rule == "point" or not (math.isfinite(low) and math.isfinite(high)):
        return point > limit
    return (low if rule == "significant" else high) > limit


def _rule(raw: str, where: str) -> str:
    v = raw.strip().lower()
    if v not in RULES:
        raise OptionError(f"{where} {raw}: expected one of {', '.join(RULES)}")
    return v


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
        elif spec.kind == "rule":
            kw[spec.dest] = _rule(str(raw), where)
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
    v = evaluate_tables(thresholds, analysis.drops, analysis.episodes)
    evaluate_regression(thresholds, analysis.versus, analysis.episodes, v)
    return v


def _configured(thresholds: Thresholds) -> list[str]:
    """The thresholds set (the rule ``gate_on`` is a setting, not a threshold)."""
    return [s.dest for s in SPECS if s.dest != "gate_on" and getattr(thresholds, s.dest) not in (None, {})]


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

    reps = drops.attrs.get("replicates") if hasattr(drops, "attrs") else None
    pending: list[tuple[str, str, list[_Candidate], str]] = []   # (threshold, subject, hypotheses) under significant
    weak: dict[tuple[str, str], list[tuple[str, float, float, int, float]]] = {}  # limits below the power

    def check(name: str, rows: pd.DataFrame, limit: float, what: str, group: list[_Candidate] | None = None
              ) -> None:
        for r in rows.itertuples(index=False):
            m = float(r.relative_drop)
            subj = label(r.model, r.suite, "" if r.level_kind == "overall" else r.level)
            mdd = float(getattr(r, "min_detectable", math.nan))
            if not math.isnan(mdd) and limit < mdd:
                weak.setdefault((flag[name], label(r.model, r.suite)), []).append(
                    ("" if r.level_kind == "overall" else str(r.level), limit, mdd, int(r.n_clusters),
                     float(r.clean)))
            if math.isnan(m) and not float(r.clean) == 0.0:  # no clean episodes: nothing to compare with
                v.breaches.append(_unevaluated(thresholds, name, subj, "no scored clean episodes"))
            elif math.isnan(m):
                v.breaches.append(_unevaluated(thresholds, name, subj, _undefined(r)))
            elif thresholds.gate_on == "significant" and group is not None:
                c = _candidate(r, limit, what, subj, reps)
                if c.reason:
                    v.breaches.append(_unevaluated(thresholds, name, subj, c.reason))
                else:
                    group.append(c)
            elif exceeds(thresholds.gate_on, m, float(r.ci_low), float(r.ci_high), limit):
                v.breaches.append(_max_breach(thresholds, flag[name], subj, m, limit, what, r.ci_low, r.ci_high,
                                              str(getattr(r, "interval_method", ""))))

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
            group: list[_Candidate] = []
            check("max_drop", rows, thresholds.max_drop, "relative drop", group)
            pending.append(("max_drop", label(model, suite), group, "overall"))
        for name, kind in (("max_target_drop", "target"), ("max_family_drop", "family")):
            lim: Mapping[str, float] = getattr(thresholds, name)
            rows = rows_of(kind, model, suite)
            group = []
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
                check(name, sel, limit, f"{kind} relative drop", group)
            if lim:
                pending.append((name, label(model, suite), group, "targets" if kind == "target" else "families"))
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
    for name, subject, group, kinds in pending:
        _decide(thresholds, name, subject, group, kinds, v)
    v.notes += [_power_note(f, subj, rows) for (f, subj), rows in weak.items()]
    return v


@dataclass
class _Candidate:
    """One hypothesis "D <= limit" of a maximum under ``significant``: its evidence, before the correction."""

    subject: str
    level: str
    what: str
    measured: float
    limit: float
    low: float
    high: float
    p: float = math.nan
    test: str = ""
    detail: str = ""
    reason: str = ""
    method: str = ""


def _undefined(r: Any) -> str:
    return (f"D undefined: the clean score is 0 over the {int(r.n_pairs)} pair(s) at this level, so no drop can be "
            "measured")


def _candidate(r: Any, limit: float, what: str, subject: str, reps: Mapping[Any, Any] | None) -> _Candidate:
    """The evidence of one row against its limit (docs/design.md section 5, "How `significant` decides").

    Binary suites: the exact paired test of "no drop" (``p_exact``, a
    generalised one-sided McNemar test) decides at limit 0; above 0 it must
    agree with the bootstrap p of "D <= limit" (an intersection-union test:
    p = the larger of the two).  A degenerate bootstrap (every defined
    replicate equal) is never evidence: the exact test decides alone, and
    only when the estimate is above the limit.  Continuous rewards: the
    bootstrap p, and a degenerate bootstrap is not evaluable.
    """
    from .analysis.stats import bootstrap_p

    m = float(r.relative_drop)
    c = _Candidate(subject, str(r.level), what, m, limit, float(r.ci_low), float(r.ci_high),
                   method=str(getattr(r, "interval_method", "")))
    boot = None if reps is None else reps.get((r.model, r.suite, r.level_kind, r.level))
    p_exact = float(getattr(r, "p_exact", math.nan))
    degenerate = bool(getattr(r, "boot_degenerate", False))
    pb, undefined = bootstrap_p(boot, limit) if boot is not None else (math.nan, 0)
    n_boot = 0 if boot is None else len(boot)
    undef = (f"; {undefined} of {n_boot} bootstrap replicates had clean score 0 (no D), counted against a breach"
             if undefined else "")
    exact = f"exact paired test (one-sided McNemar/permutation on {int(r.n_clusters)} task-repeat clusters)"
    if degenerate:
        c.detail = f"the bootstrap interval is degenerate (every replicate {m:.1f} %), not evidence{undef}"
        if math.isfinite(p_exact):
            c.p, c.test = (p_exact if m > limit else 1.0), exact
        else:
            c.reason = (f"the bootstrap interval is degenerate (every replicate {m:.1f} %) and continuous rewards "
                        "have no exact test here; add tasks or repeats")
        return c
    if math.isfinite(p_exact) and (limit == 0 or not math.isfinite(pb)):
        c.p, c.test, c.detail = p_exact, exact, undef.lstrip("; ")
    elif math.isfinite(p_exact):
        c.p = max(p_exact, pb)
        c.test = (f"the larger of the {exact} (p {p_exact:.3g}) and the bootstrap p of D <= limit (p {pb:.3g})")
        c.detail = undef.lstrip("; ")
    elif math.isfinite(pb):
        c.p, c.test, c.detail = pb, f"bootstrap p of D <= limit ({n_boot} replicates)", undef.lstrip("; ")
    else:   # no replicates kept with the table: the interval rule
        c.p = 0.0 if exceeds("significant", m, c.low, c.high, limit) else 1.0
        c.test = "the 95 % interval (no replicates kept)"
    return c


def _decide(thresholds: Thresholds, name: str, subject: str, group: list[_Candidate], kinds: str, v: Verdict
            ) -> None:
    """Holm's step-down over one threshold's hypotheses for one model and suite; a breach per rejected one."""
    from .analysis.stats import ALPHA, holm

    if not group:
        return
    adj = holm([c.p for c in group])
    k = len(group)
    corr = f"Holm step-down over {k} {kinds}" if k > 1 else "one hypothesis, no correction"
    flag = thresholds.names[name]
    rule_flag = thresholds.names.get("gate_on", "--agentperturb-gate-on")
    for c, a in zip(group, adj):
        if a <= ALPHA:
            v.breaches.append(SignificanceBreach(flag, c.subject, c.measured, c.limit, c.what, low=c.low, high=c.high,
                                         rule="significant", rule_flag=rule_flag, p_raw=c.p, p_adj=a,
                                         test=c.test, correction=corr, detail=c.detail, method=c.method))
    figs = "; ".join(f"{'overall' if c.level == 'all' else c.level} p {c.p:.3g} -> {a:.3g}"
                     for c, a in zip(group, adj))
    v.notes.append(f"agentperturb gate: {flag} for {subject} under {rule_flag} significant: {corr} at one-sided "
                   f"{100 * ALPHA:g} % (raw p -> adjusted p: {figs})")


def _power_note(flag: str, subject: str, rows: list[tuple[str, float, float, int, float]]) -> str:
    """Says where a limit sits below the smallest drop the run could detect (80 % power, one-sided 2.5 %)."""

    def mdd(x: float) -> str:
        return detectable(x, ".0f", "%")

    def cannot(limit: float) -> str:
        return "a small drop (the limit is 0 %)" if limit == 0 else f"a {limit:g} % drop"

    if len(rows) == 1:
        lev, limit, m, g, c = rows[0]
        where = f" [{lev}]" if lev else ""
        return (f"agentperturb gate: {flag} for {subject}{where}: this run cannot tell {cannot(limit)} from noise "
                f"(smallest drop it detects with 80 % power at one-sided 2.5 %: {mdd(m)}; {g} task-repeat clusters, "
                f"clean score {c:.2f}); add tasks or repeats")
    limits = sorted({r[1] for r in rows})
    lim = cannot(limits[0]) if len(limits) == 1 else "a drop of its limit"
    each = ", ".join(f"{lev or 'overall'} {mdd(m)}" for lev, _, m, _, _ in rows)
    gs, cs = [r[3] for r in rows], [r[4] for r in rows]
    return (f"agentperturb gate: {flag} for {subject}: this run cannot tell {lim} from noise at {len(rows)} levels "
            f"(smallest drop detectable with 80 % power at one-sided 2.5 %: {each}; {min(gs)}-{max(gs)} task-repeat "
            f"clusters, clean score {min(cs):.2f}-{max(cs):.2f}); add tasks or repeats")


def _max_breach(thresholds: Thresholds, flag: str, subject: str, measured: float, limit: float, what: str,
                low: float, high: float, method: str = "") -> Breach:
    """Today's line under the point rule; the interval (and "exact" after an exact one) and the rule under the others."""
    if thresholds.gate_on == "point":
        return Breach(flag, subject, measured, limit, what)
    return IntervalBreach(flag, subject, measured, limit, what, low=float(low), high=float(high),
                          rule=thresholds.gate_on, rule_flag=thresholds.names.get("gate_on", "--agentperturb-gate-on"),
                          method=method)


def evaluate_regression(thresholds: Thresholds, versus: Comparison | None, episodes: pd.DataFrame,
                        verdict: Verdict) -> None:
    """``--agentperturb-max-regression``: the overall change in D against the baseline run, per model and suite.

    Judged by the ``--agentperturb-gate-on`` rule on the change and its
    paired bootstrap interval.  Without a comparison, or for a judged model
    with nothing comparable, the threshold fails with the reason.
    """
    limit = thresholds.max_regression
    if limit is None:
        return
    flag = thresholds.names.get("max_regression", "--agentperturb-max-regression")
    if versus is None:
        verdict.breaches.append(Breach(flag, "this run", math.nan, limit, "change in D",
                                       "no baseline run to compare with (set --agentperturb-baseline)"))
        return
    rows = versus.deltas[versus.deltas["level_kind"] == "overall"]
    models = judged_models(sorted(set(episodes["model"])), baseline_models(episodes)) if len(episodes) else []
    for model in models:
        mine = rows[rows["model"] == model]
        if not len(mine):
            verdict.breaches.append(Breach(flag, model, math.nan, limit, "change in D",
                                           f"no pairs comparable with the {versus.label}"))
        for r in mine.itertuples(index=False):
            d = float(r.delta)
            subj = f"{r.model} on {r.suite} vs {r.baseline_model} ({versus.label})"
            mdc = float(getattr(r, "min_detectable", math.nan))
            if mdc == mdc and limit < mdc:
                can = detectable(mdc, ".0f", "points")
                verdict.notes.append(
                    f"agentperturb gate: {flag} for {subj}: this run cannot tell a {limit:g}-point regression from "
                    f"noise (smallest rise of D it detects with 80 % power at one-sided 2.5 %: {can}, "
                    f"{int(r.n_tasks)} tasks); add tasks or repeats")
            if math.isnan(d):
                verdict.breaches.append(Breach(flag, subj, math.nan, limit, "change in D",
                                               "D undefined on one side (clean score 0)"))
                continue
            rule_flag = thresholds.names.get("gate_on", "--agentperturb-gate-on")
            if thresholds.gate_on == "significant":
                c = _regression_candidate(r, d, limit, subj, versus.replicates.get((r.model, r.suite, "overall", "all")))
                if c.p <= 0.025:
                    verdict.breaches.append(SignificanceBreach(
                        flag, subj, d, limit, "change in D", low=c.low, high=c.high, rule="significant",
                        rule_flag=rule_flag, p_raw=c.p, p_adj=c.p, test=c.test, correction="one hypothesis, no "
                        "correction", detail=c.detail, method=c.method))
                verdict.notes.append(f"agentperturb gate: {flag} for {subj} under {rule_flag} significant: "
                                     f"{c.test}: p {c.p:.3g} at one-sided 2.5 %")
            elif exceeds(thresholds.gate_on, d, float(r.ci_low), float(r.ci_high), limit):
                verdict.breaches.append(IntervalBreach(
                    flag, subj, d, limit, "change in D", low=float(r.ci_low), high=float(r.ci_high),
                    rule=thresholds.gate_on, rule_flag=rule_flag, method=str(getattr(r, "interval_method", ""))))


def _regression_candidate(r: Any, d: float, limit: float, subject: str, boot: Any) -> _Candidate:
    """The evidence of "the change in D <= limit" (docs/design.md section 5, "Against a baseline run").

    The exact paired swap test of "no regression" (``p_exact``) decides at
    limit 0; above 0 it must agree with the bootstrap p of "change <= limit"
    (p = the larger).  A degenerate bootstrap (every replicate equal) is never
    evidence: the swap test decides alone, and only when the change is above
    the limit.
    """
    import numpy as np

    from .analysis.stats import bootstrap_p

    c = _Candidate(subject, "all", "change in D", d, limit, float(r.ci_low), float(r.ci_high),
                   method=str(getattr(r, "interval_method", "")))
    p_exact = float(getattr(r, "p_exact", math.nan))
    exact = f"exact paired swap test of no regression on {int(r.n_tasks)} tasks"
    if boot is None:    # no replicates kept: the interval stands in for the bootstrap p
        pb = 0.0 if exceeds("significant", d, c.low, c.high, limit) else 1.0
    else:
        pb = bootstrap_p(boot, limit)[0]
    fin = None if boot is None else np.asarray(boot, dtype=float)[np.isfinite(boot)]
    if fin is not None and (len(fin) < 2 or float(np.ptp(fin)) == 0.0):
        c.detail = f"the bootstrap interval of the change is degenerate (every replicate {d:+.1f} points), not evidence"
        c.p, c.test = (p_exact if d > limit else 1.0), exact
    elif limit == 0:
        c.p, c.test = p_exact, exact
    else:
        c.p = max(p_exact, pb)
        c.test = f"the larger of the {exact} (p {p_exact:.3g}) and the bootstrap p of change <= limit (p {pb:.3g})"
    if not math.isfinite(c.p):
        c.p = 1.0
    return c
