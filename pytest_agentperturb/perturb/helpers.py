"""Shared helpers of the operators: surface text edits, decoys, fact lookups.

Operators stay small by building on these: reading and replacing text of a
text surface (user, procedure, context turns), drawing a plausible wrong
value of a fact's shape that the clean task never mentions (a clean canary),
and telling which facts a reader can no longer find after an edit.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from ..model.records import Canary
from ..model.task import TARGETS, Fact, Surfaces, Task, Turn, fill
from .engine import Edit


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


def clean_text(task: Task) -> str:
    """Everything the clean task says or does: surfaces, gold actions and answer."""
    values = task.fact_values()
    return "\n".join([*(task.surfaces.render(t) for t in TARGETS), fill(task.answer, values),
                      *(repr(fill(dict(s.args), values)) for s in task.solution)])


def gold_text(task: Task) -> str:
    """What the gold solution does: its filled tool arguments and answer."""
    values = task.fact_values()
    return "\n".join([fill(task.answer, values), *(repr(fill(dict(s.args), values)) for s in task.solution)])


def enum_alternatives(task: Task, fact: Fact) -> list[str]:
    """Other values of the tool enum that a fact fills (e.g. another access level)."""
    out: list[str] = []
    for step in task.solution:
        fn = task.surfaces.tool_schema(step.tool)
        props = fn["parameters"].get("properties", {}) if fn else {}
        for arg, tmpl in step.args.items():
            enum = props.get(arg, {}).get("enum") if isinstance(props.get(arg), dict) else None
            if tmpl == "{" + fact.id + "}" and enum:
                out += [str(e) for e in enum if str(e) != fact.value and str(e) not in out]
    return out


def fresh_decoy(task: Task, fact: Fact, rng: random.Random) -> str | None:
    """A decoy of the fact's shape whose appearance in actions is a clean canary.

    A fact that fills a tool enum gets another member of that enum which the
    gold actions never use; any other fact gets a value of its shape that the
    clean task never mentions anywhere.
    """
    alternatives = [e for e in enum_alternatives(task, fact) if e not in gold_text(task)]
    if alternatives:
        return rng.choice(alternatives)
    seen = clean_text(task)
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
    if v.startswith("/"):  # a path: change its last segment
        head, _, last = v.rpartition("/")
        return f"{head}/{rng.choice(('old', 'drafts', 'shared', 'misc'))}-{last}"
    if re.fullmatch(r"[a-z0-9-]+\.[a-z]+", v):  # a file name
        stem, _, ext = v.rpartition(".")
        return f"{stem}-{rng.choice(('draft', 'v2', 'old', 'copy'))}.{ext}"
    words = ["Updated", "Moved", "Notice", "Changed", "Archive", "Pending", "Draft", "Shared"]
    pick = rng.choice([w for w in words if w.lower() != v.lower()])
    return pick if v[:1].isupper() else pick.lower()


def facts_on(task: Task, target: str) -> list[Fact]:
    """Facts the clean task states on ``target``."""
    return [f for f in task.facts if target in f.surfaces]


def omitted_after(task: Task, new: Surfaces) -> list[Fact]:
    """Facts whose true value no surface states any more (as a reader finds facts)."""
    texts = new.texts()
    return [f for f in task.facts if f.surfaces and f.value not in {v for _, v in f.find(texts)}]


def stating_sentence(task: Task, fact: Fact, target: str) -> str | None:
    """The first sentence on ``target`` that states the fact's true value."""
    return next((x for x in (fact.stating(t) for t in texts_of(task.surfaces, target)) if x), None)


def pick_decoy(task: Task, rng: random.Random) -> tuple[Fact, str] | None:
    """A random fact of the task and a fresh decoy of its shape (None if none is fresh)."""
    fact = rng.choice(list(task.facts))
    d = fresh_decoy(task, fact, rng)
    return None if d is None else (fact, d)


def omission(task: Task, new: Surfaces, note: str, needed: Fact | None = None) -> Edit | None:
    """The edit of a missing-type operator: every fact ``new`` no longer states is
    an ``omitted`` canary and part of the recovery annotation.  None when
    nothing (or not ``needed``) went missing."""
    gone = omitted_after(task, new)
    if not gone or (needed is not None and needed not in gone):
        return None
    return Edit(new, tuple(Canary("omitted", f.value, f.id) for f in gone),
                recovery=tuple(f.id for f in gone), note=note)
