"""Statistical building blocks: rank correlation with a permutation test, paired tests,
bootstrap weights and percentile intervals (docs/design.md section 4).

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
_BLOCK = 20_000


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
        hits = 0
        for start in range(0, len(perms), 10 * _BLOCK):
            r = (yc[perms[start:start + 10 * _BLOCK]] @ xc) / den
            hits += int((np.abs(r) >= abs(rho) - tol).sum())
        return Correlation(rho, hits / len(perms), n, len(perms), exact=True)
    rng = rng if rng is not None else np.random.default_rng(0)
    hits, done = 0, 0
    while done < permutations:
        k = min(_BLOCK, permutations - done)
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
