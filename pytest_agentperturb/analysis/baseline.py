"""This run against a baseline run, and D across runs (docs/design.md section 4.1, "Versus a baseline run").

:func:`compare` sets each model of this run beside its counterpart in a
baseline run (the same model name; otherwise the baseline run's only model,
or its only model with the same ``baseline`` flag) on the same tasks,
families and variants: a (task, family) enters the comparison only when both
runs ran it on the same variant (equal ``variant_digest``), and a task whose
clean instance differs leaves with all its families.  What was left out is
listed with the reason.  Per level (overall, target, type, family, inserted
object) it gives D of both runs over the tasks that have pairs in both, the
change delta = D_this - D_baseline in points, and a 95 % BCa interval
(:func:`~.stats.bca_interval`) of the change from a paired cluster bootstrap:
one draw of tasks shared by both runs, a drawn task bringing all its repeats
of both runs along; the acceleration comes from the jackknife that leaves out
one task (of both runs) at a time.  ``p_exact`` is the paired swap test
(:func:`~.stats.swap_test`) of "no regression" on the shared tasks, the
exact test the gate's ``significant`` rule decides the regression with; the
bootstrap replicates of the change are kept in ``Comparison.replicates``.

:func:`run_trend` gives the overall D of every (run, model, suite) of a
table holding several runs, in the order the runs were recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..model.task import CLEAN
from .degradation import ALL_MODELS, _level_rows, _levels, drops, relative_degradation
from .exact import DESIGN_TASKS_CHANGE, EXACT, change_interval, effective_n, exact_by_design, is_sparse
from .stats import ALPHA, N_BOOTSTRAP, FloatArray, Replicates, bca_interval, bootstrap_weights, draw_sums, swap_test
from .table import pairs, with_repeat

if TYPE_CHECKING:
    import pandas as pd

ROSE, FELL, SAME = "rose", "fell", "not distinguishable"
DELTA_COLUMNS = ["model", "baseline_model", "suite", "baseline", "level_kind", "level", "d_current", "d_baseline",
                 "delta", "ci_low", "ci_high", "n_tasks", "n_pairs_current", "n_pairs_baseline", "verdict",
                 "min_detectable", "p_exact", "interval_method"]
MISMATCH_COLUMNS = ["model", "baseline_model", "suite", "task", "family", "reason"]
TREND_COLUMNS = ["run_id", "order", "model", "suite", "baseline", "clean", "perturbed", "relative_drop", "ci_low",
                 "ci_high", "n_pairs"]


@dataclass
class Comparison:
    """This run against a baseline run: changes in D per level and what was left out."""

    label: str
    deltas: pd.DataFrame
    mismatches: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    #: bootstrap replicates of the change per (model, suite, level_kind, level), for the gate's bootstrap p
    replicates: dict[tuple[str, str, str, str], FloatArray] = field(default_factory=Replicates)


def counterparts(models: list[str], base_models: list[str], flags: dict[str, bool],
                 base_flags: dict[str, bool]) -> dict[str, str]:
    """This run's model -> its baseline-run model (same name; else the only one; else the only one of its kind)."""
    out = {}
    for m in models:
        if m in base_models:
            out[m] = m
        elif len(base_models) == 1:
            out[m] = base_models[0]
        else:
            same = [b for b in base_models if base_flags.get(b) == flags.get(m)]
            if len(same) == 1:
                out[m] = same[0]
    return out


def _digests(df: pd.DataFrame) -> dict[tuple[str, str], frozenset[str]]:
    if "variant_digest" not in df.columns:
        return {}
    d = df[["task", "family", "variant_digest"]].fillna("")
    d = d[d["variant_digest"].astype(str) != ""]
    return {(str(t), str(f)): frozenset(map(str, g)) for (t, f), g in d.groupby(["task", "family"])["variant_digest"]}


def _match(cur: pd.DataFrame, bas: pd.DataFrame) -> tuple[set[tuple[str, str]], list[tuple[str, str, str]], bool]:
    """(task, family) pairs both runs ran on the same variant; (task, family, reason) left out; digests known."""
    kc = set(map(tuple, cur[["task", "family"]].astype(str).to_numpy().tolist()))
    kb = set(map(tuple, bas[["task", "family"]].astype(str).to_numpy().tolist()))
    dc, db = _digests(cur), _digests(bas)
    known = bool(dc) and bool(db)
    left: dict[tuple[str, str], str] = {}
    for key in sorted(kc | kb):
        if key not in kb:
            left[key] = "not in the baseline run"
        elif key not in kc:
            left[key] = "not in this run"
        elif known and dc.get(key, frozenset()) != db.get(key, frozenset()):
            left[key] = "variant differs"
    bad_clean = {t for (t, f) in left if f == CLEAN}
    for key in sorted(kc & kb):
        if key[0] in bad_clean and key not in left:
            left[key] = "clean instance not comparable"
    kept = (kc & kb) - set(left)
    return kept, [(t, f, r) for (t, f), r in sorted(left.items())], known


def _only(df: pd.DataFrame, keep: set[tuple[str, str]]) -> pd.DataFrame:
    """The episodes of ``df`` whose (task, family) is in ``keep``."""
    sel = np.asarray([(str(t), str(f)) in keep for t, f in zip(df["task"], df["family"])], dtype=bool)
    return df[sel] if len(df) else df


def _sums(pr: pd.DataFrame, ti: dict[str, int], li: dict[tuple[str, str], int]
          ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Clean sums, perturbed sums and pair counts of a pairs table, shape (tasks, repeats, levels)."""
    reps = sorted(pr["repeat"].unique()) if len(pr) else [0]
    shape = (len(ti), len(reps), len(li))
    cs, ps, n = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    if len(pr):
        r, lv = _level_rows(pr, li)
        t = pr["task"].map(ti).to_numpy()[r]
        k = pr["repeat"].map({x: i for i, x in enumerate(reps)}).to_numpy()[r]
        np.add.at(cs, (t, k, lv), pr["reward_clean"].to_numpy(float)[r])
        np.add.at(ps, (t, k, lv), pr["reward_pert"].to_numpy(float)[r])
        np.add.at(n, (t, k, lv), 1.0)
    return cs, ps, n


def _boot_d(cs: FloatArray, ps: FloatArray, n: FloatArray, w: FloatArray) -> FloatArray:
    """Bootstrap replicates of D per level, shape (replicates, levels); a drawn task brings all its repeats."""
    cs, ps, n = cs.sum(1), ps.sum(1), n.sum(1)                    # (tasks, levels)
    with np.errstate(invalid="ignore", divide="ignore"):
        nb = draw_sums("bt,tl->bl", w, n)
        cb = draw_sums("bt,tl->bl", w, cs) / nb
        pb = draw_sums("bt,tl->bl", w, ps) / nb
        return np.asarray(100.0 * (cb - pb) / cb, dtype=float)


def _jack_d(cs: FloatArray, ps: FloatArray, n: FloatArray) -> FloatArray:
    """D per level with one task (all its repeats) left out, shape (tasks, levels)."""
    cs, ps, n = cs.sum(1), ps.sum(1), n.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        nj = n.sum(0)[None] - n
        cj = (cs.sum(0)[None] - cs) / nj
        pj = (ps.sum(0)[None] - ps) / nj
        return np.asarray(100.0 * (cj - pj) / cj, dtype=float)


def compare(current: pd.DataFrame, base: pd.DataFrame, *, label: str = "baseline run",
            replicates: int = N_BOOTSTRAP, seed: int = 0, level: float = 0.95) -> Comparison:
    """This run (``current``) against ``base``, both normalised episode tables (see the module docstring)."""
    import pandas as pd

    current, base = with_repeat(current), with_repeat(base)
    flags = current.groupby("model")["baseline"].any().to_dict() if len(current) else {}
    base_flags = base.groupby("model")["baseline"].any().to_dict() if len(base) else {}
    match = counterparts(sorted(flags), sorted(base_flags), flags, base_flags)
    notes = [f"{m}: no counterpart in the {label} (it has {', '.join(sorted(base_flags)) or 'no models'})"
             for m in sorted(flags) if m not in match]
    rows: list[dict[str, object]] = []
    left: list[dict[str, object]] = []
    rng = np.random.default_rng(seed)
    swaps = np.random.default_rng([seed, 27])       # the swap test's own draws: the bootstrap's stay as they were
    reps = Replicates()
    unknown = False
    for model, bmodel in sorted(match.items()):
        for suite in sorted(set(current.loc[current["model"] == model, "suite"])):
            cur = current[(current["model"] == model) & (current["suite"] == suite)]
            bas = base[(base["model"] == bmodel) & (base["suite"] == suite)]
            if not len(bas):
                notes.append(f"{model} on {suite}: the {label} has no episodes of {bmodel} on this suite")
                continue
            kept, out, known = _match(cur, bas)
            unknown |= not known
            left += [{"model": model, "baseline_model": bmodel, "suite": suite, "task": t, "family": f,
                      "reason": why} for t, f, why in out]
            pc, pb = pairs(_only(cur, kept)), pairs(_only(bas, kept))
            rows += _deltas(pc, pb, model, bmodel, suite, bool(flags.get(model, False)), replicates, rng, level,
                            swaps, reps)
    if unknown:
        notes.append("variant digests were not recorded on one side: (task, family) pairs were matched by name only")
    return Comparison(label, pd.DataFrame(rows, columns=DELTA_COLUMNS), pd.DataFrame(left, columns=MISMATCH_COLUMNS),
                      notes, reps)


def _deltas(pc: pd.DataFrame, pb: pd.DataFrame, model: str, bmodel: str, suite: str, is_base: bool,
            replicates: int, rng: np.random.Generator, level: float, swaps: np.random.Generator,
            reps: dict[tuple[str, str, str, str], FloatArray]) -> list[dict[str, object]]:
    if not len(pc) or not len(pb):
        return []
    tasks = sorted(set(pc["task"]) | set(pb["task"]))
    levels = _levels(set(pc["family"]) | set(pb["family"]))
    ti = {t: i for i, t in enumerate(tasks)}
    li = {lv: i for i, lv in enumerate(levels)}
    cc, cp, cn = _sums(pc, ti, li)
    bc, bp, bn = _sums(pb, ti, li)
    both = (cn.sum(1) > 0) & (bn.sum(1) > 0)                      # (tasks, levels): pairs on both sides
    for a in (cc, cp, cn, bc, bp, bn):
        a *= both[:, None, :]
    w = bootstrap_weights(len(tasks), replicates, rng)
    delta_b = _boot_d(cc, cp, cn, w) - _boot_d(bc, bp, bn, w)
    delta_j = np.where(both, _jack_d(cc, cp, cn) - _jack_d(bc, bp, bn), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        d_hat = [relative_degradation(float(cc[..., j].sum()) / float(cn[..., j].sum()),
                                      float(cp[..., j].sum()) / float(cn[..., j].sum()))
                 - relative_degradation(float(bc[..., j].sum()) / float(bn[..., j].sum()),
                                        float(bp[..., j].sum()) / float(bn[..., j].sum()))
                 if both[:, j].any() else float("nan") for j in range(len(levels))]
    lo, hi = bca_interval(delta_b, np.asarray(d_hat, dtype=float), delta_j, level, expand=True)
    binary = all(bool(np.isin(t[c].to_numpy(float), (0.0, 1.0)).all())
                 for t in (pc, pb) for c in ("reward_clean", "reward_pert"))
    p_swap, _ = swap_test(np.stack([cc.sum(1), cp.sum(1)]), np.stack([bc.sum(1), bp.sum(1)]), swaps)
    out: list[dict[str, object]] = []
    for j, (kind, lab) in enumerate(levels):
        if not both[:, j].any():
            continue
        nc, nb = float(cn[..., j].sum()), float(bn[..., j].sum())
        dc = relative_degradation(float(cc[..., j].sum()) / nc, float(cp[..., j].sum()) / nc)
        db = relative_degradation(float(bc[..., j].sum()) / nb, float(bp[..., j].sum()) / nb)
        low, high = float(lo[j]), float(hi[j])
        method = _exact_change(binary, level, cc[..., j], cp[..., j], cn[..., j], bc[..., j], bp[..., j], bn[..., j],
                               int(both[:, j].sum()), delta_b[:, j])
        if method is not None:
            low, high = method
        verdict = ROSE if low > 0 else FELL if high < 0 else SAME
        reps[(model, suite, kind, lab)] = delta_b[:, j].astype(np.float32)
        n_tasks = int(both[:, j].sum())
        mdc = min_detectable_change(cc[..., j], cp[..., j], cn[..., j], bc[..., j], bp[..., j], bn[..., j])
        out.append({"model": model, "baseline_model": bmodel, "suite": suite, "baseline": is_base, "level_kind": kind,
                    "level": lab, "d_current": dc, "d_baseline": db, "delta": dc - db, "ci_low": low, "ci_high": high,
                    "n_tasks": n_tasks, "n_pairs_current": int(cn[..., j].sum()),
                    "n_pairs_baseline": int(bn[..., j].sum()), "verdict": verdict,
                    # the swap test's smallest p is 2^-n: below 6 tasks no regression reaches one-sided 2.5 %
                    "min_detectable": math.inf if mdc == mdc and 0.5 ** n_tasks > ALPHA else mdc,
                    "p_exact": float(p_swap[j]), "interval_method": "bca" if method is None else EXACT})
    return out


def _exact_change(binary: bool, level: float, cc: FloatArray, cp: FloatArray, cn: FloatArray, bc: FloatArray,
                  bp: FloatArray, bn: FloatArray, tasks: int, boot: FloatArray) -> tuple[float, float] | None:
    """The exact interval of a level's change (:func:`~.exact.change_interval`) where the design or the data ask.

    Binary rewards on both sides, and either one repeat index with pairs in
    each run and fewer than :data:`~.exact.DESIGN_TASKS_CHANGE` shared tasks
    (docs/design.md section 4.1, "Exact by design"), or a sparse level as in
    the drop table (:func:`~.exact.is_sparse`: fewer than 5 clean passes in
    either run, a degenerate bootstrap ``boot`` of the change, or more than
    1 % of its replicates undefined); None elsewhere (the BCa interval stays).
    Arguments: (tasks, repeats) sums and pair counts of both runs at the level.
    """
    if not binary:
        return None

    def counts(c: FloatArray, p: FloatArray, n: FloatArray) -> tuple[float, float, float, float]:
        tot = float(n.sum())
        return float(c.sum()) / tot, effective_n(n[n > 0].tolist()), float(p.sum()) / tot, tot

    cur, base = counts(cc, cp, cn), counts(bc, bp, bn)
    reps = max(int((cn.sum(0) > 0).sum()), int((bn.sum(0) > 0).sum()))
    fin = np.isfinite(boot)
    degenerate = bool(fin.sum() < 2 or float(np.ptp(boot[fin])) == 0.0)
    passes = min(cur[0] * cur[1], base[0] * base[1])
    if not (exact_by_design(reps, tasks, DESIGN_TASKS_CHANGE) or is_sparse(passes, degenerate, float((~fin).sum()) / max(len(boot), 1))):
        return None
    lo, hi = change_interval(cur, base, level)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def _d_variance(cs: FloatArray, ps: FloatArray, n: FloatArray) -> float:
    """Delta-method variance of D (as a fraction) over independent clusters with independent outcomes."""
    have = n > 0
    g = int(have.sum())
    tot = float(n.sum())
    if not g or not tot:
        return float("nan")
    c, p, m = float(cs.sum()) / tot, float(ps.sum()) / tot, tot / g
    if not c > 0:
        return float("nan")
    r = p / c
    return (p * (1 - p) / m + r * r * c * (1 - c)) / (g * c * c)


def min_detectable_change(cc: FloatArray, cp: FloatArray, cn: FloatArray, bc: FloatArray, bp: FloatArray,
                          bn: FloatArray) -> float:
    """Smallest rise of D (points) against the baseline run detected with 80 % power at one-sided 2.5 %.

    Normal approximation: each run's D has the delta-method variance
    [P (1 - P) / m + (P / C)^2 C (1 - C)] / (G C^2) over its G task-repeat
    clusters (m pairs each, outcomes independent); the runs are independent,
    so the change has the sum of the two variances, and 100 (z_alpha +
    z_beta) sqrt(V_this + V_baseline) points is detected with 80 % power.
    NaN where either clean score is 0.
    """
    v = _d_variance(cc, cp, cn) + _d_variance(bc, bp, bn)
    return float("nan") if v != v else 100.0 * (1.959963984540054 + 0.8416212335729143) * math.sqrt(v)


def run_trend(df: pd.DataFrame, *, replicates: int = N_BOOTSTRAP, seed: int = 0) -> pd.DataFrame:
    """Overall D with its interval per (run, model, suite), runs in recording order (:data:`TREND_COLUMNS`).

    The order is the earliest ``recorded_at`` of each run when the table has
    that column (a store's rows), else the order in which runs first appear.
    """
    import pandas as pd

    if not len(df):
        return pd.DataFrame(columns=TREND_COLUMNS)
    if "recorded_at" in df.columns and df["recorded_at"].notna().any():
        when = pd.to_numeric(df["recorded_at"], errors="coerce").groupby(df["run_id"]).min()
        runs = [str(r) for r in when.sort_values(kind="mergesort").index]
    else:
        runs = [str(r) for r in dict.fromkeys(df["run_id"])]
    parts = []
    for i, run in enumerate(runs):
        d = drops(df[df["run_id"] == run], replicates=replicates, seed=seed)
        d = d[(d["level_kind"] == "overall") & (d["model"] != ALL_MODELS)]
        if len(d):
            parts.append(d.assign(run_id=run, order=i)[TREND_COLUMNS])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=TREND_COLUMNS)
