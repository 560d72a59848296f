"""Fact-based operators shared by the text surfaces: user, procedure, context.

Each class is instantiated once per target it makes sense for; the target
modules (:mod:`.user_ops`, :mod:`.procedure_ops`, :mod:`.context_ops`)
register the instances under ``<target>-<type>``.  They act on *facts*
(docs/design.md section 1b): a missing operator removes what states a needed fact, a
redundant one adds plausible content that does not change the solution, an
incorrect one replaces a stated value with a wrong one that stays
recoverable (the user simulator knows the true value).
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from ..model.records import Canary
from ..model.task import Fact, Task, Turn
from .engine import Edit
from .helpers import (
    clean_text,
    decoy,
    facts_on,
    fresh_decoy,
    omission,
    omitted_after,
    pick_decoy,
    replace_text,
    stating_sentence,
    surface_text,
    texts_of,
)

__all__ = [
    "AppendUnrelated", "DropFactSentence", "KeepObsolete", "MisattributeValue", "SwapValue",
    "VagueValue", "decoy", "fresh_decoy", "omitted_after", "replace_text", "surface_text",
]


class _OnTarget:
    """Base of operators parametrised by the surface they edit."""

    id = ""
    type = ""

    def __init__(self, target: str) -> None:
        self.target = target
        self.family = f"{target}-{self.type}"

    def applicable(self, task: Task) -> bool:
        return bool(facts_on(task, self.target))

    def stated_fact(self, task: Task, rng: random.Random) -> tuple[Fact, str | None]:
        """A random fact stated on this surface and the sentence stating it (None if none does)."""
        fact = rng.choice(facts_on(task, self.target))
        return fact, stating_sentence(task, fact, self.target)


# -- missing --------------------------------------------------------------------


class DropFactSentence(_OnTarget):
    """Remove the sentence that states a needed fact (``drop_fact_sentence``).

    The fact is then stated nowhere; the recovery annotation names it and the
    user simulator supplies it when asked, so the task stays solvable.  A
    request of one sentence is never dropped whole: that would remove the
    goal, not a fact (``vague_reference`` covers it).
    """

    id = "drop_fact_sentence"
    type = "missing"

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact, sent = self.stated_fact(task, rng)
        if not sent:
            return None
        holder = next(t for t in texts_of(task.surfaces, self.target) if sent in t)
        m = re.search(re.escape(sent) + r"[ \t]*\n?", holder)
        new = replace_text(task.surfaces, self.target, m.group(0) if m else sent, "")
        if self.target == "user" and not new.user.strip():
            return None
        return omission(task, new, f"removed: {sent.strip()}")


_VAGUE = {
    "time": ("the usual time", "(the time we agreed)"),
    "date": ("the agreed day", "(the day we agreed)"),
    "email": ("their usual address", "(the address on file)"),
    "id": ("the usual reference", "(the reference we discussed)"),
    "amount": ("the invoiced amount", "(the amount we discussed)"),
    "integer": ("the agreed number", "(the number we agreed)"),
    "text": ("the usual one", "(as agreed earlier)"),
}


class VagueValue(_OnTarget):
    """Replace a needed value by a vague reference (``vague_reference``).

    The sentence stays, its value goes ("move it to the usual time"): the
    fact is stated nowhere any more, so it is genuinely missing; the recovery
    annotation names it and the user simulator supplies it when asked.
    """

    id = "vague_reference"
    type = "missing"

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact, sent = self.stated_fact(task, rng)
        if not sent:
            return None
        for phrase in _VAGUE[fact.kind]:
            new_sent = sent.replace(fact.value, phrase)
            if list(fact.find([("x", new_sent)])):
                continue  # the phrase itself would read as a (wrong) value
            new = replace_text(task.surfaces, self.target, sent, new_sent)
            edit = omission(task, new, f"{fact.id}: {fact.value} -> {phrase}", needed=fact)
            if edit is not None:
                return edit
        return None


# -- redundant ------------------------------------------------------------------

_THINGS = {
    "time": "the fire drill last month started at {d}",
    "date": "the office was closed on {d} for maintenance",
    "email": "the printer vendor can be reached at {d}, but nobody needs to contact them",
    "id": "{d} about the coffee machine was closed last week",
    "amount": "last quarter's team lunch came to {d} in total",
    "integer": "the parking garage has {d} spaces on level two",
    "text": 'an old newsletter template used "{d}"',
}


def unrelated_thing(task: Task, rng: random.Random) -> tuple[Fact, str, str] | None:
    """(fact, decoy, sentence) about an unrelated matter carrying a decoy of a fact's shape."""
    got = pick_decoy(task, rng)
    if got is None:
        return None
    fact, d = got
    return fact, d, _THINGS[fact.kind].format(d=d)


class AppendUnrelated(_OnTarget):
    """Append an earlier, unrelated and already settled matter (``append_unrelated``).

    After an explicit topic switch, the surface mentions a request or note
    that has nothing to do with the task and needs no action; it carries a
    decoy value of a fact's shape.  Nothing the solution needs changes; the
    decoy is the canary.
    """

    id = "append_unrelated"
    type = "redundant"
    _FRAMES = {
        "user": "\nOn another topic: last week I also asked you to note that {thing}. "
                "That one is already done, nothing to do there.\n",
        "procedure": "\nArchived note (informational only, no action required): {thing}.\n",
    }

    def applicable(self, task: Task) -> bool:
        return bool(task.facts)

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        got = unrelated_thing(task, rng)
        if got is None:
            return None
        fact, d, thing = got
        if self.target == "context":
            turns = (Turn("user", f"Different topic: for the archive, {thing}. No action needed."),
                     Turn("assistant", "Noted; nothing to do there."))
            new = replace(task.surfaces, context=task.surfaces.context + turns)
        else:
            text = getattr(task.surfaces, self.target)
            new = replace(task.surfaces, **{self.target: text.rstrip("\n") + "\n"
                                            + self._FRAMES[self.target].format(thing=thing)})
        return Edit(new, (Canary("text", d, fact.id),), note=f"appended: {thing}")


class KeepObsolete(_OnTarget):
    """Keep an obsolete version of a rule beside the current one (``keep_obsolete_rule``).

    Right before the sentence that states a fact, a copy of that sentence
    with a decoy value is kept, explicitly marked as superseded.  The current
    rule is unchanged, so the solution is the same; the decoy is the canary.
    """

    id = "keep_obsolete_rule"
    type = "redundant"

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact, sent = self.stated_fact(task, rng)
        d = fresh_decoy(task, fact, rng)
        if not sent or d is None:
            return None
        lead = re.match(r"\s*(?:[-*]\s+)?", sent)
        prefix = lead.group(0) if lead else ""
        body = sent[len(prefix):]
        old = f"Superseded, no longer applies: {body.rstrip('.').replace(fact.value, d)}. Current: "
        new = replace_text(task.surfaces, self.target, sent, prefix + old + body)
        return Edit(new, (Canary("text", d, fact.id),), note=f"kept obsolete rule: {old.strip()}")


# -- incorrect ------------------------------------------------------------------


class SwapValue(_OnTarget):
    """Replace a stated fact value with a plausible wrong one (``swap_value``).

    The corrupted fact stays recoverable: the recovery annotation names it and
    the user simulator gives its true value when asked; facts with a domain
    can also be cross-checked against the environment.  The wrong value is
    the canary.
    """

    id = "swap_value"
    type = "incorrect"

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact = rng.choice(facts_on(task, self.target))
        wrong = fresh_decoy(task, fact, rng)
        if wrong is None:
            return None
        text = surface_text(task.surfaces, self.target)
        new = replace_text(task.surfaces, self.target, fact.value, wrong, count=text.count(fact.value))
        if wrong not in {v for _, v in fact.find(new.texts())}:
            return None  # a reader would not take the wrong value as this fact
        return Edit(new, (Canary("value", wrong, fact.id),), recovery=(fact.id,),
                    note=f"{fact.id}: {fact.value} -> {wrong}")


class MisattributeValue(_OnTarget):
    """Attribute a real value of another source to this fact (``misattribute_value``).

    For a fact with a domain (e.g. contacts' e-mail addresses), its value is
    replaced by the value of *another* existing entity: the statement now
    credits the wrong person, ticket or message.  The value exists in the
    environment, so only the pairing is wrong; the recovery annotation names
    the fact and the user simulator gives its true value.  The misattributed
    value is the canary.
    """

    id = "misattribute_value"
    type = "incorrect"

    def _candidates(self, task: Task, fact: Fact) -> list[str]:
        seen = clean_text(task)
        return sorted({v for v in task.domain_values(fact) if v != fact.value and v not in seen and v})

    def applicable(self, task: Task) -> bool:
        return any(self._candidates(task, f) for f in facts_on(task, self.target))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        facts = [f for f in facts_on(task, self.target) if self._candidates(task, f)]
        fact = rng.choice(facts)
        wrong = rng.choice(self._candidates(task, fact))
        text = surface_text(task.surfaces, self.target)
        new = replace_text(task.surfaces, self.target, fact.value, wrong, count=text.count(fact.value))
        if wrong not in {v for _, v in fact.find(new.texts())}:
            return None
        return Edit(new, (Canary("value", wrong, fact.id),), recovery=(fact.id,),
                    note=f"{fact.id}: {fact.value} -> {wrong} (belongs to another entry of {fact.domain})")
