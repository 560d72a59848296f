"""Fact-based operators shared by the text surfaces: user, procedure, context.

Each class is instantiated once per target it makes sense for; the target
modules (:mod:`.user_ops`, :mod:`.procedure_ops`, :mod:`.context_ops`)
register the instances under ``<target>-<type>``.  They act on *facts*
(docs/design.md section 1b): a missing operator removes what states a needed fact, a
redundant one adds plausible content that does not change the solution, an
incorrect one replaces a stated value with a wrong one that stays
recoverable (the user simulator knows the true value).

What they write reads like real input: wrong values come from the task's
own world (:mod:`.decoys`), vague phrases and negations fit the sentence
(:mod:`.phrasing`), and added content is drawn from per-area snippet banks
filled with the task's own entities (:mod:`.snippets`, ``banks/*.toml``).
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from ..model.records import Canary
from ..model.task import Fact, Task, Turn
from . import bank
from ..model.interfaces import Edit
from .helpers import (
    clashes,
    facts_on,
    fresh_decoy,
    omission,
    omitted_after,
    replace_text,
    restate,
    stating_sentence,
    surface_text,
    texts_of,
)
from .phrasing import vague_rewrites, with_value
from .realism import shape_problems
from .snippets import Filled, fill
from .world import clean_text

__all__ = [
    "AppendUnrelated", "DropFactSentence", "KeepObsolete", "MisattributeValue", "SwapValue",
    "VagueValue", "fresh_decoy", "omitted_after", "replace_text", "surface_text",
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
    user simulator supplies it when asked, so the task stays solvable.  The
    space around the sentence goes with it, so no stray blank is left.  A
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
        cut, keep = _removal(holder, sent)
        new = replace_text(task.surfaces, self.target, cut, keep)
        if self.target == "user" and not new.user.strip():
            return None
        return omission(task, new, f"removed: {sent.strip()}")


def _removal(holder: str, sent: str) -> tuple[str, str]:
    """(text to cut, what to put back) to remove ``sent`` from ``holder`` without a stray blank."""
    m = re.search(r"([ \t]*)" + re.escape(sent) + r"([ \t]*)(\n?)", holder)
    if m is None:
        return sent, ""
    starts_line = m.start() == 0 or holder[m.start() - 1] == "\n"
    ends_line = bool(m.group(3)) or m.end() == len(holder)
    if starts_line and ends_line:
        return m.group(0), ""  # the whole line goes
    if ends_line:
        return m.group(0), m.group(3)  # "... rate. That is X.\n" -> "... rate.\n"
    return m.group(0), m.group(1)  # "A. B. C." -> "A. C."


class VagueValue(_OnTarget):
    """Replace a needed value by a vague reference that fits the sentence (``vague_reference``).

    The whole phrase holding the value gives way to a vague noun phrase of
    the fact's kind (``Book room "Fjord"`` -> ``Book the room we normally
    use``, ``in the folder /finance/payable`` -> ``in the usual folder``); a
    value in parentheses or in an apposition is dropped with them.  The
    phrases come from ``banks/phrasing.toml`` (:func:`.phrasing.vague_rewrites`).
    The fact is stated nowhere any more, so it is genuinely missing; the
    recovery annotation names it and the user simulator supplies it.
    """

    id = "vague_reference"
    type = "missing"

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact, sent = self.stated_fact(task, rng)
        if not sent:
            return None
        rewrites = vague_rewrites(fact, sent)
        rng.shuffle(rewrites)
        for new_sent in rewrites:
            if list(fact.find([("x", new_sent)])) or shape_problems(new_sent):
                continue  # the phrase would read as a (wrong) value, or reads badly
            new = replace_text(task.surfaces, self.target, sent, new_sent)
            edit = omission(task, new, f"{fact.id}: {sent.strip()} -> {new_sent.strip()}", needed=fact)
            if edit is not None:
                return edit
        return None


# -- redundant ------------------------------------------------------------------

#: The bank section each surface draws its unrelated content from.
_ASIDES = {"user": "user_aside", "procedure": "procedure_note", "context": "context_aside"}


def unrelated(task: Task, section: str, rng: random.Random) -> Filled | None:
    """A snippet about another, already settled matter, filled with the task's own entities.

    The snippet comes from ``section`` of ``banks/redundant.toml``, among
    those whose tool area the task has, and carries a fresh decoy of one of
    the task's facts (see :func:`~.decoys.fresh_decoy`): content that needs
    no action and changes nothing the solution needs.  An aside in the
    conversation without a reply of its own gets one of the assistant's
    replies of the ``acks`` section.

    Args:
        task: the clean task.
        section: the bank section: ``user_aside``, ``procedure_note``,
            ``context_aside``, ``add_background``, ``history`` or ``distractor``.
        rng: the operator's seeded random generator.

    Returns:
        The filled snippet (its ``text``, ``reply`` and ``canaries``), or None
        when no snippet of the section can be filled for this task.
    """
    replies = bank.snippets("redundant", "acks") if section == "context_aside" else ()
    return fill(task, bank.snippets("redundant", section), rng, replies=replies)


class AppendUnrelated(_OnTarget):
    """Append an earlier, unrelated and already settled matter (``append_unrelated``).

    The surface gains a snippet about another matter (a postscript of the
    user, a note in the policy's history, an aside in the conversation with
    the assistant's reply), drawn from the snippet bank of the task's tool
    areas and filled with the task's own people, rooms, folders and records
    (``banks/redundant.toml``).  It needs no action and carries a decoy from
    the task's world; nothing the solution needs changes.  The decoy is the
    canary.
    """

    id = "append_unrelated"
    type = "redundant"

    def applicable(self, task: Task) -> bool:
        return bool(task.facts)

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        got = unrelated(task, _ASIDES[self.target], rng)
        if got is None:
            return None
        if self.target == "context":
            turns = (Turn("user", got.text), Turn("assistant", got.reply))
            new = replace(task.surfaces, context=task.surfaces.context + turns)
        else:
            text = getattr(task.surfaces, self.target)
            new = replace(task.surfaces, **{self.target: text.rstrip("\n") + "\n\n" + got.text + "\n"})
        return Edit(new, got.canaries, note=f"appended: {got.text}")


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


class KeepObsolete(_OnTarget):
    """Keep an obsolete version of a rule beside the current one (``keep_obsolete_rule``).

    The sentence that states a fact keeps its current wording and gains its
    history, the way policy documents do: a revision note, a struck-through
    old rule, a changelog entry (``banks/obsolete.toml``), naming the
    outdated value (a decoy from the task's world).  The current rule is
    unchanged, so the solution is the same; the outdated value is the canary.
    """

    id = "keep_obsolete_rule"
    type = "redundant"

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact, sent = self.stated_fact(task, rng)
        if not sent:
            return None
        lead = re.match(r"\s*(?:[-*]\s+|\d+[.)]\s+)?", sent)
        prefix = lead.group(0) if lead else ""
        body = sent[len(prefix):]

        def slots(f: Fact, decoy: str) -> dict[str, str] | None:
            old = with_value(f, body, decoy)
            if old is None or clashes(decoy, body):
                return None
            bare = old.rstrip().rstrip(".")
            return {"current": body, "current_lc": _lower_first(body), "old": old, "old_bare": bare,
                    "old_lc": _lower_first(bare)}

        got = fill(task, bank.snippets("obsolete", "frames"), rng, facts=[fact], extra=slots)
        if got is None:
            return None
        new = replace_text(task.surfaces, self.target, sent, prefix + got.text)
        return Edit(new, got.canaries, note=f"kept obsolete rule: {got.text}")


# -- incorrect ------------------------------------------------------------------


class SwapValue(_OnTarget):
    """Replace a stated fact value with a wrong one from the task's world (``swap_value``).

    The wrong value is another valid value of the fact's slot: another
    member of the tool enum it fills, another entry of its domain, another
    folder, file, room, date or ticket of the environment (:mod:`.decoys`);
    only where the world has none, a plausible value of the same kind and
    format.  It replaces the value only where a reader finds the fact.  The
    corrupted fact stays recoverable: the recovery annotation names it and
    the user simulator gives its true value when asked.  The wrong value is
    the canary.
    """

    id = "swap_value"
    type = "incorrect"

    def wrong_value(self, task: Task, fact: Fact, rng: random.Random) -> str | None:
        sent = stating_sentence(task, fact, self.target) or ""
        for _ in range(3):
            wrong = fresh_decoy(task, fact, rng)
            if wrong is not None and not clashes(wrong, sent):
                return wrong
        return None

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact = rng.choice(facts_on(task, self.target))
        wrong = self.wrong_value(task, fact, rng)
        if wrong is None:
            return None
        new = restate(task.surfaces, self.target, fact, wrong)
        if wrong not in {v for _, v in fact.find(new.texts())}:
            return None  # a reader would not take the wrong value as this fact
        return Edit(new, (Canary("value", wrong, fact.id),), recovery=(fact.id,),
                    note=f"{fact.id}: {fact.value} -> {wrong}")


class MisattributeValue(SwapValue):
    """Attribute a real value of another entry to this fact (``misattribute_value``).

    For a fact with a domain (e.g. contacts' e-mail addresses), its value is
    replaced by the value of *another* existing entity that the clean task
    never mentions: the statement now credits the wrong person, ticket or
    message.  The value exists in the environment, so only the pairing is
    wrong; the recovery annotation names the fact and the user simulator
    gives its true value.  The misattributed value is the canary.
    """

    id = "misattribute_value"
    type = "incorrect"

    def _candidates(self, task: Task, fact: Fact) -> list[str]:
        seen = clean_text(task)
        sent = stating_sentence(task, fact, self.target) or ""
        return sorted({v for v in task.domain_values(fact)
                       if v != fact.value and v not in seen and v and not clashes(v, sent)})

    def applicable(self, task: Task) -> bool:
        return any(self._candidates(task, f) for f in facts_on(task, self.target))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        facts = [f for f in facts_on(task, self.target) if self._candidates(task, f)]
        fact = rng.choice(facts)
        wrong = rng.choice(self._candidates(task, fact))
        new = restate(task.surfaces, self.target, fact, wrong)
        if wrong not in {v for _, v in fact.find(new.texts())}:
            return None
        return Edit(new, (Canary("value", wrong, fact.id),), recovery=(fact.id,),
                    note=f"{fact.id}: {fact.value} -> {wrong} (belongs to another entry of {fact.domain})")

