"""Agent runners: the offline reference baselines and the litellm function-calling agent.

:func:`make_agent` turns a model spec from ``--agentperturb-model`` into an
:class:`Agent`: ``reference/*`` names the offline baselines, any other name
the litellm agent; plugins add runners through the
``pytest_agentperturb_make_agent`` hook.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import OptionError
from ..llm_options import LLMSettings
from .base import ASK_USER, Agent, EpisodeContext, UserSimulator
from .reference import CarefulAgent, LiteralAgent, OracleAgent

REFERENCE_AGENTS: dict[str, Callable[[], Agent]] = {
    OracleAgent.name: OracleAgent,
    LiteralAgent.name: LiteralAgent,
    CarefulAgent.name: CarefulAgent,
}


def make_agent(spec: str, settings: LLMSettings | None = None) -> Agent:
    """The agent for ``spec``: a ``reference/*`` baseline, or the litellm agent for any other name.

    Raises:
        OptionError: for an unknown ``reference/*`` name.
    """
    if spec in REFERENCE_AGENTS:
        return REFERENCE_AGENTS[spec]()
    if spec.startswith("reference/"):
        raise OptionError(f"unknown baseline {spec!r}; built-in baselines: {', '.join(REFERENCE_AGENTS)}")
    from .litellm_agent import LiteLLMAgent  # cheap: litellm itself is imported on the first call

    return LiteLLMAgent(spec, settings)


__all__ = ["ASK_USER", "Agent", "EpisodeContext", "UserSimulator", "REFERENCE_AGENTS", "make_agent"]
