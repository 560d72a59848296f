"""Shared helpers of the operators: surface text edits, decoys, fact lookups.

Operators stay small by building on these: reading and replacing text of a
text surface (user, procedure, context turns), restating a fact with another
value where a reader finds it, drawing a wrong value from the task's own
world that the clean gold actions never use (a clean canary, see
:mod:`.decoys`), and telling which facts a reader can no longer find after
an edit.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from ..model.records import Canary
from ..model.task import Fact, Surfaces, Task, Turn
from .decoys import enum_alternatives, fresh_decoy
from ..model.interfaces import Edit
from .phrasing import restated
from .world import clean_text, gold_text


def surface_text(s: Surfaces, target: str) -> str:
    """All text of a text surface (context turns joined by newlines)."""
    if target == "context":
        return "\n".join(t.content for t in s.context)
    return str(getattr(s, target))


def replace_text(s: Surfaces, target: str, old: str, new: str, count: int = 1) -> Surfaces:
    """Replace text inside one text surface.

    On the context surface the replacement happens inside the first turn
    holding ``old``; turns left empty are dropped.  ``count`` < 0 replaces
    every occurrence.
    """
    if target == "context":
        turns = list(s.context)
        for i, t in enumerate(turns):
            if old in t.content:
                turns[i] = Turn(t.role, t.content.replace(old, new, count))
                break
        return replace(s, context=tuple(t for t in turns if t.content.strip()))
    return replace(s, **{target: getattr(s, target).replace(old, new, count)})


def texts_of(s: Surfaces, target: str) -> list[str]:
    """The separately edited texts of a surface: one per context turn, else one."""
    return [t.content for t in s.context] if target == "context" else [surface_text(s, target)]


def restate(s: Surfaces, target: str, fact: Fact, new: str) -> Surfaces:
    """Replace the fact's value by ``new`` where a reader finds it on one text surface.

    Only the sentences that state the fact change (see
    :func:`.phrasing.restated`); the same string elsewhere in the text, such
    as "travel" in "the travel and expenses assistant", is left alone.
    """
    if target == "context":
        return replace(s, context=tuple(Turn(t.role, restated(fact, t.content, new)) for t in s.context))
    if target == "user":
        return replace(s, user=restated(fact, s.user, new))
    return replace(s, procedure=restated(fact, s.procedure, new))


def facts_on(task: Task, target: str) -> list[Fact]:
    """The facts the clean task states on one surface.

    Args:
        task: the clean task.
        target: a surface: ``user``, ``procedure``, ``context`` or ``tool``.

    Returns:
        The task's facts whose ``surfaces`` name ``target``, in the task's order.
    """
    return [f for f in task.facts if target in f.surfaces]


def omitted_after(task: Task, new: Surfaces) -> list[Fact]:
    """Facts whose true value no surface states any more (as a reader finds facts)."""
    texts = new.texts()
    return [f for f in task.facts if f.surfaces and f.value not in {v for _, v in f.find(texts)}]


def stating_sentence(task: Task, fact: Fact, target: str) -> str | None:
    """The first sentence on ``target`` that states the fact's true value."""
    return next((x for x in (fact.stating(t) for t in texts_of(task.surfaces, target)) if x), None)


def pick_decoy(task: Task, rng: random.Random) -> tuple[Fact, str] | None:
    """A random fact of the task and a fresh decoy from its world (None if none is fresh)."""
    fact = rng.choice(list(task.facts))
    d = fresh_decoy(task, fact, rng)
    return None if d is None else (fact, d)


def clashes(decoy: str, sentence: str) -> bool:
    """Whether ``decoy`` already occurs in ``sentence`` ("get "edit" access, never edit rights")."""
    return re.search(rf"(?<![\w-]){re.escape(decoy.lower())}(?![\w-])", sentence.lower()) is not None


def omission(task: Task, new: Surfaces, note: str, needed: Fact | None = None) -> Edit | None:
    """The edit of a missing-type operator, from the surfaces it left.

    Every fact whose true value no surface of ``new`` states any more (as a
    reader finds facts) becomes an ``omitted`` canary (using the value means
    the agent recovered it) and part of the recovery annotation (the user
    simulator hands it back on request).

    Args:
        task: the clean task.
        new: the task's surfaces with something removed or made vague.
        note: one line for the report: what was removed.
        needed: a fact that must be among the missing ones, else there is no edit.

    Returns:
        The edit, or None when nothing went missing (or not ``needed``).
    """
    gone = omitted_after(task, new)
    if not gone or (needed is not None and needed not in gone):
        return None
    return Edit(new, tuple(Canary("omitted", f.value, f.id) for f in gone),
                recovery=tuple(f.id for f in gone), note=note)


__all__ = [
    "clashes", "clean_text", "enum_alternatives", "facts_on", "fresh_decoy", "gold_text", "omission",
    "omitted_after", "pick_decoy", "replace_text", "restate", "stating_sentence", "surface_text", "texts_of",
]
