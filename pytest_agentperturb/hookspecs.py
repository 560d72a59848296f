"""Extension points of pytest-agentperturb, all prefixed ``pytest_agentperturb_``.

Implement them in a ``conftest.py`` or a plugin to add agent runners,
perturbation operators or report sections without touching this package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .agents.base import Agent
    from .perturb.base import Operator
    from .records import EpisodeRecord


@pytest.hookspec(firstresult=True)
def pytest_agentperturb_make_agent(model: str, config: pytest.Config) -> Agent | None:
    """Return the agent runner for ``model``, or None to let others decide.

    The built-in implementation (``trylast``) knows the ``reference/*``
    baselines and hands any other name to the litellm runner.
    """


@pytest.hookspec
def pytest_agentperturb_register_operators(register: Callable[[Operator], Operator]) -> None:
    """Register extra perturbation operators by calling ``register(op)``."""


@pytest.hookspec
def pytest_agentperturb_report_sections(records: list[EpisodeRecord], config: pytest.Config) -> list[tuple[str, str]]:
    """Return extra (title, escaped HTML) sections for the HTML report."""
    raise NotImplementedError


@pytest.hookspec
def pytest_agentperturb_episode_recorded(record: EpisodeRecord, config: pytest.Config) -> Any:
    """Called on the process that ran an episode, right after it was stored."""
