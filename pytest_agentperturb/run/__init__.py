"""The run layer: episodes, the episode loop, the store, baseline resolution, the LLM generator.

It ties the lower layers together: it plays an agent (:mod:`..agents`) on a
variant made by the engine (:mod:`..perturb`), with a user simulator of
:mod:`..simulator` behind ``ask_user``, scores it with the task's grader and
records it; it also gives the engine its oracle runner.  ``UserSimulator`` is
re-exported from :mod:`..simulator.keyword`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .episode import (
        classify_compliance,
        make_engine,
        oracle_runner,
        recovery_turns,
        run_episode,
        run_episode_sync,
    )
    from ..simulator.keyword import UserSimulator

__all__ = ["UserSimulator", "classify_compliance", "make_engine", "oracle_runner", "recovery_turns", "run_episode",
           "run_episode_sync"]

# Imported on first use, so that reading a store (``run.store``) does not load the episode loop (asyncio, the
# simulator): the ``report`` command starts faster.
_HOME = {"UserSimulator": "..simulator.keyword", **{n: ".episode" for n in __all__ if n != "UserSimulator"}}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
