"""Facts derived from a benchmark's text and gold tool calls (docs/design.md section 1b), for external suites.

A benchmark that ships ground-truth calls but no fact annotations (AgentDojo,
for one: :mod:`.agentdojo`) still says which values the solution needs: the
call arguments.  :func:`derive_facts` turns those that the task's text states
verbatim into :class:`~pytest_agentperturb.model.task.Fact` s, can synthesise
one earlier conversation turn stating a needed lookup value that the text
does not state, and writes the gold calls as
:class:`~pytest_agentperturb.model.task.Step` s over ``{fact}`` placeholders,
so that the ``missing`` and ``incorrect`` operators have something to remove
or corrupt and the oracle a recovery path.

Each fact is read by a pattern anchored on the words around it
(:func:`anchored_pattern`): a swapped value standing in the same place is
still read as the fact, a vague phrase is not, and nothing else in the text
is.  A value no reader could find that way does not become a fact.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model.task import FACT_KINDS, Fact, Step, Surfaces, Turn, sentences

#: Tool-name prefixes of lookup tools: only their arguments go into a synthesised context turn.
READ_VERBS: tuple[str, ...] = ("get_", "search_", "read_", "list_", "check_")
ACK = "Noted, I will use it when your request comes."


@dataclass(frozen=True)
class Derived:
    """What :func:`derive_facts` found: facts, the synthesised context (possibly empty), gold steps."""

    facts: tuple[Fact, ...]
    context: tuple[Turn, ...]
    steps: tuple[Step, ...]

    def on(self, surface: str) -> list[str]:
        """Ids of the facts stated on ``surface``."""
        return [f.id for f in self.facts if surface in f.surfaces]


def spellings(value: Any) -> list[str]:
    """How an argument value may be written in text (none for booleans and None)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, float):
        return [f"{value:.2f}", str(int(value)), str(value)] if value.is_integer() else [str(value), f"{value:.2f}"]
    return [value] if isinstance(value, str) else []


def plain(value: Any) -> str:
    """The usual spelling of a value (``4.0`` -> ``4``; '' for booleans and None)."""
    if isinstance(value, float) and not isinstance(value, bool):
        return str(int(value)) if value.is_integer() else str(value)
    sp = spellings(value)
    return sp[0] if sp else ""


def stated_at(text: str, value: str) -> int:
    """Offset of ``value`` in ``text`` as a whole token (not inside a longer word or number), or -1."""
    pre = r"(?<![\w.-])" if value[:1].isalnum() else ""
    post = r"(?![\w-]|[.,]\d)" if value[-1:].isalnum() else ""
    m = re.search(pre + re.escape(value) + post, text)
    return m.start() if m else -1


def anchored_pattern(sentence: str, start: int, value: str, others: Sequence[str] = ()) -> str | None:
    """A regex whose group reads a value of this shape where ``value`` stands in ``sentence``.

    Anchored on up to two words before it and on what follows it (the
    punctuation right after it, else the next word); the group admits at
    most as many words as the value has, so a one-word decoy is read as
    the fact and a longer vague phrase is not.  Anchors stop short of the
    ``others`` (the values of neighbouring facts, which may be swapped
    too).  None when the value has no anchor on either side.
    """
    before, after = sentence[:start], sentence[start + len(value):]
    cut = max((before.rfind(o) + len(o) for o in others if o and o in before), default=0)
    left = re.search(r"(?:\S+\s+){0,2}\S*$", before[cut:])
    lead = left.group(0) if left else ""
    punct = re.match(r"[^\w\s]+", after)
    nxt = re.match(r"\s+(\S+)", after)
    if punct:
        trail = re.escape(punct.group(0))
    elif nxt and not any(o and after.lstrip().startswith(o) for o in others):
        trail = rf"(?=\s+{re.escape(nxt.group(1))})"
    elif nxt:
        trail = r"(?=\s)"
    else:
        trail = "$"
    if not lead.strip() and trail in ("$", r"(?=\s)"):
        return None
    words = len(value.split()) - 1
    group = r"(\S+" + (rf"(?:\s+\S+){{0,{words}}}" if words > 0 else "") + ")"
    return (re.escape(lead) if lead.strip() else "^") + group + trail


def kind_of(value: str) -> str:
    """The first of :data:`FACT_KINDS` the whole value matches, else ``text``."""
    return next((k for k, rx in FACT_KINDS.items() if re.fullmatch(rx, value)), "text")


def stated_fact(fid: str, value: str, surface: str, text: str, question: str,
                others: Sequence[str] = ()) -> Fact | None:
    """The fact ``value`` as ``text`` (the surface's text) states it, or None when nothing anchors it."""
    for sent in sentences(text):
        i = stated_at(sent, value)
        if i >= 0:
            pattern = anchored_pattern(sent, i, value, others)
            return Fact(fid, value, (surface,), kind_of(value), pattern, (), None, question) if pattern else None
    return None


def label(schema: Mapping[str, Any], arg: str) -> str:
    """``the <argument description>`` (its first sentence) or ``the <argument name>``."""
    prop = schema.get("parameters", {}).get("properties", {}).get(arg, {})
    desc = str(prop.get("description", "")).split(". ")[0].replace("(optional)", "").strip().rstrip(".")
    if not desc or len(desc) > 70 or "\n" in desc:
        desc = arg.replace("_", " ")
    if desc[:2].istitle() or desc[:1].islower():  # "Number of ..." -> "number of ...", but keep "IBAN"
        desc = desc[0].lower() + desc[1:]
    return desc if re.match(r"(the|a|an) ", desc) else "the " + desc


def _leaves(args: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for arg, value in args.items():
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, (dict, list)):
                yield arg, v


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "next")


def _unique(base: str, taken: set[str], form: str) -> str:
    """``base``, or ``form`` filled with base and 2, 3, ... until it is not taken."""
    name, i = base, 1
    while name in taken:
        i += 1
        name = form.format(base=base, i=i)
    taken.add(name)
    return name


def derive_facts(prompt: str, procedure: str, calls: Sequence[tuple[str, Mapping[str, Any]]],
                 schemas: Mapping[str, Mapping[str, Any]]) -> Derived:
    """Facts, synthesised context and templated gold steps of a single-turn task.

    * user facts: every argument value (list items included) that ``prompt``
      states verbatim, one fact per distinct value;
    * context: the first scalar argument of a lookup call (:data:`READ_VERBS`)
      that neither the prompt nor the procedure states (2-80 characters, one
      sentence) becomes an earlier user turn, "One detail you will need for
      it: <label> is <value>", plus an acknowledgement; none if there is no such value;
    * steps: the calls with every argument equal to a fact value replaced by
      its ``{fact}`` placeholder (a number becomes its text; typed tools
      coerce it back).

    A fact is kept only if a reader of the clean surfaces finds exactly its
    value: every candidate its pattern reads, on every surface, is the value.
    """
    facts: list[Fact] = []
    ids: set[str] = set()
    questions: set[str] = set()

    def fact_id(arg: str) -> str:
        base = re.sub(r"[^a-z0-9_]", "_", arg.lower()).strip("_") or "value"
        return _unique(base if re.match(r"[a-z_]", base) else "v_" + base, ids, "{base}_{i}")

    def known(v: Any) -> bool:
        return any(f.value in spellings(v) for f in facts)

    stated: dict[str, tuple[str, str, int]] = {}  # value as the prompt writes it -> (tool, argument, call)
    for i, (tool, args) in enumerate(calls):
        for arg, v in _leaves(args):
            sp = next((s for s in spellings(v) if len(s) >= 2 and stated_at(prompt, s) >= 0), None)
            if sp is not None and not any(s in stated for s in spellings(v)):
                stated[sp] = (tool, arg, i)

    def which_call(tool: str, i: int) -> str:
        """``tool``, or "the second <tool> call" where the gold calls it more than once (the user can tell
        the questions apart)."""
        same = [j for j, (t, _) in enumerate(calls) if t == tool]
        return f"the {_ORDINALS[min(same.index(i), len(_ORDINALS) - 1)]} {tool} call" if len(same) > 1 else tool

    for value, (tool, arg, i) in stated.items():
        q = _unique(f"Which {arg.replace('_', ' ')} should I use for {which_call(tool, i)}?", questions,
                    "{base} (item {i})")
        fact = stated_fact(fact_id(arg), value, "user", prompt, q, [o for o in stated if o != value])
        facts += [fact] if fact is not None else []
    context: tuple[Turn, ...] = ()
    lookups = ((tool, arg, v, i) for i, (tool, args) in enumerate(calls) if tool.startswith(READ_VERBS)
               for arg, v in args.items())
    for tool, arg, v, i in lookups:
        val = plain(v)
        if (not 2 <= len(val) <= 80 or known(v) or val in prompt or val in procedure
                or re.search(r"[\n\t]|[.!?]\s", val)):
            continue  # a value the agent looks things up with, never one it must compute or write
        what = label(schemas.get(tool, {}), arg)
        turn = f"I will send you a request in a moment. One detail you will need for it: {what} is {val}"
        q = _unique(f"What was {what} you mentioned before your request ({which_call(tool, i)})?", questions,
                    "{base} ({i})")
        fact = stated_fact(fact_id(arg), val, "context", turn, q)
        if fact is not None:
            facts.append(fact)
            context = (Turn("user", turn), Turn("assistant", ACK))
            break
    texts = Surfaces(prompt, procedure, context, ()).texts()
    kept = [f for f in facts if {v for _, v in f.find(texts)} == {f.value}]
    if context and not any("context" in f.surfaces for f in kept):
        context = ()
    steps = tuple(Step(tool, {a: _template(v, kept) for a, v in args.items()}) for tool, args in calls)
    return Derived(tuple(kept), context, steps)


def _template(value: Any, facts: Sequence[Fact]) -> Any:
    if isinstance(value, list):
        return [_template(v, facts) for v in value]
    fact = next((f for f in facts if f.value in spellings(value)), None)
    return "{" + fact.id + "}" if fact is not None else value
