"""Coverage of candidate interval methods of D on the same simulated runs (issue 27, acceptance 1).

The null world of ``bench/calibration.py`` (one model; each task's clean
success probability p_i ~ Beta(2, 1.5), low-score Beta(0.5, 2); every
episode and repeat succeeds with probability p_i (1 - ``--drop``) for the
12 families, p_i for clean), but the intervals are computed here directly
from the outcome arrays, for the overall level (the 12 families) and each
family, with the same bootstrap as ``analysis.drops`` (tasks drawn with
replacement, a drawn task bringing all its repeats; 2000 replicates) and
the same functions (``stats.bca_interval`` expanded, ``exact.ratio_interval``,
``exact.is_sparse``).  Per configuration and level (o = overall, f = the 12
families) it prints the coverage of the true D (0, or 100 x ``--drop``) of:

- ``bca``: expanded BCa everywhere (NaN-free runs only);
- ``switch``: what ``drops`` reports on main: exact where the row is sparse
  (data-driven), BCa elsewhere;
- ``exact``: the exact interval everywhere;
- ``stud``: a studentised (bootstrap-t) interval, linearised standard
  errors of the ratio per replicate, t quantiles of the replicates;
- ``design``: exact for every binary row when K = 1 and tasks < 50, else the
  switch (the choice made on design quantities where the switch's BCa rows
  are off; a sparse row is still exact);
- ``adopted``: what ``drops`` reports: exact by design (K = 1, fewer than
  ``exact.DESIGN_TASKS`` tasks), else the switch, whose BCa interval is the
  plain one for a level of one outcome per cluster (a family at K = 1) and
  the expanded one elsewhere (``adopted bca``: its BCa rows);
- ``design-t``: as ``design`` but the studentised interval instead of BCa
  for K >= 2 (sparse rows still exact);
- ``change``: the interval of the change in D against a baseline run
  (``baseline.compare``'s expanded BCa over a paired cluster bootstrap, one
  draw shared by both runs; a second run drawn from the same world, true
  change 0); ``change rep``: what ``baseline.compare`` reports (exact by
  design or where sparse, BCa elsewhere).

Then ``switch bca`` / ``design bca``: the coverage of the BCa rows alone of
``switch`` / ``design`` (its exact rows cover about 1.00), and ``exact
share``: the share of exact rows under ``design``.

Monte-Carlo standard error: overall sqrt(c (1 - c) / N); families, that of
the per-run shares.  Run: ``PYTHONPATH=. python bench/interval_methods.py
--runs 300 [--configs 10:1:typical,...] [--seed 27]``.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np

from pytest_agentperturb.analysis.exact import DESIGN_TASKS, change_interval, is_sparse, ratio_interval
from pytest_agentperturb.analysis.stats import N_BOOTSTRAP, bca_interval, bootstrap_weights

PRIOR = {"typical": (2.0, 1.5), "low-score": (0.5, 2.0)}
GRID = [(t, k, s) for s in ("typical", "low-score") for t in (10, 25, 50) for k in (1, 3, 5)]
METHODS = ["bca", "switch", "exact", "stud", "design", "design-t", "change", "change rep", "adopted"]
SPLIT = ["switch bca", "design bca", "adopted bca"]
FAMILIES = 12


def studentised(cs: np.ndarray, ps: np.ndarray, w: np.ndarray, d_hat: np.ndarray,
                level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap-t interval of D = 100 (1 - sum ps / sum cs) per column (levels), linearised standard errors.

    ``cs``, ``ps``: per-task clean and perturbed sums (tasks, levels); ``w``
    the draw counts (B, tasks).  se(R) = sqrt(n / (n - 1) sum_t (ps_t - R cs_t)^2) / sum_t cs_t.
    """
    n = cs.shape[0]
    f = math.sqrt(n / (n - 1))

    def se(wt: np.ndarray, r: np.ndarray) -> np.ndarray:
        s_cc, s_pp, s_pc = wt @ (cs * cs), wt @ (ps * ps), wt @ (ps * cs)
        s_c = wt @ cs
        v = np.maximum(s_pp - 2 * r * s_pc + r * r * s_cc, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(100.0 * f * np.sqrt(v) / s_c, dtype=float)

    with np.errstate(invalid="ignore", divide="ignore"):
        r_hat = ps.sum(0) / cs.sum(0)
        se_hat = se(np.ones((1, n)), r_hat[None])[0]
        rb = (w @ ps) / (w @ cs)
        db = 100.0 * (1.0 - rb)
        seb = se(w, rb)
        t = (db - d_hat) / seb
    t = np.where(np.isnan(t) & np.isfinite(db), 0.0, t)      # 0 / 0: the replicate equals the estimate
    lo_q = np.array([np.nanquantile(t[:, j], (1 + level) / 2) if np.isfinite(t[:, j]).any() else np.nan
                     for j in range(t.shape[1])])
    hi_q = np.array([np.nanquantile(t[:, j], (1 - level) / 2) if np.isfinite(t[:, j]).any() else np.nan
                     for j in range(t.shape[1])])
    return d_hat - lo_q * se_hat, d_hat - hi_q * se_hat


def one_run(rng: np.random.Generator, tasks: int, k: int, suite: str, drop: float,
            replicates: int) -> dict[str, np.ndarray]:
    """Intervals of every method for one simulated run: {method: (2, levels)} with level 0 = overall."""
    p = rng.beta(*PRIOR[suite], tasks)
    clean = rng.random((tasks, k)) < p[:, None]
    pert = rng.random((tasks, FAMILIES, k)) < (p * (1 - drop))[:, None, None]
    # per-task sums per level: overall (every clean outcome paired 12 times), then each family
    cs = np.column_stack([FAMILIES * clean.sum(1)] + [clean.sum(1)] * FAMILIES).astype(float)
    ps = np.column_stack([pert.sum((1, 2))] + [pert[:, j].sum(1) for j in range(FAMILIES)]).astype(float)
    npair = np.array([FAMILIES * k * tasks] + [k * tasks] * FAMILIES, dtype=float)
    clean_b = rng.random((tasks, k)) < p[:, None]                     # the baseline run, same world
    pert_b = rng.random((tasks, FAMILIES, k)) < (p * (1 - drop))[:, None, None]
    cs_b = np.column_stack([FAMILIES * clean_b.sum(1)] + [clean_b.sum(1)] * FAMILIES).astype(float)
    ps_b = np.column_stack([pert_b.sum((1, 2))] + [pert_b[:, j].sum(1) for j in range(FAMILIES)]).astype(float)
    w = bootstrap_weights(tasks, replicates, rng)
    with np.errstate(invalid="ignore", divide="ignore"):
        def d_of(c_s: np.ndarray, p_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            tc, tp = c_s.sum(0), p_s.sum(0)
            return (100.0 * (1.0 - tp / tc), 100.0 * (1.0 - (w @ p_s) / (w @ c_s)),
                    100.0 * (1.0 - (tp[None] - p_s) / (tc[None] - c_s)))
        (h1, b1, j1), (h2, b2, j2) = d_of(cs, ps), d_of(cs_b, ps_b)
        ch_lo, ch_hi = bca_interval(b1 - b2, h1 - h2, j1 - j2, expand=True)
        c, pp = cs.sum(0) / npair, ps.sum(0) / npair
        d_hat = 100.0 * (c - pp) / c
        db = 100.0 * (1.0 - (w @ ps) / (w @ cs))
        tot_c, tot_p = cs.sum(0), ps.sum(0)
        dj = 100.0 * (1.0 - (tot_p[None] - ps) / (tot_c[None] - cs))
    lo, hi = bca_interval(db, d_hat, dj, expand=True)
    s_lo, s_hi = studentised(cs, ps, w, d_hat)
    e_lo, e_hi = np.full(len(c), np.nan), np.full(len(c), np.nan)
    sparse = np.zeros(len(c), dtype=bool)
    for j in range(len(c)):
        if c[j] > 0:
            e_lo[j], e_hi[j] = ratio_interval(float(c[j]), float(tasks * k), float(pp[j]), float(npair[j]))
            fin = np.isfinite(db[:, j])
            degenerate = bool(fin.sum() < 2 or float(np.ptp(db[fin, j])) == 0.0)
            sparse[j] = is_sparse(float(c[j]) * tasks * k, degenerate, float((~fin).sum()) / replicates)
    sw_lo, sw_hi = np.where(sparse, e_lo, lo), np.where(sparse, e_hi, hi)
    design = k == 1 and tasks < 50
    out = {"bca": np.stack([lo, hi]), "switch": np.stack([sw_lo, sw_hi]), "exact": np.stack([e_lo, e_hi]),
           "stud": np.stack([s_lo, s_hi]),
           "design": np.stack([e_lo, e_hi]) if design else np.stack([sw_lo, sw_hi])}
    out["change"] = np.stack([ch_lo, ch_hi])
    # what baseline.compare reports: exact (Bonferroni of the runs' exact intervals) by design or where sparse
    ch_d = ch_lo.copy(), ch_hi.copy()
    cb_all = (cs_b.sum(0) / npair, ps_b.sum(0) / npair)
    dch = b1 - b2
    for j in range(len(c)):
        fin = np.isfinite(dch[:, j])
        degenerate = bool(fin.sum() < 2 or float(np.ptp(dch[fin, j])) == 0.0)
        passes = min(float(c[j]), float(cb_all[0][j])) * tasks * k
        if design or is_sparse(passes, degenerate, float((~fin).sum()) / replicates):
            if c[j] > 0 and cb_all[0][j] > 0:
                ch_d[0][j], ch_d[1][j] = change_interval(
                    (float(c[j]), float(tasks * k), float(pp[j]), float(npair[j])),
                    (float(cb_all[0][j]), float(tasks * k), float(cb_all[1][j]), float(npair[j])))
            else:
                ch_d[0][j] = ch_d[1][j] = np.nan
    out["change rep"] = np.stack(ch_d)
    # the adopted rule: expanded where a cluster holds more than one outcome of the level (the overall level's
    # 12, or K >= 2 repeats), plain for a family at K = 1
    a_lo, a_hi = bca_interval(db, d_hat, dj, expand=np.array([True] + [k >= 2] * FAMILIES))
    by_design = k == 1 and tasks < DESIGN_TASKS
    out["adopted"] = np.stack([e_lo, e_hi]) if by_design else np.stack([np.where(sparse, e_lo, a_lo),
                                                                        np.where(sparse, e_hi, a_hi)])
    out["adopted bca"] = np.full((2, len(c)), np.nan) if by_design else np.where(sparse, np.nan, out["adopted"])
    out["switch bca"] = np.where(sparse, np.nan, out["switch"])
    out["design bca"] = out["switch bca"] if not design else np.full((2, len(c)), np.nan)
    out["design exact"] = np.stack([sparse | design] * 2).astype(float)
    if k >= 2:
        out["design-t"] = np.stack([np.where(sparse, e_lo, s_lo), np.where(sparse, e_hi, s_hi)])
    else:
        out["design-t"] = out["design"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--drop", type=float, default=0.0)
    ap.add_argument("--replicates", type=int, default=N_BOOTSTRAP)
    ap.add_argument("--configs", default="", help="e.g. 10:1:typical,50:1:low-score (default: the 18 of the grid)")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    configs = GRID if not args.configs else [
        (int(t), int(k), s) for t, k, s in (c.split(":") for c in args.configs.split(","))]
    rng = np.random.default_rng(args.seed)
    true_d = 100.0 * args.drop
    print(f"coverage of the true D = {true_d:g}, {args.runs} runs per configuration, overall / per family "
          f"(+- MC s.e. of the last column's method in brackets)")
    print(f"{'tasks':>5} {'K':>2} {'suite':<9}  " + "  ".join(f"{m:>13}" for m in METHODS + SPLIT) + "  exact share")
    start = time.perf_counter()
    for tasks, k, suite in configs:
        hit_o: dict[str, list[bool]] = {m: [] for m in METHODS + SPLIT}
        hit_f: dict[str, list[float]] = {m: [] for m in METHODS + SPLIT}
        share: list[float] = []
        for _ in range(args.runs):
            res = one_run(rng, tasks, k, suite, args.drop, args.replicates)
            share.append(float(res.pop("design exact")[0].mean()))
            for m, (lo, hi) in res.items():
                fin = np.isfinite(lo) & np.isfinite(hi)
                hit = (lo - 1e-9 <= true_d) & (true_d <= hi + 1e-9)
                if fin[0]:
                    hit_o[m].append(bool(hit[0]))
                if fin[1:].any():
                    hit_f[m].append(float(hit[1:][fin[1:]].mean()))
        cells = []
        for m in METHODS + SPLIT:
            o = np.mean(hit_o[m]) if hit_o[m] else math.nan
            f = np.mean(hit_f[m]) if hit_f[m] else math.nan
            cells.append(f"{o:.3f}/{f:.3f}")
        o_se = math.sqrt(0.95 * 0.05 / max(len(hit_o["bca"]), 1))
        f_se = float(np.std(hit_f["bca"], ddof=1) / math.sqrt(len(hit_f["bca"]))) if len(hit_f["bca"]) > 1 else 0.0
        print(f"{tasks:>5} {k:>2} {suite:<9}  " + "  ".join(f"{c:>13}" for c in cells)
              + f"  {np.mean(share):5.2f}  (se {o_se:.3f}/{f_se:.3f}, n_o {len(hit_o['bca'])})", flush=True)
    print(f"target 0.93-0.97; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
