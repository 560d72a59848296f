"""Extension points of pytest-agentperturb, all prefixed ``pytest_agentperturb_``.

Implement them in a ``conftest.py`` or a plugin to add suite formats, agent
runners, perturbation operators or report sections without touching this
package.  "Make me an X" hooks are ``firstresult``: the first implementation
that returns something wins, and the built-in one runs last.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..model.interfaces import Agent, Operator, SuiteAdapter
    from ..model.records import EpisodeRecord


@pytest.hookspec(firstresult=True)
def pytest_agentperturb_suite_adapter(path: Path | None, name: str | None,
                                      config: pytest.Config) -> SuiteAdapter | None:
    """Return the suite adapter for a folder (``path``) or a suite name (``name``), or None.

    Exactly one of ``path`` and ``name`` is given: ``path`` for every folder
    pytest collects, ``name`` for each ``--agentperturb-suite NAME``.  Return
    None for what you do not recognise; the built-in implementation
    recognises folders holding ``suite.toml``.
    """


@pytest.hookspec(firstresult=True)
def pytest_agentperturb_make_agent(model: str, config: pytest.Config) -> Agent | None:
    """Return the agent runner for ``model`` (an ``--agentperturb-model`` name), or None.

    The built-in implementation knows the ``reference/*`` baselines and hands
    any other name to the litellm runner.
    """


@pytest.hookspec
def pytest_agentperturb_register_operators(register: Callable[[Operator], Operator]) -> None:
    """Register extra perturbation operators into this session's registry by calling ``register(op)``."""


@pytest.hookspec
def pytest_agentperturb_report_sections(records: list[EpisodeRecord], config: pytest.Config) -> list[tuple[str, str]]:
    """Return extra (title, escaped HTML) sections for the HTML report."""
    raise NotImplementedError


@pytest.hookspec
def pytest_agentperturb_episode_recorded(record: EpisodeRecord, config: pytest.Config) -> Any:
    """Called on the process that ran an episode, right after it was scored.

    Without xdist that process has just stored it; under xdist the worker
    calls this and the controller stores the episode when the item's report
    arrives (a worker never opens the store).
    """
