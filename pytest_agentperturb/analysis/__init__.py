"""The study's analyses over the episode table (docs/design.md section 4, "Metrics"), in one call.

:func:`analyze` runs every metric on a normalised episode table and returns
an :class:`Analysis` of DataFrames; :func:`summary` turns it into the JSON
summary of ``agentperturb analyze --json``.  Each metric is also importable
on its own from the submodules (pure functions over the table).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .defaults import N_BOOTSTRAP, N_PERMUTATIONS
from .table import DROP_REASONS, describe_drops, normalise, pairing_audit, pairs, pooled, pooled_models, scored
from ..model.undefined import NO_CLEAN_PASSES, detectable, drop_why, figure, na, undefined

if TYPE_CHECKING:
    import pandas as pd

    from .baseline import Comparison
    from .degradation import (
        ALL_MODELS,
        cells,
        compliance,
        drops,
        malleability,
        marginal_effects,
        overall,
        paired_tests,
        relative_degradation,
        suite_average,
    )
    from .sensitivity import Sensitivity

#: Names re-exported from :mod:`.degradation`, imported on first use: the package (and its numpy-free
#: modules :mod:`.table` and :mod:`.labels`) loads without numpy, for the task pages' worker.
_LAZY: tuple[str, ...] = ("ALL_MODELS", "cells", "compliance", "drops", "malleability", "marginal_effects", "overall",
                          "paired_tests", "relative_degradation", "suite_average")

__all__ = [
    "ALL_MODELS", "Analysis", "analyze", "cells", "compliance", "drops", "malleability", "marginal_effects",
    "normalise", "overall", "paired_tests", "pairing_audit", "pairing_note", "pairs", "pooled", "relative_degradation", "scored",
    "suite_average", "summary", "summary_lines", "extra_summary_lines",
]


def __getattr__(name: str) -> Any:
    """The :mod:`.degradation` names, imported on first use."""
    if name in _LAZY:
        value = getattr(importlib.import_module(".degradation", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Analysis:
    """Every table of the study for one episode table."""

    episodes: pd.DataFrame
    drops: pd.DataFrame
    overall: pd.DataFrame
    suite_average: pd.DataFrame
    marginal: pd.DataFrame
    malleability: pd.DataFrame
    malleability_family: pd.DataFrame
    compliance: pd.DataFrame
    compliance_operator: pd.DataFrame
    paired_tests: pd.DataFrame
    predictors: pd.DataFrame
    clean_score: pd.DataFrame
    sensitivity: list[Sensitivity]
    recovery_cost: pd.DataFrame
    rollout_ratios: pd.DataFrame
    edit_magnitude: pd.DataFrame
    labels: pd.DataFrame
    pairing: pd.DataFrame
    replicates: int = N_BOOTSTRAP
    permutations: int = N_PERMUTATIONS
    notes: list[str] = field(default_factory=list)
    #: pass@1, pass^k, pass@k and the noise floor per model and family (rows only for K >= 2 repeats)
    repeats: pd.DataFrame | None = None
    #: this run against ``--agentperturb-baseline`` (None without one)
    versus: Comparison | None = None
    #: overall D per run, in recording order (None for a table of one run)
    trend: pd.DataFrame | None = None


def analyze(df: pd.DataFrame, *, capability: pd.DataFrame | None = None,
            task_properties: pd.DataFrame | None = None, manual_labels: pd.DataFrame | None = None,
            replicates: int = N_BOOTSTRAP, permutations: int = N_PERMUTATIONS, seed: int = 0,
            baseline: pd.DataFrame | None = None, baseline_label: str = "baseline run",
            labelled: pd.DataFrame | None = None) -> Analysis:
    """Run the whole study on ``df`` (already :func:`normalise`-d).

    Args:
        df: the episode table.
        capability: ``model, capability`` table for the capability predictor.
        task_properties: ``[suite,] task, tool_count, instruction_length, solution_length``.
        manual_labels: imported awareness/behaviour labels (win over computed ones).
        replicates: bootstrap replicates for every interval.
        permutations: random assignments of each permutation test.
        seed: seed of every random draw (same seed, same numbers).
        baseline: the baseline run's episode table (normalised) to compare with.
        baseline_label: how the report names the baseline run.
        labelled: ``label(df, manual_labels)`` when the caller has it already (it is not labelled twice).
    """
    import pandas as pd

    from . import degradation as dg
    from .baseline import compare, run_trend
    from .cost import edit_magnitude, recovery_cost, rollout_ratios
    from .labels import label
    from .predictors import PREDICTOR_COLUMNS, clean_score_predictor, model_predictors, task_predictors
    from .repeats import repeat_stats
    from .sensitivity import start_cross_family

    labelled = label(df, manual_labels) if labelled is None else labelled
    # the cross-family bootstrap (numpy) runs beside the rest (pandas) in a thread of its own
    sensitivity = start_cross_family(labelled, replicates=replicates, seed=seed)
    pr = pairs(labelled)
    audit = pairing_audit(labelled)
    dt = dg.drops(labelled, replicates=replicates, seed=seed, paired=pr, audit=audit)
    ov = dg.overall(dt)
    parts = [t for t in (model_predictors(ov, capability, permutations=permutations, seed=seed),
                         task_predictors(pr, task_properties, permutations=permutations, seed=seed + 1)) if len(t)]
    preds = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=PREDICTOR_COLUMNS)
    tables = dict(
        episodes=labelled, drops=dt, overall=ov, suite_average=dg.suite_average(dt),
        marginal=dg.marginal_effects(pr), malleability=dg.malleability(pr),
        malleability_family=dg.malleability(pr, ("suite", "family")),
        compliance=dg.compliance(labelled),
        compliance_operator=dg.compliance(labelled, ("suite", "family", "operator")),
        paired_tests=dg.paired_tests(pr), predictors=preds,
        clean_score=clean_score_predictor(pr, permutations=permutations, seed=seed + 2),
        recovery_cost=recovery_cost(pr), rollout_ratios=rollout_ratios(pr), edit_magnitude=edit_magnitude(pr),
        labels=_label_counts(labelled), pairing=audit,
        notes=notes(labelled, audit, pr), repeats=repeat_stats(labelled, replicates=replicates, seed=seed + 3),
        versus=None if baseline is None else compare(df, baseline, label=baseline_label, replicates=replicates,
                                                     seed=seed + 4),
        trend=run_trend(df, replicates=replicates, seed=seed) if df["run_id"].nunique() > 1 else None,
    )
    return Analysis(**tables, sensitivity=sensitivity(), replicates=replicates, permutations=permutations)


def pairing_note(audit: pd.DataFrame) -> str:
    """What the pairing formed and left out, and why: one sentence, the report's note and the terminal's line
    (empty without perturbed episodes).  A missing variant is counted per model, task and repeat."""
    if not len(audit):
        return ""
    by = {r: int(audit[r].sum()) for r in DROP_REASONS}
    return (f"Pairing: {int(audit['n_pairs'].sum())} clean/perturbed pair(s) of "
            f"{int(audit['n_episodes'].sum())} perturbed episode(s)"
            + (f"; left out: {describe_drops(by)}" if any(by.values()) else "; nothing left out")
            + " (a variant missing, one per model, task and repeat, leaves that task's clean score out of that "
              "family's comparison).")


def notes(df: pd.DataFrame, audit: pd.DataFrame, pr: pd.DataFrame) -> list[str]:
    """What the numbers rest on: unscored episodes, what the pairing dropped and why, unknown usage, baselines."""
    out = []
    n_err = int((df["error"] != "").sum())
    if n_err:
        out.append(f"{n_err} episode(s) could not be scored (error) and are excluded from every metric; "
                   "each takes its clean or perturbed partner out of the comparison.")
    line = pairing_note(audit)
    if line:
        out.append(line)
    if len(pr):
        unknown = int((pr["tokens_clean"].isna() | pr["tokens_pert"].isna()).sum())
        if unknown == len(pr):
            out.append("No token usage recorded: the token metrics (recovery cost, edit magnitude's token change) "
                       "are empty.")
        elif unknown:
            out.append(f"{unknown} of {len(pr)} pair(s) have no recorded token usage (NULL) on one side and are left "
                       "out of the token metrics (recovery cost, edit magnitude's token change).")
    base = sorted(df.loc[df["baseline"].astype(bool), "model"].unique()) if len(df) else []
    real = pooled_models(df)
    if base and set(real).isdisjoint(base):
        out.append(f"Baselines ({', '.join(base)}) keep their own rows and stay out of every 'all models' figure, "
                   "suite average and pooled metric.")
    return out


def summary_lines(a: Analysis) -> list[str]:
    """One terminal line per (model, suite): C, P, D with its interval, compliance, turns.

    Compliance is the share of the 12 families' perturbed episodes with a
    compliance verdict (docs/design.md section 4); turns are per scored episode;
    pairs = the pairs the drop rests on.
    """
    from ..model.task import FAMILIES
    from .degradation import ALL_MODELS

    ep = scored(a.episodes)
    lines = []
    for _, r in a.overall[a.overall["model"] != ALL_MODELS].iterrows():
        g = ep[(ep["model"] == r["model"]) & (ep["suite"] == r["suite"])]
        comp = g[g["family"].isin(FAMILIES)]["compliance"].dropna()
        rate = float(comp.astype(bool).mean()) if len(comp) else float("nan")
        if undefined(r["relative_drop"]):
            drop = f"drop {na(drop_why(r) or 'undefined')}"
        else:
            drop = f"drop {r['relative_drop']:.1f}% " + (
                f"[{r['ci_low']:.1f}, {r['ci_high']:.1f}]" if not (undefined(r["ci_low"]) or undefined(r["ci_high"]))
                else "[n/a (no interval)]") + (" exact" if r.get("interval_method") == "exact" else "")
        lines.append(
            f"{r['model']:<22} {r['suite']:<12} clean {figure(r['clean'], '.3f', 'no scored clean episode')}  "
            f"perturbed {figure(r['perturbed'], '.3f', 'no scored perturbed episode')}  {drop}  "
            f"compliance {figure(rate, '.2f', 'no compliance verdict')}  "
            f"turns/episode {figure(g['turns'].mean(), '.1f', 'no scored episode')}  pairs {int(r['n_pairs'])}"
            + (f" (dropped {int(r['n_dropped'])}: {r['dropped_why']})" if r["n_dropped"] else "")
            + _detectable(r))
    return lines or ["no scored episodes"]


def _pct(d: Any) -> str:
    """A relative drop D in percent, or ``n/a (...)`` (D divides by the clean score)."""
    return "n/a (no clean passes or no pairs)" if undefined(d) else f"{float(d):.1f}%"


def _detectable(r: Any) -> str:
    """The smallest drop a row could detect (80 % power, one-sided 2.5 %), and replicates with no D."""
    m = float(r.get("min_detectable", float("nan")))
    out = ""
    if m == m:
        out = ("  detectable drop: none up to 100 %" if math.isinf(m) else f"  detectable drop >= {m:.0f}%") \
            + " (80% power, one-sided 2.5%)"
    undef = int(r.get("n_boot_undefined", 0) or 0)
    return out + (f"  {undef} bootstrap replicate(s) with clean 0 (no D)" if undef else "")


def _detectable_change(m: Any) -> str:
    """The smallest rise of D against the baseline run a row detects: infinite and undefined ones say so (never ``inf``)."""
    power = " (80% power, one-sided 2.5%)"
    if undefined(m):   # either run's clean score is 0
        return f"detectable change: {na(NO_CLEAN_PASSES)}"
    if math.isfinite(float(m)):
        return f"detectable change >= {float(m):.0f} points{power}"
    return f"detectable change: {detectable(m, '.0f', 'points')}{power}"


def extra_summary_lines(a: Analysis) -> list[str]:
    """Terminal lines for repeated trials (pass@1 / pass^k / pass@k, the noise floor) and the baseline comparison."""
    from .repeats import NOT_DISTINGUISHABLE

    from ..model.task import CLEAN

    lines = []
    rp = a.repeats if a.repeats is not None else None
    if rp is not None and len(rp):
        for (model, suite), g in rp.groupby(["model", "suite"], sort=True):
            c = g[g["family"] == CLEAN]
            fams = g[g["family"] != CLEAN]
            quiet = sorted(fams.loc[fams["verdict"] == NOT_DISTINGUISHABLE, "family"])
            head = f"{model:<22} {suite:<12} repeats k={int(g['k'].iloc[0])}"
            if len(c):
                r = c.iloc[0]
                head += (f": clean pass@1 {figure(r['pass_at_1'], '.2f')}  pass^k {figure(r['pass_hat_k'], '.2f')}  "
                         f"pass@k {figure(r['pass_at_k'], '.2f')}  noise floor (clean-vs-clean flips) "
                         f"{figure(r['noise_floor'], '.2f')}")
                curve = r.get("pass_hat_curve")
                if isinstance(curve, list) and len(curve) > 2:
                    head += f"  pass^k for k = 1..{len(curve)}: " + " ".join(figure(x, ".2f") for x in curve)
            lines.append(head)
            lines.append(f"{'':<35} families not distinguishable from noise: {', '.join(quiet) or 'none'} "
                         f"({len(quiet)} of {len(fams)})")
    if a.versus is not None:
        v = a.versus
        ov = v.deltas[v.deltas["level_kind"] == "overall"]
        for r in ov.itertuples(index=False):
            ci = f"[{r.ci_low:+.1f}, {r.ci_high:+.1f}]" if not (undefined(r.ci_low) or undefined(r.ci_high)) \
                else "[n/a (no interval)]"
            if ci != "[n/a (no interval)]" and getattr(r, "interval_method", "") == "exact":
                ci += " exact"
            lines.append(f"{r.model:<22} {r.suite:<12} versus {v.label} ({r.baseline_model}): "
                         f"D {_pct(r.d_current)} vs {_pct(r.d_baseline)}, "
                         f"change {figure(r.delta, '+.1f', 'a D undefined')} points {ci} "
                         f"({r.verdict}), {int(r.n_tasks)} task{'' if int(r.n_tasks) == 1 else 's'}"
                         + f", {_detectable_change(r.min_detectable)}")
        if len(v.mismatches):
            why = v.mismatches["reason"].value_counts().sort_index()
            lines.append(f"versus {v.label}: left out {len(v.mismatches)} (task, family) pair(s): "
                         + ", ".join(f"{int(n)} {k}" for k, n in why.items()))
        lines += [f"versus {v.label}: {n}" for n in v.notes]
    return lines


def _label_counts(labelled: pd.DataFrame) -> pd.DataFrame:
    from .labels import label_counts

    return label_counts(labelled)


def _clean(v: Any) -> Any:
    """JSON-safe scalars: NaN/inf become None, numpy scalars plain Python."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def records(df: pd.DataFrame, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """DataFrame rows as JSON-safe dicts."""
    cols = columns or list(df.columns)
    return [{c: _clean(v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False, name=None)]


def summary(a: Analysis) -> dict[str, Any]:
    """The JSON summary: degradation, suite averages, predictors and every other table."""
    sens = []
    for s in a.sensitivity:
        sens.append({"suite": s.suite, "skipped": s.skipped, "families": s.families,
                     "replicates": s.replicates, "pairs": [{k: _clean(v) for k, v in r.items()}
                                                          for r in s.pair_rows()],
                     "groups": [{k: _clean(v) for k, v in g.items()} for g in s.groups]})
    return {
        "degradation": records(a.overall, ["model", "suite", "baseline", "clean", "perturbed", "relative_drop",
                                           "ci_low", "ci_high", "n_tasks", "n_perturbed", "n_pairs", "n_dropped",
                                           "dropped_why", "p_exact", "min_detectable", "n_boot_undefined",
                                           "interval_method"]),
        "suite_average": records(a.suite_average),
        "predictors": records(a.predictors),
        "clean_score_predictor": records(a.clean_score),
        "drops": records(a.drops),
        "marginal_effects": records(a.marginal),
        "malleability": records(a.malleability),
        "malleability_by_family": records(a.malleability_family),
        "compliance": records(a.compliance),
        "compliance_by_operator": records(a.compliance_operator),
        "paired_tests": records(a.paired_tests),
        "cross_family": sens,
        "recovery_cost": records(a.recovery_cost),
        "rollout_ratios": records(a.rollout_ratios),
        "edit_magnitude": records(a.edit_magnitude),
        "labels": records(a.labels),
        "settings": {"bootstrap_replicates": a.replicates, "permutations": a.permutations},
        "notes": a.notes,
        **extended_summary(a),
    }


def extended_summary(a: Analysis) -> dict[str, Any]:
    """The JSON of repeated trials, the baseline comparison and the trend (present when the analysis has them)."""
    out: dict[str, Any] = {}
    if a.repeats is not None and len(a.repeats):
        out["repeats"] = records(a.repeats)
    if a.versus is not None:
        out["versus_baseline"] = {"baseline": a.versus.label, "deltas": records(a.versus.deltas),
                                  "left_out": records(a.versus.mismatches), "notes": a.versus.notes}
    if a.trend is not None:
        out["trend"] = records(a.trend)
    return out
