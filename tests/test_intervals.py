"""The reported 95 % intervals: expanded BCa over task clusters (docs/design.md section 4.1, "Intervals")."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_agentperturb.analysis import drops, normalise
from pytest_agentperturb.analysis.baseline import compare
from pytest_agentperturb.analysis.stats import (
    acceleration,
    bca_interval,
    column_quantiles,
    expanded_z,
    normal_cdf,
    normal_ppf,
    percentile_interval,
    t_quantile,
)


def test_normal_and_t_quantiles() -> None:
    q = normal_ppf(np.array([0.025, 0.5, 0.975, 1e-10, 0.0, 1.0, 2.0]))
    assert q[:3] == pytest.approx([-1.959963984540054, 0.0, 1.959963984540054], abs=1e-13)
    assert q[3] == pytest.approx(-6.361340902404056, rel=1e-12)
    assert q[4] == -math.inf and q[5] == math.inf and math.isnan(q[6])
    for x in (-3.0, -0.3, 0.0, 1.7):
        assert float(normal_ppf(np.array(normal_cdf(x)))) == pytest.approx(x, abs=1e-12)
    # scipy.stats.t.ppf(0.975, nu)
    for nu, t in ((1, 12.706204736174694), (2, 4.302652729749462), (9, 2.2621571627982050),
                  (24, 2.0638985616280245), (49, 2.0095752371292392)):
        assert t_quantile(0.975, nu) == pytest.approx(t, rel=1e-12)
        assert t_quantile(0.025, nu) == pytest.approx(-t, rel=1e-12)
    lo, hi = expanded_z(0.95, np.array([1, 10, 25, 50]))
    assert hi[0] == pytest.approx(1.959963984540054)                       # one cluster: no expansion
    assert hi[1:] == pytest.approx([math.sqrt(10 / 9) * 2.2621571627982050, math.sqrt(25 / 24) * 2.0638985616280245,
                                    math.sqrt(50 / 49) * 2.0095752371292392])
    assert list(lo) == [-v for v in hi]


def test_column_quantiles_match_numpy_and_skip_non_finite() -> None:
    a = np.random.default_rng(0).normal(size=(501, 3))
    q = np.array([0.025, 0.5, 0.975])
    assert column_quantiles(a, q) == pytest.approx([np.percentile(a[:, i], 100 * q[i]) for i in range(3)], abs=1e-15)
    b = a.copy()
    b[:7, 1] = np.nan
    b[:, 2] = np.inf
    got = column_quantiles(b, q)
    assert got[1] == pytest.approx(np.nanpercentile(b[:, 1], 50.0), abs=1e-15) and math.isnan(got[2])


def test_bca_reduces_to_the_percentile_interval_without_bias_or_skew() -> None:
    rng = np.random.default_rng(1)
    s = rng.normal(size=(2000, 2))
    s = np.concatenate([s, -s])                          # symmetric about 0: z0 = 0
    jack = np.array([[-1.0, 2.0], [1.0, -2.0]])          # symmetric jackknife: a = 0
    lo, hi = bca_interval(s, np.zeros(2), jack)
    plo, phi = percentile_interval(s)
    assert lo == pytest.approx(plo, abs=1e-12) and hi == pytest.approx(phi, abs=1e-12)
    assert acceleration(jack) == pytest.approx([0.0, 0.0])


def test_bca_by_hand() -> None:
    """z0 and a move the quantile levels as Efron's formula says."""
    s = np.arange(1.0, 1001.0)[:, None]                     # replicates 1..1000
    est = np.array([300.5])                                  # 300 below: z0 = Phi^-1(0.3)
    jack = np.array([[0.0], [0.0], [0.0], [3.0]])            # d = 0.75, 0.75, 0.75, -2.25
    d = np.array([0.75, 0.75, 0.75, -2.25])
    a = float((d ** 3).sum() / (6 * (d ** 2).sum() ** 1.5))
    assert float(acceleration(jack)[0]) == pytest.approx(a)
    z0 = float(normal_ppf(np.array(0.3)))
    lo, hi = bca_interval(s, est, jack)
    for got, z in ((lo, -1.959963984540054), (hi, 1.959963984540054)):
        q = normal_cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))
        assert float(got[0]) == pytest.approx(1 + q * 999, abs=1e-9)
    # expanded at 4 clusters: z' = sqrt(4/3) t_{0.975, 3}
    elo, ehi = bca_interval(s, est, jack, expand=True)
    z = math.sqrt(4 / 3) * t_quantile(0.975, 3)
    assert float(ehi[0]) == pytest.approx(1 + normal_cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) * 999, abs=1e-9)
    assert elo[0] < lo[0] and ehi[0] > hi[0]
    # undefined estimate or no finite replicate: no interval
    nlo, nhi = bca_interval(np.full((5, 1), np.nan), np.array([1.0]), jack)
    assert math.isnan(nlo[0]) and math.isnan(nhi[0])


def test_bca_degenerate_bootstrap_is_one_point() -> None:
    lo, hi = bca_interval(np.full((100, 1), 100.0), np.array([100.0]), np.full((10, 1), 100.0), expand=True)
    assert (float(lo[0]), float(hi[0])) == (100.0, 100.0)


def _run(tasks: int, seed: int, repeats: int = 1, drop: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = rng.beta(2.0, 1.5, tasks)
    rows = []
    for i in range(tasks):
        for r in range(repeats):
            for fam, q in (("clean", p[i]), ("tool-missing", p[i] * (1 - drop)), ("user-incorrect", p[i])):
                rows.append({"model": "m", "suite": "s", "task": f"t{i}", "family": fam, "repeat": r,
                             "reward": float(rng.random() < q)})
    return normalise(pd.DataFrame(rows))


def test_drops_report_the_expanded_bca_interval_deterministically() -> None:
    df = _run(12, 3, repeats=2, drop=0.3)
    a, b = drops(df, replicates=800, seed=9), drops(df, replicates=800, seed=9)
    pd.testing.assert_frame_equal(a, b)                                          # same seed, same interval
    old = drops(df, replicates=800, seed=9, method="percentile")
    row = a[a["level_kind"] == "overall"].iloc[0]
    prow = old[old["level_kind"] == "overall"].iloc[0]
    assert row.ci_low <= row.relative_drop <= row.ci_high
    assert (row.relative_drop, row.n_boot_undefined) == (prow.relative_drop, prow.n_boot_undefined)
    # the same replicates; the expanded BCa interval is wider than the percentile one at 12 tasks
    np.testing.assert_array_equal(a.attrs["replicates"][("m", "s", "overall", "all")],
                                  old.attrs["replicates"][("m", "s", "overall", "all")])
    assert row.ci_high - row.ci_low > prow.ci_high - prow.ci_low


def test_baseline_change_interval_is_bca_too() -> None:
    cur, base = _run(20, 4, repeats=2, drop=0.4), _run(20, 5, repeats=2)
    cmp = compare(cur.assign(run_id="b"), base.assign(run_id="a"), replicates=800, seed=2).deltas
    ov = cmp[cmp["level_kind"] == "overall"].iloc[0]
    assert ov.ci_low <= ov.delta <= ov.ci_high and set(cmp["interval_method"]) == {"bca"}
    # the same outcomes on both sides at a level: every replicate of the change is 0, a degenerate bootstrap,
    # so that level's interval is exact (never the one point [0, 0])
    same = compare(cur.assign(run_id="b"), _run(20, 4, repeats=2).assign(run_id="a"), replicates=800, seed=2).deltas
    ui = same[same["level"] == "user-incorrect"].iloc[0]
    assert (ui.delta, ui.interval_method) == (0.0, "exact") and ui.ci_low < 0.0 < ui.ci_high
    again = compare(cur.assign(run_id="b"), base.assign(run_id="a"), replicates=800, seed=2).deltas
    pd.testing.assert_frame_equal(cmp, again)


def test_baseline_change_is_exact_by_design_at_one_repeat_below_50_tasks() -> None:
    """K = 1, 20 tasks: the change's interval joins the two runs' exact intervals (Bonferroni), whatever the seed."""
    from pytest_agentperturb.analysis.exact import change_interval, ratio_interval

    cur, base = _run(20, 4, drop=0.4), _run(20, 4)
    a = compare(cur.assign(run_id="b"), base.assign(run_id="a"), replicates=800, seed=2).deltas
    b = compare(cur.assign(run_id="b"), base.assign(run_id="a"), replicates=800, seed=3).deltas
    assert set(a["interval_method"]) == {"exact"}
    pd.testing.assert_frame_equal(a[["ci_low", "ci_high", "verdict"]], b[["ci_low", "ci_high", "verdict"]])  # no draws
    d_cur, d_base = drops(cur, replicates=200), drops(base, replicates=200)
    oc = d_cur[(d_cur["model"] == "m") & (d_cur["level_kind"] == "overall")].iloc[0]
    ob = d_base[(d_base["model"] == "m") & (d_base["level_kind"] == "overall")].iloc[0]
    ov = a[a["level_kind"] == "overall"].iloc[0]
    lo, hi = change_interval((oc.clean, 20, oc.perturbed, 40), (ob.clean, 20, ob.perturbed, 40))
    assert (ov.ci_low, ov.ci_high) == pytest.approx((lo, hi))
    assert ov.ci_low <= ov.delta <= ov.ci_high
    # wider than the difference of the two 95 % intervals' ends: each run's interval is at 97.5 %
    c95, b95 = ratio_interval(oc.clean, 20, oc.perturbed, 40), ratio_interval(ob.clean, 20, ob.perturbed, 40)
    assert lo < c95[0] - b95[1] and hi > c95[1] - b95[0]


def test_calibration_bench_prints_coverage_and_ends_with_fwer(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import runpy
    from pathlib import Path

    bench = Path(__file__).resolve().parent.parent / "bench" / "calibration.py"
    monkeypatch.setattr("sys.argv", ["calibration.py", "--quick", "--runs", "4", "--replicates", "200",
                                     "--reg-runs", "3", "--reg-replicates", "100"])
    runpy.run_path(str(bench), run_name="__main__")
    lines = capsys.readouterr().out.strip().splitlines()
    assert "cover overall" in lines[1] and "cover families" in lines[1] and "exact cover o/f" in lines[1]
    rows = lines[2:4]
    for row in rows:
        cov = [float(x) for x in row.split()[-9:-3:3]]        # "0.950 +- 0.022  0.917 +- 0.011  ..."
        assert len(cov) == 2 and all(0.0 <= c <= 1.0 for c in cov)
        share, bca, exact = row.split()[-3:]                  # "0.25/0.25  0.948/0.965  1.000/1.000" ('-': none)
        assert all(0.0 <= float(x) <= 1.0 for x in share.split("/"))
        assert all(x == "-" or 0.0 <= float(x) <= 1.0 for x in (*bca.split("/"), *exact.split("/")))
    assert "coverage: bca interval" in lines[4]
    assert lines[5].startswith("regression against a baseline run") and "power +25" in lines[6]
    reg = lines[7].split()                                    # "10  1 typical  2.3 +- 0.9 %  ...  94 pts"
    assert reg[:3] == ["10", "1", "typical"] and reg[-1] == "pts" and len(reg) == 3 + 5 * 4 + 2
    assert lines[-1].startswith("fwer: ") and float(lines[-1].split()[1]) <= 1.0


# -- exact intervals where a binary row is sparse (docs/design.md section 4.1, "Exact intervals in sparse rows") --

def _issue_case() -> pd.DataFrame:
    """Issue 27's sparse example: 10 tasks, clean passes 2 of 10, tool-missing passes 0 of 10, others as clean."""
    from pytest_agentperturb.model.task import FAMILIES

    rows = []
    for i in range(10):
        clean = float(i < 2)
        rows.append({"model": "m", "suite": "s", "task": f"t{i}", "family": "clean", "reward": clean})
        for f in FAMILIES:
            rows.append({"model": "m", "suite": "s", "task": f"t{i}", "family": f,
                         "reward": 0.0 if f == "tool-missing" else clean})
    return normalise(pd.DataFrame(rows))


def test_clopper_pearson_and_the_beta_quantile() -> None:
    from pytest_agentperturb.analysis.exact import (
        beta_cdf,
        clopper_pearson,
        effective_n,
    )

    # scipy.stats.beta.ppf(0.025, 2, 9), beta.ppf(0.975, 3, 8); beta.cdf(0.3, 2.5, 4)
    assert clopper_pearson(2, 10, 0.025) == pytest.approx((0.025210726326833, 0.556095462307641), rel=1e-9)
    assert clopper_pearson(0, 10, 0.025) == (0.0, pytest.approx(1 - 0.025 ** 0.1, rel=1e-9))
    assert clopper_pearson(10, 10, 0.025) == (pytest.approx(0.025 ** 0.1, rel=1e-9), 1.0)
    assert beta_cdf(0.3, 2.5, 4.0) == pytest.approx(0.352197585906766, rel=1e-9)
    assert effective_n([12.0] * 10) == pytest.approx(10.0) and effective_n([1.0, 3.0]) == pytest.approx(1.6)


def test_the_issue_case_gets_an_exact_interval_that_is_not_degenerate() -> None:
    df = _issue_case()
    d = drops(df, replicates=800, seed=1)
    row = d[(d["model"] == "m") & (d["level"] == "tool-missing")].iloc[0]
    assert row.relative_drop == 100.0 and row.boot_degenerate                # every bootstrap replicate says 100
    assert row.interval_method == "exact"
    assert row.ci_low < 0.0 and row.ci_high == 100.0                          # D of 50, or none, is plausible
    old = drops(df, replicates=800, seed=1, method="percentile")              # what the bootstrap alone reports
    prow = old[(old["model"] == "m") & (old["level"] == "tool-missing")].iloc[0]
    assert (prow.ci_low, prow.ci_high, prow.interval_method) == (100.0, 100.0, "percentile")
    # the same figures from the clean and perturbed counts (2 of 10, 0 of 10; 2 of 10, 22 of 120 overall)
    from pytest_agentperturb.analysis.exact import ratio_interval

    assert (row.ci_low, row.ci_high) == pytest.approx(ratio_interval(0.2, 10, 0.0, 10))
    ov = d[(d["model"] == "m") & (d["level_kind"] == "overall")].iloc[0]
    assert ov.interval_method == "exact" and (ov.ci_low, ov.ci_high) == pytest.approx(
        ratio_interval(0.2, 10, 22 / 120, 120))
    pool = d[(d["model"] == "all models") & (d["level"] == "tool-missing")].iloc[0]
    assert pool.interval_method == "exact" and (pool.ci_low, pool.ci_high) == (row.ci_low, row.ci_high)


def test_exact_intervals_are_deterministic_and_do_not_depend_on_the_bootstrap_seed() -> None:
    df = _issue_case()
    a, b = drops(df, replicates=400, seed=3), drops(df, replicates=400, seed=3)
    pd.testing.assert_frame_equal(a, b)
    c = drops(df, replicates=400, seed=4)
    ex = a["interval_method"] == "exact"
    assert ex.any()
    np.testing.assert_array_equal(a.loc[ex, ["ci_low", "ci_high"]].to_numpy(), c.loc[ex, ["ci_low", "ci_high"]].to_numpy())


def test_a_dense_binary_row_keeps_the_bca_interval() -> None:
    for tasks, repeats in ((50, 1), (40, 2), (10, 3)):
        df = _run(tasks, 2, repeats=repeats, drop=0.3)
        d = drops(df, replicates=800, seed=9)
        assert set(d["interval_method"]) == {"bca"}, (tasks, repeats)
        assert (d["n_boot_undefined"] == 0).all() and not d["boot_degenerate"].any()


@pytest.mark.parametrize("tasks", [10, 19])
def test_one_repeat_on_fewer_than_20_tasks_is_exact_by_design(tasks: int) -> None:
    """K = 1 below 20 tasks: exact whatever the outcomes (a dense row too); the point estimates are the bootstrap's."""
    from pytest_agentperturb.analysis.exact import DESIGN_TASKS, ratio_interval

    assert DESIGN_TASKS == 20
    df = _run(tasks, 2, drop=0.3)
    d = drops(df, replicates=800, seed=9)
    old = drops(df, replicates=800, seed=9, method="percentile")
    assert set(d["interval_method"]) == {"exact"}
    pd.testing.assert_series_equal(d["relative_drop"], old["relative_drop"])
    ov = d[(d["model"] == "m") & (d["level_kind"] == "overall")].iloc[0]
    assert (ov.ci_low, ov.ci_high) == pytest.approx(ratio_interval(ov.clean, tasks, ov.perturbed, 2 * tasks))
    assert ov.ci_low <= ov.relative_drop <= ov.ci_high and ov.ci_low < ov.ci_high
    # continuous rewards keep the bootstrap interval at K = 1 (the exact interval is for 0/1 outcomes)
    cont = df.assign(reward=df["reward"] * 0.9 + 0.05)
    assert set(drops(normalise(cont), replicates=300, seed=9)["interval_method"]) == {"bca"}


def test_one_repeat_on_25_tasks_keeps_bca_where_the_row_is_dense() -> None:
    """From 20 tasks on, a dense K = 1 row keeps the (narrower) BCa interval: the main job's size."""
    d = drops(_run(25, 2, drop=0.3), replicates=800, seed=9)
    ov = d[(d["model"] == "m") & (d["level_kind"] == "overall")].iloc[0]
    assert ov.interval_method == "bca"


def test_a_family_of_one_binary_pair_per_task_takes_the_plain_bca_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """K = 1 from 20 tasks on: a family row (one 0/1 pair per task) gets the plain BCa quantiles (expanded, such rows
    covered 0.975-0.978 at low scores), the overall row (two pairs per task here) and every row at K >= 2 the
    expanded ones; the point estimates are the same either way."""
    def level(d: pd.DataFrame, kind: str) -> pd.DataFrame:
        return d[(d["model"] == "m") & (d["level_kind"] == kind)].set_index("level")

    df = _run(30, 2, drop=0.3)
    d, wide = drops(df, replicates=800, seed=9), _expanded(df, monkeypatch)
    fam, fam_wide = level(d, "family"), level(wide, "family")
    dense = (fam["interval_method"] == "bca") & (fam_wide["interval_method"] == "bca")
    assert dense.any()
    assert ((fam.ci_high - fam.ci_low)[dense] < (fam_wide.ci_high - fam_wide.ci_low)[dense]).all()
    pd.testing.assert_frame_equal(level(d, "overall"), level(wide, "overall"))
    pd.testing.assert_series_equal(d["relative_drop"], wide["relative_drop"])
    reps = _run(30, 2, repeats=2, drop=0.3)   # K = 2: a task holds two pairs at every level, all expanded
    pd.testing.assert_frame_equal(drops(reps, replicates=800, seed=9), _expanded(reps, monkeypatch))


def _expanded(df: pd.DataFrame, monkeypatch: pytest.MonkeyPatch) -> pd.DataFrame:
    """``drops`` of ``df`` with every BCa interval expanded (the rule before K = 1 family rows took the plain one)."""
    from pytest_agentperturb.analysis import degradation

    real = degradation.bca_interval
    with monkeypatch.context() as m:
        m.setattr(degradation, "bca_interval", lambda *a, expand=False, **k: real(*a, expand=True, **k))
        return drops(df, replicates=800, seed=9)


@pytest.mark.parametrize("seed", range(12))
def test_an_exact_interval_contains_the_point_estimate(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tasks = int(rng.integers(4, 16))
    p = rng.beta(0.5, 2.0, tasks)
    rows = [{"model": m, "suite": "s", "task": f"t{i}", "family": fam, "repeat": r,
             "reward": float(rng.random() < p[i] * (1 - drop))}
            for m in ("a", "b") for i in range(tasks) for r in range(int(rng.integers(1, 3)) if m == "a" else 1)
            for fam, drop in (("clean", 0.0), ("tool-missing", 0.5), ("user-incorrect", 0.0), ("env-noisy", 0.2))]
    d = drops(normalise(pd.DataFrame(rows)), replicates=300, seed=seed)
    ex = d[d["interval_method"] == "exact"]
    for r in ex.itertuples():
        assert r.ci_low <= r.relative_drop <= r.ci_high and r.ci_low < r.ci_high and r.ci_high <= 100.0
    assert set(d["interval_method"]) <= {"bca", "exact"}


def test_ratio_interval_contains_the_estimate_on_a_grid() -> None:
    from pytest_agentperturb.analysis.exact import ratio_interval

    for n in (3, 10, 25):
        for kc in range(1, n + 1):
            for kp in range(n + 1):
                lo, hi = ratio_interval(kc / n, n, kp / n, n)
                d = 100.0 * (1 - kp / kc)
                assert lo < d + 1e-9 and d - 1e-9 < hi and lo < hi
    assert all(math.isnan(v) for v in ratio_interval(0.0, 10, 0.1, 10))


def test_the_exact_coverage_is_at_least_95_percent() -> None:
    """Monte-Carlo over sparse worlds with heterogeneous tasks: the exact interval covers the true D."""
    from pytest_agentperturb.analysis.exact import ratio_interval

    rng = np.random.default_rng(27)
    hits = tot = 0
    for _ in range(3000):
        p = rng.beta(0.5, 2.0, 10)
        x = rng.random(10) < p
        y = rng.random(10) < 0.6 * p
        if x.any():
            lo, hi = ratio_interval(float(x.mean()), 10, float(y.mean()), 10)
            tot, hits = tot + 1, hits + (lo <= 40.0 <= hi)
    assert hits / tot >= 0.95


def test_agentperturb_analyze_says_exact_in_the_terminal_json_and_report(tmp_path: Path) -> None:
    import json

    from pytest_agentperturb.cli import main

    csv = tmp_path / "e.csv"
    _issue_case()[["model", "suite", "task", "family", "reward"]].to_csv(csv, index=False)
    out, html = tmp_path / "s.json", tmp_path / "r.html"
    assert main(["analyze", "--results", str(csv), "--json", str(out), "--out", str(html), "--replicates", "300"]) == 0
    from pytest_agentperturb.analysis import analyze, summary_lines

    (line,) = summary_lines(analyze(_issue_case(), replicates=300, permutations=100))   # the terminal's line
    assert "drop 8.3% [-" in line and "] exact  " in line                    # 1 - (22/120) / 0.2; not one point
    summary = json.loads(out.read_text())
    assert summary["degradation"][0]["interval_method"] == "exact"
    fam = [r for r in summary["drops"] if r["level"] == "tool-missing" and r["model"] == "m"]
    assert fam[0]["interval_method"] == "exact" and fam[0]["ci_low"] < fam[0]["ci_high"] == 100.0
    page = html.read_text()
    assert "<td class=ci><span class=iv>[-1931.9 %, 100.0 %]</span> exact</td>" in page   # the family row
    assert "(exact)" in page                                                  # the dot plot's labels


def test_continuous_rewards_keep_the_bootstrap_interval_even_when_sparse() -> None:
    df = _issue_case()
    df["reward"] = df["reward"] * 0.9                          # rewards 0 and 0.9: not a binary suite
    d = drops(df, replicates=300, seed=1)
    row = d[(d["model"] == "m") & (d["level"] == "tool-missing")].iloc[0]
    assert row.interval_method == "bca" and row.boot_degenerate and (row.ci_low, row.ci_high) == (100.0, 100.0)
