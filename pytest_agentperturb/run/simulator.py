"""The user simulator behind ``ask_user`` (docs/design.md section 2, rule 4).

It answers a fair question about an omitted or corrupted fact with that
fact's value and nothing else; any other question gets the neutral reply.
The default simulator matches words, offline and deterministic.
"""

from __future__ import annotations

import re

from ..model.context import NEUTRAL_REPLY
from ..model.task import Task


class UserSimulator:
    """Answers clarification requests by matching words against the task's facts.

    A request that names an omitted (or corrupted) fact is answered with that
    fact's value and nothing else; any other question gets a neutral reply.
    """

    def __init__(self, task: Task, recovery: tuple[str, ...]) -> None:
        self._all = list(task.facts)
        self._recovery = set(recovery)

    def answer(self, question: str) -> tuple[str, str | None]:
        """(reply, fact id it disclosed or None).

        The question is matched against *every* fact of the task: two points
        per word shared with a fact's question, id or kind vocabulary, one per
        cue word; at least two points are needed.  Only when the best match
        is a fact of the recovery annotation is its value disclosed; a
        question about anything else gets the neutral reply.
        """
        words = set(_words(question)) - _STOP
        best, best_score = None, 1
        for f in self._all:
            about = set(_words(" ".join((f.question, f.id.replace("_", " "), _KIND_WORDS.get(f.kind, "")))))
            score = 2 * len(words & (about - _STOP)) + len(words & set(f.cues))
            if score > best_score:
                best, best_score = f, score
        if best is None or best.id not in self._recovery:
            return NEUTRAL_REPLY, None
        return best.value, best.id


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


_KIND_WORDS = {
    "time": "time when hour start",
    "date": "date day when",
    "email": "email mail address",
    "id": "id which number reference",
    "amount": "amount much cost price total sum",
    "integer": "number many count",
}
_STOP = {"the", "a", "an", "is", "of", "to", "on", "what", "which", "should", "i", "it", "be", "how", "for", "at"}
