"""The reported 95 % intervals: expanded BCa over task clusters (docs/design.md section 4.1, "Intervals")."""

from __future__ import annotations

import math

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
    cur, base = _run(20, 4, drop=0.4), _run(20, 4)
    cmp = compare(cur.assign(run_id="b"), base.assign(run_id="a"), replicates=800, seed=2).deltas
    ov = cmp[cmp["level_kind"] == "overall"].iloc[0]
    assert ov.ci_low <= ov.delta <= ov.ci_high
    again = compare(cur.assign(run_id="b"), base.assign(run_id="a"), replicates=800, seed=2).deltas
    pd.testing.assert_frame_equal(cmp, again)


def test_calibration_bench_prints_coverage_and_ends_with_fwer(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import runpy
    from pathlib import Path

    bench = Path(__file__).resolve().parent.parent / "bench" / "calibration.py"
    monkeypatch.setattr("sys.argv", ["calibration.py", "--quick", "--runs", "4", "--replicates", "200",
                                     "--reg-runs", "3", "--reg-replicates", "100"])
    runpy.run_path(str(bench), run_name="__main__")
    lines = capsys.readouterr().out.strip().splitlines()
    assert "cover overall" in lines[1] and "cover families" in lines[1]
    rows = lines[2:4]
    for row in rows:
        cov = [float(x) for x in row.split()[-6::3]]          # "0.950 +- 0.022  0.917 +- 0.011"
        assert len(cov) == 2 and all(0.0 <= c <= 1.0 for c in cov)
    assert "coverage: bca interval" in lines[4]
    assert lines[5].startswith("regression against a baseline run") and "power +25" in lines[6]
    reg = lines[7].split()                                    # "10  1 typical  2.3 +- 0.9 %  ...  94 pts"
    assert reg[:3] == ["10", "1", "typical"] and reg[-1] == "pts" and len(reg) == 3 + 5 * 4 + 2
    assert lines[-1].startswith("fwer: ") and float(lines[-1].split()[1]) <= 1.0
