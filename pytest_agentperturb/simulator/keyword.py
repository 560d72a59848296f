"""The user simulator behind ``ask_user`` (docs/design.md section 2, rule 4) and its leak guard.

A simulator answers a fair question about an omitted or corrupted fact with
that fact's value and nothing else; any other question gets the neutral
reply.  Every reply of every simulator passes the :class:`LeakGuard`: a
reply that states the value of a fact outside the recovery annotation, or
any canary text, becomes the neutral reply (a *blocked leak*), and the
facts a reply disclosed are read from the reply itself (its values), never
taken on the simulator's word.  A reply that states no recovery value at
all is the neutral reply too.  A ``tool-missing`` variant's removed tool or
argument (:class:`~pytest_agentperturb.model.records.ToolGap`) is what the
user may name besides the recovery facts: asked about it ("which tool sends
money?"), the simulator names it, and the reply's ``disclosed`` list says
``tool:<name>``.

:class:`UserSimulator`, the default, matches words, offline and
deterministic; :mod:`.llm` puts a user model behind the same guard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..model.context import NEUTRAL_REPLY
from ..model.protocols import UserReply
from ..model.records import Canary, ToolGap, Variant, names_word, tool_gaps
from ..model.task import Fact, Task
from .matching import Matcher, _terms, matcher_of, states, value_pattern


class LeakGuard:
    """What a reply may say on one instance: the recovery facts' values, and nothing else of the task.

    Forbidden are the values of the task's other facts (unless equal to a
    recovery value) and the variant's canary texts (planted values, fake
    tool names, distractors, injected goals; a canary that holds a recovery
    fact's true value is not forbidden).  A forbidden string that the
    question itself states is not a leak: the reply cannot tell the agent
    what it wrote.  A forbidden string inside a recovery value (a folder
    inside a path) only counts where it occurs outside that value.
    """

    def __init__(self, task: Task, recovery: Sequence[str], canaries: Iterable[Canary] = ()) -> None:
        canaries = tuple(canaries)
        self.recovery: tuple[Fact, ...] = tuple(task.fact(r) for r in dict.fromkeys(recovery))
        self.gaps: tuple[ToolGap, ...] = tool_gaps(canaries)  # a removed tool or argument may be named
        allowed = {f.value.strip().lower() for f in self.recovery}
        forbidden = [f.value for f in task.facts if f.id not in recovery]
        forbidden += [c.text for c in canaries if not (c.kind == "omitted" and not c.fact)]
        self.forbidden: tuple[str, ...] = tuple(dict.fromkeys(
            s for s in forbidden if s.strip() and s.strip().lower() not in allowed))

    def disclosed(self, text: str) -> tuple[str, ...]:
        """Ids of the recovery facts whose values ``text`` states, in annotation order, then the removed
        tools (``tool:<name>``) and arguments (``tool:<name>.<arg>``) it names."""
        facts = tuple(f.id for f in self.recovery if states(f.value, text))
        return facts + tuple(g.id for g in self.gaps if g.named_in(text))

    def leaks(self, text: str, question: str = "") -> list[str]:
        """The forbidden strings that ``text`` states (and ``question`` does not)."""
        masked = text
        for f in self.recovery:
            masked = value_pattern(f.value).sub(" ", masked)
        out = []
        for s in self.forbidden:
            if states(s, question):
                continue
            inside = any(s.strip().lower() in f.value.lower() for f in self.recovery)
            if states(s, masked if inside else text):
                out.append(s)
        return out

    def check(self, text: str, question: str = "", *, simulator: str = "",
              usage: Mapping[str, Any] | None = None) -> UserReply:
        """The reply the agent may see for ``text``: itself, or the neutral reply (blocked when it leaked)."""
        if self.leaks(text, question):
            return UserReply(NEUTRAL_REPLY, (), usage, True, simulator)
        disclosed = self.disclosed(text)
        if not disclosed:
            return UserReply(NEUTRAL_REPLY, (), usage, False, simulator)
        return UserReply(text.strip(), disclosed, usage, False, simulator)


def _tool_words(task: Task, tool: str) -> tuple[set[str], set[str]]:
    """(name words, description words) of a true tool, from the clean contract."""
    schema = task.surfaces.tool_schema(tool) or {}
    desc = str(schema.get("description") or "").split("\n")[0]
    return set(_terms(tool.replace("_", " ").replace("-", " "))), set(_terms(desc))


def asks_for_gap(task: Task, gap: ToolGap, question: str) -> bool:
    """Whether ``question`` clearly asks about the removed tool or argument: it names the tool, or it states
    every content word of the tool's name, or most of its description's first line (at least three words);
    for an argument, also the argument's name or words."""
    q = set(_terms(question))
    name, desc = _tool_words(task, gap.tool)
    about_tool = names_word(gap.tool, question) or (bool(name) and name <= q) or \
        (len(desc) >= 3 and len(desc & q) >= 0.6 * len(desc))
    if not gap.arg:
        return about_tool
    arg = set(_terms(gap.arg.replace("_", " ")))
    return about_tool and (names_word(gap.arg, question) or (bool(arg) and arg <= q))


def gap_reply(gaps: Sequence[ToolGap]) -> str:
    """The keyword simulator's reply about removed tools or arguments: it names them."""
    out = []
    for g in gaps:
        out.append(f"{g.tool} takes {g.arg} as well." if g.arg else f"You can use {g.tool} for that.")
    return " ".join(out)


def compose(facts: Sequence[Fact]) -> str:
    """The keyword simulator's reply: the bare value of one fact; ``name: value`` pairs for several."""
    if len(facts) == 1:
        return facts[0].value
    return "; ".join(f"{f.id.replace('_', ' ')}: {f.value}" for f in facts)


class UserSimulator:
    """Answers clarification requests by matching words against the task's facts (offline, deterministic).

    A request is matched against *every* fact of the task (:class:`~.matching.Matcher`);
    the recovery facts it clearly asks for are answered with their values
    (the bare value for one fact, ``name: value`` pairs for several) and
    nothing else; any other question gets the neutral reply.
    """

    name = "keyword"

    def __init__(self, task: Task, recovery: Sequence[str], canaries: Iterable[Canary] = ()) -> None:
        self.task = task
        self._recovery = set(recovery)
        self._annotation, self._canaries = tuple(recovery), tuple(canaries)
        self._guard: LeakGuard | None = None

    @property
    def guard(self) -> LeakGuard:
        """The instance's leak guard: built at the first reply that needs it (most episodes ask nothing)."""
        if self._guard is None:
            self._guard = LeakGuard(self.task, self._annotation, self._canaries)
        return self._guard

    @property
    def matcher(self) -> Matcher:
        """The task's matcher: built at the first question (most episodes ask none), once per task."""
        return matcher_of(self.task)

    def asked(self, question: str) -> list[Fact]:
        """The facts ``question`` clearly asks for (of the whole task, recovery or not)."""
        return self.matcher.asked(question)

    def answer(self, question: str) -> UserReply:
        """The values of the recovery facts the question asks for, else the tools or arguments the variant
        removed that it asks about (named), else the neutral reply."""
        facts = [f for f in self.asked(question) if f.id in self._recovery]
        if facts:
            return self.guard.check(compose(facts), question)
        gaps = [g for g in tool_gaps(self._canaries) if asks_for_gap(self.task, g, question)]
        if gaps:
            return self.guard.check(gap_reply(gaps), question)
        return UserReply(NEUTRAL_REPLY)


def default_simulator(task: Task, variant: Variant) -> UserSimulator:
    """The offline simulator of one instance: its recovery annotation and canaries."""
    return UserSimulator(task, variant.recovery, variant.canaries)
