"""Benchmark of the full analysis on a synthetic study of the paper's size.

10 models x 25 tasks x 13 families (clean + 12) on one suite, binary
rewards, token usage (with reasoning tokens inside the output tokens) and
tool-call counts, and the incomplete data a real run has: a few episodes
that errored, a few variants skipped and a few episodes without usage.  The
full analysis runs with 2000 bootstrap replicates and 100,000 permutations
(the defaults), a capability table and task properties.  Prints the seconds
it took (wall clock and CPU); the target is under 10 s on a 2-core machine.

Run: ``PYTHONPATH=. python bench/analysis.py [--replicates N] [--permutations N]``
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd

from pytest_agentperturb.analysis import analyze, normalise, summary
from pytest_agentperturb.model.task import CLEAN, FAMILIES


def synthetic(models: int = 10, tasks: int = 25, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Episode table, capability table and task properties of a synthetic study."""
    rng = np.random.default_rng(seed)
    skill = np.linspace(0.3, 0.9, models)
    hardness = rng.normal(0, 0.15, tasks)
    fam_effect = dict(zip(FAMILIES, rng.uniform(0.0, 0.35, len(FAMILIES))))
    rows = []
    for m in range(models):
        for i in range(tasks):
            for fam in (CLEAN, *FAMILIES):
                p = np.clip(skill[m] - hardness[i] - (fam_effect.get(fam, 0.0)), 0.02, 0.98)
                ok = bool(rng.random() < p)
                calls = int(rng.integers(3, 9)) + (0 if fam == CLEAN else int(rng.integers(0, 3)))
                fate = rng.random()
                if fam != CLEAN and fate < 0.01:
                    continue                                     # variant skipped by the validity checks
                error = "timeout" if fate > 0.995 else ""         # an episode that could not be scored
                usage = fate < 0.02 or fate > 0.985               # no usage recorded (NULL)
                rows.append({"run_id": "bench", "model": f"model-{m:02d}", "suite": "synthetic",
                             "task": f"task-{i:02d}", "family": fam, "seed": 0,
                             "reward": None if error else float(ok), "success": None if error else ok,
                             "error": error, "compliance": None if fam == CLEAN else bool(rng.random() < 0.4),
                             "operator": "op-" + fam.split("-")[-1],
                             "input_tokens": None if usage else int(calls * 900),
                             "output_tokens": None if usage else int(calls * 60),
                             "reasoning_tokens": None if usage else int(calls * 20),
                             "tool_calls": calls, "turns": calls + 1})
    cap = pd.DataFrame({"model": [f"model-{m:02d}" for m in range(models)],
                        "capability": skill * 100 + rng.normal(0, 5, models)})
    props = pd.DataFrame({"suite": "synthetic", "task": [f"task-{i:02d}" for i in range(tasks)],
                          "tool_count": rng.integers(3, 12, tasks), "instruction_length": rng.integers(20, 200, tasks),
                          "solution_length": rng.integers(2, 9, tasks)})
    return pd.DataFrame(rows), cap, props


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=2000)
    ap.add_argument("--permutations", type=int, default=100_000)
    args = ap.parse_args(argv)
    df, cap, props = synthetic()
    t0, c0 = time.perf_counter(), time.process_time()
    table = normalise(df)
    a = analyze(table, capability=cap, task_properties=props, replicates=args.replicates,
                permutations=args.permutations, seed=0)
    s = summary(a)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    avg = s["suite_average"][0]
    print(f"episodes: {len(df)}  models: 10  tasks: 25  families: 13  replicates: {args.replicates}  "
          f"permutations: {args.permutations}")
    print(f"suite average drop: {avg['relative_drop']:.1f} %  "
          f"[{avg['ci_low']:.1f}, {avg['ci_high']:.1f}]  over {avg['n_pairs']} pairs ({avg['n_dropped']} dropped)")
    for note in s["notes"]:
        print(f"note: {note}")
    print(f"full analysis: {dt:.2f} s wall, {cpu:.2f} s CPU (target < 10 s)")
    return 0 if dt < 10 else 1


if __name__ == "__main__":
    sys.exit(main())
