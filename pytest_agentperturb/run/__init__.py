"""The run layer: episodes, the user simulator, the episode loop, the store, the LLM generator.

It ties the lower layers together: it plays an agent (:mod:`..agents`) on a
variant made by the engine (:mod:`..perturb`), scores it with the task's
grader and records it; it also gives the engine its oracle runner.
"""

from __future__ import annotations

from .episode import classify_compliance, make_engine, oracle_runner, recovery_turns, run_episode, run_episode_sync
from .simulator import UserSimulator

__all__ = ["UserSimulator", "classify_compliance", "make_engine", "oracle_runner", "recovery_turns", "run_episode",
           "run_episode_sync"]
