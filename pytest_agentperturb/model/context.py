"""What an agent sees and may do during one episode: the :class:`EpisodeContext`.

An agent gets the (possibly perturbed) surfaces, a tool channel that runs
calls against the environment by true name, an ``ask_user`` channel wired to
the user simulator, and ``finish`` for the final answer.  The context
records the trajectory and the usage counters that end up in the episode
row.  Its methods are plain (blocking) calls, so a synchronous agent running
in a worker thread uses them just like an async one.

The rule for ``ask_user`` (docs/design.md section 7): code running *on* the
episode's event loop (async agents, the litellm agent, the reference
agents) awaits :meth:`EpisodeContext.ask_user_async` (or
:meth:`EpisodeContext.call_tool_async`), so a model-backed user simulator
never blocks the loop; blocking code in a worker thread calls
:meth:`EpisodeContext.ask_user`, which hands a model-backed simulator's
call to the episode loop and waits for it there.  Only a blocking call made
on the loop itself runs the simulator's blocking path, and stalls the
other episodes of the process while it waits (logged once).  An offline
simulator answers at once on every path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import AgentValueError, InfrastructureError, SimulatorError, ToolError
from .interfaces import Agent as Agent  # re-exported: the seam that receives this context
from .interfaces import Environment, Simulator
from .limits import MAX_OBSERVATION_CHARS, MAX_REPLY_CHARS, cut
from .protocols import Observation, TextPart, UserReply
from .records import Variant
from .task import Surfaces, Task
from .trajectory import ASK_USER as ASK_USER  # re-exported: the clarification tool's name
from .trajectory import Trajectory, final_answer, harness_note, question_text, tool_call, tool_result, user_reply
from .trajectory import recovery_turns as _recovery_turns
#: What the user simulator says to a question it will not answer.
NEUTRAL_REPLY = "I don't have more details."

log = logging.getLogger("pytest_agentperturb.context")
_warned_blocking = False


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
        loop: the episode's event loop (set by the runner); blocking
            ``ask_user`` calls from worker threads run a model-backed
            simulator's call there.
        simulator_error: the first failure of the user simulator; the
            episode is recorded as an error even if the agent caught it.
    """

    task: Task
    variant: Variant
    env: Environment
    simulator: Simulator
    seed: int = 0
    trajectory: Trajectory = field(default_factory=list)
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
    #: a call reported no usage: the episode's token counts are unknown (stored as NULL, not 0)
    usage_unknown: bool = False
    cancelled: bool = False
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    simulator_error: str = ""
    #: the first value the agent handed a channel that is not JSON (or not text): the episode is an ERROR
    agent_error: str = ""
    _shown: int = field(default=-1, repr=False)

    @property
    def surfaces(self) -> Surfaces:
        """The surfaces this instance shows the agent."""
        return self.variant.surfaces

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The advertised tool contract (OpenAI-style function schemas)."""
        return [dict(t) for t in self.surfaces.tools]

    # -- usage --------------------------------------------------------------
    def add_usage(self, input_tokens: int | None = 0, output_tokens: int | None = 0,
                  reasoning_tokens: int | None = 0, cost_usd: float | None = None) -> None:
        """Add provider-reported usage of one model call; ``None`` token counts mark the usage unknown."""
        if input_tokens is None or output_tokens is None or reasoning_tokens is None:
            self.usage_unknown = True
        self.input_tokens += input_tokens or 0
        self.output_tokens += output_tokens or 0
        self.reasoning_tokens += reasoning_tokens or 0
        if cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost_usd

    def model_turn(self, output: str) -> None:
        """Count one turn of an agent that reports no usage (estimated tokens).

        The estimated input is everything shown so far: the surfaces, the
        tool contract and the trajectory's contents.
        """
        self.turns += 1
        self.estimated_usage = True
        if self._shown < 0:
            self._shown = sum(len(t) for _, t in self.surfaces.texts()) + len(self.surfaces.render("tool"))
        seen = self._shown + sum(len(str(e.get("content", "") if isinstance(e, dict) else e))
                                 for e in self.trajectory)   # an entry the agent appended may be no dict
        self.add_usage(math.ceil(seen / 4), estimate_tokens(output))

    # -- channels -----------------------------------------------------------
    def _check_open(self) -> None:
        if self.cancelled:
            raise EpisodeCancelled("the episode timed out; its context is closed")

    def call_tool(self, name: str, args: Any, raw_args: str | None = None) -> Observation:
        """Run a tool call by the name the agent used; a bad call becomes an error observation."""
        self._check_open()
        self._check_call(name, args, raw_args)
        self.tool_calls += 1
        self.trajectory.append(tool_call(name, args if raw_args is None else raw_args))
        if name == ASK_USER:
            return Observation.of_text(self.ask_user(question_text(args), record_call=False))
        if not isinstance(args, Mapping):
            obs = Observation.failure(f"{name}: arguments must be a JSON object, got {type(args).__name__}")
        else:
            try:
                obs = Observation.of(self.env.call(name, args))
            except ToolError as exc:
                obs = Observation.failure(str(exc))
        return self.record_observation(name, obs)

    @staticmethod
    def _bounded(obs: Observation) -> tuple[Observation, int]:
        """``obs`` with its text parts cut to MAX_OBSERVATION_CHARS in all; how many characters were left out."""
        if sum(len(p.text) for p in obs.parts if isinstance(p, TextPart)) <= MAX_OBSERVATION_CHARS:
            return obs, 0
        budget, parts, left_out = MAX_OBSERVATION_CHARS, [], 0
        for p in obs.parts:
            if isinstance(p, TextPart):
                text, out = cut(p.text, budget)
                budget, left_out = max(0, budget - len(p.text)), left_out + out
                p = TextPart(text)
            parts.append(p)
        return Observation(tuple(parts), error=obs.error), left_out

    def note_cut(self, what: str, left_out: int, limit: int) -> None:
        """Say in the trajectory that ``what`` was cut to ``limit`` characters."""
        self.trajectory.append(harness_note(f"truncated: {what} was cut to {limit:,} characters "
                                            f"({left_out:,} left out)"))

    def reply(self, text: str, *, turn: int, usage: dict[str, Any]) -> str:
        """Record one model reply (an assistant message, its turn and usage); the text as kept.

        A reply past :data:`~.limits.MAX_REPLY_CHARS` is cut (with a marker and a harness note).
        """
        if not isinstance(text, str):
            raise self._refuse(f"reply(): the text must be str, got {type(text).__name__}")
        text, left_out = cut(text, MAX_REPLY_CHARS)
        self.trajectory.append({"role": "assistant", "content": text, "turn": turn, "usage": usage})
        if left_out:
            self.note_cut("a model reply", left_out, MAX_REPLY_CHARS)
        return text

    def _refuse(self, msg: str) -> AgentValueError:
        """The agent handed a channel a value the episode cannot keep: remember it (an ERROR) and say so."""
        self.agent_error = self.agent_error or msg[:400]
        return AgentValueError(msg[:400])

    def _check_call(self, name: Any, args: Any, raw_args: Any) -> None:
        """A tool call's name must be text, its raw arguments text, its arguments JSON."""
        if not isinstance(name, str):
            raise self._refuse(f"call_tool(): the tool name must be str, got {type(name).__name__}")
        if raw_args is not None and not isinstance(raw_args, str):
            raise self._refuse(f"call_tool({name!r}): raw_args must be str, got {type(raw_args).__name__}")
        why = not_json(args)
        if why:
            raise self._refuse(f"call_tool({name!r}): the arguments are not JSON ({why})")

    def record_observation(self, name: str, obs: Observation) -> Observation:
        """Append a tool result to the trajectory (text, plus typed parts when not text only).

        Text past :data:`~.limits.MAX_OBSERVATION_CHARS` is cut (with a marker and a harness note);
        the observation as kept is returned (what the agent then sees).
        """
        obs, left_out = self._bounded(obs)
        self.trajectory.append(tool_result(name, obs.text, obs.to_json() if obs.images else None))
        if left_out:
            self.note_cut(f"the observation of {name}", left_out, MAX_OBSERVATION_CHARS)
        return obs

    async def call_tool_async(self, name: str, args: Any, raw_args: str | None = None) -> Observation:
        """:meth:`call_tool` for code on the event loop: an ``ask_user`` call awaits the simulator."""
        if name != ASK_USER:
            return self.call_tool(name, args, raw_args)
        self._check_open()
        self._check_call(name, args, raw_args)
        self.tool_calls += 1
        self.trajectory.append(tool_call(name, args if raw_args is None else raw_args))
        return Observation.of_text(await self.ask_user_async(question_text(args), record_call=False))

    def ask_user(self, question: str, record_call: bool = True) -> str:
        """Ask the simulated user and wait for the reply (blocking; see the module's rule)."""
        self._asking(question, record_call)
        ask_async = getattr(self.simulator, "answer_async", None)
        try:
            if ask_async is not None and self.loop is not None and self.loop.is_running() \
                    and not _on(self.loop):
                # a worker thread: the call runs on the episode loop, with its clients and limits
                result = asyncio.run_coroutine_threadsafe(ask_async(question), self.loop).result()
            else:
                if ask_async is not None and _on_any_loop():
                    _warn_blocking()
                result = self.simulator.answer(question)
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._answered(question, result)

    async def ask_user_async(self, question: str, record_call: bool = True) -> str:
        """Ask the simulated user without blocking the event loop; returns the reply."""
        self._asking(question, record_call)
        ask_async = getattr(self.simulator, "answer_async", None)
        try:
            result = await ask_async(question) if ask_async is not None else self.simulator.answer(question)
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._answered(question, result)

    def _asking(self, question: str, record_call: bool) -> None:
        self._check_open()
        if not isinstance(question, str):
            raise self._refuse(f"ask_user(): the question must be str, got {type(question).__name__}")
        if record_call:
            self.tool_calls += 1
            self.trajectory.append(tool_call(ASK_USER, {"question": question}))

    def _failed(self, exc: Exception) -> Exception:
        """The simulator failed: remember it (the episode becomes an ERROR) and say so."""
        if isinstance(exc, EpisodeCancelled):
            return exc
        msg = f"{type(exc).__name__}: {exc}"[:400]
        self.simulator_error = self.simulator_error or msg
        self.trajectory.append(harness_note(f"user simulator failed: {msg}"))
        return SimulatorError(f"the user simulator failed: {msg}")

    def _answered(self, question: str, result: UserReply | tuple[str, str | None]) -> str:
        """Record the user turn (reply, disclosed facts, the simulator's own usage) and return the reply."""
        reply = UserReply.of(result)
        self.asked.append(question)
        self.disclosed.extend(reply.disclosed)
        # the user model's tokens (usage) stay in the entry, apart from the agent's counters
        self.trajectory.append(user_reply(reply.text, disclosed=reply.disclosed, simulator=reply.simulator,
                                          usage=reply.usage, blocked=reply.blocked))
        return reply.text

    @property
    def recovery_turns(self) -> int:
        """Recovery turns: ``ask_user`` turns whose reply disclosed at least one fact."""
        return _recovery_turns(self.trajectory)

    def finish(self, answer: str) -> None:
        """Give the final answer (text) and end the episode."""
        self._check_open()
        if not isinstance(answer, str):
            raise self._refuse(f"finish(): the answer must be str, got {type(answer).__name__}")
        answer, left_out = cut(answer, MAX_REPLY_CHARS)
        self.answer = answer
        self.finished = True
        self.trajectory.append(final_answer(answer))
        if left_out:
            self.note_cut("the final answer", left_out, MAX_REPLY_CHARS)


def not_json(value: Any) -> str:
    """Why ``value`` cannot be stored as JSON (``""`` when it can): an object, bytes, a cycle, too deep."""
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    return ""


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread is running ``loop``."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _on_any_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _warn_blocking() -> None:
    global _warned_blocking
    if not _warned_blocking:
        _warned_blocking = True
        log.warning("ctx.ask_user was called on the event loop with a model-backed user simulator: the call "
                    "blocks the other episodes of this process; await ctx.ask_user_async(...) instead")
