"""Agent runners: the offline reference baselines, the litellm agent, and your own Python agents.

:func:`make_agent` turns a model name from ``--agentperturb-model`` into an
agent: ``reference/*`` names the offline baselines, any other name the
litellm function-calling agent.  :func:`load_agent` turns an
``--agentperturb-agent`` spec (``module:attr`` or ``file.py:attr``) into one;
:func:`as_agent` wraps a function or object already in hand.  Plugins add
runners through the ``pytest_agentperturb_make_agent`` hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..model.errors import OptionError
from ..model.interfaces import Agent
from ..model.options import LLMSettings
from .python import PythonAgent, as_agent, load_agent, load_object
from .reference import CarefulAgent, LiteralAgent, NoisyAgent, OracleAgent

REFERENCE_AGENTS: dict[str, Callable[[], Agent]] = {
    OracleAgent.name: OracleAgent,
    LiteralAgent.name: LiteralAgent,
    CarefulAgent.name: CarefulAgent,
    NoisyAgent.name: NoisyAgent,
}


def make_agent(spec: str, settings: LLMSettings | None = None) -> Agent:
    """The agent for ``spec``: a ``reference/*`` baseline, or the litellm agent for any other name.

    Raises:
        OptionError: for an unknown ``reference/*`` name or an empty name.
    """
    if spec in REFERENCE_AGENTS:
        return REFERENCE_AGENTS[spec]()
    if spec.startswith("reference/"):
        raise OptionError(f"unknown baseline {spec!r}; built-in baselines: {', '.join(REFERENCE_AGENTS)}")
    from .litellm_agent import LiteLLMAgent  # cheap: litellm itself is imported on the first call

    return LiteLLMAgent(spec, settings)


def prepare(agents: Iterable[Agent], settings: LLMSettings) -> None:
    """One-time set-up before the first episode, in the caller's thread (the session calls it in pytest's
    main thread, before it starts the episode loop): each agent's optional ``prepare()``, and litellm's
    import when a model plays the user (``--agentperturb-user-model``).  Seconds of imports here never
    stall the episodes that share the loop."""
    for agent in agents:
        ready = getattr(agent, "prepare", None)
        if callable(ready):
            ready()
    if settings.user_model:
        from .litellm_agent import import_litellm

        import_litellm()


__all__ = ["REFERENCE_AGENTS", "CarefulAgent", "LiteralAgent", "NoisyAgent", "OracleAgent", "PythonAgent", "as_agent",
           "load_agent", "load_object", "make_agent", "prepare"]
