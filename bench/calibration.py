"""Calibration of the gate's ``significant`` rule in the null world (issue 27, docs/design.md section 5).

Null world: one model, one suite; each task's clean success probability
p_i ~ Beta(2, 1.5) (a low-score suite: Beta(0.5, 2), mean 0.2); every
episode, clean or of any of the 12 families, and every repeat, succeeds
with probability p_i independently, so perturbed episodes are distributed
as clean and no threshold at limit 0 should breach.  Each simulated run
goes through the real code (``analysis.normalise``, ``analysis.drops``,
``gate.evaluate_tables`` with ``gate_on = significant``), for three gates
evaluated together (each decided on its own):
``--max-drop 0`` (overall, one hypothesis at one-sided 2.5 %) and
``--max-target-drop 0`` (Holm over the 4 targets) and ``--max-family-drop
0`` (the 12-family gate, Holm's step-down over the 12 families, family-wise
2.5 %).  Prints, per configuration (tasks,
repeats, suite), the false-alarm rate with its Monte-Carlo standard error
sqrt(r (1 - r) / N), the share of runs where C = 0 overall (not evaluable:
counted apart, not as a false alarm), the mean share of bootstrap replicates
with C* = 0 (counted by ``drops``), and the mean smallest detectable
overall drop (capped at 100 %: a run that can detect none counts as 100),
and the **coverage** of the reported 95 % intervals of D (docs/design.md
section 4.1, "Intervals"): the share of runs whose overall interval holds
the true D, and the share of the 12 family intervals that hold it (the
true D is 0 in the null world and 100 x ``--drop`` in the drop world, for
every task and so for every level); runs whose D is undefined (C = 0) have
no interval and are left out of the coverage; a degenerate interval counts
like any other; ``exact o/f`` is the share of overall (family) intervals that are exact
(``interval_method``, docs/design.md section 4.1, "Exact intervals in sparse rows"), and
``bca cover o/f`` / ``exact cover o/f`` the coverage of each kind ("-": none).  ``--configs
10:1:low-score,50:1:low-score`` measures chosen configurations.  The Monte-Carlo standard error of the family coverage is
that of the per-run shares (the 12 families of one run are not
independent).  The last line is ``fwer: <max over configurations>``
(largest false-alarm rate of any gate, the regression's included).  The bootstrap runs with the
reported number of replicates (2000), so the coverage is that of the
intervals a run reports; ``--interval percentile`` measures the old
percentile interval instead.

``--drop 0.25`` simulates a true 25 % relative drop in every family instead
and prints the gates' power (their breach rates) in the same table.

The **regression table** (after it; ``--tables regression`` prints it
alone) judges ``--max-regression 0`` under ``significant`` (the exact paired
swap test, docs/design.md section 5, "Against a baseline run"): per run it
draws the tasks' p_i once and, from that one world, a baseline run and a
current run per scenario, through ``baseline.compare`` and
``gate.evaluate_regression``.  ``false alarm``: both runs from the same
world (nominal 2.5 %).  ``cur clean x0.7`` / ``base clean x0.7``: the
current (baseline) run's clean probabilities are 0.7 p_i, both runs lose the
same 25 % in every family, so D and the change (0) are the same but the runs
are not interchangeable within a task (the swap test's hypothesis does not
hold; these are nulls of "no regression" all the same and count in
``fwer``).  ``power +10`` / ``+25``: the current run's families lose 10 %
(25 %) of p_i, a true regression of 10 (25) points.  ``detectable``: the
mean stated smallest regression detected with 80 % power (``min_detectable``
of the change row, capped at 100).  ``--tables swap`` draws the swap test
alone on the overall level (no episode tables, fast; also clean x0.5), the
README's regression table.  ``--reg-runs`` (default 200),
``--reg-configs 50:1:typical,...`` and ``--reg-replicates`` (the bootstrap
of the change; at limit 0 it only flags a degenerate interval) set it.

Run: ``PYTHONPATH=. python bench/calibration.py [--runs N] [--seed S] [--quick] [--full] [--drop D]
[--tables all|drops|regression] [--interval bca|percentile]`` (default 300 runs per configuration, about 3
minutes on one free core, and the regression table at 10 and 25 tasks, K = 1, about 4 minutes more; ``--full``
adds K = 5 and more sizes, and the regression at 50 tasks, K = 3 and a low-score suite, several minutes more).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
import pandas as pd

from pytest_agentperturb import gate
from pytest_agentperturb.analysis import drops, normalise
from pytest_agentperturb.analysis.baseline import compare
from pytest_agentperturb.analysis.stats import INTERVAL_METHODS, N_BOOTSTRAP
from pytest_agentperturb.model.task import CLEAN, FAMILIES

CONFIGS = [(10, 1, "typical"), (25, 1, "typical"), (50, 1, "typical"), (10, 3, "typical"), (25, 3, "typical"),
           (25, 1, "low-score"), (50, 3, "low-score")]
#: added by --full (slower: several minutes)
FULL = [(50, 3, "typical"), (25, 5, "typical"), (50, 5, "typical"), (10, 1, "low-score"), (50, 1, "low-score")]
PRIOR = {"typical": (2.0, 1.5), "low-score": (0.5, 2.0)}
FAM = (CLEAN, *FAMILIES)
#: the regression table's configurations (tasks, repeats, suite); --full adds REG_FULL
REG_CONFIGS = [(10, 1, "typical"), (25, 1, "typical")]
REG_FULL = [(50, 1, "typical"), (25, 3, "typical"), (25, 1, "low-score")]
#: the shifted null: the two runs' clean success probabilities differ by this factor, their relative drop does not
SHIFT, SHIFT_DROP = 0.7, 0.25


def null_run(rng: np.random.Generator, tasks: int, repeats: int, suite: str, drop: float = 0.0,
             p: np.ndarray | None = None) -> pd.DataFrame:
    """One simulated run of the null world (``drop`` > 0: every family's success probability p_i (1 - drop)).

    ``p``: the tasks' clean success probabilities (drawn from the suite's prior when not given).
    """
    if p is None:
        a, b = PRIOR[suite]
        p = rng.beta(a, b, tasks)
    prob = np.repeat(p[:, None], len(FAM), axis=1)
    prob[:, 1:] *= 1.0 - drop
    ok = rng.random((tasks, len(FAM), repeats)) < prob[:, :, None]
    t, f, r = np.meshgrid(np.arange(tasks), np.arange(len(FAM)), np.arange(repeats), indexing="ij")
    df = pd.DataFrame({"model": "m", "suite": "s", "task": [f"t{i}" for i in t.ravel()],
                       "family": [FAM[j] for j in f.ravel()], "repeat": r.ravel(),
                       "reward": ok.ravel().astype(float)})
    return normalise(df)


def regression_world(rng: np.random.Generator, tasks: int, repeats: int, suite: str, replicates: int
                     ) -> dict[str, tuple[bool, float]]:
    """One baseline run and one current run per scenario, judged by ``--max-regression 0`` under significant.

    Every scenario shares the tasks' clean probabilities p_i (one suite, one
    world).  ``null``: both runs from the same world (change 0).  ``shift
    down`` / ``shift up``: the current run's clean probabilities are SHIFT x
    p_i (resp. the baseline's), both runs lose the same relative SHIFT_DROP
    in every family, so D is the same in both (change 0) but the runs are not
    interchangeable within a task.  ``+10`` / ``+25``: the current run's
    families lose 10 % (25 %) of p_i, the baseline's none: a true regression
    of 10 (25) points.  Returns per scenario (breached, min_detectable).
    """
    a, b = PRIOR[suite]
    p = rng.beta(a, b, tasks)
    thr = gate.parse({"max_regression": "0", "gate_on": "significant"})
    plan = {"null": ((p, 0.0), (p, 0.0)), "shift down": ((p, SHIFT_DROP), (SHIFT * p, SHIFT_DROP)),
            "shift up": ((SHIFT * p, SHIFT_DROP), (p, SHIFT_DROP)), "+10": ((p, 0.0), (p, 0.10)),
            "+25": ((p, 0.0), (p, 0.25))}
    out: dict[str, tuple[bool, float]] = {}
    for name, ((pb, db), (pc, dc)) in plan.items():
        base = null_run(rng, tasks, repeats, suite, db, pb).assign(run_id="baseline")
        cur = null_run(rng, tasks, repeats, suite, dc, pc).assign(run_id="current")
        cmp = compare(cur, base, replicates=replicates, seed=int(rng.integers(1 << 31)))
        v = gate.Verdict(thr)
        gate.evaluate_regression(thr, cmp, cur, v)
        row = cmp.deltas[cmp.deltas["level_kind"] == "overall"]
        mdc = float(row["min_detectable"].iloc[0]) if len(row) else math.inf
        out[name] = (any(not br.reason for br in v.breaches), min(mdc, 100.0))
    return out


def regression_table(rng: np.random.Generator, configs: list[tuple[int, int, str]], runs: int,
                     replicates: int) -> float:
    """Print the regression table; return its largest false-alarm rate (the null and the shifted nulls)."""
    names = ["null", "shift down", "shift up", "+10", "+25"]
    print(f"regression against a baseline run (--max-regression 0, significant: exact paired swap test), {runs} runs "
          f"per configuration; false alarm (null, shifted clean x{SHIFT:g} with the same {100 * SHIFT_DROP:g} % drop "
          "in both runs) and power (+10, +25 points) +- Monte-Carlo standard error")
    print(f"{'tasks':>5} {'K':>2} {'suite':<9}  {'false alarm':>15}  {'cur clean x0.7':>15}  {'base clean x0.7':>15}  "
          f"{'power +10':>15}  {'power +25':>15}  {'detectable':>10}")
    worst = 0.0
    for tasks, k, suite in configs:
        hits = {n: 0 for n in names}
        mdc: list[float] = []
        for _ in range(runs):
            res = regression_world(rng, tasks, k, suite, replicates)
            for n in names:
                hits[n] += res[n][0]
            mdc.append(res["null"][1])
        rate = {n: hits[n] / runs for n in names}
        worst = max(worst, rate["null"], rate["shift down"], rate["shift up"])
        cells = "  ".join(f"{_pm(rate[n], runs):>15}" for n in names)
        print(f"{tasks:>5} {k:>2} {suite:<9}  {cells}  {float(np.mean(mdc)):6.0f} pts", flush=True)
    print(f"nominal: 2.5 % (one-sided); Monte-Carlo error at 2.5 % and {runs} runs: "
          f"+- {100 * math.sqrt(0.025 * 0.975 / runs):.1f} %; detectable: mean smallest regression (points) detected "
          "with 80 % power (capped at 100)")
    return worst


def swap_table(rng: np.random.Generator, sizes: list[int], runs: int) -> float:
    """Direct draws of ``stats.swap_test`` on the overall level (typical suite, K = 1): the README's table.

    Fast (no episode tables): per task 12 x the clean outcome and the sum of
    the 12 families' outcomes, as ``baseline.compare`` passes them.  Columns:
    the same world, one run's clean probabilities x0.7 or x0.5 with the same
    25 % drop in both (change 0), and a true +10 / +25 points.  Returns the
    largest false-alarm rate.
    """
    from pytest_agentperturb.analysis.stats import swap_test

    cols = [("false alarm", 1.0, 1.0, 0.0, 0.0), ("base clean x0.7", 1.0, SHIFT, SHIFT_DROP, SHIFT_DROP),
            ("cur clean x0.7", SHIFT, 1.0, SHIFT_DROP, SHIFT_DROP),
            ("base clean x0.5", 1.0, 0.5, SHIFT_DROP, SHIFT_DROP),
            ("cur clean x0.5", 0.5, 1.0, SHIFT_DROP, SHIFT_DROP), ("power +10", 1.0, 1.0, 0.10, 0.0),
            ("power +25", 1.0, 1.0, 0.25, 0.0)]
    print(f"swap test alone (overall level, typical suite, K = 1, {runs} runs per size; 4000 random swaps above 12 "
          "tasks): breach rate at one-sided 2.5 % +- Monte-Carlo standard error")
    print(f"{'tasks':>5}  " + "  ".join(f"{c[0]:>15}" for c in cols))
    worst = 0.0
    for n in sizes:
        def run(q: np.ndarray, drop: float) -> np.ndarray:
            clean = (rng.random(n) < q).astype(float) * len(FAMILIES)
            pert = (rng.random((n, len(FAMILIES))) < (q * (1 - drop))[:, None]).sum(1).astype(float)
            return np.stack([clean, pert])[:, :, None]

        cells = []
        for i, (_, sc, sb, dc, db) in enumerate(cols):
            hits = tot = 0
            for _ in range(runs):
                p = rng.beta(*PRIOR["typical"], n)
                pv = swap_test(run(sc * p, dc), run(sb * p, db), rng, 4000)[0][0]
                if np.isfinite(pv):
                    tot, hits = tot + 1, hits + bool(pv <= 0.025)
            r = hits / max(tot, 1)
            if i < 5:
                worst = max(worst, r)
            cells.append(f"{_pm(r, max(tot, 1)):>15}")
        print(f"{n:>5}  " + "  ".join(cells), flush=True)
    return worst


def _pm(r: float, n: int) -> str:
    return f"{100 * r:5.1f} +- {100 * math.sqrt(r * (1 - r) / n):3.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--replicates", type=int, default=N_BOOTSTRAP)
    ap.add_argument("--interval", choices=INTERVAL_METHODS, default="bca",
                    help="the interval method whose coverage is measured (bca: the reported one)")
    ap.add_argument("--quick", action="store_true", help="the first two configurations only")
    ap.add_argument("--configs", default="",
                    help="the drop table's configurations instead of the default, e.g. 10:1:low-score,50:1:low-score")
    ap.add_argument("--full", action="store_true", help="also K = 5, 50 tasks at K = 3 and more low-score sizes")
    ap.add_argument("--drop", type=float, default=0.0,
                    help="a true relative drop (e.g. 0.25) in every family: the rates are then the power")
    ap.add_argument("--tables", choices=["all", "drops", "regression", "swap"], default="all",
                    help="which tables to print (the drop thresholds', the regression's, or both)")
    ap.add_argument("--reg-runs", type=int, default=200, help="runs per configuration of the regression table")
    ap.add_argument("--reg-replicates", type=int, default=N_BOOTSTRAP,
                    help="bootstrap replicates of the regression's comparison (the swap test decides at limit 0)")
    ap.add_argument("--reg-configs", default="",
                    help="the regression table's configurations instead of the default, e.g. 50:1:typical,25:3:typical")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)     # inf - inf in replicates with a clean sum 0 (counted apart)
    rng = np.random.default_rng(args.seed)
    # the three gates in one evaluation (each threshold is decided on its own; Holm runs per threshold flag)
    gates = gate.parse({"max_drop": "0", "max_target_drop": ["0"], "max_family_drop": ["0"], "gate_on": "significant"})
    flag = gates.names
    worst = 0.0
    start = time.perf_counter()
    what = "false alarm" if args.drop == 0 else f"power (true drop {100 * args.drop:g} % in every family)"
    configs = CONFIGS[:2] if args.quick else CONFIGS + (FULL if args.full else [])
    if args.configs:
        configs = [(int(t), int(k), s) for t, k, s in (c.split(":") for c in args.configs.split(","))]
    if args.tables in ("regression", "swap"):
        configs = []
    else:
        print(f"{'null world' if args.drop == 0 else 'drop world'}, {args.runs} runs per configuration; {what} "
              "+- Monte-Carlo standard error")
        print(f"{'tasks':>5} {'K':>2} {'suite':<9}  {'overall':>15}  {'4 targets':>15}  {'12 families':>15}  "
              f"{'C = 0':>6}  {'C* = 0':>6}  {'detectable':>10}  {'cover overall':>14}  {'cover families':>14}  "
              f"{'exact o/f':>9}  {'bca cover o/f':>13}  {'exact cover o/f':>15}")
    for tasks, k, suite in configs:
        fa_o = fa_t = fa_f = undefined = 0
        c0_share, mdd, cov_o, cov_f = [], [], [], []
        by_method: dict[tuple[str, str], list[bool]] = {}    # (overall | family, interval_method) -> covered?
        true_d = 100.0 * args.drop
        for _ in range(args.runs):
            df = null_run(rng, tasks, k, suite, args.drop)
            d = drops(df, replicates=args.replicates, seed=int(rng.integers(1 << 31)), method=args.interval)
            br = gate.evaluate_tables(gates, d, df).breaches
            v_o = [b for b in br if b.flag == flag["max_drop"]]
            fa_t += any(not b.reason for b in br if b.flag == flag["max_target_drop"])
            if any(b.reason for b in v_o):
                undefined += 1
            fa_o += any(not b.reason for b in v_o)
            fa_f += any(not b.reason for b in br if b.flag == flag["max_family_drop"])
            row = d[(d["model"] == "m") & (d["level_kind"] == "overall")]
            if len(row):
                c0_share.append(float(row["n_boot_undefined"].iloc[0]) / args.replicates)
                mdd.append(min(float(row["min_detectable"].iloc[0]), 100.0))
                lo, hi = float(row["ci_low"].iloc[0]), float(row["ci_high"].iloc[0])
                if math.isfinite(lo) and math.isfinite(hi):
                    cov_o.append(lo - 1e-9 <= true_d <= hi + 1e-9)
                    by_method.setdefault(("o", str(row["interval_method"].iloc[0])), []).append(cov_o[-1])
            fam = d[(d["model"] == "m") & (d["level_kind"] == "family")]
            fin = np.isfinite(fam["ci_low"].to_numpy(float)) & np.isfinite(fam["ci_high"].to_numpy(float))
            if fin.any():
                lo_f, hi_f = fam["ci_low"].to_numpy(float)[fin], fam["ci_high"].to_numpy(float)[fin]
                hit = (lo_f - 1e-9 <= true_d) & (true_d <= hi_f + 1e-9)
                cov_f.append(float(hit.mean()))
                for meth, h in zip(fam["interval_method"].to_numpy()[fin], hit):
                    by_method.setdefault(("f", str(meth)), []).append(bool(h))
        n = args.runs
        ro, rt, rf = fa_o / n, fa_t / n, fa_f / n
        worst = max(worst, ro, rt, rf)

        def pm(r: float) -> str:
            return _pm(r, n)

        def cover(shares: list[float]) -> str:
            if not shares:
                return "-"
            a = np.asarray(shares, dtype=float)
            se = float(a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else float("nan")
            return f"{a.mean():.3f} +- {se:.3f}"

        def share(level: str, by: dict[tuple[str, str], list[bool]] = by_method) -> str:
            tot = sum(len(v) for (lv, _), v in by.items() if lv == level)
            return f"{len(by.get((level, 'exact'), [])) / max(tot, 1):4.2f}"

        def split(meth: str, by: dict[tuple[str, str], list[bool]] = by_method) -> str:
            return "/".join(f"{np.mean(by[(lv, meth)]):.3f}" if by.get((lv, meth)) else "-" for lv in ("o", "f"))

        print(f"{tasks:>5} {k:>2} {suite:<9}  {pm(ro):>15}  {pm(rt):>15}  {pm(rf):>15}  {100 * undefined / n:5.1f}%  "
              f"{100 * float(np.mean(c0_share)):5.1f}%  {float(np.nanmean(mdd)):8.0f} %  "
              f"{cover([float(x) for x in cov_o]):>14}  {cover(cov_f):>14}  {share('o')}/{share('f')}  "
              f"{split(args.interval):>13}  {split('exact'):>15}", flush=True)
    if configs:
        print(f"nominal: 2.5 % (one-sided); Monte-Carlo error at 2.5 % and {args.runs} runs: "
              f"+- {100 * math.sqrt(0.025 * 0.975 / args.runs):.1f} %; coverage: {args.interval} interval, "
              f"target 0.93-0.97 (+- {math.sqrt(0.95 * 0.05 / args.runs):.3f} at 0.95); "
              f"{time.perf_counter() - start:.0f} s")
    if args.tables == "swap":
        worst = swap_table(rng, [10, 25] if args.quick else [10, 25, 50], args.reg_runs)
    elif args.tables != "drops" and args.drop == 0:
        reg = REG_CONFIGS[:1] if args.quick else REG_CONFIGS + (REG_FULL if args.full else [])
        if args.reg_configs:
            reg = [(int(t), int(k), s) for t, k, s in (c.split(":") for c in args.reg_configs.split(","))]
        worst = max(worst, regression_table(rng, reg, args.reg_runs, args.reg_replicates))
    print(f"fwer: {worst:.4f}" if args.drop == 0 else f"power: max {worst:.4f} (not a false-alarm rate)")


if __name__ == "__main__":
    main()
