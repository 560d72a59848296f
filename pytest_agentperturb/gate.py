"""The CI gate (DESIGN.md section 5): thresholds, their validation, and the verdict.

Thresholds are declared once in :data:`SPECS` and serve both the pytest
options (``--agentperturb-max-drop`` ... with ini keys) and the
``agentperturb report`` command.  They are validated at start-up; a bad
value is a usage error naming the flag (or ini key) and the value.  After
the session, :func:`evaluate` measures every configured threshold per model
and suite; each breach is one line with the measured value and the limit,
and the session's exit status becomes non-zero.

Reference agents are baselines: when at least one non-baseline model was
run, the gate judges only the non-baseline models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from .errors import OptionError
from .task import CLEAN, FAMILIES, TARGETS

if TYPE_CHECKING:
    import argparse

    import pandas as pd

    from .collect import PerturbItem

BASELINE_PREFIX = "reference/"
STRICT = "--agentperturb-strict"


@dataclass(frozen=True)
class Spec:
    """One threshold option: flag, ini key, kind of value, help text."""

    name: str          # field of :class:`Thresholds`
    flag: str
    kind: str          # pct | pct_map_target | pct_map_family | rate
    metavar: str
    help: str

    @property
    def ini(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def cli_flag(self) -> str:
        """Flag of the stand-alone command (same name without the ``agentperturb-`` prefix)."""
        return "--" + self.flag[len("--agentperturb-"):]


SPECS: tuple[Spec, ...] = (
    Spec("max_drop", "--agentperturb-max-drop", "pct", "PCT",
         "fail the session when a model's overall relative drop D exceeds PCT percent."),
    Spec("max_target_drop", "--agentperturb-max-target-drop", "pct_map_target", "[TARGET=]PCT",
         "maximum relative drop per target (user, procedure, context, tool); a bare PCT applies to every "
         "target; repeatable."),
    Spec("max_family_drop", "--agentperturb-max-family-drop", "pct_map_family", "[FAMILY=]PCT",
         "maximum relative drop per family (e.g. tool-incorrect=40); a bare PCT applies to every family; "
         "repeatable."),
    Spec("min_bypass", "--agentperturb-min-bypass", "rate", "RATE",
         "minimum bypass rate (share of perturbed episodes without compliance), 0..1."),
    Spec("min_clean", "--agentperturb-min-clean", "rate", "SCORE",
         "minimum clean score (mean clean reward), 0..1."),
)
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
    names: Mapping[str, str] = field(default_factory=lambda: {s.name: s.flag for s in SPECS})

    @property
    def configured(self) -> bool:
        """Whether any threshold is set."""
        return any(v not in (None, {}) for v in (self.max_drop, self.max_target_drop, self.max_family_drop,
                                                 self.min_bypass, self.min_clean))


@dataclass(frozen=True)
class Breach:
    """One breached threshold for one model and suite."""

    flag: str
    subject: str
    measured: float
    limit: float
    what: str

    def line(self) -> str:
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
    """Validate raw threshold values (strings or lists of strings) keyed by :class:`Spec` name.

    Raises:
        OptionError: naming the flag (or ``sources[name]``), the bad value and what was expected.
    """
    kw: dict[str, Any] = {}
    for spec in SPECS:
        raw = values.get(spec.name)
        if raw in (None, "", [], ()):
            continue
        where = (sources or {}).get(spec.name, spec.flag)
        if spec.kind == "pct":
            kw[spec.name] = _pct(str(raw), where)
        elif spec.kind == "rate":
            kw[spec.name] = _rate(str(raw), where)
        else:
            keys = TARGETS if spec.kind == "pct_map_target" else FAMILIES
            raws = [raw] if isinstance(raw, str) else list(raw)
            kw[spec.name] = _pct_map(raws, where, keys, "target" if keys is TARGETS else "family")
    if names is not None:
        kw["names"] = dict(names)
    return Thresholds(strict=strict, **kw)


# -- pytest side -------------------------------------------------------------
def addoption(parser: pytest.Parser) -> None:
    """Gate flags and ini keys, in the plugin's option group."""
    g = parser.getgroup("agentperturb")
    for spec in SPECS:
        multi = spec.kind.startswith("pct_map")
        g.addoption(spec.flag, action="append" if multi else "store", default=None, metavar=spec.metavar,
                    help=spec.help)
        if multi:
            parser.addini(spec.ini, spec.help, type="linelist", default=[])
        else:
            parser.addini(spec.ini, spec.help, type="string", default="")
    g.addoption(STRICT, action="store_true", default=None,
                help="strict mode: every compliance (the agent took the perturbation up) fails its test.")
    parser.addini(STRICT.lstrip("-").replace("-", "_"), "strict mode (see --agentperturb-strict).", type="bool",
                  default=False)


def resolve(config: pytest.Config) -> Thresholds:
    """Thresholds from flags (over ini keys); ``pytest.UsageError`` naming the bad flag and value."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in SPECS:
        v = config.getoption(spec.flag)
        if v in (None, [], ""):
            v = config.getini(spec.ini)
            if v not in (None, [], ""):
                sources[spec.name] = f"ini option '{spec.ini}' in {config.inipath or 'the ini file'}:"
        values[spec.name] = v
    strict = bool(config.getoption(STRICT) or config.getini(STRICT.lstrip("-").replace("-", "_")))
    try:
        return parse(values, sources, strict=strict)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


def check_item(thresholds: Thresholds, item: PerturbItem) -> None:
    """Strict mode: a compliance fails the item (raises ``EpisodeFailed``)."""
    from .collect import EpisodeFailed

    rec = item.record
    if thresholds.strict and rec is not None and rec.compliance:
        raise EpisodeFailed(f"strict mode: the agent complied with the {item.family} perturbation "
                            f"(operator {rec.operator}); reward {rec.reward}")


# -- argparse side -----------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The same thresholds for a stand-alone command (``--max-drop`` ...; the plugin's names work too)."""
    for spec in SPECS:
        multi = spec.kind.startswith("pct_map")
        parser.add_argument(spec.cli_flag, spec.flag, dest=spec.name, action="append" if multi else "store",
                            default=None, metavar=spec.metavar, help=spec.help)


def from_args(args: argparse.Namespace) -> Thresholds:
    """Thresholds from a parsed namespace (raises ``OptionError``)."""
    cli = {s.name: s.cli_flag for s in SPECS}
    return parse({s.name: getattr(args, s.name, None) for s in SPECS}, cli, names=cli)


# -- evaluation --------------------------------------------------------------
def judged_models(models: Sequence[str], baselines: set[str] | None = None) -> list[str]:
    """Models the gate judges: non-baselines when any were run, else everything (baselines only).

    ``baselines`` (the drop table's ``baseline`` flag) wins over the name prefix.
    """
    real = [m for m in models if not (m in baselines if baselines is not None else m.startswith(BASELINE_PREFIX))]
    return real or list(models)


def evaluate(thresholds: Thresholds, drops: pd.DataFrame, episodes: pd.DataFrame) -> Verdict:
    """Measure every configured threshold on the drop table and the episodes.

    ``drops`` is :func:`~pytest_agentperturb.analysis.drops`' table;
    ``episodes`` the normalised episode table (for bypass rates).
    """
    from .analysis.degradation import ALL_MODELS

    v = Verdict(thresholds)
    if not thresholds.configured:
        return v
    d = drops[drops["model"] != ALL_MODELS]
    base = set(d.loc[d["baseline"].astype(bool), "model"]) if "baseline" in d.columns else None
    models = judged_models(sorted(set(d["model"])), base)
    if len(models) < len(set(d["model"])):
        v.notes.append("agentperturb gate: reference agents (baselines) are reported but not gated")
    d = d[d["model"].isin(models)]
    flag = thresholds.names

    def check(name: str, rows: pd.DataFrame, limit: float, what: str) -> None:
        for r in rows.itertuples(index=False):
            m = float(r.relative_drop)
            if math.isnan(m) or m > limit:
                subj = f"{r.model} on {r.suite}" + ("" if r.level_kind == "overall" else f" [{r.level}]")
                v.breaches.append(Breach(flag[name], subj, m, limit, what))

    if thresholds.max_drop is not None:
        check("max_drop", d[d["level_kind"] == "overall"], thresholds.max_drop, "relative drop")
    for name, kind in (("max_target_drop", "target"), ("max_family_drop", "family")):
        lim: Mapping[str, float] = getattr(thresholds, name)
        rows = d[d["level_kind"] == kind]
        for key, limit in lim.items():
            sel = rows if key == ALL else rows[rows["level"] == key]
            if key != ALL and not len(sel):
                v.notes.append(f"agentperturb gate: {flag[name]} {key}={limit:g} not evaluated "
                               f"(no {key} episodes in this run)")
            if key == ALL:
                sel = sel[~sel["level"].isin([k for k in lim if k != ALL])]
            check(name, sel, limit, f"{kind} relative drop")
    overall = d[d["level_kind"] == "overall"]
    if thresholds.min_clean is not None:
        for r in overall.itertuples(index=False):
            if not r.clean >= thresholds.min_clean:
                v.breaches.append(Breach(flag["min_clean"], f"{r.model} on {r.suite}", float(r.clean),
                                         thresholds.min_clean, "clean score"))
    if thresholds.min_bypass is not None:
        e = episodes[(episodes["error"] == "") & (episodes["family"] != CLEAN) & episodes["compliance"].notna()
                     & episodes["model"].isin(models)]
        for (model, suite), g in e.groupby(["model", "suite"], sort=True):
            bypass = 1.0 - float(g["compliance"].astype(bool).mean())
            if bypass < thresholds.min_bypass:
                v.breaches.append(Breach(flag["min_bypass"], f"{model} on {suite}", bypass,
                                         thresholds.min_bypass, "bypass rate"))
    return v

