"""Cross-family sensitivity: do the same tasks and models break under different families?

docs/design.md section 4.  Real models only (baselines join only when no
model-backed agent ran); the 12 families only.  For model m, task i and family f, the relative paired
change is delta_mif = (s_mif - s_mi,clean) / C_m.  Within each family the
deltas are ranked over all (m, i); the ranks are regressed on the rank of
the clean score s_mi,clean with model fixed effects (by Frisch-Waugh-Lovell:
demean both within model, then one slope per family); rho_fg is the Pearson
correlation of the residuals of f and g over the (m, i) where both exist.
Families are ordered by average-linkage clustering on 1 - rho.  Uncertainty
comes from a cluster bootstrap over tasks (a resampled task keeps all its
models; C_m, ranks, regression and correlations are recomputed in every
replicate), with 95 % percentile intervals; the same replicates give
intervals for the mean rho over pairs sharing a target, sharing a type, or
neither, and for the differences same-target minus same-type and minus
neither.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.task import CLEAN, FAMILIES, family_parts
from .cluster import average_linkage, leaves
from .stats import N_BOOTSTRAP, FloatArray, percentile_interval, ranks
from .table import only, pooled, scored

if TYPE_CHECKING:
    import pandas as pd

_BLOCK = 200   # replicates drawn at a time (the draws of a seed do not depend on it)
_CHUNK = 25    # replicates computed at a time: their arrays stay in the processor's cache
GROUPS = ("same_target", "same_type", "neither")


@dataclass
class Sensitivity:
    """Cross-family correlations of one suite (or why they could not be estimated)."""

    suite: str
    families: list[str] = field(default_factory=list)   # clustering order
    rho: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    ci_low: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    ci_high: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    linkage: FloatArray = field(default_factory=lambda: np.zeros((0, 4)))
    groups: list[dict[str, Any]] = field(default_factory=list)
    replicates: int = 0
    n_models: int = 0
    n_tasks: int = 0
    skipped: str = ""

    def pair_rows(self) -> list[dict[str, Any]]:
        """One row per family pair: f, g, relation, rho and its interval."""
        out = []
        for a, b in combinations(range(len(self.families)), 2):
            f, g = self.families[a], self.families[b]
            out.append({"suite": self.suite, "family_f": f, "family_g": g, "relation": relation(f, g),
                        "rho": float(self.rho[a, b]), "ci_low": float(self.ci_low[a, b]),
                        "ci_high": float(self.ci_high[a, b])})
        return out


def relation(f: str, g: str) -> str:
    """``same_target``, ``same_type`` or ``neither`` for two families."""
    (tf, kf), (tg, kg) = family_parts(f), family_parts(g)
    return "same_target" if tf == tg else "same_type" if kf == kg else "neither"


def _estimate(s: FloatArray, clean: FloatArray, *, dense: bool | None = None) -> FloatArray:
    """rho matrices for a batch: ``s`` (B, M, T, F) family scores, ``clean`` (B, M, T) -> (B, F, F).

    ``dense`` (default: whether every rank is finite) skips the masking of
    missing cells, which then is a product with ones: the same arrays, the
    same order of every sum, the same numbers.
    """
    bsz, nm, nt, nf = s.shape
    with np.errstate(invalid="ignore", divide="ignore"):
        cfin = np.isfinite(clean)
        c_m = np.where(cfin, clean, 0).sum(2) / np.maximum(cfin.sum(2), 1)       # (B, M)
        c_m = np.where(c_m > 0, c_m, np.nan)
        delta = (s - clean[..., None]) / c_m[:, :, None, None]
    y = ranks(delta.reshape(bsz, nm * nt, nf), axis=1).reshape(bsz, nm, nt, nf)
    x = ranks(clean.reshape(bsz, nm * nt), axis=1).reshape(bsz, nm, nt)
    if dense is None:
        dense = bool(np.isfinite(y).all()) and bool(np.isfinite(x).all())
    if dense:   # every (m, t, f) valid: the mask v is all ones
        v = np.ones((bsz, nm, nt, nf))
        y0 = np.ascontiguousarray(y)
        x0 = np.ascontiguousarray(np.broadcast_to(x[..., None], y0.shape))
        n_m = float(max(nt, 1))
        yt = y0 - y0.sum(2, keepdims=True) / n_m                                     # within-model demeaning
        xt = x0 - x0.sum(2, keepdims=True) / n_m
    else:
        v = (np.isfinite(y) & np.isfinite(x)[..., None]).astype(float)
        y0 = np.where(v > 0, y, 0.0)
        x0 = np.where(v > 0, x[..., None], 0.0)
        n_m = np.maximum(v.sum(2, keepdims=True), 1.0)
        yt = (y0 - y0.sum(2, keepdims=True) / n_m) * v
        xt = (x0 - x0.sum(2, keepdims=True) / n_m) * v
    sxx = (xt * xt).sum((1, 2))
    beta = np.where(sxx > 0, (xt * yt).sum((1, 2)) / np.where(sxx > 0, sxx, 1.0), 0.0)   # (B, F)
    z = yt - beta[:, None, None, :] * xt
    z = (z if dense else z * v).reshape(bsz, nm * nt, nf)
    vv = v.reshape(bsz, nm * nt, nf)
    zt = z.transpose(0, 2, 1)
    n = vv.transpose(0, 2, 1) @ vv
    sx = zt @ vv                        # sum of z_f over rows where g is valid too
    sxx2 = (zt * zt) @ vv
    sxy = zt @ z
    with np.errstate(invalid="ignore", divide="ignore"):
        sy = sx.transpose(0, 2, 1)
        cov = sxy - sx * sy / n
        var_f = sxx2 - sx * sx / n
        var_g = var_f.transpose(0, 2, 1)
        rho = cov / np.sqrt(var_f * var_g)
    rho = np.where((n >= 3) & np.isfinite(rho), rho, np.nan)
    return np.asarray(np.clip(rho, -1.0, 1.0), dtype=float)


def _order(rho: FloatArray) -> tuple[list[int], FloatArray]:
    k = rho.shape[0]
    if k < 2:
        return list(range(k)), np.zeros((0, 4))
    dist = 1.0 - np.where(np.isfinite(rho), rho, 0.0)
    np.fill_diagonal(dist, 0.0)
    dist = (dist + dist.T) / 2
    z = average_linkage(np.clip(dist, 0.0, 2.0))
    return leaves(z), z


def _group_stats(rho: FloatArray, fams: list[str]) -> dict[str, FloatArray]:
    """Mean rho over same-target / same-type / neither pairs and their differences, per replicate."""
    rel = {g: [(a, b) for a, b in combinations(range(len(fams)), 2) if relation(fams[a], fams[b]) == g]
           for g in GROUPS}
    out: dict[str, FloatArray] = {}
    for g, prs in rel.items():
        if prs:
            vals = np.stack([rho[..., a, b] for a, b in prs], axis=-1)
            fin = np.isfinite(vals)
            out[g] = np.where(fin.any(-1), np.where(fin, vals, 0).sum(-1) / np.maximum(fin.sum(-1), 1), np.nan)
    if "same_target" in out and "same_type" in out:
        out["same_target_minus_same_type"] = out["same_target"] - out["same_type"]
    if "same_target" in out and "neither" in out:
        out["same_target_minus_neither"] = out["same_target"] - out["neither"]
    return out


def cross_family(df: pd.DataFrame, *, replicates: int = N_BOOTSTRAP, seed: int = 0,
                 level: float = 0.95) -> list[Sensitivity]:
    """Cross-family correlations per suite (see the module docstring for the estimator)."""
    jobs = _prepare(df, replicates)
    _compute(jobs, replicates, seed, level)
    return [res for res, _ in jobs]


def start_cross_family(df: pd.DataFrame, *, replicates: int = N_BOOTSTRAP, seed: int = 0,
                       level: float = 0.95) -> Callable[[], list[Sensitivity]]:
    """:func:`cross_family`, its numpy part (the bootstrap) run by a background thread: call the result for it.

    The table is read here; the thread then works on arrays of its own, and
    numpy lets go of the interpreter's lock in its large operations, so the
    caller's pandas work goes on beside it on a second core.  The numbers are
    those of :func:`cross_family` (the same draws in the same order).
    """
    jobs = _prepare(df, replicates)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            _compute(jobs, replicates, seed, level)
        except BaseException as exc:  # noqa: BLE001 - raised again by the caller's join
            failed.append(exc)

    thread = threading.Thread(target=run, name="agentperturb-cross-family", daemon=True)
    thread.start()

    def result() -> list[Sensitivity]:
        thread.join()
        if failed:
            raise failed[0]
        return [res for res, _ in jobs]

    return result


def _prepare(df: pd.DataFrame, replicates: int) -> list[tuple[Sensitivity, tuple[FloatArray, FloatArray] | None]]:
    """Per suite: its result (skipped already where too small) and (clean (M, T), family scores (M, T, F))."""
    d = pooled(scored(only(df, ("suite", "model", "task", "family", "reward", "error", "baseline"))))
    jobs: list[tuple[Sensitivity, tuple[FloatArray, FloatArray] | None]] = []
    for suite, g in d.groupby("suite", sort=True):
        res = Sensitivity(suite=str(suite), replicates=replicates)
        present = set(g["family"].unique().tolist())
        fams = [f for f in FAMILIES if f in present]
        models, tasks = sorted(g["model"].unique()), sorted(g["task"].unique())
        res.n_models, res.n_tasks = len(models), len(tasks)
        if len(fams) < 2 or len(tasks) < 3 or len(models) * len(tasks) < 4:
            res.skipped = (f"needs at least 2 families and 3 tasks (found {len(fams)} families, "
                           f"{len(tasks)} tasks)")
            jobs.append((res, None))
            continue
        piv = g[g["family"].isin([CLEAN, *fams])].pivot_table(
            index=["model", "task"], columns="family", values="reward", aggfunc="mean")
        piv = piv.reindex(index=[(m, t) for m in models for t in tasks], columns=[CLEAN, *fams])
        arr = piv.to_numpy(dtype=float).reshape(len(models), len(tasks), len(fams) + 1)
        res.families = fams
        jobs.append((res, (arr[:, :, 0], arr[:, :, 1:])))
    return jobs


def _compute(jobs: list[tuple[Sensitivity, tuple[FloatArray, FloatArray] | None]], replicates: int, seed: int,
             level: float) -> None:
    """Fill in each prepared suite's estimates and bootstrap intervals (one generator, suites in order)."""
    rng = np.random.default_rng(seed)
    for res, arrays in jobs:
        if arrays is None:
            continue
        clean, s = arrays
        fams, n_tasks = res.families, clean.shape[1]
        point = _estimate(s[None], clean[None])[0]
        order, link = _order(point)
        boots = []
        for start in range(0, replicates, _BLOCK):
            k = min(_BLOCK, replicates - start)
            idx = rng.integers(0, n_tasks, size=(k, n_tasks))
            for a in range(0, k, _CHUNK):   # replicates are independent: computed a few at a time, in cache
                sub = idx[a:a + _CHUNK]
                boots.append(_estimate(s[:, sub].transpose(1, 0, 2, 3), clean[:, sub].transpose(1, 0, 2)))
        boot = np.concatenate(boots) if boots else np.zeros((0, len(fams), len(fams)))
        lo, hi = percentile_interval(boot, level)
        o = np.asarray(order)
        res.families = [fams[i] for i in order]
        res.rho, res.ci_low, res.ci_high = point[np.ix_(o, o)], lo[np.ix_(o, o)], hi[np.ix_(o, o)]
        res.linkage = link
        est, bst = _group_stats(point, fams), _group_stats(boot, fams)
        for name, val in est.items():
            blo, bhi = percentile_interval(bst[name], level)
            n_pairs = sum(1 for a, b in combinations(fams, 2) if relation(a, b) == name) \
                if name in GROUPS else None
            res.groups.append({"suite": res.suite, "group": name, "mean_rho": float(val),
                               "ci_low": float(blo), "ci_high": float(bhi), "n_pairs": n_pairs})
