"""Slot-fitting text edits: replace a value, make it vague, invert the rule that states it.

The operators of :mod:`.text_ops` and :mod:`.procedure_ops` edit one
sentence of a surface; what they write must fit the sentence the way a
person would have written it (docs/design.md section 1: plausible edits).

* :func:`with_value` swaps a fact's value only where a reader finds it
  (inside the sentences that state the fact), never elsewhere in the text.
* :func:`vague_rewrites` replaces the *whole phrase* that holds a value by a
  vague noun phrase that fits the fact's kind and the sentence: ``room
  "Fjord"`` -> ``the room we normally use``, ``the folder /finance/payable``
  -> ``the usual folder``, a parenthetical or an apposition is dropped
  (``the Q3 board report (board-q3-2026.pdf)`` -> ``the Q3 board report``);
  a quoted value is never replaced by a description inside the quotes.
* :func:`invert_rule` negates the rule itself: the main clause that holds
  the value, not a justification after it; an existing negation is removed
  rather than doubled.

The phrase bank is data (``banks/phrasing.toml``).
"""

from __future__ import annotations

import re

from ..model.task import Fact
from . import bank
from .world import decoy_class, fact_noun, noun_words

#: Determiners and possessives that may open the noun phrase of a slot.
DETERMINERS: frozenset[str] = frozenset("the a an our their his her its my your this that".split())
#: Nouns that name a slot in any office task ("the folder /x", "ticket TCK-1").
SLOT_NOUNS: frozenset[str] = frozenset("""folder room ticket project invoice order priority status category
account address file event level code reference list document report contract prefix currency mailbox
channel queue team calendar meeting case issue""".split())
NEGATION = re.compile(r"\b(?:not|never|no|nor|without|cannot)\b|n't\b", re.I)
IMPERATIVES: frozenset[str] = frozenset(bank.words("phrasing", "imperative", "verbs"))
_SUBORDINATE = re.compile(r"(?:When|Once|If|After|Before|Unless|Whenever|As soon as|For|Where|While|Until)\b")
_TAIL = re.compile(r";|\s[-\u2013\u2014]\s|,\s+(?:never|not|but|since|because|so|as|which|unless)\b")


def negations(text: str) -> int:
    """How many negations a text holds."""
    return len(NEGATION.findall(text))


# -- values inside sentences ----------------------------------------------------------


def value_spans(fact: Fact, sentence: str, value: str | None = None) -> list[tuple[int, int]]:
    """Where ``sentence`` states ``value`` (default: the true value) as this fact, read as a reader does."""
    value = fact.value if value is None else value
    low = sentence.lower()
    if fact.cues and not any(re.search(rf"\b{re.escape(c.lower())}\b", low) for c in fact.cues):
        return []
    rx = fact.regex()
    g = 1 if rx.groups else 0
    return [m.span(g) for m in rx.finditer(sentence) if m.group(g) == value]


def with_value(fact: Fact, sentence: str, new: str) -> str | None:
    """``sentence`` with the fact's value replaced by ``new`` where it is stated (None if it is not)."""
    spans = value_spans(fact, sentence)
    if not spans:
        return None
    for s, e in reversed(spans):
        sentence = sentence[:s] + new + sentence[e:]
    return sentence


def restated(fact: Fact, text: str, new: str) -> str:
    """``text`` with the fact's value replaced by ``new`` in every sentence that states it."""
    from ..model.task import sentences

    out, pos = [], 0
    for sent in sentences(text):
        at = text.find(sent, pos)
        if at < 0:
            continue
        changed = with_value(fact, sent, new)
        out.append(text[pos:at] + (changed if changed is not None else sent))
        pos = at + len(sent)
    return "".join(out) + text[pos:]


# -- vague references ---------------------------------------------------------------------


def _forms(kind: str, noun: str = "") -> list[str]:
    return [f.format(noun=noun) for f in bank.words("phrasing", "vague", kind)]


def _style(fact: Fact) -> str:
    return "reference" if fact.kind in ("id", "email") or decoy_class(fact) == "file" else "setting"


def _noun_forms(fact: Fact, noun: str) -> list[str]:
    nouns = [noun, *bank.words("phrasing", "synonyms", noun), *bank.words("phrasing", "synonyms", noun.split()[-1])]
    out: list[str] = []
    for n in dict.fromkeys(nouns):
        out += _forms(_style(fact), n)
    return out


def _kind_forms(fact: Fact, before: str) -> list[str]:
    head = re.findall(r"[\w'-]+", before.lower())[-3:]
    if fact.kind == "email":
        return _forms("email_is" if head[-1:] == ["is"] else "email")
    if fact.kind in ("time", "date", "amount"):
        return _forms(fact.kind)
    noun = fact_noun(fact)
    if set(noun.split()) & set(head):  # "set its status to X": the noun is already there
        return _forms("bare")
    return _noun_forms(fact, noun)


def _slot_noun(fact: Fact, word: str) -> bool:
    w = word.lower()
    return w in SLOT_NOUNS or w in noun_words(fact)


def _phrase_before(fact: Fact, before: str) -> tuple[int, str] | None:
    """(start, noun) of a noun phrase that ends right before the value ("the folder ", "purchase order ")."""
    m = re.search(r"([\w-]+)\s+$", before)
    if not m or not _slot_noun(fact, m.group(1)):
        return None
    start, noun = m.start(1), m.group(1).lower()
    mod = re.search(r"([\w-]+)\s+$", before[:start])
    if mod and mod.group(1).lower() in noun_words(fact) and mod.group(1).lower() not in DETERMINERS:
        start, noun = mod.start(1), f"{mod.group(1).lower()} {noun}"
    det = re.search(r"([\w-]+)\s+$", before[:start])
    if det and det.group(1).lower() in DETERMINERS:
        start = det.start(1)
    return start, noun


def _capitalised(text: str, at_start: bool) -> str:
    return text[:1].upper() + text[1:] if at_start else text


def vague_rewrites(fact: Fact, sentence: str) -> list[str]:
    """Rewrites of ``sentence`` in which a vague phrase stands where the fact's value was.

    In order of preference; the caller keeps the first one that reads well
    and that no reader would take for a value.  Empty when the sentence
    does not state the fact.
    """
    spans = value_spans(fact, sentence)
    if not spans:
        return []
    s, e = spans[0]
    left, right = sentence[:s], sentence[e:]
    if re.search(r"\(\s*$", left) and re.match(r"\s*\)", right):  # "the report (x.pdf) with" -> "the report with"
        return [re.sub(r"\s*\(\s*$", "", left) + re.sub(r"^\s*\)", "", right)]
    if re.search(r"\w,\s*$", left) and (re.match(r"\s*[,.;!?]", right) or not right.strip()):
        return [re.sub(r",\s*$", "", left) + re.sub(r"^\s*,", "", right)]  # an apposition: drop it
    out: list[str] = []
    quoted = left.count('"') % 2 == 1 and '"' in right
    if quoted:
        qs, qe = left.rfind('"'), e + right.index('"') + 1
        before, after = sentence[:qs], sentence[qe:]
    else:
        before, after = left, right
    lead = len(re.match(r"\s*(?:[-*]\s+|\d+[.)]\s+)?", sentence).group(0))  # type: ignore[union-attr]
    phrase = _phrase_before(fact, before)
    if phrase is not None:
        start, noun = phrase
        forms = _noun_forms(fact, noun)
        out += [before[:start] + _capitalised(f, start <= lead) + after for f in forms]
    elif quoted and (m := re.match(r"\s+([\w-]+)", after)) and _slot_noun(fact, m.group(1)):
        noun = m.group(1).lower()
        full = fact_noun(fact)
        noun = full if full.split()[0] == noun else noun
        out += [before + _capitalised(f, len(before) <= lead) + after[m.end():] for f in _noun_forms(fact, noun)]
    else:
        out += [before + _capitalised(f, len(before) <= lead) + after for f in _kind_forms(fact, before)]
        out += _adverbial(fact, before, after)
    return list(dict.fromkeys(x for x in out if x != sentence))


def _adverbial(fact: Fact, before: str, after: str) -> list[str]:
    """"set its status to X" -> "set its status as usual": a setting's noun, a preposition, the value."""
    if fact.kind not in ("text", "integer") or decoy_class(fact) != "value":
        return []
    m = re.search(r"\b([\w-]+)\s+(?:to|at|in|on|into|under)\s+$", before)
    if not m or m.group(1).lower() not in noun_words(fact):
        return []
    return [before[:m.end(1)] + (" " + a if a else "") + after for a in bank.words("phrasing", "vague", "adverbial")]


# -- inverted rules -----------------------------------------------------------------------------

_PRESENT = {"gets": "get", "has": "have", "needs": "need", "goes": "go", "uses": "use", "receives": "receive",
            "takes": "take", "requires": "require", "starts": "start"}
_MARKERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(must|should|may|can|will|shall) not\b"), r"\1"),
    (re.compile(r"\b(do|does|did) not\s+"), ""),
    (re.compile(r"\b(is|are|was|were) not\b"), r"\1"),
    (re.compile(r"\bnever\b"), "always"),
    (re.compile(r"\bcannot\b"), "can"),
    (re.compile(r"\balways\b"), "never"),
    (re.compile(r"\b(must|should|may|can|will|shall)(?: only)?\b"), r"\1 not"),
    (re.compile(r"\b(is|are|was|were)\b"), r"\1 not"),
    (re.compile(r"\b(gets|has|needs|goes|uses|receives|takes|requires|starts)\b"), "does not {base}"),
    (re.compile(r"\b(get|have|need|go|use|receive|take|require|start)\b"), r"do not \1"),
)


def _negated_clause(clause: str, limit: int, opening: bool) -> str | None:
    hits = []
    for rx, rep in _MARKERS:
        for m in rx.finditer(clause, 0, limit):
            if re.search(r"\b(?:that|which|who|whose)\s+$", clause[:m.start()]):
                continue  # a relative clause, not the rule
            hits.append((m.start(), m, rx, rep))
            break
    if hits:
        _, m, rx, rep = min(hits, key=lambda h: h[0])
        new = rep.format(base=_PRESENT.get(m.group(0), m.group(0))) if "{base}" in rep else m.expand(rep)
        return clause[:m.start()] + new + clause[m.end():]
    first = re.match(r"([A-Za-z-]+)\b", clause)
    if first and first.group(1).lower() in IMPERATIVES:
        return ("Do not " if opening else "do not ") + first.group(1).lower() + clause[first.end():]
    return None


def invert_rule(sentence: str, value: str | None = None) -> str | None:
    """The sentence with its rule negated (None when it states no rule that can be negated).

    Only the main clause that holds ``value`` is negated ("Book room "Fjord"
    for offsites; it is the only room that seats twelve" -> "Do not book
    room "Fjord" for offsites."): a justification or contrast after it
    would contradict or double the negation, so it is left out.  A
    subordinate opening ("Once a ticket has an owner, ...") is kept.
    """
    lead = re.match(r"\s*(?:[-*]\s+|\d+[.)]\s+)?", sentence).group(0)  # type: ignore[union-attr]
    body = sentence[len(lead):].rstrip()
    trail = sentence[len(lead) + len(body):]
    stop = body[-1] if body[-1:] in ".!" else ""
    core = body[:-1] if stop else body
    at = core.find(value) if value else 0
    if at < 0:
        return None
    end = at + len(value or "")
    tail = _TAIL.search(core, end)
    main = core[:tail.start()] if tail else core
    prefix = ""
    if _SUBORDINATE.match(main):
        cut = main.rfind(", ", 0, at) if value else main.find(", ")
        if cut > 0:
            prefix, main = main[:cut + 2], main[cut + 2:]
    new = _negated_clause(main, at - len(prefix) if value else len(main), opening=not prefix)
    if new is None:
        return None
    out = lead + prefix + new + (stop or ("." if tail else "")) + trail
    if negations(out) > 1 or (value and value not in out) or out == sentence:
        return None
    return out
