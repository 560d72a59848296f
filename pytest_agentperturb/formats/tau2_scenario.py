"""A tau2 user scenario as the task model's surfaces and facts (for :mod:`.tau2`); imports no tau2.

tau2 gives its user simulator a scenario: ``reason_for_call``,
``known_info`` (what the user knows: name, user id, zip code, order
number), ``unknown_info`` and ``task_instructions`` (how to behave).  The
agent sees none of it; it hears the user's requests.  Here:

* the opening request is the ``reason_for_call``, rewritten by rule from
  the second person ("You want to cancel reservation EHGLP3") to the
  first ("I want to cancel reservation EHGLP3") (:func:`opening_request`);
* facts are the string values of the gold actions' arguments that the
  agent cannot look up: those the request states (``user`` facts, which
  the user operators remove or corrupt), those the policy states
  (``procedure`` facts), and those only the scenario's ``known_info`` or
  ``task_instructions`` state: these are *held* facts, on no surface,
  which the user simulator gives when asked on every instance
  (``Task.held``).  Values the agent finds with its tools (a reservation id
  listed in the user's profile) are no facts: the gold steps keep them
  literally;
* each fact is read by a pattern anchored on the words around it
  (:func:`~.facts.stated_fact`), and kept only when a reader of the clean
  surfaces finds exactly its value (held facts are read nowhere);
* an authored edit may declare further facts (``facts = { id = "value" }``
  in the domain's pack): a policy rule's figure that no gold argument holds
  (the free bags of a gold member, a certificate's amount), so that the
  procedure families can remove or corrupt the rule (:func:`declared_facts`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..model.task import Fact, Step, Surfaces
from .derived_facts import stated_at, stated_fact

#: Second-person phrases and their first-person forms, longest first (case kept at a sentence start).
_PERSON: tuple[tuple[str, str], ...] = (
    ("you are", "I am"), ("you're", "I'm"), ("you were", "I was"), ("you've", "I've"), ("you'd", "I'd"),
    ("you'll", "I'll"), ("yourself", "myself"), ("yours", "mine"), ("your", "my"),
)
#: Words after which ``you`` is an object (``me``), not a subject (``I``).
_OBJECT_BEFORE = re.compile(r"(?:\b(?:to|for|with|at|from|about|tell|told|tells|give|gave|gives|help|helps|"
                            r"helped|let|lets|ask|asks|asked|allow|allows|allowed|call|called|contact|"
                            r"contacted|charge|charged|offer|offered|send|sent|show|owe|owes|remind)\s+)$", re.I)
#: How a user is asked for an argument whose name alone reads badly.
QUESTION_WORDS: Mapping[str, str] = {"email": "e-mail address", "dob": "date of birth", "zip": "zip code"}
#: The smallest string value worth a fact (shorter ones are read everywhere).
MIN_LEN = 2


def opening_request(reason_for_call: str) -> str:
    """The user's opening message: ``reason_for_call`` in the first person, whitespace tidied."""
    text = re.sub(r"[ \t]+", " ", reason_for_call.strip())
    text = re.sub(r" ?\n ?", "\n", text)
    text = re.sub(r"\n\s*\n+", "\n\n", text)
    out, i = [], 0
    words = re.compile(r"\b(" + "|".join(re.escape(a) for a, _ in _PERSON) + r"|you)\b", re.I)
    for m in words.finditer(text):
        word = m.group(1)
        low = word.lower()
        if low == "you":
            new = "me" if _OBJECT_BEFORE.search(text[:m.start()]) else "I"
        else:
            new = dict(_PERSON)[low]
        if word[0].isupper() and new[0].islower():
            new = new[0].upper() + new[1:]
        out += [text[i:m.start()], new]
        i = m.end()
    out.append(text[i:])
    return "".join(out)


def held_text(known_info: str | None, task_instructions: str | None) -> str:
    """What the user knows beyond the request: ``known_info`` and ``task_instructions``."""
    return "\n".join(t.strip() for t in (known_info, task_instructions) if t and t.strip())


def user_prompt(guidelines: str, scenario: str) -> str:
    """The user model's prompt: tau2's simulation guidelines and the scenario, as tau2 writes its own
    (``<scenario>`` block), then the harness's rules for what may be disclosed."""
    return (f"{guidelines.strip()}\n\n<scenario>\n{scenario.strip()}\n</scenario>\n\n"
            "## What you may give the assistant when it asks\n{{facts}}\n\n"
            "Answer only what the assistant asks, with the value written exactly as shown. When it asks "
            "for anything else, reply exactly: {{neutral}}")


@dataclass(frozen=True)
class Scenario:
    """Facts of one tau2 task: all of them, the held ones' ids, and the gold steps over them."""

    facts: tuple[Fact, ...]
    held: tuple[str, ...]
    steps: tuple[Step, ...]

    def on(self, surface: str) -> list[str]:
        """Ids of the facts stated on ``surface``."""
        return [f.id for f in self.facts if surface in f.surfaces]


def string_leaves(value: Any, where: str = "") -> Iterator[tuple[str, str, str]]:
    """``(argument, whose, value)`` for every string in a (nested) argument value, in order.

    ``whose`` names the list item a value belongs to (``passenger 2`` for
    ``passengers[1].first_name``), so that two passengers' first names are
    asked for apart; empty at the top level.
    """
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(v, list) and any(isinstance(x, Mapping) for x in v):
                for i, x in enumerate(v):
                    yield from string_leaves(x, f"{str(k).rstrip('s').replace('_', ' ')} {i + 1}")
            else:
                for arg, whose, s in string_leaves(v, where):
                    yield (arg or str(k)), whose, s
    elif isinstance(value, list):
        for v in value:
            yield from string_leaves(v, where)
    elif isinstance(value, str):
        yield "", where, value


def _fact_id(arg: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9_]", "_", arg.lower()).strip("_") or "value"
    base = base if re.match(r"[a-z_]", base) else "v_" + base
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def derive(request: str, policy: str, held: str, actions: Sequence[tuple[str, Mapping[str, Any]]]) -> Scenario:
    """Facts and templated gold steps of one task (see the module docstring).

    A value goes to the first of request, held text and policy that states
    it as a whole token; on the request and the policy it must be read there
    by its anchored pattern and nowhere else on the clean surfaces.
    """
    values: dict[str, tuple[str, str, str]] = {}  # value -> (tool, argument, whose)
    for tool, args in actions:
        for arg, whose, v in string_leaves(dict(args)):
            if len(v) >= MIN_LEN and "\n" not in v and v not in values:
                values[v] = (tool, arg, whose)
    ids: set[str] = set()
    facts: list[Fact] = []
    held_ids: list[str] = []
    others = list(values)
    for value, (tool, arg, whose) in values.items():
        words = arg.replace("_", " ") + (f" of {whose}" if whose else "")
        near = [o for o in others if o != value]
        if stated_at(request, value) >= 0:
            fid = _fact_id(arg, ids)
            fact = stated_fact(fid, value, "user", request, f"Which {words} should I use for {tool}?", near)
        elif stated_at(held, value) >= 0:
            fid = _fact_id(arg, ids)
            ask = f"What is the {words}?" if whose else f"What is your {QUESTION_WORDS.get(arg, words)}?"
            fact = stated_fact(fid, value, "user", held, ask, near)
            if fact is not None:
                fact = replace(fact, surfaces=())
                held_ids.append(fid)
        elif stated_at(policy, value) >= 0:
            fid = _fact_id(arg, ids)
            fact = stated_fact(fid, value, "procedure", policy, f"Which {words} does the policy give for {tool}?",
                               near)
        else:
            continue
        if fact is not None:
            facts.append(fact)
    texts = Surfaces(request, policy, (), ()).texts()
    kept = [f for f in facts if not f.surfaces or {v for _, v in f.find(texts)} == {f.value}]
    held_kept = tuple(h for h in held_ids if any(f.id == h for f in kept))
    by_value = {f.value: f.id for f in kept}
    steps = tuple(Step(tool, {a: _template(v, by_value) for a, v in dict(args).items()}) for tool, args in actions)
    return Scenario(tuple(kept), held_kept, steps)


def declared_facts(request: str, policy: str, declared: Mapping[str, str], taken: Sequence[Fact]
                   ) -> tuple[tuple[Fact, ...], tuple[str, ...]]:
    """The facts authored edits declare (id -> value), read where the clean policy (else the request) states
    them, and a line for each declared fact that cannot be kept (the edits that name it then fail to apply).

    A declared fact is kept when its anchored pattern finds exactly its value on the clean surfaces, as
    :func:`derive` keeps its own; an id the task already has is kept as it is (same value) or refused.
    """
    have = {f.id: f for f in taken}
    texts = Surfaces(request, policy, (), ()).texts()
    out: list[Fact] = []
    problems: list[str] = []
    for fid, value in declared.items():
        if fid in have:
            if have[fid].value != value:
                problems.append(f"declared fact {fid} = {value!r}: the task's fact {fid} is {have[fid].value!r}")
            continue
        words = fid.replace("_", " ")
        fact = None
        if stated_at(policy, value) >= 0:
            fact = stated_fact(fid, value, "procedure", policy, f"What does the policy give as the {words}?")
        elif stated_at(request, value) >= 0:
            fact = stated_fact(fid, value, "user", request, f"What is the {words}?")
        found = {v for _, v in fact.find(texts)} if fact is not None else set()
        if fact is None or found != {value}:
            problems.append(f"declared fact {fid} = {value!r}: the clean policy and request do not state it "
                            f"in one place a reader finds (read: {sorted(found) or 'nothing'})")
            continue
        out.append(fact)
        have[fid] = fact
    return tuple(out), tuple(problems)


def _template(value: Any, by_value: Mapping[str, str]) -> Any:
    """A gold argument with every string equal to a fact's value replaced by its ``{fact}`` placeholder."""
    if isinstance(value, Mapping):
        return {k: _template(v, by_value) for k, v in value.items()}
    if isinstance(value, list):
        return [_template(v, by_value) for v in value]
    if isinstance(value, str) and value in by_value:
        return "{" + by_value[value] + "}"
    return value
