"""Matching for the user simulator: which facts a question asks for, and where a value occurs.

:class:`Matcher` is the offline keyword simulator's reading of a question
(docs/design.md section 2, rule 4).  Every fact of the task gets a profile
of weighted words:

* topic words: its question, cues and id (weight 2), the owner's name of an
  e-mail value (``grace.liu@...`` -> *grace liu*, 2) and the words of the
  sentences of the clean task that state it (0.5); a possessor in its
  question (*Priya* in "Who is Priya's manager?") counts half;
* answer words: what asks for its kind of value (*when*, *day* for a date;
  *address*, *who*, *send* for an e-mail; *folder*, *where* for a path...).
  They count, but never make a match alone.

Words are lower-cased, stemmed and folded through small tables of synonyms
and office acronyms; a fact id's final abbreviation is written out
(``invoice_no`` -> *invoice number*).  A word counts for a fact in
proportion to the share of the word's weight (over the task's facts) that
the fact holds, so the words that tell facts apart count most.  Two readings of the question add
to that: its *focus* (what it asks for: the words after *which*/*what*, after
"confirm"/"give me"/"could you share", and *who*/*where*/*when*; "which
*team*'s share" asks for the team; a unit asked for, "in *percent*"),
matched against each fact's kind, id and question focus, the noun after
*of* that follows it ("the number of *the invoice*") counting for the facts
it names, and its *subject* (the noun phrase after the auxiliary, "What day
is *the client meeting*", and after *of*, "the e-mail of *the leaver's
manager*"), whose words count double.

Which facts may answer: when the question's focus asks for a kind of
thing some fact is, only facts of that kind; when it asks for something no
fact is, or for yes or no ("Should I start?"), only facts that share two
topic words with it (for yes or no, two words of the fact's question, cues
or id: the sentences around a fact do not make a yes/no question about
it); the question word a question opens with rules out kinds of value
(*who*/*whose*/*where* no number or date, *when* no address, path or
number); a fact must share topic words with the question in any case,
except that an answer word only one fact's kind has ("day" when the task
has one date) names that fact in a question with more to it than that
word.  A question asks for the best of those facts when it scores at
least :attr:`Matcher.threshold` and leads every other one by
:attr:`Matcher.margin`; a near tie asks for nothing.  A question is also
split at *and*, commas, semicolons and question marks, and each part is
read the same way in the context of the whole, so "What date and what time
...?" asks for both facts.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Sequence

from ..model.task import Fact, Task


def value_pattern(value: str) -> re.Pattern[str]:
    """Where ``value`` occurs in text: case-insensitive, not inside a longer word or number.

    A number is not stated by a decimal that merely contains it: *50* is not
    in *2.50* or *1,250*, *2* is not in *2.5* (a full stop after it is fine).
    """
    v = value.strip()
    left = r"(?<![A-Za-z0-9])" if v[:1].isalnum() else ""
    right = r"(?![A-Za-z0-9])" if v[-1:].isalnum() else ""
    if v[:1].isdigit():
        left += r"(?<!\d[.,])"
    if v[-1:].isdigit():
        right += r"(?![.,]\d)"
    return re.compile(left + re.escape(v) + right, re.I)


def states(value: str, text: str) -> bool:
    """Whether ``text`` states ``value`` (see :func:`value_pattern`)."""
    return bool(value.strip()) and value_pattern(value).search(text) is not None


_MATCHERS: dict[int, tuple[weakref.ref[Task], Matcher]] = {}
_BUILDING = threading.Lock()


def matcher_of(task: Task) -> Matcher:
    """The :class:`Matcher` of ``task``, built once per task object and shared by its episodes.

    A matcher reads only the clean task and is never changed once built;
    building one costs milliseconds, more than the rest of an episode's
    bookkeeping, so no episode builds its own.
    """
    def cached() -> Matcher | None:
        hit = _MATCHERS.get(id(task))
        return hit[1] if hit is not None and hit[0]() is task else None

    if (ready := cached()) is not None:
        return ready
    with _BUILDING:   # the oracle's check and an episode ask a task's first question at once: one builds
        if (ready := cached()) is not None:
            return ready
        matcher = Matcher(task)
        ref = weakref.ref(task)
        _MATCHERS[id(task)] = (ref, matcher)
        weakref.finalize(task, _forget, id(task), ref)
        return matcher


def _forget(key: int, ref: weakref.ref[Task]) -> None:
    """Drop a dead task's matcher, not a live task's that took its id.

    A task in a reference cycle is finalized only when the collector runs,
    which can be after a new task got the same id and its own matcher.
    """
    hit = _MATCHERS.get(key)
    if hit is not None and hit[0] is ref:
        del _MATCHERS[key]


class Matcher:
    """Which facts of one task a question asks for (see the module docstring)."""

    threshold = 1.0
    margin = 0.5
    #: topic-word weight a fact must match to be asked for at all
    topic_threshold = 0.25
    #: weight of a focus word shared with a fact (divided among the facts that share it)
    focus_weight = 3.0
    #: weight factor of the words of the question's subject
    subject_boost = 2.0

    def __init__(self, task: Task) -> None:
        self.facts = list(task.facts)
        texts = task.surfaces.texts()
        profiles = [_profile(f, _stated(f, texts)) for f in self.facts]
        mass: dict[str, float] = {}
        for prof in profiles:
            for w, (wt, _) in prof.items():
                mass[w] = mass.get(w, 0.0) + wt
        self.profiles = [{w: (wt * wt / mass[w], topic) for w, (wt, topic) in prof.items()} for prof in profiles]
        # topic words of what the fact *is* (its question, cues, id), not of the sentences around it
        self.strong = [{w for w, (wt, topic) in prof.items() if topic and wt >= 1.0} for prof in profiles]
        foci = [_focus(f.question) | set(_terms(_id_words(f.id))) | _answer_terms(f) for f in self.facts]
        share: dict[str, int] = {}
        for fs in foci:
            for w in fs:
                share[w] = share.get(w, 0) + 1
        self.foci = [{w: 1.0 / share[w] for w in fs} for fs in foci]
        # an answer word only one fact's kind has ("day" when the task has one date) names that fact
        self.only: dict[str, Fact] = {}
        for f in self.facts:
            for w in _answer_terms(f):
                owners = [g for g in self.facts if w in _answer_terms(g)]
                if owners == [f]:
                    self.only[w] = f

    def scores(self, question: str, in_context: bool = False) -> list[tuple[float, bool, Fact]]:
        """(score, whether the fact may be the answer, fact) per fact, best first.

        A fact may be the answer when the question matched its topic words
        (at least :attr:`topic_threshold`) and: if the question asks for a
        kind of thing some fact is (its focus), the fact is of that kind; if
        it asks for a kind of thing no fact is, or for yes or no ("Should I
        start?"), it matched two of the fact's topic words.  An answer word
        that only one fact's kind has ("day" when the task has one date)
        names that fact in a question with more words to it (not in "What
        day is it?") or in a part of a longer question (``in_context``).
        """
        words = set(_terms(question))
        focus, subject = _focus(question), _subject(question)
        of_focus = _focus(question, of=True) - focus  # they count for the facts they name, no more
        wh = in_context or _is_wh(question)
        # an answer word only one fact's kind has names that fact, in a question with more to it
        # than the answer word ("What time should I reschedule it to?", not "What time is it now?")
        context = in_context or bool(words - focus - _WH_TERMS)
        strange = any(not any(w in foc for foc in self.foci) for w in focus)  # "phone" in "phone number"
        only = {self.only[w].id for w in focus if w in self.only} if context and not strange else set()
        focused = any(w in foc for foc in self.foci for w in focus)
        unfit = _UNFIT.get(_opening(question), frozenset())
        out = []
        for f, prof, foc, strong in zip(self.facts, self.profiles, self.foci, self.strong):
            hits = {w: (prof[w][0] * (self.subject_boost if w in subject else 1.0), prof[w][1])
                    for w in words if w in prof}
            topic = [wt for wt, is_topic in hits.values() if is_topic]
            bonus = self.focus_weight * sum(foc[w] for w in focus if w in foc)
            score = sum(wt for wt, _ in hits.values()) + bonus + self.focus_weight * sum(
                foc[w] for w in of_focus if w in foc)
            if focused:  # the question asks for a kind of thing: only facts of that kind answer it
                enough = bonus > 0
            elif focus:  # it asks for something no fact is: two topic words
                enough = len(topic) >= 2
            elif not wh:  # it asks for yes or no: two words of what the fact is
                enough = len(strong & words) >= 2
            else:
                enough = True
            eligible = _shape(f) not in unfit and (f.id in only or (sum(topic) >= self.topic_threshold and enough))
            out.append((score, eligible, f))
        return sorted(out, key=lambda x: -x[0])

    def best(self, question: str, in_context: bool = False) -> Fact | None:
        """The one fact ``question`` asks for, or None."""
        ranked = [(s, f) for s, eligible, f in self.scores(question, in_context) if eligible]
        if not ranked or ranked[0][0] < self.threshold:
            return None
        score, fact = ranked[0]
        if any(s > score - self.margin for s, _ in ranked[1:]):
            return None  # a near tie: the question does not say which fact it means
        return fact

    def asked(self, question: str) -> list[Fact]:
        """The facts ``question`` asks for: that of the whole question and those of its parts."""
        whole = self.best(question)
        out = [whole] if whole is not None else []
        parts = [p for p in _PARTS.split(question) if p.strip()]
        if len(parts) > 1:
            about_task = whole is not None or any(e for _, e, _ in self.scores(question))
            for part in parts:
                f = self.best(part, in_context=about_task)
                if f is not None and f not in out:
                    out.append(f)
        return out


# -- profiles ---------------------------------------------------------------------------

#: Weight factor of a possessor in a fact's question ("Priya" in "Who is Priya's manager?").
POSSESSOR_WEIGHT = 0.5
#: Weight of the words of the sentences that state a fact.
STATED_WEIGHT = 0.5


def _stated(f: Fact, texts: Sequence[tuple[str, str]]) -> str:
    """The sentences of the clean task that state ``f`` (what the user said about it), value removed."""
    found = [sent for _, text in texts if (sent := f.stating(text))]
    return value_pattern(f.value).sub(" ", " ".join(found)) if found else ""


def _profile(f: Fact, stated: str) -> dict[str, tuple[float, bool]]:
    """word -> (weight, is a topic word) for one fact."""
    answer = _answer_terms(f)
    prof: dict[str, tuple[float, bool]] = {w: (1.0, False) for w in answer}
    owner = re.sub(r"[._-]+", " ", f.value.split("@", 1)[0]) if f.kind == "email" else ""
    possessors = set(_terms(" ".join(re.findall(r"(\w+)'s\b", f.question))))
    sources: tuple[tuple[str, float, set[str]], ...] = (
        (f.question, 2.0, possessors), (" ".join(f.cues), 2.0, set()), (_id_words(f.id), 2.0, set()),
        (owner, 2.0, set()), (stated, STATED_WEIGHT, set()))
    for text, weight, minor in sources:
        for w in _terms(text):
            if w in answer or w in _WH_TERMS:
                prof[w] = (max(prof.get(w, (0.0, False))[0], 1.0), prof.get(w, (0.0, False))[1])
            else:
                wt = weight * (POSSESSOR_WEIGHT if w in minor else 1.0)
                prof[w] = (max(prof.get(w, (0.0, True))[0], wt), True)
    return prof


#: Abbreviations that end fact ids (``invoice_no``, ``cap_pct``; not the *no* of ``no_code_decision``).
_ID_ABBREVIATIONS = {"no": "number", "nr": "number", "num": "number", "pct": "percentage", "perc": "percentage",
                     "addr": "address", "qty": "quantity", "amt": "amount", "dt": "date"}


def _id_words(fact_id: str) -> str:
    """The words of a fact id, a final abbreviation written out (``invoice_no`` -> "invoice number")."""
    words = [w for w in re.split(r"[_\W]+", fact_id.lower()) if w]
    if len(words) > 1:
        words[-1] = _ID_ABBREVIATIONS.get(words[-1], words[-1])
    return " ".join(words)


def _shape(f: Fact) -> str:
    """What the value looks like: the fact's kind, or ``folder``/``file``/``word`` for text."""
    if f.kind != "text":
        return f.kind
    if re.search(r"\.[a-z0-9]{2,4}$", f.value.rsplit("/", 1)[-1]):
        return "file"
    return "folder" if f.value.startswith("/") else "word"


def _answer_terms(f: Fact) -> set[str]:
    return set(_terms(" ".join(ANSWER_WORDS.get(_shape(f), ()))))


#: Words that ask for a kind of value (they count, but never make a match alone).
ANSWER_WORDS: dict[str, tuple[str, ...]] = {
    "time": ("time", "hour", "when"),
    "date": ("date", "day", "when"),
    "email": ("email", "address", "who", "reach", "where", "send", "forward", "assign", "receive"),
    "id": ("id", "number", "reference", "code"),
    "amount": ("amount", "much", "cost", "price", "total"),
    "integer": ("number", "many"),
    "folder": ("folder", "where", "path"),
    "file": ("file", "name", "path"),
    "word": (),
}

# -- words ----------------------------------------------------------------------------------

_SYNONYMS = {
    "mail": "email", "emails": "email", "directory": "folder", "dir": "folder", "location": "folder",
    "document": "file", "pdf": "file", "doc": "file", "filename": "file",
    "begin": "start", "beginning": "start", "begins": "start", "kick": "start", "opening": "start",
    "prioritise": "priority", "prioritize": "priority", "prioritised": "priority", "prioritized": "priority",
    "permission": "access", "rights": "access", "ref": "reference", "whom": "who", "identifier": "id",
    "organizer": "organiser", "state": "status", "categoris": "category", "categoriz": "category",
    "person": "who", "colleague": "who",
    "percent": "percentage", "pct": "percentage", "share": "percentage", "proportion": "percentage",
    "weigh": "weight", "weighting": "weight",
}
_ACRONYMS = {"po": "purchase order", "pos": "purchase order", "ap": "accounts payable",
             "dpo": "data protection officer", "pr": "purchase request", "cc": "copy",
             "nrr": "net revenue retention", "ev": "enterprise value", "ic": "investment committee"}
_STOP = set("""a an the is are was were be been being of to on in at for by with from as it its this that these
those i me my we our you your he him his she her they them their what which how should would could can do does
did will shall may might must there here and or but if so than then just please tell give let know confirm
s t d ll re ve m need get set use one any some also up out about into over under again all each both go goes going
take takes taken done well want everything anything else like now today other ok okay currently right
whose""".split())
_PARTS = re.compile(r"\?|;|,\s*(?:and|or)?\s*|\s+and\s+|\s+as well as\s+|\s+plus\s+", re.I)
#: Verbs whose object is what a question asks for ("could you confirm the date", "give me the address").
_ASKING_VERBS = {"confirm", "need", "give", "tell", "share", "send", "remind"}
_FOCUS_SKIP = set("""is are was s the a an exactly kind sort type should do does did will would can could must
i we you it its their his her our my your me us exact""".split())
_FOCUS_STOP = _STOP | {"this", "that", "these", "those", "go", "goes", "get", "gets", "need", "needs"}
_AUX = {"is", "are", "was", "were", "s", "should", "does", "do", "did", "will", "would", "can", "must", "has",
        "have"}
_DETERMINERS = {"the", "a", "an", "this", "that", "our", "your", "my", "their"}


def _stem(w: str) -> str:
    """A word's stem; synonyms fold to the stem of their target ("files", "documents" -> ``fil``)."""
    w = _suffixes(_SYNONYMS.get(w, w))
    target = _SYNONYMS.get(w)
    return _suffixes(target) if target is not None else w


def _suffixes(w: str) -> str:
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us")):
        w = w[:-1]
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("e-mail", "email").replace("go/no-go", "gonogo"))


def _norm(words: Sequence[str]) -> list[str]:
    """Stemmed words, acronyms expanded, stop words dropped."""
    return [_stem(x) for w in words for x in _ACRONYMS.get(w, w).split() if x not in _STOP]


def _terms(text: str) -> list[str]:
    """Stemmed content words of ``text``."""
    return _norm(_tokens(text))


#: Question words: they tell what kind of value is asked for, never which fact.
_WH_TERMS = {_stem(w) for w in ("who", "whom", "where", "when", "how", "much", "many")}


def _focus(text: str, of: bool = False) -> set[str]:
    """What a question asks for (up to three words after *which*/*what*/an asking verb; *who*, *where*...).

    With ``of``, also the noun phrase after *of* that follows those words
    ("the number *of the invoice*").
    """
    toks = _tokens(text)
    out: set[str] = set()
    for i, t in enumerate(toks):
        if t in ("who", "whom", "where", "when"):
            out.add(_stem(t))
        if t == "how" and toks[i + 1:i + 2] in (["much"], ["many"], ["long"], ["often"]):
            out.update(_norm(toks[i + 1:i + 3]))  # "how many people": the people are asked about too
        if t == "how" and any(w in ("start", "starts", "begin", "begins", "open", "opens") for w in toks[i + 1:]):
            out.add("start")
        if t == "whose":  # "whose share ...?" asks for the owner
            out.add("who")
        if t in ("in", "as") and i > 0:  # "..., in percent?", "as a percentage of ...": the unit asked for
            unit = [w for w in toks[i + 1:i + 3] if w not in ("a", "an")][:1]
            if unit and _stem(unit[0]) in _UNITS:
                out.add(_stem(unit[0]))
        asking = _asking(toks, i)
        who_is = t == "who" and toks[i + 1:i + 2] in (["is"], ["s"], ["are"], ["was"])  # "who is the buddy"
        if t not in ("which", "what", "whats") and not asking and not who_is:
            continue
        taken: list[str] = []
        skipped = False
        rest = toks[i + 1:]
        for j, w in enumerate(rest):
            if w == "s" and taken:
                if not skipped and t in ("which", "what"):  # "which team's share": the team is asked for
                    break
                taken.clear()  # a possessor ("what is Dana's address") is not what is asked for
                continue
            if w in _FOCUS_SKIP and not taken:
                skipped = True
                continue
            if w in _FOCUS_STOP or w in _FOCUS_SKIP or len(taken) >= 3:
                if of and taken and w == "of":  # "the number of the invoice" asks for the invoice number
                    taken += _noun_phrase(rest[j + 1:], 2)
                break
            taken.append(w)
        out.update(_norm(taken))
    return out


def _noun_phrase(toks: list[str], most: int) -> list[str]:
    """The first words of the noun phrase ``toks`` opens with (determiners and a possessor dropped)."""
    taken: list[str] = []
    for w in toks:
        if w == "s" and taken:
            taken.clear()
            continue
        if w in _DETERMINERS and not taken:
            continue
        if w in _STOP or w in _AUX or len(taken) >= most:
            break
        taken.append(w)
    return taken


def _is_wh(text: str) -> bool:
    """Whether a question asks for something (a *wh*-word, "tell me", "confirm the...") rather than yes or no."""
    toks = _tokens(text)
    return any(t in _WH_WORDS or _asking(toks, i) for i, t in enumerate(toks))


def _asking(toks: list[str], i: int) -> bool:
    """Whether ``toks[i]`` asks for what follows it: "confirm", "need", "give me", "could you share"."""
    t = toks[i]
    return t in _ASKING_VERBS and (t in ("confirm", "need") or toks[i + 1:i + 2] in (["me"], ["us"])
                                   or toks[i - 1:i] == ["you"])


#: Units a question may ask its answer in ("in percent", "as a percentage", "in months").
_UNITS = {_stem(w) for w in ("percent", "percentage", "months", "years", "days", "minutes", "hours", "weeks")}
_WH_WORDS = {"what", "whats", "which", "who", "whom", "whose", "where", "when", "how"}
#: Shapes of value that a question opening with this word cannot ask for ("Whose share ...?" no number,
#: "Where ...?" no date, "When ...?" no address).
_NUMBERS = frozenset({"integer", "amount"})
_UNFIT: dict[str, frozenset[str]] = {
    "who": _NUMBERS | {"date", "time", "folder", "file"},
    "whom": _NUMBERS | {"date", "time", "folder", "file"},
    "whose": _NUMBERS | {"date", "time", "folder", "file"},
    "where": _NUMBERS | {"date", "time"},
    "when": _NUMBERS | {"email", "folder", "file", "id"},
}


def _opening(text: str) -> str:
    """The *wh*-word a question opens with ("Could you confirm *where* ..."), or ``""``."""
    for t in _tokens(text):
        if t in _WH_WORDS:
            return t
        if t not in _STOP and t not in _ASKING_VERBS:
            return ""
    return ""


def _subject(text: str) -> set[str]:
    """What a question is about: the noun phrase after a *wh*-question's auxiliary ("What day is *the
    client meeting*") and the one after *of* that follows what is asked for ("the e-mail of *the
    leaver's manager*"; a possessor is dropped)."""
    toks = _tokens(text)
    return _after_aux(toks) | _of_phrase(toks)


def _of_phrase(toks: list[str]) -> set[str]:
    for i, t in enumerate(toks):
        if t != "of" or not any(w in _WH_WORDS or w in _ASKING_VERBS for w in toks[max(0, i - 5):i]):
            continue
        return _phrase(toks[i + 1:], drop_possessor=True)
    return set()


def _after_aux(toks: list[str]) -> set[str]:
    for i, t in enumerate(toks):
        if t not in ("which", "what", "when", "where", "who", "how"):
            continue
        j = i + 1
        while j < len(toks) and toks[j] not in _AUX and j - i <= 4:
            j += 1
        return _phrase(toks[j + 1:])
    return set()


def _phrase(words: list[str], drop_possessor: bool = False) -> set[str]:
    """The (normalised) words of the noun phrase ``words`` open with: up to three, a leading
    determiner skipped; with ``drop_possessor`` a possessor ("the leaver's") is dropped."""
    taken: list[str] = []
    for w in words:
        if drop_possessor and w == "s" and taken:
            taken.clear()
            continue
        if w in _DETERMINERS and not taken:
            continue
        if w in _STOP or w in _AUX or len(taken) >= 3:
            break
        taken.append(w)
    return set(_norm(taken))
