"""The analysis' own versions of scipy pieces give scipy's numbers.

The report computes ranks, the signed-rank and McNemar p-values and the
average-linkage order of the cross-family matrix without importing scipy;
these tests hold ranks, statistics, the exact signed-rank p and the linkage
to scipy's results value for value, ties and edge cases included.  The
McNemar p is the exact binomial tail correctly rounded (held bit for bit to
a sum of fractions) and agrees with scipy's to 1e-12, relative; so does the
signed-rank test's normal approximation.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_agentperturb.analysis import labels
from pytest_agentperturb.analysis.cluster import average_linkage, leaves
from pytest_agentperturb.analysis.sensitivity import _estimate
from pytest_agentperturb.analysis.stats import (
    average_ranks,
    binomial_two_sided,
    mcnemar,
    ranks,
    signed_rank,
    signed_rank_counts,
)


def _arrays(rng: np.random.Generator, k: int) -> list[np.ndarray]:
    out = []
    for i in range(k):
        shape = tuple(int(v) for v in rng.integers(1, 7, size=rng.integers(1, 4)))
        a = rng.integers(0, 4, size=shape).astype(float) if i % 3 else rng.normal(size=shape)
        if i % 5 == 0:
            a[rng.uniform(size=shape) < 0.2] = np.inf
        out.append(a)
    return out


def test_average_ranks_equal_scipy_rankdata_on_every_axis() -> None:
    from scipy.stats import rankdata

    rng = np.random.default_rng(11)
    for a in _arrays(rng, 400):
        for axis in range(a.ndim):
            got, ref = average_ranks(a, axis=axis), rankdata(a, method="average", axis=axis)
            assert got.shape == ref.shape and np.array_equal(got, ref), (a, axis)
    assert average_ranks(np.array([])).shape == (0,)
    assert average_ranks(np.zeros((3, 0)), axis=1).shape == (3, 0)


def test_ranks_keep_nan_out_and_tie_rounded_values() -> None:
    r = ranks([2 / 3 - 1 / 3, 1 - 2 / 3, float("nan"), 0.0])
    assert r[0] == r[1] == 2.5 and r[3] == 1.0 and np.isnan(r[2])
    big = np.round(np.random.default_rng(2).normal(size=(30, 40, 5)), 1)
    from scipy.stats import rankdata

    assert np.array_equal(ranks(big, axis=1), rankdata(np.round(big, 9), axis=1))


def test_binomial_two_sided_is_the_exact_tail_correctly_rounded() -> None:
    from fractions import Fraction
    from math import comb

    from scipy.stats import binomtest

    for n in [*range(1, 161), 999, 2000]:
        for k in (range(n + 1) if n <= 160 else (0, 1, n // 3, n // 2 - 1, n // 2, n - 1)):
            got = binomial_two_sided(k, n)
            lo = min(k, n - k)
            exact = 1 if 2 * k == n else min(Fraction(1), 2 * sum(Fraction(comb(n, i), 2 ** n) for i in range(lo + 1)))
            assert got == float(exact), (k, n)
            assert got == pytest.approx(binomtest(k, n, 0.5).pvalue, rel=1e-12, abs=1e-300), (k, n)
    t = mcnemar([True] * 9 + [False] * 4, [False] * 6 + [True] * 3 + [True] * 2 + [False] * 2)
    assert (t.harmful, t.beneficial) == (6, 2)
    assert t.p_value == 37 / 128  # 2 * (1 + 8 + 28) / 2^8


def test_normal_cdf_agrees_with_scipy_ndtr_in_both_tails() -> None:
    from scipy.special import ndtr

    from pytest_agentperturb.analysis.stats import normal_cdf

    for x in np.linspace(-30, 8, 7601):
        assert normal_cdf(float(x)) == pytest.approx(float(ndtr(x)), rel=1e-12, abs=0), x
    assert normal_cdf(0.0) == 0.5 and normal_cdf(-40.0) == 0.0 and normal_cdf(40.0) == 1.0


def test_signed_rank_is_scipy_wilcoxon_bit_for_bit() -> None:
    from scipy.stats import wilcoxon

    rng = np.random.default_rng(5)
    exact = approx = 0
    for i in range(300):
        n = int(rng.integers(1, 70))
        c = rng.normal(size=n) if i % 2 else rng.integers(0, 9, n).astype(float)
        p = c + (rng.normal(size=n) if i % 3 else rng.integers(-3, 4, n))
        got = signed_rank(c, p)
        d = (p - c)[(p - c) != 0]
        if not len(d):
            assert got.p_value == 1.0
            continue
        ties = len(np.unique(np.abs(d))) < len(d)
        method = "approx" if ties or len(d) >= 50 else "exact"
        exact += method == "exact"
        approx += method == "approx"
        ref = wilcoxon(d, zero_method="wilcox", method=method, correction=False)
        assert got.statistic == float(ref.statistic), (c, p, method)
        if method == "exact":
            assert got.p_value == float(ref.pvalue), (c, p)
        else:  # the normal approximation: math.erfc against scipy's ndtr
            assert got.p_value == pytest.approx(float(ref.pvalue), rel=1e-12), (c, p)
    assert exact > 20 and approx > 20


def test_signed_rank_counts_are_the_subset_sums_of_1_to_n() -> None:
    from itertools import combinations

    for n in range(0, 9):
        counts = np.zeros(n * (n + 1) // 2 + 1, dtype=np.int64)
        for k in range(n + 1):
            for c in combinations(range(1, n + 1), k):
                counts[sum(c)] += 1
        assert np.array_equal(signed_rank_counts(n), counts)
    assert int(signed_rank_counts(49).sum()) == 2 ** 49


def _condensed(d: np.ndarray) -> np.ndarray:
    return d[np.triu_indices(len(d), 1)]


def test_average_linkage_and_leaves_equal_scipy_ties_included() -> None:
    from scipy.cluster.hierarchy import leaves_list, linkage

    rng = np.random.default_rng(0)
    for t in range(3000):
        k = int(rng.integers(2, 14))
        kind = t % 4
        d = (rng.uniform(0, 2, (k, k)) if kind == 0 else rng.integers(0, 3, (k, k)) / 2 if kind == 1
             else np.round(rng.uniform(0, 2, (k, k)), 1) if kind == 2 else np.where(rng.uniform(size=(k, k)) < .3, .5, 1.))
        d = (d + d.T) / 2
        np.fill_diagonal(d, 0.0)
        ref = linkage(_condensed(d), method="average")
        z = average_linkage(d)
        assert np.array_equal(z, ref), d
        assert leaves(z) == [int(i) for i in leaves_list(ref)]
    assert average_linkage(np.zeros((1, 1))).shape == (0, 4)
    with pytest.raises(ValueError, match="finite"):
        average_linkage(np.array([[0.0, np.nan], [np.nan, 0.0]]))


def test_the_dense_cross_family_estimate_equals_the_masked_one() -> None:
    rng = np.random.default_rng(1)
    for i in range(60):
        b, m, t, f = (int(rng.integers(1, 12)), int(rng.integers(1, 4)), int(rng.integers(3, 40)),
                      int(rng.integers(2, 13)))
        if i % 2:
            s = (rng.uniform(size=(b, m, t, f)) < 0.6).astype(float)
            c = (rng.uniform(size=(b, m, t)) < 0.85).astype(float)
        else:
            s, c = np.round(rng.uniform(size=(b, m, t, f)), 2), np.round(rng.uniform(0.1, 1, size=(b, m, t)), 2)
        assert np.array_equal(_estimate(s, c, dense=True), _estimate(s, c, dense=False), equal_nan=True)


_WORDS = ("the", "this", "instructions", "Task description", "procedure", "policy", "tool descriptions", "tool list",
          "Tool schema", "schemas", "documentation", "earlier conversation", "previous messages", "prior turns",
          "context", "notes", "user's message", "USER REQUEST", "is", "are", "wrong", "outdated", "contradicts",
          "errors", "in", "between", "and", "conflict", "has", "an", "error", "seems", "to be", "not", "gives",
          "inconsistency", "user", "tool", "message", "do not match", "ſchema", "naïve", "ſ", "K")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=10), st.sampled_from([" ", "  ", "\n", "-"]))
def test_the_channel_pre_check_never_changes_the_verdict(words: list[str], sep: str) -> None:
    text = sep.join(words)
    assert labels._channel(text) == (labels._CHANNEL.search(text) is not None)


_LEXICON = ("Might", "may be", "MAYBE", "seems", "appear", "not sure", "unsure", "Unclear", "possibly", "perhaps",
            "I assume", "assuming", "probably", "i think", "could be", "double-check", "Confirmed", "inconsistent",
            "Conflicts", "contradiction", "discrepancy", "mismatched", "doesn't match", "do not exist", "not given",
            "not found", "missing", "WRONG", "incorrect", "invalid", "unknown tool", "no such", "outdated", "errors",
            "error", "mayb", "seeming", "conflic", "matched", "existing", "note", "ſure", "naïve", "K", "x", "1")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_LEXICON), min_size=1, max_size=8), st.sampled_from([" ", "", "\n", "-", "."]))
def test_the_lexicon_pre_checks_never_change_the_verdict(words: list[str], sep: str) -> None:
    text = sep.join(words)
    low = text.lower() if text.isascii() else None
    for pattern, stems in ((labels._HEDGE, labels._HEDGE_WORDS), (labels._PROBLEM, labels._PROBLEM_WORDS),
                           (labels._CHANNEL, labels._CHANNEL_WORDS)):
        assert labels._search(pattern, stems, text, low) == (pattern.search(text) is not None)


def test_cross_family_is_the_same_in_a_thread_and_in_any_chunk_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from synthetic_store import rows

    from pytest_agentperturb.analysis import sensitivity
    from pytest_agentperturb.report import episode_table

    table = episode_table(rows(12))

    def flat(results: list[sensitivity.Sensitivity]) -> str:   # repr: NaN equals NaN
        return repr([(r.suite, r.families, r.rho.tolist(), r.ci_low.tolist(), r.ci_high.tolist(),
                      r.linkage.tolist(), r.groups) for r in results])

    ref = flat(sensitivity.cross_family(table, replicates=230, seed=4))
    assert "synthetic" in ref and "tool-missing" in ref
    assert flat(sensitivity.start_cross_family(table, replicates=230, seed=4)()) == ref
    for chunk in (1, 7, 230):
        monkeypatch.setattr(sensitivity, "_CHUNK", chunk)
        assert flat(sensitivity.cross_family(table, replicates=230, seed=4)) == ref
    assert flat(sensitivity.cross_family(table, replicates=230, seed=5)) != ref


# -- exact shortcuts: the same bytes as the general computation ----------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["bt,mtl->bml", "btr,mtrl->bml", "btr,trl->bl"]), st.integers(0, 2**31 - 1),
       st.booleans())
def test_draw_sums_are_the_einsum_byte_for_byte(spec: str, seed: int, whole: bool) -> None:
    from pytest_agentperturb.analysis.stats import draw_sums

    rng = np.random.default_rng(seed)
    dims = {c: int(rng.integers(1, 9)) for c in "btrml"}
    ws, xs = spec.split("->")[0].split(",")
    w = rng.integers(0, 6, size=[dims[c] for c in ws]).astype(float)
    x = rng.integers(0, 40, size=[dims[c] for c in xs]).astype(float)
    if not whole:
        x = x + rng.uniform(size=x.shape)   # not whole numbers: the einsum itself
    got, want = draw_sums(spec, w, x), np.einsum(spec, w, x)
    assert got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()


_JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
                        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids,
                                                                                  max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_JSONISH, st.booleans())
def test_the_reused_json_encoder_writes_what_json_dumps_writes(value: object, sort_keys: bool) -> None:
    import json

    from pytest_agentperturb.model.jsontext import dumper

    assert dumper(sort_keys=sort_keys)(value) == json.dumps(value, ensure_ascii=False, sort_keys=sort_keys)


def test_the_reused_json_encoder_raises_what_json_dumps_raises() -> None:
    import json

    from pytest_agentperturb.model.jsontext import dumper

    loop: list[object] = []
    loop.append(loop)
    for bad, exc in ((loop, ValueError), ({"a": object()}, TypeError), ({1: 1, "a": 2}, TypeError)):
        with pytest.raises(exc) as want:
            json.dumps(bad, ensure_ascii=False, sort_keys=True)
        with pytest.raises(exc) as got:
            dumper(sort_keys=True)(bad)
        assert str(got.value) == str(want.value)
