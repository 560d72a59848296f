"""Statistical building blocks: rank correlation with a permutation test, paired tests,
bootstrap weights, percentile and BCa intervals (docs/design.md section 4).

Everything is vectorised numpy and driven by an explicit ``numpy.random.Generator``
so that the same seed gives the same numbers.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

# re-exported: the defaults live in .defaults, which loads without numpy
from .defaults import N_BOOTSTRAP as N_BOOTSTRAP
from .defaults import N_PERMUTATIONS as N_PERMUTATIONS

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Values are rounded to this many decimals before ranking, so that equal values computed by
#: different arithmetic (2/3 - 1/3 and 1 - 2/3) tie.
ROUND_DECIMALS = 9
#: Largest sample whose n! assignments the permutation test can enumerate (10! = 3,628,800).
MAX_EXACT_N = 10
#: Permuted rank vectors scored at a time: at most this many values (2 MiB of floats) in one block, so a
#: test over many tasks never holds a large array (the draws of a generator do not depend on the block).
_BLOCK_CELLS = 1 << 18


def rounded(x: npt.ArrayLike) -> FloatArray:
    """``x`` as floats rounded to :data:`ROUND_DECIMALS` decimals (NaN and inf unchanged)."""
    return np.asarray(np.round(np.asarray(x, dtype=float), ROUND_DECIMALS), dtype=float)


def ranks(x: npt.ArrayLike, axis: int = -1) -> FloatArray:
    """Average ranks (1-based) along ``axis`` of the rounded values; NaN stays NaN and takes no rank."""
    a = rounded(x)
    nan = np.isnan(a)
    r = average_ranks(np.where(nan, np.inf, a) if nan.any() else a, axis=axis)
    return np.where(nan, np.nan, r)


def average_ranks(x: npt.ArrayLike, axis: int = -1) -> FloatArray:
    """Average ranks (1-based) along ``axis``: tied values share the mean of their positions.

    Every rank is a whole or half number, so the values are exact (those of
    ``scipy.stats.rankdata(method="average")``).  NaN is not handled (see :func:`ranks`).
    """
    src = np.asarray(x, dtype=float)
    if src.size == 0 or src.ndim == 0:
        return np.ones_like(src)
    a = np.moveaxis(src, axis, -1)
    n = a.shape[-1]
    flat = a.reshape(-1, n)
    offset = np.arange(flat.shape[0]) * n               # flat position of each row's first element
    order = np.argsort(flat, axis=1)                    # any sort: tied values share one average rank
    y = np.take_along_axis(flat, order, axis=1)
    first = np.ones(y.shape, dtype=bool)                # where a run of equal values starts (and every row)
    first[:, 1:] = y[:, 1:] != y[:, :-1]
    f = first.ravel()
    starts = np.flatnonzero(f)
    ends = np.append(starts[1:], f.size) - 1
    mid = (starts + ends) * 0.5 + 1.0                   # 1-based average position of each run, flat
    out = np.empty(f.size)
    out[(order + offset[:, None]).ravel()] = (mid[np.cumsum(f) - 1].reshape(y.shape) - offset[:, None]).ravel()
    return np.moveaxis(out.reshape(a.shape), -1, axis)


def _pearson_rows(x: FloatArray, y: FloatArray) -> FloatArray:
    """Pearson correlation of ``x`` (n,) with every row of ``y`` (k, n)."""
    xc = x - x.mean()
    yc = y - y.mean(axis=-1, keepdims=True)
    den = math.sqrt(float((xc * xc).sum())) * np.sqrt((yc * yc).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray((yc @ xc) / den, dtype=float)


@dataclass(frozen=True)
class Correlation:
    """Spearman rho, its two-sided permutation p-value, the sample size and how p was computed."""

    rho: float
    p_value: float
    n: int
    permutations: int
    exact: bool = False


@functools.lru_cache(maxsize=1)
def all_permutations(n: int) -> npt.NDArray[np.int8]:
    """Every permutation of ``range(n)`` as rows of an (n!, n) array (n <= :data:`MAX_EXACT_N`)."""
    if not 0 <= n <= MAX_EXACT_N:
        raise ValueError(f"cannot enumerate {n}! permutations (at most {MAX_EXACT_N}! supported)")
    p = np.zeros((1, 0), dtype=np.int8)
    for k in range(1, n + 1):   # insert k - 1 at every position of each permutation of range(k - 1)
        m = p.shape[0]
        out = np.empty((m * k, k), dtype=np.int8)
        for pos in range(k):
            blk = out[pos * m:(pos + 1) * m]
            blk[:, :pos], blk[:, pos], blk[:, pos + 1:] = p[:, :pos], k - 1, p[:, pos:]
        p = out
    p.setflags(write=False)
    return p


def spearman_permutation(x: Sequence[float] | npt.ArrayLike, y: Sequence[float] | npt.ArrayLike, *,
                         permutations: int = N_PERMUTATIONS, rng: np.random.Generator | None = None,
                         exact: bool | None = None) -> Correlation:
    """Spearman's rho with a two-sided permutation test.

    rho = Pearson correlation of the average ranks of ``x`` and ``y`` over
    the pairs where both are finite (values rounded to
    :data:`ROUND_DECIMALS` decimals first, so equal values tie).  When
    ``exact`` (by default: whenever n! <= ``permutations``) every one of the
    n! assignments of the ``y`` ranks to the ``x`` ranks is enumerated and
    p = #{|rho*| >= |rho|} / n! exactly; otherwise p = (1 + #{|rho*| >=
    |rho|}) / (1 + B) over B random assignments (drawn in blocks).  NaN rho
    and p when fewer than 3 pairs remain or either side is constant.
    """
    xa, ya = rounded(x), rounded(y)
    ok = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[ok], ya[ok]
    n = int(len(xa))
    if n < 3 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return Correlation(float("nan"), float("nan"), n, 0)
    rx, ry = ranks(xa), ranks(ya)
    rho = float(_pearson_rows(rx, ry[None, :])[0])
    # Permuting y's ranks leaves both centred sums of squares unchanged, so
    # each permuted rho is one dot product: rho* = (ry*_c . rx_c) / den.
    xc, yc = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((xc * xc).sum() * (yc * yc).sum()))
    tol = 1e-12
    if exact if exact is not None else (n <= MAX_EXACT_N and math.factorial(n) <= permutations):
        perms = all_permutations(n)
        hits, rows = 0, max(1, _BLOCK_CELLS // n)
        for start in range(0, len(perms), rows):
            r = (yc[perms[start:start + rows]] @ xc) / den
            hits += int((np.abs(r) >= abs(rho) - tol).sum())
        return Correlation(rho, hits / len(perms), n, len(perms), exact=True)
    rng = rng if rng is not None else np.random.default_rng(0)
    hits, done, rows = 0, 0, max(1, _BLOCK_CELLS // n)
    while done < permutations:
        k = min(rows, permutations - done)
        perm = rng.permuted(np.broadcast_to(yc, (k, n)), axis=1)
        r = (perm @ xc) / den
        hits += int((np.abs(r) >= abs(rho) - tol).sum())
        done += k
    return Correlation(rho, (1 + hits) / (1 + permutations), n, permutations)


def bootstrap_weights(n: int, replicates: int, rng: np.random.Generator) -> FloatArray:
    """How often each of ``n`` clusters is drawn in each replicate: shape (replicates, n)."""
    idx = rng.integers(0, n, size=(replicates, n))
    flat = (np.arange(replicates)[:, None] * n + idx).ravel()
    return np.bincount(flat, minlength=replicates * n).reshape(replicates, n).astype(float)


def draw_sums(spec: str, w: FloatArray, x: FloatArray) -> FloatArray:
    """``np.einsum(spec, w, x)`` for bootstrap draw counts ``w`` and per-cluster sums ``x``.

    Where both hold whole numbers in [0, 2^40] only (draw counts, pair
    counts, the reward sums of a 0/1 suite) every product and partial sum
    is exact, so a matrix product (:func:`numpy.tensordot`, many times
    faster) gives the very same numbers in whatever order it adds; anything
    else takes the einsum itself, in its own order of addition.
    """
    if _whole(w) and _whole(x):
        ins, out = spec.split("->")
        sw, sx = ins.split(",")
        summed = [c for c in sw if c in sx and c not in out]
        r = np.tensordot(w, x, axes=([sw.index(c) for c in summed], [sx.index(c) for c in summed]))
        have = [c for c in sw if c not in summed] + [c for c in sx if c not in summed]
        return np.ascontiguousarray(np.transpose(r, [have.index(c) for c in out]), dtype=float)
    return np.asarray(np.einsum(spec, w, x), dtype=float)


def _whole(a: FloatArray) -> bool:
    return bool(np.all((a >= 0) & (a <= 2.0 ** 40) & (a == np.floor(a))))


def bootstrap_indices(n: int, replicates: int, rng: np.random.Generator) -> IntArray:
    """Resampled cluster indices, shape (replicates, n)."""
    return rng.integers(0, n, size=(replicates, n)).astype(np.int64)


def percentile_interval(samples: npt.ArrayLike, level: float = 0.95, axis: int = 0) -> tuple[FloatArray, FloatArray]:
    """Percentile interval of bootstrap ``samples`` along ``axis``, ignoring non-finite replicates.

    Where no replicate is finite the bounds are NaN.
    """
    a = np.asarray(samples, dtype=float)
    lo_q, hi_q = 100 * (1 - level) / 2, 100 * (1 + level) / 2
    fin = np.isfinite(a)
    if fin.all():
        return (np.asarray(np.percentile(a, lo_q, axis=axis), dtype=float),
                np.asarray(np.percentile(a, hi_q, axis=axis), dtype=float))
    a = np.where(fin, a, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN bounds, as documented
        lo = np.nanpercentile(a, lo_q, axis=axis)
        hi = np.nanpercentile(a, hi_q, axis=axis)
    return np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)


@dataclass(frozen=True)
class PairedTest:
    """Result of a paired test: its name, statistic, p-value and the counts it used."""

    test: str
    statistic: float
    p_value: float
    n: int
    harmful: int = 0
    beneficial: int = 0


def mcnemar(clean_pass: Sequence[bool] | npt.ArrayLike, pert_pass: Sequence[bool] | npt.ArrayLike) -> PairedTest:
    """Exact McNemar test on paired binary outcomes.

    b = clean pass & perturbed fail, c = clean fail & perturbed pass;
    p = two-sided binomial test of b out of b + c at 1/2 (1.0 when b + c = 0).
    """
    cp, pp = np.asarray(clean_pass, dtype=bool), np.asarray(pert_pass, dtype=bool)
    b, c = int((cp & ~pp).sum()), int((~cp & pp).sum())
    p = 1.0 if b + c == 0 else binomial_two_sided(b, b + c)
    return PairedTest("mcnemar-exact", float(b), p, int(len(cp)), harmful=b, beneficial=c)


def signed_rank(clean: Sequence[float] | npt.ArrayLike, pert: Sequence[float] | npt.ArrayLike) -> PairedTest:
    """Wilcoxon signed-rank test of ``pert - clean`` (zero differences dropped).

    Statistic: the smaller of the two signed rank sums.  Fewer than 50
    non-zero differences without ties: the exact two-sided p from the null
    distribution of the rank sum (:func:`signed_rank_counts`); otherwise the
    normal approximation with the tie correction and no continuity
    correction.  The same statistic and p as ``scipy.stats.wilcoxon``
    (``method="exact"`` and ``method="approx"`` respectively; the
    approximation's p to about 1e-14, relative: its normal distribution
    function is :func:`normal_cdf`), computed here without its per-call
    overhead.  p = 1.0 when every difference is zero.
    """
    c, p = np.asarray(clean, dtype=float), np.asarray(pert, dtype=float)
    ok = np.isfinite(c) & np.isfinite(p)
    d = (p - c)[ok]
    nz = d[d != 0]
    if len(nz) == 0:
        return PairedTest("wilcoxon", 0.0, 1.0, int(len(d)))
    a = np.abs(nz)
    _, counts = np.unique(a, return_counts=True)
    r = average_ranks(a)
    n = len(nz)
    t_plus, t_minus = float(r[nz > 0].sum()), float(r[nz < 0].sum())
    t = min(t_plus, t_minus)
    if len(counts) == n and n < 50:
        # no ties: integer ranks 1..n and an integer rank sum; p = 2 min(P(T+ >= t+), P(T+ <= t+))
        dist = signed_rank_counts(n)
        k = int(t_plus)
        tail = min(int(dist[k:].sum()), int(dist[:k + 1].sum()))
        return PairedTest("wilcoxon", t, min(1.0, float(Fraction(2 * tail, 2 ** n))), int(len(d)))
    nf = float(n)
    se = math.sqrt((nf * (nf + 1) * (2 * nf + 1) - 0.5 * float((counts * (counts * counts - 1.0)).sum())) / 24)
    z = (t - nf * (nf + 1) / 4) / se if se > 0 else 0.0
    return PairedTest("wilcoxon", t, float(2 * normal_cdf(-abs(z))), int(len(d)))


@functools.lru_cache(maxsize=64)
def signed_rank_counts(n: int) -> npt.NDArray[np.int64]:
    """How many of the 2^n sign assignments of ranks 1..n give each positive-rank sum 0..n(n+1)/2 (n < 63)."""
    counts = np.zeros(n * (n + 1) // 2 + 1, dtype=np.int64)
    counts[0] = 1
    for k in range(1, n + 1):
        counts[k:] = counts[k:] + counts[:-k]
    counts.setflags(write=False)
    return counts


def normal_cdf(x: float) -> float:
    """Standard normal distribution function at ``x``: erfc(-x / sqrt 2) / 2.

    From the complementary error function so that the lower tail, where the
    signed-rank test reads its p, keeps its relative precision (agrees with
    scipy's ``special.ndtr`` to 1e-12, relative, down to -30).
    """
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def binomial_two_sided(k: int, n: int) -> float:
    """Two-sided p of k successes in n trials at probability 1/2, computed exactly.

    At probability 1/2 the distribution is symmetric, so the outcomes at
    least as unlikely as k are the two tails cut at lo = min(k, n - k):
    p = 2 * sum(C(n, i) for i <= lo) / 2^n (1 when k = n / 2), summed in
    whole numbers and divided once, so p is the exact value correctly
    rounded to a float (``scipy.stats.binomtest(k, n).pvalue`` agrees to
    about 1e-13, relative), with no scipy import in the report.
    """
    if 2 * k == n:
        return 1.0
    lo = min(k, n - k)
    tail, term = 0, 1  # term = C(n, i), built from C(n, i - 1)
    for i in range(lo + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    return min(1.0, (2 * tail) / (1 << n))


def paired_test(clean: Sequence[float] | npt.ArrayLike, pert: Sequence[float] | npt.ArrayLike) -> PairedTest:
    """McNemar when every reward is 0 or 1, the signed-rank test otherwise."""
    c, p = np.asarray(clean, dtype=float), np.asarray(pert, dtype=float)
    if np.isin(c, (0.0, 1.0)).all() and np.isin(p, (0.0, 1.0)).all():
        return mcnemar(c >= 0.5, p >= 0.5)
    return signed_rank(c, p)


# -- the gate's tests (docs/design.md section 5, "How `significant` decides") --------------------------
#: One-sided level of every ``significant`` decision and of the power statement.
ALPHA = 0.025
#: Power the smallest detectable drop is stated at.
POWER = 0.80
_Z_ALPHA = 1.959963984540054      # the normal quantile at 1 - 0.025
_Z_BETA = 0.8416212335729143      # the normal quantile at 0.80


def exchange_test(x: npt.ArrayLike, m: npt.ArrayLike, s: npt.ArrayLike) -> float:
    """Exact one-sided p of "no drop" for binary outcomes in clusters (a generalised exact McNemar test).

    A cluster g (one task and repeat index) has one clean outcome ``x[g]``
    (0 or 1) and ``m[g]`` perturbed outcomes summing to ``s[g]``; the
    statistic is T = sum_g (m_g x_g - s_g) (the pair-weighted C - P, times
    the number of pairs).  Under the null hypothesis that the perturbed
    outcomes are distributed as the clean one within each cluster, the
    m_g + 1 outcomes of a cluster are exchangeable: conditional on their
    total, the clean one is any of them with equal chance, so x*_g = 1 with
    probability (x_g + s_g) / (m_g + 1), independently across clusters.
    p = P(T* >= T), computed exactly by convolution.  With one perturbed
    outcome per cluster this is the exact one-sided McNemar (sign) test on
    the discordant pairs.  1.0 without clusters.
    """
    xa, ma, sa = (np.asarray(v, dtype=float) for v in (x, m, s))
    keep = ma > 0
    xa, ma, sa = xa[keep], ma[keep], sa[keep]
    tot = xa + sa
    size = (ma + 1).astype(np.int64)
    prob = tot / (ma + 1)
    free = (prob > 0) & (prob < 1)                 # clusters whose clean outcome can move
    if not free.any():
        return 1.0
    w_obs = int(round(float((size[free] * xa[free]).sum())))
    dist = np.zeros(int(size[free].sum()) + 1)
    dist[0] = 1.0
    top = 0
    for k, pi in zip(size[free].tolist(), prob[free].tolist()):
        new = dist[:top + k + 1] * 0.0
        new[:top + 1] = dist[:top + 1] * (1.0 - pi)
        new[k:top + k + 1] += dist[:top + 1] * pi
        top += k
        dist[:top + 1] = new
    return float(min(1.0, max(0.0, dist[w_obs:top + 1].sum())))


#: Tasks up to which :func:`swap_test` enumerates every swap (2^12 = 4096); above, random swaps.
MAX_EXACT_SWAP = 12
#: Random swaps of :func:`swap_test` above :data:`MAX_EXACT_SWAP` tasks.
N_SWAPS = 20_000


def swap_test(cur: FloatArray, base: FloatArray, rng: np.random.Generator, draws: int = N_SWAPS
              ) -> tuple[FloatArray, bool]:
    """One-sided p of "no regression" for the change in D against a baseline run, per level, and whether exact.

    ``cur`` and ``base`` (2, tasks, levels) hold each run's clean and
    perturbed reward sums per task over the pairs of the level (zero where a
    task has no pairs on both sides).  The change is delta = D_this -
    D_baseline, D = 100 (c - p) / c over the summed rewards.  Under the null
    hypothesis that the two runs are exchangeable within each task, swapping
    which run a task's episodes belong to leaves the distribution of the data
    unchanged, so for any statistic p = P(stat* >= stat) over the 2^n swaps
    is exact (a paired randomisation test on the tasks; at every size and for
    any rewards, conservative through discreteness).  Two statistics are
    tested and the larger p is returned (still exact): delta itself, and
    delta studentised, delta / sqrt(V_this + V_baseline), V = 100^2 sum_i
    (p_i - R c_i)^2 / C^2 the delta-method variance of each run's D over its
    tasks (R = P / C).  The runs need not be exchangeable for "no
    regression" to hold: with the same D but different clean scores, delta's
    swap test breaches 4-10 % of the time at one-sided 2.5 % when the
    current run's clean score is the higher, the studentised one 6-8 % when
    it is the lower; each errs on the safe side in the other case, so the
    larger p stays within the Monte-Carlo error of 2.5 % (docs/design.md
    section 5, "Against a baseline run").  Up to :data:`MAX_EXACT_SWAP` tasks
    every swap is enumerated (p = hits / 2^n); above, ``draws`` random swaps
    give p = (1 + hits) / (1 + draws), still a valid level.  A swap leaving
    either clean sum 0 (undefined) counts as a hit (against a breach); a zero
    variance makes the studentised statistic +-inf with the sign of delta.
    NaN where delta itself is undefined.
    """
    c, b = np.asarray(cur, dtype=float), np.asarray(base, dtype=float)
    n = c.shape[1]
    exact = n <= MAX_EXACT_SWAP
    if exact:
        flips = ((np.arange(1 << n)[:, None] >> np.arange(n)[None, :]) & 1).astype(float)
    else:
        flips = (rng.random((draws, n)) < 0.5).astype(float)
    # per task: clean, perturbed, clean^2, clean x perturbed, perturbed^2 (what D and its variance are made of)
    parts = [np.stack([x[0], x[1], x[0] ** 2, x[0] * x[1], x[1] ** 2]) for x in (c, b)]    # (5, tasks, levels)
    tot_c, tot_b = parts[0].sum(1), parts[1].sum(1)                                         # (5, levels)
    moved = np.stack([flips @ (parts[0][i] - parts[1][i]) for i in range(5)])            # (5, swaps, levels)

    def t(sc: FloatArray, sb: FloatArray) -> FloatArray:
        with np.errstate(invalid="ignore", divide="ignore"):
            def d_var(s: FloatArray) -> tuple[FloatArray, FloatArray]:
                r = s[1] / s[0]
                var = np.maximum(s[4] - 2 * r * s[3] + r * r * s[2], 0.0) / (s[0] * s[0])
                return np.where(s[0] != 0, 100.0 * (1.0 - r), np.nan), 1e4 * var
            (dc, vc), (db, vb) = d_var(sc), d_var(sb)
            delta, se = dc - db, np.sqrt(vc + vb)
            tol = 1e-12 * (1.0 + np.abs(delta))
            out = np.where(se > 1e-9 * (1.0 + np.abs(delta)), delta / se,
                           np.where(delta > tol, np.inf, np.where(delta < -tol, -np.inf, 0.0)))
            return np.stack([delta, np.where(np.isfinite(delta), out, np.nan)])

    obs = t(tot_c, tot_b)                                                    # (2 statistics, levels)
    star = t(tot_c[:, None, :] - moved, tot_b[:, None, :] + moved)          # (2, swaps, levels)
    tol = np.where(np.isfinite(obs), 1e-9 * np.maximum(1.0, np.abs(obs)), 0.0)[:, None, :]
    hits = (np.isnan(star) | (star >= obs[:, None, :] - tol)).sum(1).max(0)   # the larger p of the two
    p = hits / len(flips) if exact else (1 + hits) / (1 + len(flips))
    obs = obs[0]
    return np.asarray(np.where(np.isnan(obs), np.nan, np.minimum(p, 1.0)), dtype=float), exact


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted among the hypotheses).

    Sorted ascending, p_(i) is multiplied by (m - i + 1), made monotone and
    capped at 1; rejecting where the adjusted p <= alpha controls the
    family-wise error at alpha under any dependence.
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    running = 0.0
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="mergesort")]):
        running = max(running, min(1.0, (m - rank) * float(p[i])))
        out[i] = running
    return [float(v) for v in out]


def bootstrap_p(replicates: npt.ArrayLike, limit: float) -> tuple[float, int]:
    """One-sided bootstrap p of "D <= limit" and how many replicates were undefined (C* = 0).

    p = (1 + #{D* <= limit} + #{D* undefined}) / (1 + B): a replicate whose
    clean score is 0 has no D and is counted as not supporting a breach
    (it is never dropped silently).
    """
    a = np.asarray(replicates, dtype=float)
    bad = int((~np.isfinite(a)).sum())
    low = int((a[np.isfinite(a)] <= limit).sum())
    return (1 + low + bad) / (1 + len(a)), bad


def min_detectable_drop(clean: float, clusters: int, per_cluster: float = 1.0) -> float:
    """Smallest relative drop D (percent) detected with 80 % power at one-sided 2.5 % (normal approximation).

    G = ``clusters`` independent clusters (tasks x repeats), each with one
    clean outcome at rate C and m = ``per_cluster`` perturbed outcomes at
    rate P = C (1 - D) (independent Bernoulli outcomes).  The per-cluster
    difference d = x - mean(y) has variance C (1 - C) + P (1 - P) / m, so
    the test detects D when z_alpha sigma_0 + z_beta sigma_1 <= sqrt(G) C D
    (sigma_0 at P = C); with m = 1 this is the usual sample size of the
    paired-proportions (McNemar) test, Connor 1987.  The exact test needs at
    least ceil(log(1/alpha) / log(m + 1)) clusters whose clean passed and
    every perturbed outcome failed; below that (G C short of it) no drop is
    detectable: inf.  NaN when C = 0 or there are no clusters.
    """
    if not clusters or not clean > 0 or not math.isfinite(clean):
        return float("nan")
    m = max(float(per_cluster), 1.0)
    need = math.ceil(math.log(1 / ALPHA) / math.log(m + 1) - 1e-12)
    if clusters * min(clean, 1.0) < need:
        return float("inf")
    c = min(clean, 1.0)
    s0 = math.sqrt(c * (1 - c) * (1 + 1 / m))

    def gap(d: float) -> float:
        p = c * (1 - d)
        s1 = math.sqrt(c * (1 - c) + p * (1 - p) / m)
        return math.sqrt(clusters) * c * d - (_Z_ALPHA * s0 + _Z_BETA * s1)

    if gap(1.0) < 0:
        return float("inf")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if gap(mid) >= 0 else (mid, hi)
    # the normal approximation has no variance left when C = 1 (every clean outcome passes): however small the
    # drop, it would call it detectable. The exact test still needs `need` clusters that failed; at a drop D
    # their number is at least Binomial(G, C D), so no D below the one that gives `need` of them with 80 %
    # probability is detectable.
    def enough(d: float) -> bool:
        q = c * d
        below = sum(math.comb(clusters, k) * q ** k * (1 - q) ** (clusters - k) for k in range(need))
        return 1 - below >= POWER

    elo, ehi = 0.0, 1.0
    if not enough(1.0):
        return float("inf")
    for _ in range(50):
        mid = (elo + ehi) / 2
        elo, ehi = (elo, mid) if enough(mid) else (mid, ehi)
    return 100.0 * max(hi, ehi)


class Replicates(dict):  # type: ignore[type-arg]
    """Bootstrap replicates of D per drop-table row, kept in ``DataFrame.attrs`` (copied by reference, not deeply)."""

    def __deepcopy__(self, memo: dict[int, object]) -> Replicates:
        return self

    def __eq__(self, other: object) -> bool:   # pandas compares attrs when it concatenates: by identity
        return self is other

    __hash__ = None


# -- the reported intervals: BCa over task clusters (docs/design.md section 4.1, "Intervals") ------------
#: Interval methods of :func:`interval`: ``"bca"`` (the reported one) and ``"percentile"`` (the old one).
INTERVAL_METHODS = ("bca", "percentile")
#: Replicates within this relative distance of the estimate count as ties in the bias correction.
_TIE = 1e-9


def normal_ppf(q: npt.ArrayLike) -> FloatArray:
    """The standard normal quantile at ``q`` (elementwise; -inf at 0, inf at 1, NaN outside [0, 1]).

    Acklam's rational approximation (relative error below 1.2e-9) refined by
    one Halley step on :func:`normal_cdf`, which brings it to about 1e-15.
    """
    p = np.asarray(q, dtype=float)
    out = np.full(p.shape, np.nan)
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
         -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
         -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
         4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
    flat, res = p.ravel(), out.ravel()
    for i, x in enumerate(flat.tolist()):
        if not 0.0 <= x <= 1.0:
            continue
        if x == 0.0 or x == 1.0:
            res[i] = -math.inf if x == 0.0 else math.inf
            continue
        if x < 0.02425 or x > 1 - 0.02425:
            s = math.sqrt(-2 * math.log(min(x, 1 - x)))
            z = (((((c[0] * s + c[1]) * s + c[2]) * s + c[3]) * s + c[4]) * s + c[5]) / \
                ((((d[0] * s + d[1]) * s + d[2]) * s + d[3]) * s + 1)
            z = z if x < 0.5 else -z
        else:
            r = x - 0.5
            t = r * r
            z = (((((a[0] * t + a[1]) * t + a[2]) * t + a[3]) * t + a[4]) * t + a[5]) * r / \
                (((((b[0] * t + b[1]) * t + b[2]) * t + b[3]) * t + b[4]) * t + 1)
        e = normal_cdf(z) - x                                # one Halley step
        u = e * math.sqrt(2 * math.pi) * math.exp(z * z / 2)
        res[i] = z - u / (1 + z * u / 2)
    return res.reshape(p.shape)


def column_quantiles(samples: npt.ArrayLike, q: npt.ArrayLike) -> FloatArray:
    """Quantile ``q[...]`` of the finite values of each column ``samples[:, ...]`` (linear interpolation).

    ``q`` has the shape of one column's index (``samples.shape[1:]``); the
    interpolation is numpy's default (``method="linear"``), so a constant
    ``q`` gives :func:`numpy.nanpercentile`'s numbers.  NaN where a column
    has no finite value or q is NaN.
    """
    a = np.asarray(samples, dtype=float)
    qq = np.broadcast_to(np.asarray(q, dtype=float), a.shape[1:])
    s = np.sort(np.where(np.isfinite(a), a, np.inf), axis=0)        # non-finite last
    n = np.isfinite(a).sum(0)
    pos = np.clip(qq, 0.0, 1.0) * np.maximum(n - 1, 0)
    lo = np.floor(np.nan_to_num(pos)).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    frac = np.nan_to_num(pos) - lo
    v_lo = np.take_along_axis(s, lo[None, ...], axis=0)[0]
    v_hi = np.take_along_axis(s, hi[None, ...], axis=0)[0]
    with np.errstate(invalid="ignore"):
        out = np.where(frac > 0, v_lo + frac * (v_hi - v_lo), v_lo)
    return np.asarray(np.where((n > 0) & np.isfinite(qq), out, np.nan), dtype=float)


def acceleration(jackknife: npt.ArrayLike) -> FloatArray:
    """BCa acceleration a = sum d^3 / (6 (sum d^2)^1.5), d = mean - leave-one-out value, per column.

    Rows are the leave-one-cluster-out estimates (axis 0); non-finite ones
    (a cluster without pairs at that level, or whose removal leaves C = 0) are
    left out.  0 where fewer than two are finite or they are all equal.
    """
    j = np.asarray(jackknife, dtype=float)
    fin = np.isfinite(j)
    k = fin.sum(0)
    mean = np.where(fin, j, 0.0).sum(0) / np.maximum(k, 1)
    dev = np.where(fin, mean - j, 0.0)
    s2, s3 = (dev ** 2).sum(0), (dev ** 3).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = s3 / (6.0 * s2 ** 1.5)
    return np.asarray(np.where((k >= 2) & (s2 > 0), a, 0.0), dtype=float)


def bca_interval(samples: npt.ArrayLike, estimate: npt.ArrayLike, jackknife: npt.ArrayLike,
                 level: float = 0.95, expand: bool | npt.ArrayLike = False) -> tuple[FloatArray, FloatArray]:
    """Bias-corrected and accelerated (BCa) bootstrap interval, per column (Efron 1987; Efron & Tibshirani 14.3).

    ``samples`` (B, ...) are the bootstrap replicates, ``estimate`` (...)
    the point estimate, ``jackknife`` (n, ...) the leave-one-cluster-out
    estimates.  Over the finite replicates: bias correction z0 =
    Phi^-1((#{theta* < theta} + #{theta* = theta} / 2) / B) (replicates within
    1e-9, relative, of the estimate tie: binary outcomes tie often), clipped so
    that the share stays within [1 / (2B), 1 - 1 / (2B)]; acceleration a from
    the jackknife (:func:`acceleration`); the bounds are the replicates'
    quantiles at Phi(z0 + (z0 + z) / (1 - a (z0 + z))) for z = the normal
    quantiles at (1 -+ level) / 2.  With z0 = a = 0 it is the percentile
    interval.  ``expand`` (True, or a mask per column) takes the expanded
    quantiles of :func:`expanded_z` instead.  NaN where the estimate is not
    finite or no replicate is.
    """
    a_s = np.asarray(samples, dtype=float)
    est = np.asarray(estimate, dtype=float)
    fin = np.isfinite(a_s)
    b = fin.sum(0)
    with np.errstate(invalid="ignore"):
        tol = _TIE * np.maximum(1.0, np.abs(est))
        below = (fin & (a_s < est - tol)).sum(0)
        tie = (fin & (np.abs(a_s - est) <= tol)).sum(0)
    share = (below + 0.5 * tie) / np.maximum(b, 1)
    eps = 0.5 / np.maximum(b, 1)
    z0 = normal_ppf(np.clip(share, eps, 1 - eps))
    acc = acceleration(jackknife)
    zs = (np.full(est.shape, float(normal_ppf(np.array((1 - level) / 2)))),
          np.full(est.shape, float(normal_ppf(np.array((1 + level) / 2)))))
    mask = np.broadcast_to(np.asarray(expand, dtype=bool), est.shape)
    if mask.any():
        wide = expanded_z(level, np.isfinite(np.asarray(jackknife, dtype=float)).sum(0))
        zs = (np.where(mask, wide[0], zs[0]), np.where(mask, wide[1], zs[1]))
    bounds = []
    for z, side in zip(zs, (-math.inf, math.inf)):
        num = z0 + z
        den = 1.0 - acc * num
        with np.errstate(invalid="ignore", divide="ignore"):
            adj = np.where(den > 0, z0 + num / den, side)
        q = np.vectorize(normal_cdf, otypes=[float])(adj) if adj.size else adj
        bounds.append(column_quantiles(a_s, q))
    ok = np.isfinite(est) & (b > 0)
    return (np.asarray(np.where(ok, bounds[0], np.nan), dtype=float),
            np.asarray(np.where(ok, bounds[1], np.nan), dtype=float))


def t_two_sided_cdf(t: float, nu: int) -> float:
    """P(|T| <= t) for Student's t with ``nu`` >= 1 degrees of freedom (Abramowitz & Stegun 26.7.3-4, exact)."""
    if t <= 0:
        return 0.0
    if math.isinf(t):
        return 1.0
    theta = math.atan(t / math.sqrt(nu))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if nu % 2:                               # odd: (2/pi)(theta + sin cos [1 + 2/3 c^2 + (2 4)/(3 5) c^4 + ...])
        if nu == 1:
            return 2 * theta / math.pi
        term, acc = 1.0, 1.0
        for k in range(1, (nu - 3) // 2 + 1):
            term *= (2 * k) / (2 * k + 1) * c2
            acc += term
        return min(1.0, 2 / math.pi * (theta + s * math.cos(theta) * acc))
    term, acc = 1.0, 1.0                     # even: sin [1 + 1/2 c^2 + (1 3)/(2 4) c^4 + ...]
    for k in range(1, (nu - 2) // 2 + 1):
        term *= (2 * k - 1) / (2 * k) * c2
        acc += term
    return min(1.0, s * acc)


@functools.lru_cache(maxsize=512)
def t_quantile(q: float, nu: int) -> float:
    """Student's t quantile at ``q`` with ``nu`` >= 1 degrees of freedom (bisection on the exact distribution).

    Agrees with ``scipy.stats.t.ppf`` to about 1e-12; above 10,000 degrees of
    freedom the normal quantile is used (their difference is below 1e-4 there).
    """
    if not 0.0 < q < 1.0:
        return -math.inf if q == 0.0 else math.inf if q == 1.0 else math.nan
    if q == 0.5:
        return 0.0
    if nu > 10_000:
        return float(normal_ppf(np.array(q)))
    target = abs(2 * q - 1)                  # P(|T| <= t) at the quantile
    lo, hi = 0.0, 1.0
    while t_two_sided_cdf(hi, nu) < target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_cdf(mid, nu) < target else (lo, mid)
        if hi - lo <= 1e-14 * hi:
            break
    t = (lo + hi) / 2
    return t if q > 0.5 else -t


def expanded_z(level: float, clusters: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The normal quantiles that make a bootstrap interval over n clusters as wide as a t interval (Hesterberg).

    The bootstrap distribution is too narrow by sqrt((n - 1) / n) and the
    normal quantile is smaller than Student's t with n - 1 degrees of
    freedom, so a bootstrap interval undercovers at few clusters; the
    expanded levels z' = sqrt(n / (n - 1)) t_{n-1} (Hesterberg 2015, "What
    teachers should know about the bootstrap", section 3.2; the R package
    ``resample``'s ``ExpandProbs``) correct both.  Returned for the lower and
    the upper bound, per column of ``clusters``; below 2 clusters the plain
    normal quantiles.
    """
    n = np.asarray(clusters, dtype=np.int64)
    z_lo = np.full(n.shape, float(normal_ppf(np.array((1 - level) / 2))))
    z_hi = -z_lo
    flat_n, flat_lo, flat_hi = n.ravel(), z_lo.ravel(), z_hi.ravel()
    for i, k in enumerate(flat_n.tolist()):
        if k >= 2:
            t = t_quantile((1 + level) / 2, k - 1) * math.sqrt(k / (k - 1))
            flat_lo[i], flat_hi[i] = -t, t
    return flat_lo.reshape(n.shape), flat_hi.reshape(n.shape)
