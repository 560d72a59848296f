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
    """P(delta* >= delta) over every swap of the tasks, by enumeration (one level)."""
    def delta(c: np.ndarray, b: np.ndarray) -> float:
        return 100 * (c[0].sum() - c[1].sum()) / c[0].sum() - 100 * (b[0].sum() - b[1].sum()) / b[0].sum()

    obs, hits, n = delta(cur, base), 0, cur.shape[1]
    for flips in itertools.product((0, 1), repeat=n):
        f = np.asarray(flips, dtype=bool)
        c, b = np.where(f, base, cur), np.where(f, cur, base)
        d = delta(c, b) if c[0].sum() and b[0].sum() else np.inf
        hits += d >= obs - 1e-9
    return hits / 2 ** n


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
