"""Calibration of the gate's ``significant`` rule in the null world (issue 27, docs/design.md section 5).

Null world: one model, one suite; each task's clean success probability
p_i ~ Beta(2, 1.5) (a low-score suite: Beta(0.5, 2), mean 0.2); every
episode, clean or of any of the 12 families, and every repeat, succeeds
with probability p_i independently, so perturbed episodes are distributed
as clean and no threshold at limit 0 should breach.  Each simulated run
goes through the real code (``analysis.normalise``, ``analysis.drops``,
``gate.evaluate_tables`` with ``gate_on = significant``), for two gates:
``--max-drop 0`` (overall, one hypothesis at one-sided 2.5 %) and
``--max-target-drop 0`` (Holm over the 4 targets) and ``--max-family-drop
0`` (the 12-family gate, Holm's step-down over the 12 families, family-wise
2.5 %).  Prints, per configuration (tasks,
repeats, suite), the false-alarm rate with its Monte-Carlo standard error
sqrt(r (1 - r) / N), the share of runs where C = 0 overall (not evaluable:
counted apart, not as a false alarm), the mean share of bootstrap replicates
with C* = 0 (counted by ``drops``), and the mean smallest detectable
overall drop (capped at 100 %: a run that can detect none counts as 100); the last line is ``fwer: <max over configurations>``
(largest false-alarm rate of any gate).  Limit 0 is decided by the exact
paired test alone, so the bootstrap runs with few replicates here.

``--drop 0.25`` simulates a true 25 % relative drop in every family instead
and prints the gates' power (their breach rates) in the same table.

Run: ``PYTHONPATH=. python bench/calibration.py [--runs N] [--seed S] [--quick] [--full] [--drop D]``
(default 300 runs per configuration, about 2 minutes on one core; ``--full``
adds K = 5 and more sizes, several minutes).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd

from pytest_agentperturb import gate
from pytest_agentperturb.analysis import drops, normalise
from pytest_agentperturb.model.task import CLEAN, FAMILIES

CONFIGS = [(10, 1, "typical"), (25, 1, "typical"), (50, 1, "typical"), (10, 3, "typical"), (25, 3, "typical"),
           (25, 1, "low-score"), (50, 3, "low-score")]
#: added by --full (slower: several minutes)
FULL = [(50, 3, "typical"), (25, 5, "typical"), (50, 5, "typical"), (10, 1, "low-score"), (50, 1, "low-score")]
PRIOR = {"typical": (2.0, 1.5), "low-score": (0.5, 2.0)}
FAM = (CLEAN, *FAMILIES)


def null_run(rng: np.random.Generator, tasks: int, repeats: int, suite: str, drop: float = 0.0) -> pd.DataFrame:
    """One simulated run of the null world (``drop`` > 0: every family's success probability p_i (1 - drop))."""
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--replicates", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="the first two configurations only")
    ap.add_argument("--full", action="store_true", help="also K = 5, 50 tasks at K = 3 and more low-score sizes")
    ap.add_argument("--drop", type=float, default=0.0,
                    help="a true relative drop (e.g. 0.25) in every family: the rates are then the power")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    overall = gate.parse({"max_drop": "0", "gate_on": "significant"})
    family = gate.parse({"max_family_drop": ["0"], "gate_on": "significant"})
    target = gate.parse({"max_target_drop": ["0"], "gate_on": "significant"})
    worst = 0.0
    start = time.perf_counter()
    what = "false alarm" if args.drop == 0 else f"power (true drop {100 * args.drop:g} % in every family)"
    print(f"{'null world' if args.drop == 0 else 'drop world'}, {args.runs} runs per configuration; {what} "
          "+- Monte-Carlo standard error")
    print(f"{'tasks':>5} {'K':>2} {'suite':<9}  {'overall':>15}  {'4 targets':>15}  {'12 families':>15}  "
          f"{'C = 0':>6}  {'C* = 0':>6}  {'detectable':>10}")
    for tasks, k, suite in CONFIGS[:2] if args.quick else CONFIGS + (FULL if args.full else []):
        fa_o = fa_t = fa_f = undefined = 0
        c0_share, mdd = [], []
        for _ in range(args.runs):
            df = null_run(rng, tasks, k, suite, args.drop)
            d = drops(df, replicates=args.replicates, seed=int(rng.integers(1 << 31)))
            v_o = gate.evaluate_tables(overall, d, df)
            v_f = gate.evaluate_tables(family, d, df)
            v_t = gate.evaluate_tables(target, d, df)
            fa_t += any(not b.reason for b in v_t.breaches)
            if any(b.reason for b in v_o.breaches):
                undefined += 1
            fa_o += any(not b.reason for b in v_o.breaches)
            fa_f += any(not b.reason for b in v_f.breaches)
            row = d[(d["model"] == "m") & (d["level_kind"] == "overall")]
            if len(row):
                c0_share.append(float(row["n_boot_undefined"].iloc[0]) / args.replicates)
                mdd.append(min(float(row["min_detectable"].iloc[0]), 100.0))
        n = args.runs
        ro, rt, rf = fa_o / n, fa_t / n, fa_f / n
        worst = max(worst, ro, rt, rf)

        def pm(r: float) -> str:
            return f"{100 * r:5.1f} +- {100 * math.sqrt(r * (1 - r) / n):3.1f} %"

        print(f"{tasks:>5} {k:>2} {suite:<9}  {pm(ro):>15}  {pm(rt):>15}  {pm(rf):>15}  {100 * undefined / n:5.1f}%  "
              f"{100 * float(np.mean(c0_share)):5.1f}%  {float(np.nanmean(mdd)):8.0f} %", flush=True)
    print(f"nominal: 2.5 % (one-sided); Monte-Carlo error at 2.5 % and {args.runs} runs: "
          f"+- {100 * math.sqrt(0.025 * 0.975 / args.runs):.1f} %; {time.perf_counter() - start:.0f} s")
    print(f"fwer: {worst:.4f}" if args.drop == 0 else f"power: max {worst:.4f} (not a false-alarm rate)")


if __name__ == "__main__":
    main()
