"""Repeated trials: pass@1, pass^k, pass@k and the noise floor (docs/design.md section 4.1, "Repeats").

With ``--agentperturb-repeats K`` every (task, family, model) runs K times on
the same variant, each repeat with its own episode seed.  For a model, a
suite and a family (clean included), over the tasks whose K repeats were all
scored:

- **pass@1** = mean over tasks of (successes / K);
- **pass^k** = share of tasks where all K repeats succeed; the curve
  ``pass_hat_curve`` gives pass^k for every k = 1..K (tau-bench's
  estimator: per task C(c, k) / C(K, k) for c successes in K repeats,
  averaged over tasks; k = 1 is pass@1 and k = K is pass^K);
- **pass@k** = share of tasks where at least one repeat succeeds;

so pass^k <= pass@1 <= pass@k on every row.  The **noise floor** is the
clean-vs-clean flip rate: per task, the share of ordered pairs of distinct
clean repeats whose success differs, 2 c (n - c) / (n (n - 1)) for c
successes in n scored clean repeats.  The **clean-vs-perturbed flip rate**
of a family is, per task, the share of (clean repeat, perturbed repeat)
combinations whose success differs; when the perturbation has no effect both
estimate the same probability.  Both are averaged over the same tasks (those
with at least two scored clean repeats and one scored perturbed repeat); the
excess flip rate (perturbed minus noise floor) gets a 95 % percentile
interval from a cluster bootstrap over those tasks, and a family whose
interval reaches 0 or below is *not distinguishable from noise*.

:func:`repeat_weights` draws repeat indices with replacement within drawn
tasks (a second bootstrap stage).  D and the change in D against a baseline
run no longer use it: their bootstrap draws tasks only, each with all its
repeats (docs/design.md section 4.1, "Intervals"), because the second stage
counted the within-task variance twice and over-covered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..model.task import CLEAN
from .stats import N_BOOTSTRAP, FloatArray, bootstrap_weights, percentile_interval
from .table import scored, with_repeat

if TYPE_CHECKING:
    import pandas as pd

#: Verdicts of a family's clean-vs-perturbed flip rate against the noise floor.
NOT_DISTINGUISHABLE = "not distinguishable from noise"
ABOVE_NOISE = "above the noise floor"
NOISE_FLOOR = "noise floor (clean vs clean)"
REPEAT_COLUMNS = ["model", "suite", "baseline", "family", "k", "n_tasks", "n_incomplete", "pass_at_1", "pass_hat_k",
                  "pass_at_k", "flip_rate", "noise_floor", "excess", "ci_low", "ci_high", "n_flip_tasks", "verdict",
                  "pass_hat_curve"]


def repeat_weights(task_weights: FloatArray, n_repeats: int, rng: np.random.Generator) -> FloatArray:
    """How often each repeat index is drawn within the drawn tasks: shape (replicates, tasks, repeats).

    A task drawn w times contributes w independent draws of ``n_repeats``
    repeat indices with replacement; their total per index is
    Multinomial(w * n_repeats, uniform), drawn here in one call.
    """
    counts = (np.asarray(task_weights) * n_repeats).astype(np.int64)
    pvals = np.full(n_repeats, 1.0 / n_repeats)
    return np.asarray(rng.multinomial(counts, pvals), dtype=float)


def n_repeats(df: pd.DataFrame) -> int:
    """Most repeat indices any (run, model, suite) of the episode table has (1 without repeats)."""
    if not len(df):
        return 1
    d = with_repeat(df)
    return int(d.groupby(["run_id", "model", "suite"], sort=False)["repeat"].nunique().max())


def pass_hat_curve(successes: FloatArray, k: int) -> list[float]:
    """pass^j for j = 1..k: mean over tasks of C(c, j) / C(k, j), c a task's successes in its k repeats."""
    from math import comb

    c = [int(round(float(x))) for x in np.asarray(successes, dtype=float)]
    if not c:
        return [float("nan")] * k
    return [float(sum(comb(x, j) for x in c) / (comb(k, j) * len(c))) for j in range(1, k + 1)]


def noise_floor(successes: FloatArray, scored_n: FloatArray) -> FloatArray:
    """Per task: share of ordered pairs of distinct repeats whose success differs (NaN below 2 repeats)."""
    c, n = np.asarray(successes, dtype=float), np.asarray(scored_n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n >= 2, 2.0 * c * (n - c) / (n * (n - 1.0)), np.nan)


def cross_flip_rate(c_clean: FloatArray, n_clean: FloatArray, c_pert: FloatArray, n_pert: FloatArray) -> FloatArray:
    """Per task: share of (clean repeat, perturbed repeat) combinations whose success differs."""
    cc, nc, cp, np_ = (np.asarray(x, dtype=float) for x in (c_clean, n_clean, c_pert, n_pert))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((nc > 0) & (np_ > 0), (cc * (np_ - cp) + (nc - cc) * cp) / (nc * np_), np.nan)


def repeat_stats(df: pd.DataFrame, *, replicates: int = N_BOOTSTRAP, seed: int = 0,
                 level: float = 0.95) -> pd.DataFrame:
    """One row per (model, suite, family) of every model with K >= 2 repeats; :data:`REPEAT_COLUMNS`.

    Tasks are (run, task) clusters, so a table of several runs keeps them
    apart.  The clean row carries pass@1 / pass^k / pass@k of the clean
    episodes and the noise floor in both flip columns.
    """
    import pandas as pd

    out: list[dict[str, object]] = []
    d = scored(with_repeat(df))
    if not len(d):
        return pd.DataFrame(columns=REPEAT_COLUMNS)
    every = with_repeat(df)
    k_of = every.groupby(["model", "suite"], sort=True)["repeat"].nunique()
    rng = np.random.default_rng(seed)
    d = d.assign(_ok=d["success"].map(lambda v: float(bool(v))), _cluster=d["run_id"] + "\0" + d["task"])
    for (model, suite), k in k_of.items():
        if k < 2:
            continue
        g = d[(d["model"] == model) & (d["suite"] == suite)]
        if not len(g):
            continue
        agg = g.groupby(["family", "_cluster"], sort=True)["_ok"].agg(["sum", "count"])
        clusters = sorted(set(g["_cluster"]))
        ci = {c: i for i, c in enumerate(clusters)}
        fams = [CLEAN, *sorted(f for f in set(g["family"]) if f != CLEAN)]
        succ = np.full((len(fams), len(clusters)), np.nan)
        cnt = np.zeros((len(fams), len(clusters)))
        for (fam, cl), n_ok, n in agg[["sum", "count"]].itertuples(index=True, name=None):
            succ[fams.index(fam), ci[cl]] = n_ok
            cnt[fams.index(fam), ci[cl]] = n
        nf = noise_floor(succ[0], cnt[0])
        w = bootstrap_weights(len(clusters), replicates, rng)
        base = bool(g["baseline"].any())
        for j, fam in enumerate(fams):
            complete = cnt[j] == k
            hits = succ[j, complete]
            rate = hits / k
            row: dict[str, object] = {
                "model": model, "suite": suite, "baseline": base, "family": fam, "k": int(k),
                "n_tasks": int(complete.sum()), "n_incomplete": int(((cnt[j] > 0) & ~complete).sum()),
                "pass_at_1": float(rate.mean()) if len(rate) else float("nan"),
                "pass_hat_k": float((hits == k).mean()) if len(rate) else float("nan"),
                "pass_at_k": float((hits > 0).mean()) if len(rate) else float("nan"),
                "pass_hat_curve": pass_hat_curve(hits, int(k))}
            if fam == CLEAN:
                ok = np.isfinite(nf)
                v = float(nf[ok].mean()) if ok.any() else float("nan")
                row.update(flip_rate=v, noise_floor=v, excess=float("nan"), ci_low=float("nan"),
                           ci_high=float("nan"), n_flip_tasks=int(ok.sum()), verdict=NOISE_FLOOR)
            else:
                fr = cross_flip_rate(succ[0], cnt[0], succ[j], cnt[j])
                ok = np.isfinite(fr) & np.isfinite(nf)
                row.update(_excess(fr, nf, ok, w, level))
            out.append(row)
    return pd.DataFrame(out, columns=REPEAT_COLUMNS)


def _excess(fr: FloatArray, nf: FloatArray, ok: np.ndarray, w: FloatArray, level: float) -> dict[str, object]:
    """Flip rate, noise floor, their difference with a cluster-bootstrap interval, and the verdict."""
    if not ok.any():
        return {"flip_rate": float("nan"), "noise_floor": float("nan"), "excess": float("nan"),
                "ci_low": float("nan"), "ci_high": float("nan"), "n_flip_tasks": 0, "verdict": NOT_DISTINGUISHABLE}
    diff = np.where(ok, fr - nf, 0.0)
    wm = w * ok[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (wm @ diff) / wm.sum(1)
    lo, hi = percentile_interval(boot, level)
    flip, floor = float(fr[ok].mean()), float(nf[ok].mean())
    return {"flip_rate": flip, "noise_floor": floor, "excess": flip - floor, "ci_low": float(lo),
            "ci_high": float(hi), "n_flip_tasks": int(ok.sum()),
            "verdict": ABOVE_NOISE if float(lo) > 0 else NOT_DISTINGUISHABLE}
