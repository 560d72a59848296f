"""Exact intervals of D for sparse binary rows (docs/design.md section 4.1, "Exact intervals in sparse rows").

Where few clean episodes pass, the cluster bootstrap of D = 100 (C - P) / C
is degenerate or rests on one or two tasks and its interval undercovers
(issue 27).  There the reported interval is exact instead: Clopper-Pearson
bounds of the clean score C and of the perturbed score P, each at one-sided
1.25 % per side, joined by Bonferroni into

    [100 (1 - P_high / C_low),  100 (1 - P_low / C_high)],

so that each side of the interval of D misses with probability at most
2.5 % (two of the four one-sided 1.25 % statements), whatever the pairing.
The bounds hold conditionally on the suite's tasks: every episode is an
independent success or failure with its own probability, so a score is a
mean of independent Bernoulli outcomes, and the Clopper-Pearson interval
of such a (Poisson-binomial) mean is conservative (Hoeffding 1956).  A
weighted mean (a clean episode counted once per pair it is in, pooled
models with unequal pair counts) uses Kish's effective number of outcomes
(sum w)^2 / sum w^2 and the effective number of successes mean x that
number (the Beta-quantile form of Clopper-Pearson takes non-integer
counts); with equal weights this is the plain Clopper-Pearson interval.
Pure Python and deterministic (no random numbers, no scipy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: A binary row's interval is exact when its clean successes (effective count) are fewer than this,
#: when its bootstrap is degenerate or when more than :data:`SPARSE_UNDEFINED` of its replicates have C* = 0.
SPARSE_PASSES = 5.0
#: Largest share of bootstrap replicates with clean score 0 (no D) a BCa interval is reported with.
SPARSE_UNDEFINED = 0.01
#: With one repeat index (K = 1) a row of D over fewer tasks than this always gets the exact interval: a design
#: rule (K and the number of tasks, never the outcomes), because at 10 tasks the data-driven switch leaves BCa
#: intervals selected on their clean passes that cover 0.977-0.979 per family (docs/design.md section 4.1).  At
#: 25 tasks and more the switch stays: exact by design there would widen a typical suite's interval (the main
#: job's 28 tasks: [19.6, 26.2] -> [4.4, 28.8]) where BCa covers 0.970 / 0.964.
DESIGN_TASKS = 20
#: The same design rule for the change against a baseline, whose BCa interval covers too little up to 25 tasks
#: (0.80 overall at 10 low-score tasks, K = 1).
DESIGN_TASKS_CHANGE = 50
#: What ``interval_method`` says for an exact interval.
EXACT = "exact"


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz, as in Numerical Recipes 6.4)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < eps:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b) for a, b > 0 (the Beta(a, b) distribution function)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lead = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return lead * _beta_cf(a, b, x) / a
    return 1.0 - lead * _beta_cf(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """The Beta(a, b) quantile at ``q`` (bisection on :func:`beta_cdf`, to about 1e-13)."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if beta_cdf(mid, a, b) < q else (lo, mid)
        if hi - lo < 1e-14:
            break
    return 0.5 * (lo + hi)


def clopper_pearson(k: float, n: float, tail: float) -> tuple[float, float]:
    """Clopper-Pearson bounds of a success probability from k successes of n, each side missing at most ``tail``.

    lower = Beta(k, n - k + 1) quantile at ``tail`` (0 when k = 0), upper =
    Beta(k + 1, n - k) quantile at 1 - ``tail`` (1 when k = n); k and n may
    be effective (non-integer) counts.
    """
    if n <= 0:
        return 0.0, 1.0
    k = min(max(k, 0.0), n)
    lo = 0.0 if k <= 1e-12 else beta_ppf(tail, k, n - k + 1.0)
    hi = 1.0 if k >= n - 1e-12 else beta_ppf(1.0 - tail, k + 1.0, n - k)
    return lo, hi


def effective_n(weights: Sequence[float]) -> float:
    """Kish's effective number of outcomes of a weighted mean: (sum w)^2 / sum w^2 (0 without weights)."""
    s1 = math.fsum(weights)
    s2 = math.fsum(w * w for w in weights)
    return s1 * s1 / s2 if s2 > 0 else 0.0


def ratio_interval(clean: float, n_clean: float, pert: float, n_pert: float, level: float = 0.95
                   ) -> tuple[float, float]:
    """The exact interval of D = 100 (1 - P / C) from the clean and perturbed scores and their effective counts.

    Clopper-Pearson bounds of C (``clean`` x ``n_clean`` successes of
    ``n_clean``) and of P at one-sided (1 - ``level``) / 4 each, joined by
    Bonferroni (module docstring).  NaN when C = 0 (D is undefined).
    """
    if not clean > 0 or n_clean <= 0 or n_pert <= 0:
        return math.nan, math.nan
    tail = (1.0 - level) / 4.0
    c_lo, c_hi = clopper_pearson(clean * n_clean, n_clean, tail)
    p_lo, p_hi = clopper_pearson(pert * n_pert, n_pert, tail)
    return 100.0 * (1.0 - p_hi / c_lo), 100.0 * (1.0 - p_lo / c_hi)


def is_sparse(clean_passes: float, degenerate: bool, undefined_share: float) -> bool:
    """Whether a binary row gets the exact interval: few clean passes, a degenerate bootstrap, or many C* = 0."""
    return bool(degenerate or clean_passes < SPARSE_PASSES or undefined_share > SPARSE_UNDEFINED)


def exact_by_design(repeats: int, tasks: int, limit: int = DESIGN_TASKS) -> bool:
    """Whether a binary row gets the exact interval whatever its outcomes: one repeat index and fewer tasks than
    ``limit`` (:data:`DESIGN_TASKS` for D, :data:`DESIGN_TASKS_CHANGE` for the change against a baseline)."""
    return repeats <= 1 and tasks < limit


def change_interval(current: tuple[float, float, float, float], baseline: tuple[float, float, float, float],
                    level: float = 0.95) -> tuple[float, float]:
    """The exact interval of the change D_current - D_baseline (points) from both runs' scores and counts.

    Each argument is (clean, n_clean, pert, n_pert) as :func:`ratio_interval`
    takes them.  Each run's D gets its exact interval at 1 - (1 - ``level``) / 2
    and the two are joined by Bonferroni, [lo_cur - hi_base, hi_cur - lo_base]:
    each side misses with probability at most (1 - ``level``) / 2, whatever
    the pairing of the two runs.  NaN when either clean score is 0.
    """
    inner = 1.0 - (1.0 - level) / 2.0
    c_lo, c_hi = ratio_interval(*current, level=inner)
    b_lo, b_hi = ratio_interval(*baseline, level=inner)
    return c_lo - b_hi, c_hi - b_lo
