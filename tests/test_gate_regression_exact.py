"""``--agentperturb-max-regression`` under ``significant``: the exact paired swap test (issue 27, point 1 and 3)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from pytest_agentperturb import gate
from pytest_agentperturb.analysis import analyze, normalise
from pytest_agentperturb.analysis.stats import swap_test


def _run(rid: str, pert: list[float], clean: list[float] | None = None) -> pd.DataFrame:
    clean = clean or [1.0] * len(pert)
    return normalise(pd.DataFrame([{"run_id": rid, "model": "m", "suite": "s", "task": f"t{i}", "family": f,
                                    "reward": clean[i] if f == "clean" else pert[i]} for i in range(len(pert))
                                   for f in ("clean", "tool-missing")]))


def _verdict(cur: pd.DataFrame, base: pd.DataFrame, limit: str = "0") -> gate.Verdict:
    a = analyze(cur, replicates=400, permutations=100, baseline=base)
    return gate.evaluate(gate.parse({"max_regression": limit, "gate_on": "significant"}), a)


def _brute(cur: np.ndarray, base: np.ndarray) -> float:
    """The larger of P(delta* >= delta) and P(t* >= t) over every swap of the tasks, by enumeration (one level)."""
    def d_var(x: np.ndarray) -> tuple[float, float]:
        cs, ps = x[0].sum(), x[1].sum()
        resid = [(x[1][i] - ps / cs * x[0][i]) / cs for i in range(x.shape[1])]
        return 100 * (cs - ps) / cs, 1e4 * sum(e * e for e in resid)

    def t(c: np.ndarray, b: np.ndarray) -> float:
        (dc, vc), (db, vb) = d_var(c), d_var(b)
        if vc + vb < 1e-12:
            return np.inf if dc - db > 1e-9 else -np.inf if dc - db < -1e-9 else 0.0
        return (dc - db) / np.sqrt(vc + vb)

    def delta(c: np.ndarray, b: np.ndarray) -> float:
        return d_var(c)[0] - d_var(b)[0]

    n, out = cur.shape[1], 0.0
    for stat in (delta, t):
        obs, hits = stat(cur, base), 0
        for flips in itertools.product((0, 1), repeat=n):
            f = np.asarray(flips, dtype=bool)
            c, b = np.where(f, base, cur), np.where(f, cur, base)
            hits += stat(c, b) >= obs - 1e-9 if c[0].sum() and b[0].sum() else True
        out = max(out, hits / 2 ** n)
    return out


def test_the_swap_test_enumerates_every_swap_of_the_tasks() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(3, 9))
        cur = np.stack([np.ones(n), (rng.random(n) < 0.6).astype(float)])
        base = np.stack([(rng.random(n) < 0.9).astype(float) + 0.5, rng.random(n)])   # continuous rewards too
        p, exact = swap_test(cur[:, :, None], base[:, :, None], rng)
        assert exact and p[0] == pytest.approx(_brute(cur, base))


def test_the_swap_test_keeps_its_level_when_the_runs_are_exchangeable() -> None:
    rng = np.random.default_rng(11)
    ps = []
    for _ in range(600):
        q = rng.beta(2.0, 1.5, 10)
        draw = [(rng.random((2, 10)) < q).astype(float) for _ in range(2)]
        ps.append(swap_test(draw[0][:, :, None], draw[1][:, :, None], rng)[0][0])
    ps = np.asarray(ps)
    ok = np.isfinite(ps)
    assert ok.mean() > 0.95
    assert (ps[ok] <= 0.025).mean() <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / ok.sum())


def test_the_swap_test_keeps_its_level_when_the_clean_scores_differ_but_d_does_not() -> None:
    """Baseline clean half the current's, the same 25 % drop in both: change 0, runs not exchangeable.

    delta's own swap test breached about 9.5 % of such runs at 25 tasks (one-sided 2.5 %), the studentised
    one about 6 % in the mirrored case (the current run the lower); the larger p of the two holds the level.
    """
    rng = np.random.default_rng(5)

    def run(q: np.ndarray) -> np.ndarray:
        clean = (rng.random(25) < q).astype(float) * 12
        pert = (rng.random((25, 12)) < 0.75 * q[:, None]).sum(1).astype(float)
        return np.stack([clean, pert])[:, :, None]

    for ratio in (0.5, 2.0):                      # baseline clean p/2, then current clean p/2
        ps = []
        for _ in range(300):
            p = rng.beta(2.0, 1.5, 25)
            cur, base = (run(p), run(ratio * p)) if ratio < 1 else (run(p / ratio), run(p))
            ps.append(swap_test(cur, base, rng, 2000)[0][0])
        ok = np.isfinite(np.asarray(ps))
        rate = (np.asarray(ps)[ok] <= 0.025).mean()
        assert rate <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / ok.sum()), (ratio, rate)


def test_a_regression_on_too_few_tasks_is_not_breached_by_its_interval() -> None:
    """Five tasks: the bootstrap interval of +80 points lies above 0, but no swap test on 5 tasks reaches 2.5 %."""
    v = _verdict(_run("new", [0, 0, 0, 0, 1]), _run("old", [1, 1, 1, 1, 1]))
    assert not v.failed
    assert any("exact paired swap test of no regression on 5 tasks: p 0.0625" in n for n in v.notes)
    assert any("cannot tell a 0-point regression from noise" in n and "none up to 100 points" in n for n in v.notes)


def test_a_clear_regression_is_decided_by_the_exact_test() -> None:
    v = _verdict(_run("new", [0.0] * 8), _run("old", [1.0] * 8))
    (b,) = v.breaches
    line = b.line()
    assert "decided by exact paired swap test of no regression on 8 tasks: p 0.00391" in line
    assert "degenerate" in line and "not evidence" in line       # every replicate +100: the test decides alone


def test_above_zero_the_exact_test_and_the_bootstrap_must_both_reject() -> None:
    cur = _run("new", [0.0] * 12 + [1.0] * 8)
    base = _run("old", [1.0] * 20)
    (b,) = _verdict(cur, base, "20").breaches                     # +60 points, far above 20
    assert "the larger of the exact paired swap test" in b.line() and "bootstrap p of change <= limit" in b.line()
    assert not _verdict(cur, base, "70").failed                   # +60 points: not above 70
