"""The metric sections of the HTML report, one function per metric of docs/design.md section 4.

Each section function takes an :class:`~pytest_agentperturb.analysis.Analysis`
and returns escaped HTML.  Tables go through :func:`table`, which escapes
every cell; plots come from :mod:`pytest_agentperturb.report.svg`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..model.task import CLEAN, TARGETS, TYPES
from ..model.undefined import (CONSTANT_FAMILY, NO_CLEAN_FAILS, NO_CLEAN_PASSES, NO_PAIRS, NO_USAGE, NOT_RUN, PER_MODEL,
                                correlation_why, detectable, drop_why, empty_why, figure, na, undefined)
from .failures import failure_anchor
from .svg import box_pairs, correlation_matrix, dot_intervals, esc, heatmap, trend_chart

if TYPE_CHECKING:
    import pandas as pd

    from ..analysis import Analysis

ALL_MODELS = "all models"
#: Tables of more than this many rows are folded behind their heading (``<details>``).
FOLD_ROWS = 12


def baselines(a: Analysis) -> frozenset[str]:
    """The models of an analysis flagged as baselines (reported, never model results)."""
    from ..gate import baseline_models

    return frozenset(baseline_models(a.episodes))


def model_cell(model: Any, base: frozenset[str] = frozenset()) -> str:
    m = str(model)
    if m in base:
        return f"{esc(m)} <span class='tag baseline'>baseline</span>"
    if m == ALL_MODELS:
        return "<i>all models (suite average)</i>"
    return esc(m)


def fmt(v: Any, kind: str, base: frozenset[str] = frozenset()) -> str:
    """One cell, formatted and escaped."""
    if kind == "model":
        return model_cell(v, base)
    if kind == "curve":
        return " ".join(figure(x, ".2f") for x in v) if isinstance(v, (list, tuple)) else na()
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return na()
    if kind == "pct":
        return detectable(v, ".1f", "%") if float(v) == math.inf else f"{float(v):.1f} %"
    if kind == "pts":
        return detectable(v, ".0f", "points")
    if kind == "rate":
        return f"{float(v):.2f}"
    if kind == "f3":
        return f"{float(v):.3f}"
    if kind == "f0":
        return f"{float(v):,.0f}"
    if kind == "i":
        return f"{int(v)}"
    if kind == "p":
        p = float(v)
        return "&lt;0.001" if p < 0.001 else f"{p:.3f}"
    return esc(v)


Col = tuple[str, str, str]   # header, column (or "ci"), kind
_NUMERIC = frozenset({"pct", "pts", "rate", "f3", "f0", "i", "p"})
#: A row's ``<column>_why`` (if set) says why its figure in ``<column>`` is undefined (else :func:`empty_why`).
WHY = "_why"


def fold(title: str, body: str, n_rows: int, *, heading: bool = True) -> str:
    """``body`` folded behind a summary naming it (``title``, escaped here) and its row count."""
    return (f"<details class=fold><summary>{'<b>' + esc(title) + '</b>' if heading else esc(title)} "
            f"<span class=muted>({n_rows} rows)</span></summary>{body}</details>")


def table(df: pd.DataFrame, cols: Sequence[Col], *, cls: str = "", limit: int | None = None,
          baselines: frozenset[str] = frozenset(), title: str | None = None,
          fold_over: int | None = FOLD_ROWS) -> str:
    """An escaped HTML table of ``df``; ``("95% CI", "ci", "pct")`` renders ``[ci_low, ci_high]``.

    ``title`` (if given) heads it; a table of more than ``fold_over`` rows
    (None: never) is folded behind that heading (:func:`fold`).  An
    undefined figure reads ``n/a (why)``: the row's ``<column>_why`` where it
    has one (:data:`WHY`), else what :func:`empty_why` or :func:`drop_why`
    knows.  An interval stays on one line (``<span class=iv>``; an ``exact``
    after it may wrap); a column of kind ``"interval"`` holds interval text
    laid out the same way.
    """
    head_html = f"<h3>{esc(title)}</h3>" if title else ""
    if not len(df):
        return head_html + "<p class=muted>no data</p>"
    head = "".join(f"<th{' class=l' if k in ('s', 'model') else ''}>{esc(h)}</th>" for h, _, k in cols)
    body = []
    rows = df if limit is None else df.head(limit)
    for r in rows.to_dict("records"):
        tds = []
        for _, c, k in cols:
            if c == "ci":
                lo, hi = r.get("ci_low"), r.get("ci_high")
                if undefined(lo) and undefined(hi):   # D undefined, or no interval: say why where it is known
                    why = r.get("ci" + WHY)
                    tds.append(f"<td class=ci>{esc(na(why if isinstance(why, str) and why else drop_why(r)))}</td>")
                else:
                    ex = " exact" if r.get("interval_method") == "exact" else ""
                    tds.append(f"<td class=ci><span class=iv>[{fmt(lo, k)}, {fmt(hi, k)}]</span>{ex}</td>")
            elif c == "relative_drop" and undefined(r.get(c)):
                tds.append(f"<td>{esc(na(drop_why(r)))}</td>")
            elif k in _NUMERIC and undefined(r.get(c)):
                why = r.get(c + WHY)
                tds.append(f"<td>{esc(na(why if isinstance(why, str) and why else empty_why(r)))}</td>")
            elif k == "interval":
                tds.append(f"<td class=ci><span class=iv>{esc(r.get(c))}</span></td>")
            else:
                tds.append(f"<td{' class=l' if k in ('s', 'model') else ''}>{fmt(r.get(c), k, baselines)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    more = f"<p class=muted>{len(df) - limit} more rows in the JSON summary.</p>" \
        if limit is not None and len(df) > limit else ""
    html = f"<table class='{cls}'><tr>{head}</tr>{''.join(body)}</table>{more}"
    if fold_over is not None and len(df) > fold_over:
        return fold(title or "the table", html, len(df))
    return head_html + html


def heatmap_for(a: Analysis, model: str, suite: str, *, title: str = "") -> str:
    """The 4x3 target-by-type heatmap of D for a model (or all models) with bootstrap intervals.

    A cell without D says why (:func:`_cell_why`): not run, no scored pair, no clean passes.
    """
    d = a.drops[(a.drops["model"] == model) & (a.drops["suite"] == suite) & (a.drops["level_kind"] == "family")]
    by = {r["level"]: r for r in d.to_dict("records")}
    vals = [[float(by.get(f"{t}-{k}", {}).get("relative_drop", float("nan"))) for k in TYPES] for t in TARGETS]
    ints = [[(float(by.get(f"{t}-{k}", {}).get("ci_low", float("nan"))),
              float(by.get(f"{t}-{k}", {}).get("ci_high", float("nan")))) for k in TYPES] for t in TARGETS]
    ran = _ran(a, suite)
    links = [[(f"#{failure_anchor(suite, fam)}" if model == ALL_MODELS else f"#{failure_anchor(suite, fam, model)}")
              if (fam := f"{t}-{k}") in ran.get(model, ()) else None for k in TYPES] for t in TARGETS]
    whys = [[_cell_why(by.get(f"{t}-{k}"), f"{t}-{k}" in ran.get(model, ())) for k in TYPES] for t in TARGETS]
    return heatmap(vals, TARGETS, TYPES, title=title, intervals=ints, links=links, whys=whys)


def _cell_why(row: dict[str, Any] | None, ran: bool) -> str:
    """Why a heatmap cell has no D: its family did not run, ran with no scored pair, or its clean score is 0."""
    if row is None:
        return NO_PAIRS if ran else NOT_RUN
    return drop_why(row)


def drop_whys(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the drop table with why their evidence columns may be undefined (:data:`WHY`).

    The exact p and the smallest detectable D are computed per model only
    (:data:`PER_MODEL` on a suite average row); elsewhere they lack for the
    reason D does (:func:`drop_why`, a clean score of 0 mostly).
    """
    if not len(df):
        return df
    whys = [PER_MODEL if str(m) == ALL_MODELS else drop_why(r)
            for m, r in zip(df["model"], df[["n_pairs", "clean"]].to_dict("records"))]
    return df.assign(min_detectable_why=whys, p_exact_why=whys)


def _ran(a: Analysis, suite: str) -> dict[str, set[str]]:
    """Families run in ``suite``, per model and for :data:`ALL_MODELS` (the failures list has a group for each)."""
    ep = a.episodes[a.episodes["suite"].astype(str) == str(suite)]
    out: dict[str, set[str]] = {ALL_MODELS: set()}
    for f, m in zip(ep["family"].astype(str), ep["model"].astype(str)):
        out.setdefault(m, set()).add(f)
        out[ALL_MODELS].add(f)
    return out


def degradation(a: Analysis) -> str:
    out = ["<p>D = 100 (C − P) / C per level; intervals are 95 % BCa intervals (expanded for few tasks) of a "
           f"cluster bootstrap over tasks, a drawn task keeping all its repeats ({a.replicates} replicates; replicates whose clean score is 0 have no D and are counted). "
           "Where a binary level is sparse (fewer than 5 clean passes, a degenerate bootstrap, or more than 1 % of "
           "the replicates with clean score 0) the interval is <b>exact</b> instead and says so: Clopper-Pearson "
           "bounds of C and P joined by Bonferroni, conservative (it covers at least 95 %) and wide. "
           "Exact p: the one-sided exact paired test of no drop (binary rewards). Smallest detectable D: the "
           "relative drop this run detects with 80 % power at one-sided 2.5 % (normal approximation).</p>"]
    for suite in sorted(set(a.drops["suite"])):
        d = a.drops[(a.drops["suite"] == suite) & (a.drops["model"] == ALL_MODELS)]
        items = [(f"{r['level_kind']}: {r['level']}" + (" (exact)" if r.get("interval_method") == "exact" else ""),
                  r["relative_drop"], r["ci_low"], r["ci_high"]) for r in d.to_dict("records")]
        out.append(dot_intervals(items, title=f"{suite}: relative drop, all models", unit=" %"))
        models = [m for m in sorted(set(a.drops["model"])) if m != ALL_MODELS]
        if len(models) > 1:
            out.append("<div class=grid>" + "".join(
                f"<div>{heatmap_for(a, m, suite, title=m + (' (baseline)' if m in baselines(a) else ''))}</div>"
                for m in models) + "</div>")
        out.append("<details class=fold><summary><b>every level, every model</b></summary>" + table(
            drop_whys(a.drops[a.drops["suite"] == suite]), baselines=baselines(a), fold_over=None, cols=[("model", "model", "model"), ("level", "level_kind", "s"), ("", "level", "s"),
             ("clean C", "clean", "f3"), ("perturbed P", "perturbed", "f3"), ("D", "relative_drop", "pct"),
             ("95% CI", "ci", "pct"), ("episodes", "n_perturbed", "i"), ("pairs", "n_pairs", "i"),
             ("dropped", "n_dropped", "i"), ("why", "dropped_why", "s"),
             ("exact p, no drop (one-sided)", "p_exact", "p"), ("smallest detectable D", "min_detectable", "pct"),
             ("replicates with C* = 0", "n_boot_undefined", "i")]) + "</details>")
    return "".join(out)


def marginal(a: Analysis) -> str:
    return ("<p>Mean paired drop s<sub>clean</sub> − s<sub>perturbed</sub> over the families sharing a target "
            "(type); relative = that / mean clean reward of the same pairs.</p>" + table(a.marginal, baselines=baselines(a), title="Per model, factor and level", cols=[("model", "model", "model"), ("suite", "suite", "s"), ("factor", "factor", "s"),
                             ("level", "level", "s"), ("mean paired drop", "mean_paired_drop", "f3"),
                             ("relative", "relative", "pct"), ("pairs", "n_pairs", "i")]))


def paired(a: Analysis) -> str:
    return ("<p>Per family: exact McNemar test on pass/fail pairs (binary rewards) or Wilcoxon signed-rank test "
            "on reward differences (continuous rewards). harmful = pass→fail, beneficial = fail→pass.</p>"
            + table(a.paired_tests, baselines=baselines(a), title="Per model and family", cols=[("model", "model", "model"), ("suite", "suite", "s"), ("family", "family", "s"),
                                     ("test", "test", "s"), ("p", "p_value", "p"), ("pairs", "n_pairs", "i"),
                                     ("harmful", "harmful", "i"), ("beneficial", "beneficial", "i"),
                                     ("mean paired drop", "mean_paired_drop", "f3")]))


def malleability(a: Analysis) -> str:
    cols: list[Col] = [("pairs", "n_pairs", "i"), ("flip rate", "flip_rate", "rate"),
                       ("harmful (of clean passes)", "harmful_rate", "rate"),
                       ("beneficial (of clean fails)", "beneficial_rate", "rate"),
                       ("mean |Δreward|", "mean_abs_delta", "f3")]
    return (table(_malleability_whys(a.malleability), baselines=baselines(a), title="Per model",
                  cols=[("model", "model", "model"), ("suite", "suite", "s"), *cols])
            + table(_malleability_whys(a.malleability_family), title="By family (all models)",
                    cols=[("suite", "suite", "s"), ("family", "family", "s"), *cols]))


def _malleability_whys(df: pd.DataFrame) -> pd.DataFrame:
    """Why a rate is undefined: harmful rates divide by the clean passes, beneficial ones by the clean fails."""
    return df.assign(harmful_rate_why=NO_CLEAN_PASSES, beneficial_rate_why=NO_CLEAN_FAILS,
                     flip_rate_why=NO_PAIRS, mean_abs_delta_why=NO_PAIRS) if len(df) else df


def _cost_whys(df: pd.DataFrame) -> pd.DataFrame:
    """Why a recovery-cost figure is undefined: no success on that side, or no token usage known for it."""
    import numpy as np

    if not len(df):
        return df
    out = df.copy()
    for side, word in (("clean", "clean"), ("pert", "perturbed")):
        why = np.where(out[f"n_success_{side}"].fillna(0) == 0, f"no {word} successes", NO_USAGE)
        out[f"tokens_per_success_{side}{WHY}"] = out[f"median_tokens_per_success_{side}{WHY}"] = why
        out[f"successes_per_mtok_{side}{WHY}"] = NO_USAGE
    out[f"extra_tokens_pct{WHY}"] = np.where(out["tokens_per_success_clean"].isna(),
                                             out[f"tokens_per_success_clean{WHY}"],
                                             out[f"tokens_per_success_pert{WHY}"])
    out[f"spm_change_pct{WHY}"] = out[f"tokens_per_success_clean{WHY}"]   # the change divides by the clean side
    return out


def compliance(a: Analysis) -> str:
    cols: list[Col] = [("episodes", "n", "i"), ("compliance", "compliance_rate", "rate"),
                       ("bypass", "bypass_rate", "rate")]
    return ("<p>Compliance: the agent took the perturbation up (a canary in its actions, or it went on without "
            "the omitted fact). Bypass = 1 − compliance.</p>"
            + table(a.compliance, baselines=baselines(a), title="Per model and family", cols=[("model", "model", "model"), ("suite", "suite", "s"), ("family", "family", "s"),
                                   *cols])
            + table(a.compliance_operator, title="Per operator / inserted object (all models)", cols=[("suite", "suite", "s"), ("family", "family", "s"),
                                            ("operator", "operator", "s"), *cols]))


def _correlation_whys(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (predictor rows) with why each undefined rho and p is: too few models or tasks, or one side constant.

    Capability and the clean score correlate across models; every other
    predictor (a task property) across tasks.
    """
    if not len(df):
        return df
    preds = df["predictor"] if "predictor" in df.columns else [""] * len(df)
    whys = [correlation_why(n, "models" if str(p) == "capability" or str(p).startswith("clean_score") else "tasks")
            for n, p in zip(df["n"], preds)]
    return df.assign(rho_why=whys, p_value_why=whys)


def predictors(a: Analysis, has_capability: bool) -> str:
    note = "" if has_capability else (
        "<p class=muted>No capability table was given: pass <code>--capability capability.csv</code> "
        "(columns <code>model,capability</code>) to <code>agentperturb report</code> or "
        "<code>agentperturb analyze</code> for the capability predictor.</p>")
    return (f"<p>Spearman ρ with a two-sided permutation test ({a.permutations:,} random assignments). Across "
            "models the outcome is −D (positive ρ: the predictor goes with robustness); across tasks it is the "
            "per-task D.</p>" + note
            + table(_correlation_whys(a.predictors), [("suite", "suite", "s"), ("predictor", "predictor", "s"),
                                   ("outcome", "outcome", "s"), ("ρ", "rho", "f3"), ("p", "p_value", "p"),
                                   ("n", "n", "i")])
            + "<h3>Clean score vs D (biased; not comparable evidence)</h3><p class=muted>C is inside D, so "
            "this correlation is biased by construction; C and D come from disjoint halves of the tasks.</p>"
            + table(_correlation_whys(a.clean_score), [("suite", "suite", "s"), ("ρ", "rho", "f3"), ("p", "p_value", "p"),
                                    ("n", "n", "i"), ("caveat", "caveat", "s")]))


def sensitivity(a: Analysis) -> str:
    out = ["<p>Residual rank correlations of relative paired changes between families, after regressing on "
           "clean-performance rank with model fixed effects; ordered by average-linkage clustering on 1 − ρ; "
           f"cluster bootstrap over tasks ({a.replicates} replicates), 95 % percentile intervals.</p>"]
    import pandas as pd

    for s in a.sensitivity:
        if s.skipped:
            out.append(f"<p class=muted>{esc(s.suite)}: not estimated: {esc(s.skipped)}</p>")
            continue
        out.append(correlation_matrix(s.families, s.rho, title=f"{s.suite}: cross-family ρ", linkage=s.linkage))
        groups = pd.DataFrame(s.groups).assign(n_pairs_why="a contrast of two groups")
        out.append(table(groups, [("group", "group", "s"), ("pairs", "n_pairs", "i"),
                                                  ("mean ρ", "mean_rho", "f3"), ("95% CI", "ci", "f3")]))
        pairs = pd.DataFrame(s.pair_rows()).assign(rho_why=CONSTANT_FAMILY, ci_why=CONSTANT_FAMILY)
        out.append("<details class=fold><summary><b>every family pair</b></summary>" + table(
            pairs, fold_over=None, cols=[("f", "family_f", "s"), ("g", "family_g", "s"),
                                          ("relation", "relation", "s"), ("ρ", "rho", "f3"),
                                          ("95% CI", "ci", "f3")]) + "</details>")
    return "".join(out)


def cost(a: Analysis) -> str:
    rc = table(_cost_whys(a.recovery_cost), baselines=baselines(a), title="Recovery cost", cols=[
        ("model", "model", "model"), ("suite", "suite", "s"), ("family", "family", "s"),
        ("tokens/success clean", "tokens_per_success_clean", "f0"),
        ("tokens/success perturbed", "tokens_per_success_pert", "f0"),
        ("median clean", "median_tokens_per_success_clean", "f0"),
        ("median perturbed", "median_tokens_per_success_pert", "f0"), ("extra tokens", "extra_tokens_pct", "pct"),
        ("successes/Mtok clean", "successes_per_mtok_clean", "f0"),
        ("successes/Mtok perturbed", "successes_per_mtok_pert", "f0"), ("change", "spm_change_pct", "pct"),
        ("pairs", "n_pairs", "i"), ("unknown usage", "n_unknown", "i")])
    rr = table(a.rollout_ratios, baselines=baselines(a), title="Rollout ratios (perturbed / clean, per pair)", cols=[
        ("model", "model", "model"), ("suite", "suite", "s"), ("by", "level_kind", "s"), ("level", "level", "s"),
        ("metric", "metric", "s"), ("pairs", "n_pairs", "i"), ("no ratio", "n_unknown", "i"),
        ("median ratio", "median", "f3"), ("Q1", "q1", "f3"), ("Q3", "q3", "f3"), ("mean", "mean", "f3"),
        ("SD", "sd", "f3"), ("signed-rank p", "p_value", "p")])
    em = table(a.edit_magnitude, title="Edit magnitude (tool-contract operators)", cols=[
        ("suite", "suite", "s"), ("operator", "operator", "s"), ("family", "family", "s"), ("pairs", "n_pairs", "i"),
        ("drop (points)", "drop_pp", "f3"), ("successful pairs", "n_success_pairs", "i"),
        ("Δ tokens", "delta_tokens", "f0"), ("Δ tool calls", "delta_tool_calls", "f3")])
    return (f"{rc}<p>Rollout ratios: median and IQR summarise; mean and SD are tail diagnostics.</p>"
            f"{rr}{em}")


def _tokens(r: dict[str, Any]) -> float:
    """Input + output tokens (output includes reasoning, as :func:`~..analysis.table.tokens`); NaN if unknown."""
    i, o = r.get("input_tokens"), r.get("output_tokens")
    return math.nan if i is None or o is None else float(i) + float(o)


#: (title, unit, value of an episode row) of each distribution drawn
_METRICS: tuple[tuple[str, str, Callable[[dict[str, Any]], float]], ...] = (
    ("turns", " turns", lambda r: float(r.get("turns", math.nan))),
    ("cost in tokens (input + output)", " tokens", _tokens),
    ("cost in USD", " USD", lambda r: math.nan if r.get("cost_usd") is None else float(r["cost_usd"])),
)


def _family_rows(rows: Sequence[dict[str, Any]], metric: Callable[[dict[str, Any]], float]
                 ) -> list[tuple[str, list[float], list[float]]]:
    """Per perturbed family: (label, the clean values of its tasks, its values), errors left out."""
    from .pages import _fam_order

    def key(r: dict[str, Any]) -> tuple[str, ...]:
        return (str(r.get("run_id", "")), str(r["model"]), str(r["task"]), str(r.get("repeat", 0)))

    clean: dict[tuple[str, ...], float] = {}
    fams: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("error"):
            continue
        if r["family"] == CLEAN:
            clean.setdefault(key(r), metric(r))
        else:
            fams.setdefault(str(r["family"]), []).append(r)
    out = []
    for f in sorted(fams, key=_fam_order):
        keys = {key(r) for r in fams[f]}
        c = [clean[k] for k in sorted(keys) if k in clean and clean[k] == clean[k]]
        p = [v for r in fams[f] if (v := metric(r)) == v]
        if c or p:
            out.append((f"{f} ({len(p)})", c, p))
    return out


def records(df: Any) -> list[dict[str, Any]]:
    """``df.to_dict("records")``: one dict per row, plain Python values, built column by column (faster)."""
    cols = [str(c) for c in df.columns]
    return [dict(zip(cols, vals)) for vals in zip(*(df[c].tolist() for c in df.columns))]


def distributions(a: Analysis) -> str:
    """Turns and cost per family, the clean episodes of the same tasks beside the perturbed ones (box plots)."""
    cols = [c for c in ("run_id", "model", "suite", "task", "family", "repeat", "error", "turns", "input_tokens",
                        "output_tokens", "reasoning_tokens", "cost_usd") if c in a.episodes.columns]
    rows = records(a.episodes[cols])
    out = ["<p>Per family, the distribution over its episodes (errors left out; the count in brackets) "
           "beside the clean episodes of the same model, run, task and repeat: box Q1–Q3, thick line the median, "
           "whiskers min to max; the medians are printed clean → perturbed. Usage a provider did not report is "
           "left out.</p>"]
    base = baselines(a)
    for suite in sorted({str(r["suite"]) for r in rows}):
        mine = [r for r in rows if str(r["suite"]) == suite]
        models = sorted({str(r["model"]) for r in mine}, key=lambda m: (m in base, m))
        real = [m for m in models if m not in base]   # pooled as the analysis pools: baselines left out if any
        pool = [r for r in mine if str(r["model"]) in real] if real and len(real) < len(models) else mine
        which = "all models" if pool is mine else "all models, baselines left out"
        charts = []
        for title, unit, metric in _METRICS:
            fr = _family_rows(pool, metric)
            if fr:
                charts.append(box_pairs(fr, title=f"{suite}: {title}, {which}", unit=unit))
        out.append("<div class=grid>" + "".join(f"<div>{c}</div>" for c in charts) + "</div>"
                   if charts else f"<p class=muted>{esc(suite)}: no scored episode to draw.</p>")
        if len(models) > 1:
            per = []
            for m in models:
                for title, unit, metric in _METRICS:
                    fr = _family_rows([r for r in mine if str(r["model"]) == m], metric)
                    if fr:
                        per.append(box_pairs(fr, title=f"{m}{' (baseline)' if m in base else ''}: {title}",
                                             unit=unit))
            if per:
                out.append(f"<details class=fold><summary><b>{esc(suite)}: per model</b> "
                           f"<span class=muted>({len(models)} models)</span></summary><div class=grid>"
                           + "".join(f"<div>{c}</div>" for c in per) + "</div></details>")
    return "".join(out)


def labels(a: Analysis) -> str:
    d = a.labels[a.labels["n"] > 0] if len(a.labels) else a.labels
    return ("<p>Labelled pairs: clean episode passed, perturbed episode failed.</p>"
            "<p>A1 no explicit signal · A2 tentative signal · A3 sustained problem statement · A4 input-channel "
            "attribution; E1 invented content · E2 requirement omitted · E3 corrupted value propagated · "
            "E4 task abandoned · E5 code defect · E6 judgment reversed. Labels from the epistemic-marker "
            "lexicon are <b>heuristic</b> (counted in the last column); E3 from canaries and E4 from a stop "
            "without asking are mechanical; imported labels are manual.</p>"
            + table(d, title="Labelled pairs", cols=[("suite", "suite", "s"), ("label", "label", "s"), ("scope", "scope", "s"),
                        ("code", "code", "s"), ("n", "n", "i"), ("of", "of", "i"), ("heuristic", "heuristic", "i")]))


SECTIONS: tuple[tuple[str, str, Callable[..., str]], ...] = (
    ("degradation", "Degradation by target, type and family", degradation),
    ("marginal", "Marginal effects", marginal),
    ("paired", "Paired tests per family", paired),
    ("malleability", "Malleability (flip rates)", malleability),
    ("compliance", "Compliance and bypass", compliance),
    ("sensitivity", "Cross-family sensitivity", sensitivity),
    ("cost", "Recovery cost, rollout ratios, edit magnitude", cost),
    ("labels", "Awareness and first-error behaviour", labels),
)


# -- release gates: repeated trials, the baseline run, the trend across runs ---------------------
def _interval_text(lo: Any, hi: Any, kind: str) -> str:
    """``[lo, hi]`` formatted like a cell (plain text: :func:`table` escapes it)."""
    return f"[{fmt(lo, kind)}, {fmt(hi, kind)}]"


def repeats(a: Analysis) -> str:
    """pass@1, pass^k, pass@k, the noise floor and D per model and family (empty without K >= 2 repeats)."""
    rp = a.repeats
    if rp is None or not len(rp):
        return ""
    d = a.drops[a.drops["level_kind"] == "family"][["model", "suite", "level", "relative_drop", "ci_low", "ci_high"]]
    d = d.rename(columns={"level": "family", "ci_low": "d_low", "ci_high": "d_high"})
    t = rp.merge(d, on=["model", "suite", "family"], how="left")
    t["d_ci"] = [_interval_text(lo, hi, "pct") for lo, hi in zip(t["d_low"], t["d_high"])]
    t["excess_ci"] = [_interval_text(lo, hi, "f3") for lo, hi in zip(t["ci_low"], t["ci_high"])]
    return ("<p>Every (task, family, model) ran k times on the same variant, each repeat with its own episode seed. "
            "Over the tasks whose k repeats were all scored: pass@1 = mean success, pass^k = share of tasks where all "
            "k succeed, pass@k = share where any does. The noise floor is the clean-vs-clean flip rate (two clean "
            "repeats of a task disagree); the flip rate beside it compares clean and perturbed repeats of the same "
            "tasks. A family whose excess flip rate (flip rate − noise floor) has a 95 % interval reaching 0 is "
            "<b>not distinguishable from noise</b>. D's interval is a cluster bootstrap over tasks with the repeats "
            f"resampled within each task ({a.replicates} replicates).</p>"
            + table(t, baselines=baselines(a), title="Per model and family", cols=[
                ("model", "model", "model"), ("suite", "suite", "s"), ("family", "family", "s"), ("k", "k", "i"),
                ("tasks", "n_tasks", "i"), ("pass@1", "pass_at_1", "rate"), ("pass^k", "pass_hat_k", "rate"),
                ("pass@k", "pass_at_k", "rate"), ("pass^1..pass^k", "pass_hat_curve", "curve"),
                ("flip rate", "flip_rate", "rate"),
                ("noise floor", "noise_floor", "rate"), ("excess", "excess", "f3"), ("95% CI", "excess_ci", "interval"),
                ("verdict", "verdict", "s"), ("D", "relative_drop", "pct"), ("D 95% CI", "d_ci", "interval")]))


def versus_baseline(a: Analysis) -> str:
    """The change in D against the baseline run, per level, with what was left out (empty without a baseline)."""
    v = a.versus
    if v is None:
        return ""
    out = [f"<p>Compared with the <b>{esc(v.label)}</b> on the same tasks, families and variants (same variant "
           "digests). Change = D this run − D baseline run, in points, with a 95 % BCa interval (expanded for few "
           f"tasks) from a paired cluster bootstrap over tasks ({a.replicates} replicates; a drawn task keeps all its "
           "repeats). 'rose' / 'fell': "
           "the whole interval is above / below 0.</p>"]
    out += [f"<p class=muted>{esc(n)}</p>" for n in v.notes]
    d = v.deltas
    for (model, suite), g in d.groupby(["model", "suite"], sort=True):
        keep = g[g["level_kind"].isin(["overall", "family"])]
        items = [(f"{r['level_kind']}: {r['level']}" + (" (exact)" if r.get("interval_method") == "exact" else ""),
                  r["delta"], r["ci_low"], r["ci_high"])
                 for r in keep.to_dict("records")]
        out.append(dot_intervals(items, title=f"{model} on {suite}: change in D vs {g['baseline_model'].iloc[0]}",
                                 unit=" pts"))
    if len(d):   # a level is compared where both runs have pairs: a figure lacks where a clean score is 0
        d = d.assign(d_current_why=NO_CLEAN_PASSES, d_baseline_why=NO_CLEAN_PASSES, delta_why="a D undefined",
                     min_detectable_why=NO_CLEAN_PASSES)
    out.append(table(d, baselines=baselines(a), title="Change per level", cols=[
        ("model", "model", "model"), ("baseline model", "baseline_model", "s"), ("suite", "suite", "s"),
        ("level", "level_kind", "s"), ("", "level", "s"), ("D this run", "d_current", "pct"),
        ("D baseline", "d_baseline", "pct"), ("change (points)", "delta", "f3"), ("95% CI", "ci", "f3"),
        ("verdict", "verdict", "s"), ("tasks", "n_tasks", "i"), ("pairs", "n_pairs_current", "i"),
        ("pairs (baseline)", "n_pairs_baseline", "i"),
        ("smallest detectable change (points)", "min_detectable", "pts")]))
    if len(v.mismatches):
        out.append(f"<details class=fold><summary>left out of the comparison: {len(v.mismatches)} (task, family) pair(s)"
                   "</summary>" + table(v.mismatches, [
                       ("model", "model", "s"), ("baseline model", "baseline_model", "s"), ("suite", "suite", "s"),
                       ("task", "task", "s"), ("family", "family", "s"), ("why", "reason", "s")]) + "</details>")
    else:
        out.append("<p class=muted>Nothing was left out: every (task, family) ran on the same variant in both "
                   "runs.</p>")
    return "".join(out)


def trend(a: Analysis) -> str:
    """Overall D per run, as a chart per suite (empty for a table of one run)."""
    t = a.trend
    if t is None or not len(t):
        return ""
    out = ["<p>Overall relative drop D per run, in the order the runs were recorded, with 95 % cluster-bootstrap "
           "intervals.</p>"]
    runs = list(dict.fromkeys(t.sort_values("order", kind="mergesort")["run_id"]))
    for suite in sorted(set(t["suite"])):
        g = t[t["suite"] == suite]
        series = []
        for model in sorted(set(g["model"])):
            by = {r["run_id"]: (r["relative_drop"], r["ci_low"], r["ci_high"]) for r in g[g["model"] == model]
                  .to_dict("records")}
            series.append((model, [by.get(run, (math.nan, math.nan, math.nan)) for run in runs]))
        out.append(trend_chart(series, runs, title=f"{suite}: relative drop D per run"))
    out.append(table(t, baselines=baselines(a), title="Per run", cols=[
        ("run", "run_id", "s"), ("model", "model", "model"), ("suite", "suite", "s"), ("clean C", "clean", "f3"),
        ("perturbed P", "perturbed", "f3"), ("D", "relative_drop", "pct"), ("95% CI", "ci", "pct"),
        ("pairs", "n_pairs", "i")]))
    return "".join(out)


#: Sections for a release manager, shown first when the analysis has them (a function returns "" otherwise).
RELEASE_SECTIONS: tuple[tuple[str, str, Callable[..., str]], ...] = (
    ("versus-baseline", "Versus baseline", versus_baseline),
    ("repeats", "Repeated trials: pass@1, pass^k, pass@k and the noise floor", repeats),
    ("trend", "D across runs", trend),
)
