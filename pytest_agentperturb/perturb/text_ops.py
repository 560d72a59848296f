"""Fact-based operators on the text surfaces: user, procedure and context.

Each operator class is instantiated once per target it makes sense for and
registered under ``<target>-<type>``.  They act on *facts* (DESIGN.md 1b):
a missing operator removes the sentence that states a needed fact, a
redundant one adds plausible content that does not change the solution, an
incorrect one replaces a stated value with a wrong one of the same shape.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from ..records import Canary
from ..task import Fact, Surfaces, Task, Turn
from .base import Edit, register



# -- helpers --------------------------------------------------------------------


def surface_text(s: Surfaces, target: str) -> str:
    """All text of a text surface (context turns joined)."""
    if target == "context":
        return "\n".join(t.content for t in s.context)
    return str(getattr(s, target))


def replace_text(s: Surfaces, target: str, old: str, new: str, count: int = 1) -> Surfaces:
    """Replace text inside one text surface (inside the first turn holding it)."""
    if target == "context":
        turns = list(s.context)
        for i, t in enumerate(turns):
            if old in t.content:
                turns[i] = Turn(t.role, t.content.replace(old, new, count))
                break
        return replace(s, context=tuple(t for t in turns if t.content.strip()))
    return replace(s, **{target: getattr(s, target).replace(old, new, count)})


def fresh_decoy(task: Task, fact: Fact, rng: random.Random) -> str | None:
    """A decoy that appears nowhere in the clean task (so it is a clean canary)."""
    seen = "\n".join([*(task.surfaces.render(t) for t in ("user", "procedure", "context", "tool")),
                      task.answer, *(repr(dict(s.args)) for s in task.solution)])
    for _ in range(10):
        d = decoy(fact, rng)
        if d != fact.value and d not in seen:
            return d
    return None


def decoy(fact: Fact, rng: random.Random) -> str:
    """A plausible wrong value of the same shape as ``fact.value``."""
    v = fact.value
    if fact.kind == "time":
        h, m = map(int, v.split(":"))
        return f"{(h + rng.choice((1, 2, 3, -1, -2)) - 8) % 10 + 8:02d}:{m:02d}"
    if fact.kind == "date":
        y, mo, d = v.split("-")
        nd = (int(d) + rng.choice((1, 2, 3, 5, 7)) - 1) % 28 + 1
        return f"{y}-{mo}-{nd:02d}"
    if fact.kind == "email":
        local, domain = v.split("@", 1)
        first = local.split(".")[0]
        return f"{first}.{rng.choice(('lee', 'ortiz', 'novak', 'sato', 'berg'))}@{domain}"
    if fact.kind == "id":
        prefix, num = v.rsplit("-", 1)
        return f"{prefix}-{int(num) + rng.choice((1, 2, 3, 7, 11)):0{len(num)}d}"
    if fact.kind in ("amount", "integer"):
        whole, _, cents = v.partition(".")
        nw = max(1, int(whole) + rng.choice((-1, 1)) * max(1, int(whole) // rng.choice((4, 5, 10))))
        return f"{nw}.{cents}" if cents else str(nw)
    words = ["Updated", "Moved", "Notice", "Changed", "FYI", "Archive", "Pending", "Draft"]
    pick = rng.choice([w for w in words if w.lower() != v.lower()])
    return pick if v[:1].isupper() else pick.lower()


def _facts_on(task: Task, target: str) -> list[Fact]:
    return [f for f in task.facts if target in f.surfaces]


def omitted_after(task: Task, new: Surfaces) -> list[Fact]:
    """Facts whose value no surface states any more (as a reader finds facts)."""
    texts = new.texts()
    return [f for f in task.facts if f.surfaces and f.value not in {v for _, v in f.find(texts)}]


# -- missing --------------------------------------------------------------------


class DropFactSentence:
    """Remove the sentence that states a needed fact.

    The fact is then stated nowhere; the recovery annotation names it, and
    the user simulator supplies it when asked, so the task stays solvable.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.id = "drop_fact_sentence"
        self.family = f"{target}-missing"

    def applicable(self, task: Task) -> bool:
        return bool(_facts_on(task, self.target))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact = rng.choice(_facts_on(task, self.target))
        texts = [t.content for t in task.surfaces.context] if self.target == "context" \
            else [surface_text(task.surfaces, self.target)]
        sent = next((x for x in (fact.stating(t) for t in texts) if x), None)
        if not sent:
            return None
        holder = next(t for t in texts if sent in t)
        m = re.search(re.escape(sent) + r"[ \t]*\n?", holder)
        new = replace_text(task.surfaces, self.target, m.group(0) if m else sent, "")
        gone = omitted_after(task, new)
        if not gone:
            return None
        return Edit(new, tuple(Canary("omitted", f.value, f.id) for f in gone),
                    recovery=tuple(f.id for f in gone), note=f"removed: {sent.strip()}")


# -- redundant ------------------------------------------------------------------

_DISTRACTORS = {
    "user": ("\nP.S. Unrelated to this request, and nothing to do about it: {thing}\n"),
    "procedure": ("\nArchived note (informational only, no action required): {thing}\n"),
}
_THINGS = {
    "time": "the fire drill last month started at {d}.",
    "date": "the office was closed on {d} for maintenance.",
    "email": "the printer vendor can be reached at {d}, but nobody needs to contact them.",
    "id": "ticket {d} about the coffee machine was closed last week.",
    "amount": "last quarter's team lunch came to {d} in total.",
    "integer": "the parking garage has {d} spaces on level two.",
    "text": 'an old newsletter template used the label "{d}".',
}


class AppendUnrelated:
    """Append plausible, task-irrelevant content carrying a decoy value.

    Nothing the solution needs is removed or changed; the decoy has the shape
    of a fact but belongs to an unrelated matter, so the solution is the
    same.  The decoy value is the canary.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.id = "append_unrelated"
        self.family = f"{target}-redundant"

    def applicable(self, task: Task) -> bool:
        return bool(task.facts)

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact = rng.choice(list(task.facts))
        d = fresh_decoy(task, fact, rng)
        if d is None:
            return None
        thing = _THINGS[fact.kind].format(d=d)
        new = replace(task.surfaces, **{self.target: getattr(task.surfaces, self.target).rstrip("\n")
                                        + "\n" + _DISTRACTORS[self.target].format(thing=thing)})
        return Edit(new, (Canary("text", d, fact.id),), note=f"appended: {thing}")


class PrependUnrelatedHistory:
    """Carry over an exchange from an unrelated earlier task into the context.

    The exchange mentions a decoy of the same shape as a fact, in a sentence
    using that fact's cue words, but it is about another matter and is
    closed by the assistant; the current task's solution does not change.
    """

    id = "prepend_unrelated_history"
    family = "context-redundant"

    def applicable(self, task: Task) -> bool:
        return bool(task.facts)

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact = rng.choice(list(task.facts))
        d = fresh_decoy(task, fact, rng)
        if d is None:
            return None
        cue = fact.cues[0] if fact.cues else "note"
        turns = (
            Turn("user", f"(Earlier, different request) For last year's archive cleanup, the {cue} "
                         f"reference was {d}. That job is finished."),
            Turn("assistant", "Understood, the archive cleanup is closed; nothing more to do there."),
        )
        new = replace(task.surfaces, context=turns + task.surfaces.context)
        return Edit(new, (Canary("text", d, fact.id),), note=f"prepended history mentioning {d}")


# -- incorrect ------------------------------------------------------------------


class SwapValue:
    """Replace a stated fact value with a plausible wrong value of the same shape.

    The corrupted fact stays recoverable: the user knows the true value and
    gives it when asked (recovery annotation), and facts with a domain can be
    cross-checked against the environment.  The wrong value is the canary.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.id = "swap_value"
        self.family = f"{target}-incorrect"

    def applicable(self, task: Task) -> bool:
        return bool(_facts_on(task, self.target))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        facts = _facts_on(task, self.target)
        fact = rng.choice(facts)
        wrong = fresh_decoy(task, fact, rng)
        if wrong is None:
            return None
        text = surface_text(task.surfaces, self.target)
        new = replace_text(task.surfaces, self.target, fact.value, wrong, count=text.count(fact.value))
        return Edit(new, (Canary("value", wrong, fact.id),), recovery=(fact.id,),
                    note=f"{fact.id}: {fact.value} -> {wrong}")


for _t in ("user", "procedure", "context"):
    register(DropFactSentence(_t))
    register(SwapValue(_t))
register(AppendUnrelated("user"))
register(AppendUnrelated("procedure"))
register(PrependUnrelatedHistory())
