"""Wrong values from the task's own world (docs/design.md section 1, ``incorrect``).

A decoy is what an ``incorrect`` operator puts where a true value was, and
what a ``redundant`` snippet mentions beside it.  It reads as real input only
when it is a value the task's world could hold: another real contact's
address, another existing folder, another open ticket, another room.  So
:func:`world_values` lists, best first, the other members of the tool enum
the fact fills, the other values of its declared domain, and the other
values of the same class and format in the environment (:mod:`.world`).
Only where the world holds none does :func:`fallback_value` make a
plausible value of the same kind and format (another year, another name
from the bank), never the true value with ``-old`` or a surname spliced in.

Every decoy is *fresh*: it never occurs in the clean gold actions, so its
appearance in what an agent does is a canary; decoys the clean task never
mentions at all come first.  Everything is deterministic given the RNG.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

from ..model.task import Fact, Task
from . import bank
from .phrasing import with_value
from .world import ID, World, clean_text, decoy_class, fact_noun, gold_text, name_from_address, world_of

#: Generic stand-in words no real request uses as a value (an IBAN, a city or a hotel replaced by "Internal"):
#: never drawn as a decoy, and named by the realism lint.
STAND_INS: frozenset[str] = frozenset({"Internal", "Default", "Standard", "Regular", "General", "Generic",
                                       "Misc", "Other", "Placeholder", "TBD", "N/A", "Sample", "Example"})

#: Tokens that mark a value as an edited copy of the true one (see ``banks/phrasing.toml``).
TELLS: frozenset[str] = frozenset(bank.words("phrasing", "tells", "tokens"))


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


def _same_ext(a: str, b: str) -> bool:
    return a.rpartition(".")[2].lower() == b.rpartition(".")[2].lower()


def _class_values(fact: Fact, world: World) -> list[str]:
    v, cls = fact.value, decoy_class(fact)
    if cls == "email":
        domain = v.split("@", 1)[-1]
        personal = name_from_address(v) is not None
        first = [p.email for p in (world.people if personal else world.mailboxes)]
        rest = [e for e in world.emails() if e not in first]
        return sorted(first, key=lambda e: e.split("@", 1)[-1] != domain) + rest
    if cls == "date":
        return list(world.dates)
    if cls == "time":
        return list(world.times)
    if cls == "id":
        prefix = v.rsplit("-", 1)[0] + "-"
        return [r.id for r in world.records if r.id.startswith(prefix)]
    if cls == "amount":
        return list(world.amounts)
    if cls == "folder":
        top = v.strip("/").split("/")[0]
        return sorted(world.folders, key=lambda f: f.strip("/").split("/")[0] != top)
    if cls == "file":
        if v.startswith("/"):
            return [f for f in world.files if _same_ext(f, v)]
        return list(dict.fromkeys(f.rsplit("/", 1)[-1] for f in world.files if _same_ext(f, v)))
    keys = [fact_noun(fact).split()[-1], *fact.id.lower().split("_"), fact.id.lower()]
    return [x for k in dict.fromkeys(keys) for x in world.values_for(k)]


def world_values(task: Task, fact: Fact, world: World | None = None) -> list[str]:
    """Values of the task's world that could stand in for ``fact``, best first.

    The other members of the tool enum the fact fills, the other values of
    its domain, then environment values of the same class (addresses of the
    same kind, dates, times, ids with the same prefix, amounts, folders,
    files with the same extension, values stored under the slot's key).
    """
    world = world or world_of(task)
    pools: Iterable[str] = [*enum_alternatives(task, fact), *task.domain_values(fact), *_class_values(fact, world)]
    return [x for x in dict.fromkeys(pools) if x and x != fact.value and fits(task, fact, x)]


def fits(task: Task, fact: Fact, candidate: str) -> bool:
    """Whether a reader would take ``candidate`` for this fact where the true value is stated."""
    if not candidate or "\n" in candidate or candidate == fact.value:
        return False
    for _, text in task.surfaces.texts():
        sent = fact.stating(text)
        if sent:
            new = with_value(fact, sent, candidate)
            return new is not None and candidate in {v for _, v in fact.find([("x", new)])}
    rx = fact.regex()
    return bool(re.fullmatch(rx.pattern if not rx.groups else _group(rx.pattern), candidate))


def _group(pattern: str) -> str:
    m = re.search(r"\((?!\?)(.*?)\)", pattern)
    return m.group(1) if m else ".+"


def _shift_time(v: str, rng: random.Random) -> str:
    h, m = map(int, v.split(":"))
    return f"{(h + rng.choice((1, 2, 3, -1, -2)) - 8) % 10 + 8:02d}:{m:02d}"


def _shift_number(v: str, rng: random.Random) -> str:
    whole, _, cents = v.partition(".")
    nw = max(1, int(whole) + rng.choice((-1, 1)) * max(1, int(whole) // rng.choice((4, 5, 10))))
    return f"{nw}.{cents}" if cents else str(nw)


def _other_year_or_number(stem: str, rng: random.Random) -> str | None:
    if m := re.search(r"(?<!\d)(19|20)\d\d(?!\d)", stem):
        year = int(m.group(0)) + rng.choice((-1, -2, 1))
        return stem[:m.start()] + str(year) + stem[m.end():]
    if m := re.search(r"(?i)(?<![a-z])q([1-4])(?!\d)", stem):
        q = rng.choice([x for x in "1234" if x != m.group(1)])
        return stem[:m.start() + 1] + q + stem[m.end():]
    if m := re.search(r"\d+", stem):
        n = int(m.group(0)) + rng.choice((1, 2, 3))
        return stem[:m.start()] + f"{n:0{len(m.group(0))}d}" + stem[m.end():]
    return None


def same_shape(value: str, rng: random.Random) -> str:
    """Another value of the shape of ``value``: each letter and digit redrawn in its class, the rest kept."""
    out = []
    for ch in value:
        if ch.isdigit():
            out.append(rng.choice("0123456789"))
        elif ch.isupper():
            out.append(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ"))
        elif ch.islower():
            out.append(rng.choice("abcdefghijkmnopqrstuvwxyz"))
        else:
            out.append(ch)
    return "".join(out)


def fallback_value(task: Task, fact: Fact, rng: random.Random) -> str | None:
    """A plausible value of the fact's kind and format, for a world that holds no other one."""
    v, cls = fact.value, decoy_class(fact)
    pick = rng.choice
    if cls == "email":
        local, _, domain = v.partition("@")
        own = name_from_address(v)
        if own is None:
            return f"{pick([m for m in bank.words('phrasing', 'fallback', 'mailboxes') if m != local])}@{domain}"
        firsts = [n for n in bank.words("phrasing", "fallback", "first_names") if n.lower() != own.split()[0].lower()]
        sep = "_" if "_" in local else "."
        return f"{pick(firsts)}{sep}{pick(bank.words('phrasing', 'fallback', 'last_names'))}@{domain}".lower()
    if cls == "date":
        y, mo, d = v.split("-")
        return f"{y}-{mo}-{(int(d) + pick((1, 2, 3, 5, 7)) - 1) % 28 + 1:02d}"
    if cls == "time":
        return _shift_time(v, rng)
    if cls == "id":
        prefix, num = v.rsplit("-", 1)
        return f"{prefix}-{int(num) + pick((1, 2, 3, 7, 11)):0{len(num)}d}"
    if cls == "amount" or re.fullmatch(r"\d+(?:\.\d+)?", v):
        return _shift_number(v, rng)
    if cls == "folder":
        head, _, last = v.rstrip("/").rpartition("/")
        other = _other_year_or_number(last, rng) if re.search(r"\d", last) else None
        leaves = [x for x in bank.words("phrasing", "fallback", "folder_leaves") if x != last]
        return f"{head}/{other or pick(leaves)}"
    if cls == "file":
        head, slash, name = v.rpartition("/")
        stem, _, ext = name.rpartition(".")
        new_stem = _other_year_or_number(stem, rng) or pick(("summary", "overview", "notes", "minutes", "agenda"))
        return f"{head}{slash}{new_stem}.{ext}"
    if ID.fullmatch(v):
        return None
    if re.search(r"\d", v) or (len(v) >= 2 and v.isupper() and v.isalnum()):
        return same_shape(v, rng)  # a code (XEHM4B, an IBAN): another one of the same shape, never a generic word
    keys = [fact_noun(fact).split()[-1], *fact.id.lower().split("_")]
    pool = next((bank.words("phrasing", "fallback", k) for k in keys if bank.words("phrasing", "fallback", k)),
                bank.words("phrasing", "fallback", "value"))
    options = [x for x in pool if x.lower() != v.lower()]
    if not options:
        return None
    out = pick(options)
    return out.capitalize() if v[:1].isupper() else out


def has_tell(decoy: str, true: str) -> bool:
    """Whether ``decoy`` is ``true`` with a tell-tale edit (``-old``, ``draft-``, a spliced surname)."""
    parts = set(re.split(r"[-_./@\s]+", decoy.lower())) - set(re.split(r"[-_./@\s]+", true.lower()))
    if parts & TELLS:
        return True
    if "@" in decoy and "@" in true:
        (dl, dd), (tl, td) = decoy.split("@", 1), true.split("@", 1)
        d_first, t_first = re.split(r"[._]", dl)[0], re.split(r"[._]", tl)[0]
        return dd == td and dl != tl and (d_first == t_first or dl.startswith(tl) or tl.startswith(dl))
    return len(true) > 3 and true in decoy


def fresh_decoys(task: Task, fact: Fact, rng: random.Random, world: World | None = None) -> list[str]:
    """Fresh decoys for ``fact``: world values first (never in the clean gold actions), else one fallback.

    World values the clean task never mentions come before those it does;
    a fallback value is added only when the world offers nothing fresh, and
    only when it is fresh, fits the fact's format and carries no tell.
    """
    gold, seen = gold_text(task), clean_text(task)
    values = [x for x in world_values(task, fact, world) if x not in gold and x not in STAND_INS]
    values.sort(key=lambda x: x in seen)  # stable: unseen first, world order kept
    if values:
        return values
    for _ in range(10):
        d = fallback_value(task, fact, rng)
        if d and d not in seen and d not in STAND_INS and fits(task, fact, d) and not has_tell(d, fact.value):
            return [d]
    return []


def fresh_decoy(task: Task, fact: Fact, rng: random.Random, world: World | None = None) -> str | None:
    """A wrong value for a fact, drawn from the task's own world, that the clean gold actions never use.

    Candidates are the world's values that could stand in for the fact
    (:func:`world_values`: the other members of the tool enum it fills, the
    other values of its domain, environment values of the same class) that
    the gold solution and answer do not use; when the world offers none, one
    generated value that fits the fact's format.  The draw is among the
    values the clean task never mentions when there are any, else among the
    others, so the decoy works as a canary: an agent that uses it took the
    perturbation up.

    Args:
        task: the clean task.
        fact: the fact to find a wrong value for.
        rng: the operator's seeded random generator (same seed, same decoy).
        world: the task's extracted world, when the caller has it already.

    Returns:
        The decoy, or None when no fresh value exists.
    """
    values = fresh_decoys(task, fact, rng, world)
    if not values:
        return None
    seen = clean_text(task)
    unseen = [x for x in values if x not in seen]
    return rng.choice(unseen or values)
