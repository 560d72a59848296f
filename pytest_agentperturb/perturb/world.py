"""The task's own world: the entities an edit may mention, read from any task.

Perturbations read as real input only when they talk about the task's own
people, rooms, folders, tickets and dates (docs/design.md section 1: plausible
edits of a benchmark's native objects).  :func:`world_of` extracts them from
the task's initial state without knowing its schema: a mapping with a
``name`` and an ``email`` is a person (or a shared mailbox), a mapping with
an id-shaped ``id`` or ``ref`` is a record (its ``title`` or ``subject``
names it), a ``path`` is a file, its parent a folder, and every other scalar
is remembered under its key (``room``, ``status``, ``priority``, ...).
Dates, times, amounts, e-mail addresses and ids are also collected from
free text.  A task from an adapter without an initial state gets an almost
empty world, and the operators fall back to snippets that need none of it.

:func:`fact_noun` and :func:`decoy_class` describe a fact the way a sentence
needs it: the noun that names its slot (``room``, ``purchase order``,
``access level``) and the class of value it holds (``email``, ``folder``,
``value``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.task import FACT_KINDS, TARGETS, Fact, Task, fill

EMAIL = re.compile(FACT_KINDS["email"])
DATE = re.compile(FACT_KINDS["date"])
TIME = re.compile(r"(?<![\d:])(?:[01]\d|2[0-3]):[0-5]\d(?![\d:])")
ID = re.compile(r"\b[A-Z]{2,6}-\d{1,6}\b")
AMOUNT = re.compile(r"(?<![\w.])\d+\.\d{2}(?![\w.])")
_FILE_NAME = re.compile(r"[\w-]+\.[A-Za-z0-9]{2,5}")
#: Where a value of a tool area lives, for the areas the office knows; others read "item".
_AREA_OBJECTS = {"calendar": "event", "mail": "message", "files": "file", "contacts": "contact",
                 "tickets": "ticket", "expenses": "expense claim"}


@dataclass(frozen=True)
class Person:
    """Someone (or a shared mailbox) with an address."""

    name: str
    email: str

    @property
    def first(self) -> str:
        return self.name.split()[0]


@dataclass(frozen=True)
class Record:
    """A ticket, event, invoice or claim: an id and what it is about."""

    id: str
    title: str


@dataclass(frozen=True)
class World:
    """Entities of one task, each tuple sorted and free of duplicates.

    Attributes:
        org: the organisation the assistant works for (``ACME``), or ``""``.
        team: the team named in the procedure (``design``), or ``""``.
        people: people with a personal address.
        mailboxes: shared addresses (lists, departments, suppliers).
        rooms, folders, files: places and documents (files as full paths).
        records: id-shaped entries with their titles.
        dates, times, amounts: values found in the state.
        by_key: every short scalar in the state, by its key.
        areas: the tool areas of the task (``calendar``, ``tickets``, ...).
    """

    org: str = ""
    team: str = ""
    people: tuple[Person, ...] = ()
    mailboxes: tuple[Person, ...] = ()
    rooms: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    records: tuple[Record, ...] = ()
    dates: tuple[str, ...] = ()
    times: tuple[str, ...] = ()
    amounts: tuple[str, ...] = ()
    by_key: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    areas: tuple[str, ...] = ()

    def person_of(self, email: str) -> Person | None:
        """The person or mailbox with this address."""
        return next((p for p in (*self.people, *self.mailboxes) if p.email == email), None)

    def record_of(self, rid: str) -> Record | None:
        """The record with this id."""
        return next((r for r in self.records if r.id == rid), None)

    def emails(self) -> tuple[str, ...]:
        """Every known address, personal first."""
        return tuple(dict.fromkeys(p.email for p in (*self.people, *self.mailboxes)))

    def values_for(self, key: str) -> tuple[str, ...]:
        """State values stored under ``key`` (or its plural / singular)."""
        out: list[str] = []
        for k in (key, key + "s", key[:-1] if key.endswith("s") else key):
            out += [v for v in self.by_key.get(k, ()) if v not in out]
        return tuple(out)


def clean_text(task: Task) -> str:
    """Everything the clean task says or does: surfaces, gold actions and answer."""
    values = task.fact_values()
    return "\n".join([*(task.surfaces.render(t) for t in TARGETS), fill(task.answer, values),
                      *(repr(fill(dict(s.args), values)) for s in task.solution)])


def gold_text(task: Task) -> str:
    """What the gold solution does: its filled tool arguments and answer."""
    values = task.fact_values()
    return "\n".join([fill(task.answer, values), *(repr(fill(dict(s.args), values)) for s in task.solution)])


def _walk(node: Any, key: str = "") -> Iterator[tuple[str, Any, Mapping[str, Any] | None]]:
    """(key, scalar, the mapping holding it) for every scalar of a JSON-like tree."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            if isinstance(v, (Mapping, list, tuple)):
                yield from _walk(v, str(k))
            else:
                yield str(k), v, node
    elif isinstance(node, (list, tuple)):
        for v in node:
            if isinstance(v, (Mapping, list, tuple)):
                yield from _walk(v, key)
            else:
                yield key, v, None


def _mappings(node: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(node, Mapping):
        yield node
        for v in node.values():
            yield from _mappings(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _mappings(v)


def name_from_address(email: str) -> str | None:
    """``omar.haddad@x`` -> ``Omar Haddad``; None for a mailbox such as ``ap@x``."""
    local = email.split("@", 1)[0]
    parts = [p for p in re.split(r"[._]", local) if p]
    if len(parts) < 2 or not all(p.isalpha() for p in parts):
        return None
    return " ".join(p.capitalize() for p in parts)


def _is_person(name: str, email: str) -> bool:
    words = name.split()
    return len(words) >= 2 and all(w[:1].isupper() for w in words) and name_from_address(email) is not None


def _org_and_team(task: Task) -> tuple[str, str]:
    text = task.surfaces.procedure + "\n" + task.surfaces.user
    m = re.search(r"\bof (?:the )?([A-Z][A-Za-z0-9&]+)\b", text)
    org = m.group(1) if m else ""
    t = re.search(r"\bthe (?:[A-Z][A-Za-z0-9&]+ )?([a-z]+(?: [a-z]+)?) team\b", text)
    return org, (t.group(1) if t else "")


def world_of(task: Task) -> World:
    """Every entity of the task's initial state (and a few from its procedure)."""
    state = task.initial_state
    people: dict[str, Person] = {}
    boxes: dict[str, Person] = {}
    records: dict[str, Record] = {}
    by_key: dict[str, list[str]] = {}
    paths: set[str] = set()
    folders: set[str] = set()
    dates: set[str] = set()
    times: set[str] = set()
    amounts: set[str] = set()
    emails: set[str] = set()
    for m in _mappings(state):
        name, email = m.get("name"), m.get("email")
        if isinstance(name, str) and isinstance(email, str) and EMAIL.fullmatch(email):
            (people if _is_person(name, email) else boxes)[email] = Person(name, email)
        for idk in ("id", "ref"):
            rid = m.get(idk)
            if isinstance(rid, str) and ID.fullmatch(rid) and rid not in records:
                title = next((str(m[k]) for k in ("title", "subject", "description", "name") if m.get(k)), "")
                records[rid] = Record(rid, title)
    for key, value, _ in _walk(state):
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            continue
        text = str(value)
        if len(text) <= 60 and "\n" not in text:
            vals = by_key.setdefault(key, [])
            if text not in vals:
                vals.append(text)
        emails.update(EMAIL.findall(text))
        spaced = re.sub(r"(?<=\d)T(?=\d)", " ", text)  # 2026-11-17T14:00: a date and a time
        dates.update(DATE.findall(spaced))
        times.update(TIME.findall(spaced))
        if key in ("amount", "total", "price") and re.fullmatch(r"\d+(?:\.\d{2})?", text):
            amounts.add(text)
        amounts.update(AMOUNT.findall(text))
        if text.startswith("/") and " " not in text:
            head, _, last = text.rpartition("/")
            if _FILE_NAME.fullmatch(last):
                paths.add(text)
                if head:
                    folders.add(head)
            else:
                folders.add(text.rstrip("/"))
    for e in sorted(emails):
        if e not in people and e not in boxes:
            n = name_from_address(e)
            if n:
                people[e] = Person(n, e)
            else:
                boxes[e] = Person(e.split("@")[0], e)
    org, team = _org_and_team(task)
    areas = {t.split("_")[0] for t in task.tools} | {str(k) for k in state}
    return World(
        org=org, team=team,
        people=tuple(sorted(people.values(), key=lambda p: p.email)),
        mailboxes=tuple(sorted(boxes.values(), key=lambda p: p.email)),
        rooms=tuple(sorted(by_key.get("room", []))),
        folders=tuple(sorted(folders)), files=tuple(sorted(paths)),
        records=tuple(sorted(records.values(), key=lambda r: r.id)),
        dates=tuple(sorted(dates)), times=tuple(sorted(times)), amounts=tuple(sorted(amounts)),
        by_key={k: tuple(v) for k, v in sorted(by_key.items())},
        areas=tuple(sorted(a for a in areas if a.isidentifier())),
    )


def area_object(tool: str) -> tuple[str, str]:
    """(singular, plural) of what a tool works on: ``calendar_update_event`` -> event(s)."""
    area = tool.split("_")[0]
    obj = _AREA_OBJECTS.get(area) or (area[:-1] if area.endswith("s") else area) or "item"
    plural = obj + ("es" if obj.endswith(("s", "x")) else "s")
    return obj, plural


# -- describing a fact -------------------------------------------------------------

_STOP = frozenset("""a an the to at in on of for by with from into under over is are was were be been get gets
got has have had do does did must should may can will would and or but than as that this these those it its
their his her our your my me us them him she he they we you i not never always only also then so if when once
after before until via per each every any all set use using start starts move moved send sent""".split())
_KIND_NOUNS = {"email": "address", "time": "time", "date": "date", "amount": "amount", "id": "reference",
               "integer": "number"}
_ID_TAILS = {"prefix", "folder", "file", "time", "date", "status", "list", "number", "name", "level", "code",
             "room", "category", "priority", "currency", "access", "amount", "title"}


def question_noun(fact: Fact) -> str:
    """The noun phrase a fact's question asks about: "Which purchase order ..." -> ``purchase order``."""
    m = re.search(r"\bwhich\s+((?:[a-z-]+\s+){0,2}?[a-z-]+)\s+(?:should|do|does|did|is|are|was|were|has|"
                  r"have|can|will|tracks?|belongs?|goes)\b", fact.question.lower())
    return m.group(1) if m else ""


def _pattern_noun(fact: Fact) -> str:
    if not fact.pattern:
        return ""
    head = fact.pattern.split("(", 1)[0]
    words = re.findall(r"[A-Za-z]+", head.replace("\\", " "))
    for w in reversed(words):
        word = str(w).lower()
        if word not in _STOP and len(word) > 2:
            return word
    return ""


def _id_noun(fact: Fact, tail_only: bool) -> str:
    tokens = [t for t in fact.id.lower().split("_") if t and t != "id"]
    if tokens and tokens[-1] in _ID_TAILS:
        return tokens[-1]
    return tokens[0] if len(tokens) == 1 and not tail_only else ""


def fact_noun(fact: Fact) -> str:
    """The noun that names the fact's slot, for phrases such as "the usual <noun>".

    In order: the fixed noun of e-mail, time and date facts; the noun the
    fact's question asks about ("Which purchase order ..."); a slot word at
    the end of its id (``subject_prefix`` -> prefix); the last content word
    before the value in its pattern (``room "(...)"`` -> room); a one-word id;
    a noun for its kind.
    """
    if fact.kind in ("email", "time", "date"):
        return {"email": "address"}.get(fact.kind, fact.kind)
    return (question_noun(fact) or _id_noun(fact, tail_only=True) or _pattern_noun(fact)
            or _id_noun(fact, tail_only=False) or _KIND_NOUNS.get(fact.kind, "value"))


def noun_words(fact: Fact) -> set[str]:
    """Words that name the fact's slot: its noun, question noun, pattern noun and cues."""
    words = set(fact_noun(fact).split()) | set(question_noun(fact).split()) | {_pattern_noun(fact)}
    words |= {c.lower() for c in fact.cues if " " not in c}
    return {w for w in words if w and w not in _STOP}


def decoy_class(fact: Fact) -> str:
    """What a stand-in for the fact looks like: email, date, time, id, amount, folder, file or value."""
    if fact.kind in ("email", "date", "time", "id", "amount"):
        return fact.kind
    v = fact.value
    if EMAIL.fullmatch(v):
        return "email"
    if ID.fullmatch(v):
        return "id"
    if v.startswith("/"):
        return "file" if _FILE_NAME.fullmatch(v.rsplit("/", 1)[-1]) else "folder"
    if _FILE_NAME.fullmatch(v) and not re.fullmatch(r"\d+\.\d+", v):
        return "file"
    return "value"
