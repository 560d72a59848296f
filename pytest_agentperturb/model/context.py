"""What an agent sees and may do during one episode: the :class:`EpisodeContext`.

An agent gets the (possibly perturbed) surfaces, a tool channel that runs
calls against the environment by true name, an ``ask_user`` channel wired to
the user simulator, and ``finish`` for the final answer.  The context
records the trajectory and the usage counters that end up in the episode
row.  Its methods are plain (blocking) calls, so a synchronous agent running
in a worker thread uses them just like an async one.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .errors import InfrastructureError, ToolError
from .protocols import Environment, Observation, Simulator
from .records import Variant
from .task import Surfaces, Task

#: Name of the clarification tool every agent may call.
ASK_USER = "ask_user"
#: What the user simulator says to a question it will not answer.
NEUTRAL_REPLY = "I don't have more details."


class EpisodeCancelled(InfrastructureError):
    """The episode ran out of time; raised by the context's channels afterwards."""


def estimate_tokens(text: str) -> int:
    """Token estimate for agents that do not report usage: ceil(chars / 4)."""
    return math.ceil(len(text) / 4)


@dataclass
class EpisodeContext:
    """The agent's window on one episode, and its recorder.

    Attributes:
        task: the clean task (reference baselines read its gold solution;
            an agent under test should use only :attr:`surfaces` and the channels).
        variant: the instance being played.
        env: the episode's environment.
        simulator: the user behind :meth:`ask_user`.
        seed: the episode's seed (for agents that sample).
    """

    task: Task
    variant: Variant
    env: Environment
    simulator: Simulator
    seed: int = 0
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    answer: str = ""
    finished: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    tool_calls: int = 0
    turns: int = 0
    asked: list[str] = field(default_factory=list)
    disclosed: list[str] = field(default_factory=list)
    estimated_usage: bool = False
    cancelled: bool = False
    _surface_chars: int = field(default=-1, init=False, repr=False)

    @property
    def surfaces(self) -> Surfaces:
        """The surfaces this instance shows the agent."""
        return self.variant.surfaces

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The advertised tool contract (OpenAI-style function schemas)."""
        return [dict(t) for t in self.surfaces.tools]

    # -- usage --------------------------------------------------------------
    def add_usage(self, input_tokens: int = 0, output_tokens: int = 0, reasoning_tokens: int = 0,
                  cost_usd: float | None = None) -> None:
        """Add provider-reported usage of one model call."""
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.reasoning_tokens += reasoning_tokens
        if cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost_usd

    def model_turn(self, output: str) -> None:
        """Count one turn of an agent that reports no usage (estimated tokens)."""
        self.turns += 1
        self.estimated_usage = True
        if self._surface_chars < 0:  # the surfaces do not change within an episode: measure them once
            self._surface_chars = sum(len(t) for _, t in self.surfaces.texts()) + len(self.surfaces.render("tool"))
        seen = self._surface_chars
        seen += sum(len(str(e.get("content", ""))) for e in self.trajectory)
        self.add_usage(estimate_tokens("x" * seen), estimate_tokens(output))

    # -- channels -----------------------------------------------------------
    def _check_open(self) -> None:
        if self.cancelled:
            raise EpisodeCancelled("the episode timed out; its context is closed")

    def call_tool(self, name: str, args: Any, raw_args: str | None = None) -> Observation:
        """Run a tool call by the name the agent used; a bad call becomes an error observation."""
        self._check_open()
        self.tool_calls += 1
        self.trajectory.append({"role": "assistant", "tool": name, "args": args if raw_args is None else raw_args})
        if name == ASK_USER:
            q = args.get("question", "") if isinstance(args, Mapping) else str(args)
            return Observation.of_text(self.ask_user(str(q), record_call=False))
        if not isinstance(args, Mapping):
            obs = Observation.failure(f"{name}: arguments must be a JSON object, got {type(args).__name__}")
        else:
            try:
                obs = Observation.of(self.env.call(name, args))
            except ToolError as exc:
                obs = Observation.failure(str(exc))
        self.record_observation(name, obs)
        return obs

    def record_observation(self, name: str, obs: Observation) -> None:
        """Append a tool result to the trajectory (text, plus typed parts when not text only)."""
        entry: dict[str, Any] = {"role": "tool", "tool": name, "content": obs.text}
        if obs.images:
            entry["parts"] = obs.to_json()
        self.trajectory.append(entry)

    def ask_user(self, question: str, record_call: bool = True) -> str:
        """Ask the simulated user; returns the reply."""
        self._check_open()
        if record_call:
            self.tool_calls += 1
            self.trajectory.append({"role": "assistant", "tool": ASK_USER, "args": {"question": question}})
        reply, fact = self.simulator.answer(question)
        self.asked.append(question)
        entry: dict[str, Any] = {"role": "user", "content": reply}
        if fact:
            self.disclosed.append(fact)
            entry["disclosed"] = fact
        self.trajectory.append(entry)
        return reply

    @property
    def recovery_turns(self) -> int:
        """Recovery turns: ``ask_user`` turns whose reply disclosed a fact."""
        return len(self.disclosed)

    def finish(self, answer: str) -> None:
        """Give the final answer and end the episode."""
        self._check_open()
        self.answer = answer
        self.finished = True
        self.trajectory.append({"role": "assistant", "content": answer, "final": True})


@runtime_checkable
class Agent(Protocol):
    """An agent runner: ``name``, the ``baseline`` flag and ``run(ctx)``.

    ``baseline`` marks offline reference agents: reports and the gate keep
    them apart from real models.  Plain functions and synchronous objects
    are wrapped into this shape by :func:`pytest_agentperturb.agents.as_agent`.
    """

    name: str
    baseline: bool

    def run(self, ctx: EpisodeContext) -> Awaitable[None]:
        """Play one episode through ``ctx``."""
