"""A user model behind ``ask_user`` (``--agentperturb-user-model MODEL``), leak-proof by construction.

The model gets the prompt ``prompts/simulator.md``: its role, the task's
goal (the title), the recovery facts it may give back (their questions and
values), the neutral reply and the rule to answer only what is asked.  It
sees the episode's earlier questions and the replies the agent got.

Whatever the model writes passes the :class:`~.keyword.LeakGuard` of the
instance: a reply that states a value of a fact outside the recovery
annotation, or any canary text, is replaced by the neutral reply and
recorded as a blocked leak; the disclosed facts are those whose values the
reply states; a reply that states none is the neutral reply.  Without
recovery facts (clean instances) no call is made at all.

Calls follow the model protocol of the litellm agent (retries of rate-limit
and timeout errors with backoff, typed :class:`~..agents.litellm_agent.ProviderError`
otherwise, which makes the episode an ERROR).  Each reply carries the
call's own usage; the episode context records it in the user turn and never
adds it to the agent's tokens.  ``answer_async`` runs on the episode loop;
``answer`` is the blocking path (see :mod:`..model.context` for which is used where).
"""

from __future__ import annotations

import asyncio
import re
import time
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..agents.litellm_agent import ProviderError, call_kwargs, classify, import_litellm, usage_of, with_retries
from ..formats import shipped
from ..model.context import NEUTRAL_REPLY
from ..model.options import LLMSettings
from ..model.interfaces import Simulator
from ..model.protocols import UserReply
from ..model.records import Canary, ToolGap, Variant
from ..model.task import Task
from .keyword import LeakGuard, default_simulator

PROMPTS = shipped("prompts")
PROMPT = "simulator.md"
#: Earlier exchanges of the episode that the user model sees with each question.
HISTORY = 10

_limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = \
    weakref.WeakKeyDictionary()


def render_prompt(task: Task, recovery: Sequence[str], root: Path = PROMPTS,
                  gaps: Sequence[ToolGap] = ()) -> str:
    """Fill ``prompts/simulator.md`` (or the task's own ``user_prompt``) for one instance; a removed tool or
    argument is one more detail the user knows (its name)."""
    facts = [task.fact(r) for r in dict.fromkeys(recovery)]
    lines = "\n".join([f"- {f.question or f.id.replace('_', ' ')} Answer: {f.value}" for f in facts] +
                      [f"- Does {g.tool} take {g.arg}? Answer: {g.tool} takes {g.arg} as well." if g.arg else
                       f"- Which tool does this ({g.tool.replace('_', ' ')})? Answer: {g.tool}"
                       for g in gaps]) or "(none)"
    values = {"goal": task.title or task.id, "facts": lines, "neutral": NEUTRAL_REPLY}
    text = task.user_prompt or (root / PROMPT).read_text(encoding="utf-8")
    where = f"the user prompt of {task.key}" if task.user_prompt else str(root / PROMPT)

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"{where}: unknown placeholder {{{{{m.group(1)}}}}}")
        return values[m.group(1)]

    return re.sub(r"\{\{(\w+)\}\}", sub, re.sub(r"<!--.*?-->\n?", "", text, flags=re.S))


class LLMSimulator:
    """The user, played by a litellm model and held to the leak guard."""

    def __init__(self, task: Task, recovery: Sequence[str], canaries: Iterable[Canary] = (), *,
                 settings: LLMSettings, model: str = "", seed: int | None = None, prompts: Path = PROMPTS) -> None:
        self.model = model or settings.user_model
        if not self.model:
            raise ValueError("LLMSimulator needs a model: settings.user_model or model=")
        self.settings = settings
        self.seed = seed
        self.recovery = tuple(recovery)
        self.guard = LeakGuard(task, recovery, canaries)
        self.prompt = render_prompt(task, recovery, prompts, self.guard.gaps)
        self.history: list[tuple[str, str]] = []
        self.calls = 0

    @property
    def name(self) -> str:
        return self.model

    def messages(self, question: str) -> list[dict[str, Any]]:
        """System prompt, the earlier exchanges (as the agent saw them), the question."""
        msgs: list[dict[str, Any]] = [{"role": "system", "content": self.prompt}]
        for q, a in self.history[-HISTORY:]:
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        msgs.append({"role": "user", "content": question})
        return msgs

    def _kwargs(self, question: str) -> dict[str, Any]:
        kw = call_kwargs(self.model, self.settings)
        kw["messages"] = self.messages(question)
        if self.seed is not None:
            kw["seed"] = self.seed
        return kw

    async def answer_async(self, question: str) -> UserReply:
        """Ask the user model on the running loop (under the per-model connection limit)."""
        if not self.recovery and not self.guard.gaps:
            return self._record(question, UserReply(NEUTRAL_REPLY, simulator=self.model))
        litellm = import_litellm()
        kw = self._kwargs(question)

        async def once() -> Any:
            async with self._limit():
                return await litellm.acompletion(**kw)

        self.calls += 1
        response = await with_retries(once, self.model, self.settings)
        return self._record(question, self._reply(question, response))

    def answer(self, question: str) -> UserReply:
        """The blocking path: the same call through litellm's synchronous client, same retry policy."""
        if not self.recovery and not self.guard.gaps:
            return self._record(question, UserReply(NEUTRAL_REPLY, simulator=self.model))
        litellm = import_litellm()
        kw = self._kwargs(question)
        self.calls += 1
        for attempt in range(self.settings.attempts):
            try:
                response = litellm.completion(**kw)
                break
            except Exception as exc:
                err = exc if isinstance(exc, ProviderError) else classify(exc, self.model)
                if not err.retry or attempt + 1 >= self.settings.attempts:
                    raise err from None
                time.sleep(self.settings.backoff * 2 ** attempt)
        return self._record(question, self._reply(question, response))

    def _limit(self) -> asyncio.Semaphore:
        per_loop = _limits.setdefault(asyncio.get_running_loop(), {})
        if self.model not in per_loop:
            per_loop[self.model] = asyncio.Semaphore(self.settings.model_connections)
        return per_loop[self.model]

    def _reply(self, question: str, response: Any) -> UserReply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ProviderError(f"{self.model}: the user model's response has no choices")
        text = str(getattr(choices[0].message, "content", None) or "")
        return self.guard.check(text, question, simulator=self.model, usage=usage_of(response))

    def _record(self, question: str, reply: UserReply) -> UserReply:
        self.history.append((question, reply.text))
        return reply


def make_simulator(task: Task, variant: Variant, settings: LLMSettings) -> Simulator:
    """The user of one episode: the user model when ``settings.user_model`` is set, else the keyword simulator."""
    if settings.user_model:
        return LLMSimulator(task, variant.recovery, variant.canaries, settings=settings, seed=variant.seed)
    return default_simulator(task, variant)
