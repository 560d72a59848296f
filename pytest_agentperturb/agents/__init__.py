"""Agent runners: offline reference baselines and (later) model-backed agents.

:func:`make_agent` turns a model spec from ``--agentperturb-model`` into an
:class:`Agent`.  ``reference/*`` names the offline baselines; plugins add
runners through the ``pytest_agentperturb_make_agent`` hook.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import OptionError
from .base import ASK_USER, Agent, EpisodeContext, UserSimulator
from .reference import CarefulAgent, LiteralAgent, OracleAgent

REFERENCE_AGENTS: dict[str, Callable[[], Agent]] = {
    OracleAgent.name: OracleAgent,
    LiteralAgent.name: LiteralAgent,
    CarefulAgent.name: CarefulAgent,
}


def make_agent(spec: str) -> Agent:
    """The built-in agent for ``spec``; raises :class:`OptionError` if unknown."""
    if spec in REFERENCE_AGENTS:
        return REFERENCE_AGENTS[spec]()
    raise OptionError(
        f"unknown model {spec!r}: built-in agents are {', '.join(REFERENCE_AGENTS)}; "
        "model-backed agents need a litellm model name such as openai/gpt-4o-mini"
    )


__all__ = ["ASK_USER", "Agent", "EpisodeContext", "UserSimulator", "REFERENCE_AGENTS", "make_agent"]
