"""Clean oracle replay on AgentDojo: our episodes against AgentDojo's own ground-truth pipeline.

Both replay every user task's ground truth in one process, on the same
tasks, and grade it with the task's utility check:

* AgentDojo: ``TaskSuite.run_task_with_pipeline(GroundTruthPipeline(task), task, None, {})``
  (it loads the environment for every task, runs the calls, grades);
* ours: :func:`~pytest_agentperturb.run.episode.run_episode` with the
  reference oracle on the clean variant (fresh environment copy, pre and
  post snapshots, the same utility check, compliance classification).

Suites are loaded and both sides warmed up before timing; each side runs
``--repeat`` times, alternating, and the best time counts.  The last line is
``agentdojo_speed_ratio: <AgentDojo time / our time>`` (1.0 = as fast; the
target is at least 0.8).  Needs ``pip install -e ".[agentdojo]"``.

With ``--pairs`` it instead checks every (user task, injection task) pair
of the suites: our oracle's episode on the injection variant (reward,
compliance) against AgentDojo's ground-truth pipeline on the same planted
injections (utility, security); the last line is ``agentdojo pairs: N/M agree``.

Usage::

    python bench/agentdojo.py [--suite banking] [--repeat 2]
    python bench/agentdojo.py --pairs [--suite slack]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

# this file is called agentdojo.py: its own folder must not shadow the agentdojo package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_agentperturb.agents.reference import OracleAgent  # noqa: E402
from pytest_agentperturb.formats.agentdojo import SUITES, AgentDojoAdapter, escape, load  # noqa: E402
from pytest_agentperturb.perturb.engine import clean_variant, variant_of  # noqa: E402
from pytest_agentperturb.run.episode import run_episode_sync  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", action="append", choices=SUITES, help="suites to run (default: all four)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--pairs", action="store_true", help="check every (user task, injection task) pair instead")
    a = ap.parse_args()
    suites = tuple(a.suite or SUITES)
    if a.pairs:
        return pairs(suites)

    t0 = time.perf_counter()
    lib = load()
    adapter = AgentDojoAdapter("agentdojo", suites)
    tasks = [slot.load() for slot in adapter.tasks()]
    print(f"import {time.perf_counter() - t0:.2f} s (incl. building {len(tasks)} tasks)")
    theirs = {name: adapter.data(name) for name in suites}
    for data in theirs.values():  # warm AgentDojo's own caches (its YAML reader is lru-cached)
        data.suite.load_and_inject_default_environment({})

    def agentdojo_side() -> dict[str, float]:
        out = {}
        for name, data in theirs.items():
            t = time.perf_counter()
            for ut in data.suite.user_tasks.values():
                utility, _ = data.suite.run_task_with_pipeline(lib.GroundTruthPipeline(ut), ut, None, {})
                assert utility, f"AgentDojo's own replay failed {name}/{ut.ID}"
            out[name] = time.perf_counter() - t
        return out

    oracle = OracleAgent()

    def our_side() -> dict[str, float]:
        out = dict.fromkeys(suites, 0.0)
        for task in tasks:
            t = time.perf_counter()
            rec = run_episode_sync(task, clean_variant(task), oracle, run_id="bench", seed=0)
            out[task.suite.split(":", 1)[1]] += time.perf_counter() - t
            assert rec.reward == 1.0 and not rec.error, f"oracle failed {task.key}: {rec.reward} {rec.error}"
        return out

    best_theirs: dict[str, float] = {}
    best_ours: dict[str, float] = {}
    for _ in range(max(1, a.repeat)):
        for best, side in ((best_theirs, agentdojo_side), (best_ours, our_side)):
            for k, v in side().items():
                best[k] = min(v, best.get(k, v))
    for name in suites:
        print(f"{name}: AgentDojo ground-truth pipeline {best_theirs[name]:.2f} s, "
              f"our oracle episodes {best_ours[name]:.2f} s")
    total_theirs, total_ours = sum(best_theirs.values()), sum(best_ours.values())
    print(f"all ({len(tasks)} tasks, every one scored 1.0 by both): AgentDojo {total_theirs:.2f} s, "
          f"ours {total_ours:.2f} s")
    print(f"agentdojo_speed_ratio: {total_theirs / total_ours:.2f}")
    return 0


def pairs(suites: tuple[str, ...]) -> int:
    """Every pair: our oracle's (reward, compliance) against AgentDojo's ground truth's (utility, security)."""
    lib = load()
    adapter = AgentDojoAdapter("agentdojo", suites)
    tasks = {slot.name: slot.load() for slot in adapter.tasks()}
    agree = total = 0
    oracle = OracleAgent()
    for name in suites:
        data = adapter.data(name)
        ops = [op for op in adapter.operators() if op.suite is data]
        ok = n = 0
        t = time.perf_counter()
        for tid in data.user_tasks:
            task = tasks[tid]
            ut = data.user_task(tid)
            for op in ops:
                edit = op.apply(task, random.Random(0))
                assert edit is not None
                variant = variant_of(task, op.family, op.id, 0, edit)
                rec = run_episode_sync(task, variant, oracle, run_id="bench", seed=0)
                planted = {i.vector: escape(i.text) for i in variant.injections}
                utility, security = data.suite.run_task_with_pipeline(
                    lib.GroundTruthPipeline(ut), ut, data.suite.injection_tasks[op.injection_id], planted)
                same = (rec.reward == 1.0, bool(rec.compliance)) == (bool(utility), bool(security))
                ok += same
                n += 1
                if not same:
                    print(f"  differs: {tid} {op.family}: ours reward {rec.reward} compliance {rec.compliance} "
                          f"{rec.error}; AgentDojo utility {utility} security {security}")
        print(f"{name}: {ok}/{n} pairs agree ({time.perf_counter() - t:.1f} s)")
        agree, total = agree + ok, total + n
    print(f"agentdojo pairs: {agree}/{total} agree")
    return 0 if agree == total else 1


if __name__ == "__main__":
    sys.exit(main())
