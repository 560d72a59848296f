"""``--agentperturb-gate-on significant``: exact paired tests, Holm's correction, power, undefined figures (issue 27)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from pytest_agentperturb import gate
from pytest_agentperturb.analysis import drops, normalise
from pytest_agentperturb.analysis.stats import bootstrap_p, exchange_test, holm, min_detectable_drop
from pytest_agentperturb.cli import main
from pytest_agentperturb.model.task import FAMILIES


def _table(n: int, clean: list[float], fam: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for i in range(n):
        rows.append({"model": "m", "suite": "s", "task": f"t{i}", "family": "clean", "reward": clean[i]})
        for f in FAMILIES:
            rows.append({"model": "m", "suite": "s", "task": f"t{i}", "family": f,
                         "reward": fam.get(f, clean)[i]})
    return normalise(pd.DataFrame(rows))


def _sparse() -> pd.DataFrame:
    """The issue's case: 10 tasks, clean passes 2, tool-missing passes 0, every other family equals clean."""
    clean = [1.0, 1.0] + [0.0] * 8
    return _table(10, clean, {"tool-missing": [0.0] * 10})


@pytest.mark.parametrize(("b", "c"), [(0, 0), (2, 0), (5, 1), (9, 3), (3, 7)])
def test_exchange_test_is_the_one_sided_exact_mcnemar_test_with_one_pair_per_cluster(b: int, c: int) -> None:
    x = [1] * b + [0] * c + [1, 0, 0]
    s = [0] * b + [1] * c + [1, 0, 0]
    want = 1.0 if b + c == 0 else binomtest(b, b + c, alternative="greater").pvalue
    assert exchange_test(x, [1] * len(x), s) == pytest.approx(want, rel=1e-12)


def test_exchange_test_with_several_outcomes_per_cluster_is_exact() -> None:
    rng = np.random.default_rng(1)          # its size is at most alpha under the exchangeable null
    x, m, s = [1, 1, 0, 1], [3, 3, 3, 3], [0, 1, 2, 3]
    p_obs = exchange_test(x, m, s)
    tot = np.array(x) + np.array(s)
    hits = 0
    for _ in range(4000):
        xs = (rng.random(4) < tot / 4).astype(float)
        hits += exchange_test(xs, m, tot - xs) <= p_obs + 1e-12
    assert hits / 4000 <= p_obs + 3 * math.sqrt(p_obs / 4000)


def test_holm_and_bootstrap_p() -> None:
    assert holm([0.01, 0.04, 0.03, math.nan])[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(holm([0.01, math.nan])[1])
    p, bad = bootstrap_p([10.0, 60.0, math.nan, 70.0], 50.0)
    assert bad == 1 and p == pytest.approx(3 / 5)   # the undefined replicate counts against a breach


def test_min_detectable_drop() -> None:
    assert math.isnan(min_detectable_drop(0.0, 10))
    assert math.isinf(min_detectable_drop(0.2, 10))              # 2 clean passes: the exact test can never reject
    a, b = min_detectable_drop(0.6, 25), min_detectable_drop(0.6, 100)
    assert 0 < b < a < 100
    assert min_detectable_drop(0.6, 25, 12) < a                   # 12 perturbed outcomes per cluster help


def test_sparse_data_never_breach_on_a_degenerate_interval() -> None:
    df = _sparse()
    d = drops(df, replicates=500)
    row = d[(d["model"] == "m") & (d["level"] == "tool-missing")].iloc[0]
    assert row.relative_drop == 100.0 and row.boot_degenerate            # every bootstrap replicate says 100
    # the reported interval is the exact one (docs/design.md section 4.1), never the one-point bootstrap interval
    assert row.interval_method == "exact" and row.ci_low < 50.0 < row.ci_high == 100.0
    assert row.p_exact == pytest.approx(0.25) and row.n_boot_undefined > 0
    assert gate.evaluate_tables(gate.parse({"max_family_drop": ["50"]}), d, df).failed       # point: breached
    cons = gate.evaluate_tables(gate.parse({"max_family_drop": ["50"], "gate_on": "conservative"}), d, df).breaches
    (tm,) = [b.line() for b in cons if "[tool-missing]" in b.line()]
    assert "(95 % interval [-1931.9 %, 100.0 %] exact)" in tm                              # the line says exact
    v = gate.evaluate_tables(gate.parse({"max_family_drop": ["50"], "gate_on": "significant"}), d, df)
    assert not v.failed
    lines = v.lines()
    assert any("Holm step-down over 12 families" in ln and "tool-missing p 0.25 -> 1" in ln for ln in lines)
    assert any("cannot tell a 50 % drop from noise" in ln and "add tasks or repeats" in ln for ln in lines)


def test_clean_score_zero_is_not_evaluated_under_every_rule() -> None:
    df = _table(6, [0.0] * 6, {})
    d = drops(df, replicates=50)
    for rule in gate.RULES:
        v = gate.evaluate_tables(gate.parse({"max_drop": "10", "gate_on": rule}), d, df)
        (b,) = v.breaches
        assert b.reason.startswith("D undefined: the clean score is 0 over the 72 pair(s)")
        assert "not evaluated" in b.line() and "interval" not in b.line()


def test_a_real_drop_breaches_with_the_test_and_the_correction_named() -> None:
    n = 30
    df = _table(n, [1.0] * n, {"tool-missing": [0.0] * 20 + [1.0] * 10})
    d = drops(df, replicates=500)
    for limit in ("0", "20"):
        v = gate.evaluate_tables(gate.parse({"max_family_drop": [limit], "gate_on": "significant"}), d, df)
        (b,) = v.breaches
        line = b.line()
        assert "breached by m on s [tool-missing]" in line and "decided by" in line and "exact paired test" in line
        assert "Holm step-down over 12 families" in line and "adjusted p" in line
        assert b.p_adj == pytest.approx(min(1.0, 12 * b.p_raw)) or b.p_adj >= b.p_raw
    v = gate.evaluate_tables(gate.parse({"max_family_drop": ["20"], "gate_on": "significant"}), d, df)
    assert "bootstrap p of D <= limit" in v.breaches[0].line()                   # above 0 both must agree
    assert not gate.evaluate_tables(gate.parse({"max_family_drop": ["70"], "gate_on": "significant"}), d, df).failed


def test_analyze_on_the_issue_case(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    csv = tmp_path / "e.csv"
    _sparse()[["model", "suite", "task", "family", "reward"]].to_csv(csv, index=False)
    out = tmp_path / "s.json"
    args = ["analyze", "--results", str(csv), "--json", str(out), "--replicates", "200",
            "--max-family-drop", "50", "--gate-on", "significant"]
    assert main(args) == 0
    assert "whole 95 % interval lies above" not in caplog.text
    assert json.loads(out.read_text())["gate"]["failed"] is False


def test_the_summary_states_the_smallest_detectable_drop() -> None:
    from pytest_agentperturb.analysis import analyze, summary, summary_lines

    a = analyze(_sparse(), replicates=100, permutations=100)
    (line,) = summary_lines(a)
    assert "detectable drop: none up to 100 % (80% power, one-sided 2.5%)" in line
    assert "bootstrap replicate(s) with clean 0 (no D)" in line
    deg = summary(a)["degradation"][0]
    assert 0 < deg["p_exact"] <= 1
    assert deg["n_boot_undefined"] > 0


def test_a_degenerate_change_against_a_baseline_is_not_evidence() -> None:
    from pytest_agentperturb.analysis import analyze

    def run(rid: str, p: float) -> pd.DataFrame:
        return normalise(pd.DataFrame([{"run_id": rid, "model": "m", "suite": "s", "task": f"t{i}", "family": f,
                                        "reward": 1.0 if f == "clean" else p} for i in range(4)
                                       for f in ("clean", "tool-missing")]))

    a = analyze(run("new", 0.0), replicates=100, permutations=100, baseline=run("old", 1.0))
    v = gate.evaluate(gate.parse({"max_regression": "5", "gate_on": "significant"}), a)
    # every replicate is +100 points, which is not evidence: the exact swap test decides, and 4 tasks cannot
    # reach one-sided 2.5 % (its smallest p is 2^-4), so nothing breaches and the note says no regression is
    # detectable at this size
    assert not v.failed
    assert any("none up to 100 points" in n for n in v.notes)
    assert any("exact paired swap test of no regression on 4 tasks: p 0.0625" in n for n in v.notes)


def test_pass_hat_curve_for_every_k() -> None:
    from pytest_agentperturb.analysis.repeats import pass_hat_curve, repeat_stats

    assert pass_hat_curve(np.array([3.0, 4.0, 2.0]), 4) == pytest.approx([0.75, 10 / 18, (1 + 4 + 0) / 12, 1 / 3])
    rows = []
    for t, c in (("a", 3), ("b", 4), ("c", 2)):
        for r in range(4):
            key = {"model": "m", "suite": "s", "task": t, "repeat": r}
            rows += [{**key, "family": "clean", "reward": float(r < c)},
                     {**key, "family": "tool-missing", "reward": 0.0}]
    st = repeat_stats(normalise(pd.DataFrame(rows)), replicates=50).set_index("family")
    curve = st.loc["clean", "pass_hat_curve"]
    assert curve[0] == pytest.approx(st.loc["clean", "pass_at_1"]) and curve[-1] == st.loc["clean", "pass_hat_k"]


def test_the_smallest_detectable_regression_is_stated() -> None:
    from pytest_agentperturb.analysis import analyze, extra_summary_lines

    def run(rid: str, p: list[float]) -> pd.DataFrame:
        return normalise(pd.DataFrame([{"run_id": rid, "model": "m", "suite": "s", "task": f"t{i}", "family": f,
                                        "reward": 1.0 if f == "clean" else p[i]} for i in range(8)
                                       for f in ("clean", "tool-missing")]))

    a = analyze(run("new", [0, 1, 0, 1, 1, 1, 1, 1]), replicates=100, permutations=100,
                baseline=run("old", [1, 0, 1, 1, 1, 1, 1, 1]))
    assert a.versus is not None
    ov = a.versus.deltas[a.versus.deltas["level_kind"] == "overall"].iloc[0]
    # C = 1, P = 6/8 and 7/8 over 8 tasks: 100 (1.96 + 0.84) sqrt((6/8 * 2/8 + 7/8 * 1/8) / 8) = 54.0 points
    assert ov.min_detectable == pytest.approx(100 * 2.8016 * math.sqrt((0.1875 + 0.109375) / 8), rel=1e-3)
    assert any("detectable change >= 54 points" in ln for ln in extra_summary_lines(a))
    v = gate.evaluate(gate.parse({"max_regression": "10"}), a)
    assert any("cannot tell a 10-point regression from noise" in n and "54 points" in n for n in v.notes)


def test_holm_keeps_a_lone_raw_rejection_among_twelve_families_from_breaching() -> None:
    n = 30
    df = _table(n, [1.0] * n, {"tool-missing": [0.0] * 6 + [1.0] * 24})   # 6 harmful flips: p = 1/64
    d = drops(df, replicates=300)
    one = gate.evaluate_tables(gate.parse({"max_family_drop": ["tool-missing=0"], "gate_on": "significant"}), d, df)
    (b,) = one.breaches
    assert b.p_raw == pytest.approx(1 / 64) and b.p_adj == b.p_raw and "one hypothesis, no correction" in b.line()
    every = gate.evaluate_tables(gate.parse({"max_family_drop": ["0"], "gate_on": "significant"}), d, df)
    assert not every.failed
    assert any("Holm step-down over 12 families" in ln and "tool-missing p 0.0156 -> 0.188" in ln
               for ln in every.lines())


def test_continuous_rewards_with_a_degenerate_bootstrap_are_not_evaluated() -> None:
    n = 6
    df = _table(n, [0.5] * n, {"tool-missing": [0.25] * n})
    d = drops(df, replicates=100)
    v = gate.evaluate_tables(gate.parse({"max_family_drop": ["tool-missing=10"], "gate_on": "significant"}), d, df)
    (b,) = v.breaches
    assert "degenerate" in b.reason and "continuous rewards have no exact test" in b.reason


def test_a_perfect_clean_score_does_not_make_every_drop_detectable() -> None:
    """At C = 1 the normal approximation has no variance left; the exact test still needs six failed
    clusters at one-sided 2.5 %, so the stated smallest drop is where 80 % of runs have them."""
    from math import comb

    from pytest_agentperturb.analysis.stats import min_detectable_drop

    d = min_detectable_drop(1.0, 336)
    assert 1.5 < d < 4.0
    q = d / 100
    at_least_six = 1 - sum(comb(336, k) * q ** k * (1 - q) ** (336 - k) for k in range(6))
    assert abs(at_least_six - 0.80) < 0.01
    assert min_detectable_drop(1.0, 28) > min_detectable_drop(1.0, 336)


def test_an_undetectable_or_undefined_change_never_prints_inf() -> None:
    """One task against a baseline: no change is detectable ("none up to 100 points"); a clean score of 0: n/a (why)."""
    from pytest_agentperturb.analysis import analyze, extended_summary, extra_summary_lines
    from pytest_agentperturb.report import render_page

    def run(rid: str, clean: float, p: float) -> pd.DataFrame:
        return normalise(pd.DataFrame([{"run_id": rid, "model": "m", "suite": "s", "task": "t0", "family": f,
                                        "reward": clean if f == "clean" else p} for f in ("clean", "tool-missing")]))

    a = analyze(run("new", 1.0, 0.0), replicates=50, permutations=50, baseline=run("old", 1.0, 1.0))
    (line,) = [ln for ln in extra_summary_lines(a) if "versus" in ln and "change" in ln]
    assert "detectable change: none up to 100 points (80% power, one-sided 2.5%)" in line, line
    assert "inf" not in line and ", 1 task," in line, line
    page = render_page(a, gate.evaluate(gate.Thresholds(), a))
    start = page.index("id='versus-baseline'")
    versus = page[start:page.index("<h2 ", start)]
    assert "<td>none up to 100 points</td>" in versus and ">inf<" not in versus
    json.dumps(extended_summary(a), allow_nan=False)             # inf and NaN are null in the JSON summary
    b = analyze(run("new", 1.0, 0.0), replicates=50, permutations=50, baseline=run("old", 0.0, 0.0))
    (line,) = [ln for ln in extra_summary_lines(b) if "versus" in ln and "change" in ln]
    assert line.endswith(", detectable change: n/a (no clean passes)") and "nan" not in line.lower(), line
