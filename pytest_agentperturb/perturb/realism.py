"""Does a variant read like real input?  Known-bad shapes and frame statistics.

Two checks back the rule operators (docs/design.md section 1: a perturbation
is a plausible edit of the task's native objects):

* :func:`shape_problems` / :func:`variant_problems` name the shapes no
  person writes and a model spots as an artificial edit: a vague phrase
  inside quotes ("priority "the usual one""), an article or slot noun
  followed by a vague noun phrase ("the folder the usual one"), a double
  negation, a fixed frame of the old templates used verbatim, broken
  punctuation left by a removal, a decoy that is the true value with a
  tell-tale edit (``-old``, ``draft-``, a spliced surname).
* :func:`frame` masks what an added sentence says about the task (values,
  names, text copied from the task) so that what is left is its *frame*;
  :func:`frame_shares` counts, per operator, how many of a suite's variants
  share the most frequent frame.  ``bench/realism.py`` prints it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..model.records import Variant
from ..model.task import TARGETS, Surfaces, Task, sentences
from .decoys import STAND_INS, has_tell, world_values
from .phrasing import SLOT_NOUNS, negations
from .world import EMAIL, ID

#: The fixed frames of the first operators; none may appear in a variant any more.
OLD_FRAMES: tuple[str, ...] = (
    "Some background first, just so you know",
    "Anyway, that is not why I am writing",
    "Archived note (informational only, no action required)",
    "an old newsletter template used",
    "On another topic: last week I also asked you to note that",
    "That one is already done, nothing to do there",
    "Different topic: for the archive",
    "Noted; nothing to do there.",
    "Superseded, no longer applies:",
    "(use this instead of",
    "(Earlier, different request)",
    "For last year's archive cleanup",
    "Understood, the archive cleanup is closed",
    "Forwarded from the Berlin team, about their own project only",
    "Faster, audited version; use this instead of",
    "the fire drill last month started at",
    "the office was closed on",
    "the printer vendor can be reached at",
    "about the coffee machine was closed last week",
    "last quarter's team lunch came to",
    "the parking garage has",
)
#: Words that open the vague noun phrases of ``vague_reference`` (banks/phrasing.toml).
VAGUE = (r"(?:usual|same \w+ as last time|(?:we|I) (?:normally|always) use|we agreed on|we discussed|"
         r"I mentioned|from earlier|I told you about|I sent over|on file|in the directory|in the address book|"
         r"on the receipt|as agreed)")
_DETERMINER = r"(?:the|a|an|our|their|his|her|its|my|your|this|that)"
_VAGUE_IN_QUOTES = re.compile(rf'"[^"\n]*\b{VAGUE}\b[^"\n]*"')
_DET_BEFORE_VAGUE = re.compile(rf"\b{_DETERMINER}\s+(?:[\w-]+\s+)?{_DETERMINER}\s+(?:[\w-]+\s+)?{VAGUE}", re.I)
_NOUN_BEFORE_VAGUE = re.compile(rf"\b(?:{'|'.join(sorted(SLOT_NOUNS))})\s+\"?(?:the|our|their|his|her)\s+"
                                rf"(?:[\w-]+\s+)?{VAGUE}", re.I)
_BROKEN = re.compile(r"\(\s*\)|\s[,;:](?=\s|$)|,\s*[,.;]|\b(?:the|a|an)\s*[.,;:]|[^\S\n]{2,}\S|^\s*[,;.]", re.M)
_CLUNKY = re.compile(r"\b(?:earlier|from earlier|I mentioned earlier) (?:last|this|next|yesterday|today|"
                     r"earlier)\b", re.I)
#: Where one clause of a sentence ends: a double negation is two negations in one clause.
_CLAUSE = re.compile(r"[;()\[\]]|\b(?:but|while|whereas)\b")


#: Tells a blind reader named in the rule operators' output (docs/design.md section 2b): self-cancelling
#: frames, stale-rule parentheticals and pointers to something never introduced.
TELL_PHRASES: tuple[str, ...] = (
    "theirs alone", "kept for the record", "nothing for us there", "the pilot ended", "(was:", "the pre-20",
    "the way we always do", "the one we agreed on", "the priority we agreed on", "the day we agreed on",
    "from earlier", "I will use it when your request comes", "informational only", "no action required",
)
#: Pointers to something never said: what a missing edit must not leave where the fact was (in added
#: content of another type they are ordinary English: "Helga files it for us as usual").
POINTERS: tuple[str, ...] = (
    "we agreed on", "we discussed", "I mentioned", "I told you about", "the usual ", "our usual", "as usual",
    "we normally use", "we always use", "as last time", "as we normally do",
)
_DOUBLED = re.compile(r"\b(on|the|a|to|of|in|for|at|and|is|we)\s+\1\b", re.I)


def shape_problems(text: str) -> list[str]:
    """Known-bad shapes in a piece of added or rewritten text (empty when it reads well)."""
    out = [f"a tell-tale frame: {p!r}" for p in TELL_PHRASES if p.lower() in text.lower()]
    if m := _DOUBLED.search(text):
        out.append(f"a doubled word: {m.group(0)!r}")
    if m := _VAGUE_IN_QUOTES.search(text):
        out.append(f"a vague phrase inside quotes: {m.group(0)!r}")
    if m := _DET_BEFORE_VAGUE.search(text) or _NOUN_BEFORE_VAGUE.search(text):
        out.append(f"a noun phrase followed by a vague noun phrase: {m.group(0)!r}")
    for sent in sentences(text):
        if any(negations(clause) > 1 for clause in _CLAUSE.split(sent)):
            out.append(f"a double negation: {sent.strip()!r}")
    out += [f"a fixed frame used verbatim: {f!r}" for f in OLD_FRAMES if f in text]
    if m := _BROKEN.search(text):
        out.append(f"broken punctuation or spacing: {text[max(0, m.start() - 20):m.end() + 20]!r}")
    if m := _CLUNKY.search(text):
        out.append(f"clashing time references: {m.group(0)!r}")
    return out


# -- what a variant adds -------------------------------------------------------------------


def units(s: Surfaces, target: str) -> list[str]:
    """The sentences of one surface (tool surface: names and descriptions)."""
    if target in ("user", "procedure"):
        return [x.strip() for x in sentences(getattr(s, target))]
    if target == "context":
        return [x.strip() for t in s.context for x in sentences(t.content)]
    out = []
    for t in s.tools:
        fn = t.get("function", {})
        out.append(str(fn.get("name", "")))
        out += [x.strip() for x in sentences(str(fn.get("description", "")))]
        for p in (fn.get("parameters") or {}).get("properties", {}).values():
            if isinstance(p, dict):
                out += [x.strip() for x in sentences(str(p.get("description", "")))]
    return out


def added_sentences(task: Task, variant: Variant) -> list[str]:
    """Sentences the variant shows and the clean task does not (injected notes included).

    A sentence the clean task already holds (a cloned tool's parameter
    descriptions, a kept rule) is not added.
    """
    added: list[str] = []
    for target in TARGETS:
        clean = set(units(task.surfaces, target))
        added += [u for u in units(variant.surfaces, target) if u and u not in clean]
    for inj in variant.injections:
        added += [x.strip() for x in sentences(inj.text)]
    return added


def variant_problems(task: Task, variant: Variant) -> list[str]:
    """Every known-bad shape of a variant: in its added text, and in its decoys."""
    out = []
    for sent in added_sentences(task, variant):
        out += [f"{p} [in: {sent[:120]!r}]" for p in shape_problems(sent)]
        if variant.type == "missing":
            out += [f"a pointer to what is no longer said: {p!r} [in: {sent[:120]!r}]" for p in POINTERS
                    if p.lower() in sent.lower()]
    for c in variant.canaries:
        if c.kind in ("value", "text") and c.fact:
            try:
                fact = task.fact(c.fact)
            except KeyError:
                continue
            if c.text in STAND_INS:
                out.append(f"a generic stand-in as the wrong value of {c.fact}: {c.text!r}")
            if has_tell(c.text, fact.value) and c.text not in world_values(task, fact):
                out.append(f"a decoy that is the true value with a tell-tale edit: {c.text!r} for {fact.value!r}")
    return out


# -- frames ----------------------------------------------------------------------------------

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"`[^`]*`"), "<code>"),
    (re.compile(r'"[^"\n]*"'), "<q>"),
    (EMAIL, "<email>"),
    (re.compile(r"(?<![\w/])/[\w./-]+"), "<path>"),
    (re.compile(r"\b[\w-]+\.(?:pdf|docx?|xlsx?|csv|md|txt|pptx?|png|jpe?g|json)\b", re.I), "<file>"),
    (ID, "<id>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d(?:T\d\d:\d\d)?\b"), "<date>"),
    (re.compile(r"\b\d{1,2}:\d\d\b"), "<time>"),
    (re.compile(r"\b\d+(?:[.,]\d+)?\b"), "<n>"),
    (re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b|\b[a-z]+(?:-[a-z0-9]+){2,}\b"), "<name>"),
    (re.compile(r"^[A-Z][a-z'-]+(?: [A-Z][\w'-]*)+"), "<Name>"),  # a name opening the sentence
    (re.compile(r"(?<=\w )(?:[A-Z][\w'-]*)(?: [A-Z][\w'-]*)*"), "<Name>"),
)
_WORD = re.compile(r"<[A-Za-z]+>|[A-Za-z']+|[^\sA-Za-z]")


def _masked(text: str) -> str:
    for rx, token in _MASKS:
        text = rx.sub(token, text)
    return text


def frame(sentence: str, task_text: str = "") -> str:
    """The frame of an added sentence: task values and names masked, text copied from the task folded.

    A run of four or more words that also occurs (masked) in ``task_text``
    becomes ``<copy>``, so "Superseded: <rule>. Current: <rule>" is one frame
    whatever the rule.
    """
    if not re.search(r"\s", sentence.strip()):
        return "<name>"  # a lone identifier: a tool name, not a sentence
    tokens = _WORD.findall(_masked(sentence))
    known = _WORD.findall(_masked(task_text))
    grams = {tuple(known[i:i + 4]) for i in range(len(known) - 3)}
    copied = [False] * len(tokens)
    for i in range(len(tokens) - 3):
        if tuple(tokens[i:i + 4]) in grams:
            copied[i:i + 4] = [True] * 4
    out: list[str] = []
    for tok, c in zip(tokens, copied):
        if c:
            if not out or out[-1] != "<copy>":
                out.append("<copy>")
        elif not (out and out[-1] == tok and tok.startswith("<")):
            out.append(tok)
    return " ".join(out)


def _literal_words(fr: str) -> int:
    return sum(1 for t in fr.split() if t.isalpha() or "'" in t)


def task_text(task: Task) -> str:
    """All text the clean task shows, sentence by sentence (tool names and descriptions included)."""
    return "\n".join(u for t in TARGETS for u in units(task.surfaces, t))


@dataclass(frozen=True)
class FrameShare:
    """The most frequent frame of one operator across a suite's variants."""

    operator: str
    variants: int
    frame: str
    count: int
    share: float
    frames: int


def frame_shares(pairs: Iterable[tuple[Task, Variant]], min_words: int = 2) -> list[FrameShare]:
    """Per operator: its most frequent added frame and the share of *all* variants that carry it.

    A frame counts once per variant; frames with fewer than ``min_words``
    literal words (a bare copy, a lone "Noted.") are not frames.  The share's
    denominator is the number of variants given (the suite's variants).
    """
    pairs = list(pairs)
    by_op: dict[str, Counter[str]] = {}
    n_op: Counter[str] = Counter()
    for task, v in pairs:
        n_op[v.operator] += 1
        text = task_text(task)
        frames = {frame(s, text) for s in added_sentences(task, v)}
        counter = by_op.setdefault(v.operator, Counter())
        counter.update(f for f in frames if _literal_words(f) >= min_words)
    total = max(1, len(pairs))
    out = []
    for op in sorted(n_op):
        common: Sequence[tuple[str, int]] = by_op[op].most_common(1)
        fr, count = common[0] if common else ("", 0)
        out.append(FrameShare(op, n_op[op], fr, count, count / total, len(by_op[op])))
    return out
