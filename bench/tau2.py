"""Agreement with tau2-bench, task by task: our oracle episode's reward against tau2's own evaluation.

For every task of the shipped domains (airline, retail):

* ours: :func:`~pytest_agentperturb.run.episode.run_episode` with the
  reference oracle on the clean variant (it asks the user simulator for the
  facts the opening request lacks, replays the gold actions on a fresh tau2
  environment, answers with the gold answer) and our grader (tau2's
  evaluators over the episode turned into tau2 messages);
* tau2's: the same gold actions and answer scored entirely by tau2
  (:func:`~pytest_agentperturb.formats.tau2.tau2_reward`: an environment from
  tau2's registry, ``evaluate_simulation`` with ``EvaluationType.ALL``).

The last line is ``tau2 oracle: N/N agree`` (tasks whose two rewards are
equal, out of all).  Needs ``pip install -e ".[tau2]"``.

Usage::

    python bench/tau2.py [--domain airline] [--limit N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# this file is called tau2.py: its own folder must not shadow the tau2 package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_agentperturb.agents.reference import OracleAgent  # noqa: E402
from pytest_agentperturb.formats.tau2 import DOMAINS, Tau2Adapter, tau2_reward  # noqa: E402
from pytest_agentperturb.perturb.engine import clean_variant  # noqa: E402
from pytest_agentperturb.run.episode import run_episode_sync  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", action="append", choices=DOMAINS, help="domains to run (default: all shipped)")
    ap.add_argument("--limit", type=int, default=0, help="the first N tasks of each domain only")
    a = ap.parse_args()
    adapter = Tau2Adapter("tau2", tuple(a.domain or DOMAINS))
    agree = total = 0
    t0 = time.perf_counter()
    for domain in adapter.domains:
        data = adapter.data(domain)
        ids = list(data.tau2_tasks)[: a.limit or None]
        for tid in ids:
            task = data.make_task(tid)
            rec = run_episode_sync(task, clean_variant(task), OracleAgent(), run_id="bench", seed=0)
            theirs = tau2_reward(domain, data.tau2_tasks[tid], task.answer)
            ok = rec.reward == theirs and not rec.error
            agree += ok
            total += 1
            if not ok:
                print(f"{tid}: ours {rec.reward} ({rec.error or 'no error'}), tau2 {theirs}")
        print(f"{domain}: {len(ids)} tasks, {time.perf_counter() - t0:.0f} s so far")
    print(f"tau2 oracle: {agree}/{total} agree")
    return 0 if agree == total else 1


if __name__ == "__main__":
    sys.exit(main())
