"""Fill bank snippets with the task's own entities and a decoy (docs/design.md section 1).

A snippet template (:mod:`.bank`) names its slots in braces.  :class:`Slots`
fills them from the task's world (:mod:`.world`) and the chosen decoy; a
template whose slots the world cannot fill is skipped, so a task from an
adapter without an initial state still gets the snippets that need nothing
but the decoy.  Slots (a capitalised name gives a capitalised value):

``decoy``, ``decoy_q`` (quoted as the task quotes the fact), ``decoy_name``
and ``decoy_first`` (who owns a decoy address), ``decoy_title`` (what a decoy
id is about), ``noun`` (the fact's slot noun), ``org``, ``team``,
``other_team``, ``person``, ``person_first``, ``person_email``,
``colleague``, ``room``, ``folder``, ``file``, ``record``, ``record_title``,
``date``, ``time``, ``amount``, ``weekday``, ``month``, ``year``, plus any
extra slot an operator passes (``current``, ``old`` for obsolete rules).

Values drawn from the world never come from the clean gold actions, and
those a reader could take for a fact become canaries beside the decoy.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..model.records import Canary
from ..model.task import Fact, Task
from . import bank
from .bank import Snippet
from .decoys import fits, fresh_decoys
from .world import World, clean_text, decoy_class, fact_noun, gold_text, name_from_address, world_of

_FORMATTER = string.Formatter()


def slot_names(template: str) -> list[str]:
    """The slot names a template uses, in order."""
    return [f for _, f, _, _ in _FORMATTER.parse(template) if f]


class Slots:
    """Lazily computed slot values for one (task, fact, decoy); None means "cannot fill"."""

    #: Slots whose values come from the world (candidates for extra canaries).
    WORLD_SLOTS = ("person_email", "room", "folder", "file", "record", "date", "time", "amount")

    def __init__(self, task: Task, world: World, fact: Fact, decoy: str, rng: random.Random,
                 extra: Mapping[str, str] | None = None) -> None:
        self.task, self.world, self.fact, self.decoy, self.rng = task, world, fact, decoy, rng
        self.extra = dict(extra or {})
        self._gold = gold_text(task)
        self._taken = {fact.value, decoy, *task.fact_values().values()}
        self._cache: dict[str, str | None] = {}
        self._person: tuple[str, str] | None = None
        self._person_drawn = False

    def _pick(self, values: Sequence[str]) -> str | None:
        ok = [v for v in values if v and v not in self._gold and v not in self._taken]
        return self.rng.choice(ok) if ok else None

    def _people(self) -> tuple[str, str] | None:
        if not self._person_drawn:
            self._person_drawn = True
            decoy_owner = self.world.person_of(self.decoy)
            ok = [p for p in self.world.people if p.email not in self._gold and p.email != self.decoy
                  and (decoy_owner is None or p.first != decoy_owner.first)]
            p = self.rng.choice(ok) if ok else None
            self._person = (p.name, p.email) if p else None
        return self._person

    def _compute(self, name: str) -> str | None:
        w, f, d = self.world, self.fact, self.decoy
        if name in self.extra:
            return self.extra[name]
        quoted = any(f'"{f.value}' in t for _, t in self.task.surfaces.texts())
        simple: dict[str, Callable[[], str | None]] = {
            "decoy": lambda: d,
            "decoy_q": lambda: f'"{d}"' if quoted else d,
            "noun": lambda: fact_noun(f),
            "org": lambda: w.org or None,
            "team": lambda: w.team or None,
            "other_team": lambda: self.rng.choice([t for t in bank.words("phrasing", "fallback", "teams")
                                                   if t != w.team]),
            "weekday": lambda: self.rng.choice(bank.words("phrasing", "fallback", "weekdays")),
            "month": lambda: self.rng.choice(bank.words("phrasing", "fallback", "months")),
            "year": lambda: self._year(),
            "room": lambda: self._pick(w.rooms),
            "folder": lambda: self._pick(w.folders),
            "file": lambda: self._pick([p.rsplit("/", 1)[-1] for p in w.files]),
            "date": lambda: self._pick(w.dates),
            "time": lambda: self._pick(w.times),
            "amount": lambda: self._pick(w.amounts),
        }
        if name in simple:
            return simple[name]()
        if name in ("decoy_name", "decoy_first"):
            owner = w.person_of(d)
            full = owner.name if owner and " " in owner.name else name_from_address(d) if "@" in d else None
            return None if full is None else (full if name == "decoy_name" else full.split()[0])
        if name == "decoy_title":
            rec = w.record_of(d)
            return rec.title if rec and rec.title else None
        if name in ("person", "person_first", "person_email"):
            p = self._people()
            if p is None:
                return None
            return {"person": p[0], "person_first": p[0].split()[0], "person_email": p[1]}[name]
        if name == "colleague":
            first = self._people()
            others = [p.name for p in w.people if p.email not in self._gold and p.email != d
                      and (first is None or p.name != first[0])]
            return self.rng.choice(others) if others else None
        if name in ("record", "record_title"):
            if "record" not in self._cache:
                recs = [r for r in w.records if r.id not in self._gold and r.id != d and r.title]
                r = self.rng.choice(recs) if recs else None
                self._cache["record"], self._cache["record_title"] = (r.id, r.title) if r else (None, None)
            return self._cache[name]
        raise KeyError(f"unknown slot {{{name}}}")

    def _year(self) -> str | None:
        years = sorted({x[:4] for x in (*self.world.dates, *self.task.fact_values().values())
                        if re.fullmatch(r"\d{4}-\d\d-\d\d", x)})
        return years[0] if years else None

    def get(self, name: str) -> str | None:
        """The value of one slot (``Name`` capitalises it)."""
        key = name[:1].lower() + name[1:]
        if key not in self._cache:
            self._cache[key] = self._compute(key)
        v = self._cache[key]
        return v[:1].upper() + v[1:] if v and name[:1].isupper() else v

    def render(self, template: str) -> str | None:
        """The filled template, or None when a slot cannot be filled."""
        values: dict[str, str] = {}
        for name in slot_names(template):
            v = self.get(name)
            if v is None:
                return None
            values[name] = v
        return template.format_map(values)

    def canaries(self, text: str) -> tuple[Canary, ...]:
        """The decoy, plus world values in ``text`` that a reader could take for some fact."""
        out = [Canary("text", self.decoy, self.fact.id)]
        for name in self.WORLD_SLOTS:
            v = self._cache.get(name)
            if not v or v not in text or v in self._gold:
                continue
            for f in self.task.facts:
                if f.id != self.fact.id and v != f.value and fits(self.task, f, v):
                    out.append(Canary("text", v, f.id))
                    break
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Filled:
    """A filled snippet: its text (and reply, for a conversation), the fact and decoy it carries.

    Attributes:
        fact: the fact whose decoy the snippet carries.
        decoy: the wrong value planted (see :func:`~.decoys.fresh_decoy`).
        text: the filled text.
        reply: the assistant's reply to it, for a conversation turn ("" otherwise).
        canaries: the planted artefacts of ``text`` and ``reply`` (the decoy among them).
        template: the bank entry it was filled from.
    """

    fact: Fact
    decoy: str
    text: str
    reply: str
    canaries: tuple[Canary, ...]
    template: Snippet


def usable(entries: Sequence[Snippet], world: World) -> list[Snippet]:
    """Entries whose tool area the task has (``any`` fits every task)."""
    return [s for s in entries if s.area == "any" or s.area in world.areas]


def fill(task: Task, entries: Sequence[Snippet], rng: random.Random, *, world: World | None = None,
         facts: Sequence[Fact] | None = None, extra: Callable[[Fact, str], Mapping[str, str] | None] | None = None,
         replies: Sequence[Snippet] = ()) -> Filled | None:
    """Fill one of ``entries`` for a random fact of the task and a fresh decoy of it.

    Facts, decoys and templates are tried in an order drawn from ``rng``; the
    first template whose slots the world can fill wins.  ``extra`` may add
    slots per (fact, decoy) or veto a fact (None).  A snippet without a
    ``reply`` of its own gets one of ``replies`` when they are given.
    """
    world = world or world_of(task)
    entries = usable(entries, world)
    order = list(facts if facts is not None else task.facts)
    rng.shuffle(order)
    seen = clean_text(task)
    for fact in order:
        decoys = fresh_decoys(task, fact, rng, world)
        if not decoys:
            continue
        unseen = [x for x in decoys if x not in seen]
        decoy = rng.choice(unseen or decoys)
        more = extra(fact, decoy) if extra else {}
        if more is None:
            continue
        cls = decoy_class(fact)
        candidates = [s for s in entries if s.decoy in (cls, "any")]
        rng.shuffle(candidates)
        for snip in candidates:
            slots = Slots(task, world, fact, decoy, rng, more)
            text = slots.render(snip.text)
            if text is None or decoy not in text:
                continue
            pool = usable(replies, world)
            reply_tpl = snip.reply or (rng.choice(pool).text if pool else "")
            reply = slots.render(reply_tpl) if reply_tpl else ""
            if reply is None:
                continue
            return Filled(fact, decoy, text, reply, slots.canaries(text + "\n" + reply), snip)
    return None
