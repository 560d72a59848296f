"""Operators on the procedure surface (policies, runbooks, system prompt).

Registers the shared fact operators for ``procedure-*`` plus
:class:`InvertCondition`, which flips the polarity of a rule that governs a
needed fact.
"""

from __future__ import annotations

import random
import re

from ..model.records import Canary
from ..model.task import Fact, Task
from .engine import Edit, Operator
from .helpers import facts_on, replace_text, stating_sentence
from .text_ops import AppendUnrelated, DropFactSentence, KeepObsolete, SwapValue, VagueValue

#: Polarity flips, most specific first: (pattern, replacement).
FLIPS: tuple[tuple[str, str], ...] = (
    (r"\balways\b", "never"), (r"\bnever\b", "always"),
    (r"\bmust\b", "must not"), (r"\bonly\b", "never"),
    (r"\bbefore\b", "after"), (r"\bafter\b", "before"),
    (r"\babove\b", "below"), (r"\bbelow\b", "above"),
    (r"\bhas an\b", "has no"),
    (r"\bare\b", "are not"), (r"\bis\b", "is not"), (r"\bget\b", "do not get"),
)


def inverted(sentence: str) -> str | None:
    """The sentence with its first polarity word flipped (None if it has none)."""
    hits = [(m.start(), rx, rep) for rx, rep in FLIPS for m in [re.search(rx, sentence)] if m]
    if not hits:
        return None
    _, rx, rep = min(hits)
    return re.sub(rx, rep, sentence, count=1)


class InvertCondition:
    """Invert the condition of a rule that states a needed fact (``invert_condition``).

    "Hotel stays are filed under category travel" becomes "... are not filed
    under ...", "always" becomes "never", "before" becomes "after".  The
    value is still there but the rule now says the opposite, so a follower
    drops or avoids the true value.  Recoverable: the recovery annotation
    names the fact and the user simulator gives its true value when asked.
    The canary (kind ``inverted``) holds the true value: acting without it,
    and without asking, means the agent followed the inverted rule.
    """

    id = "invert_condition"
    family = "procedure-incorrect"

    def _targets(self, task: Task) -> list[tuple[Fact, str]]:
        out = []
        for f in facts_on(task, "procedure"):
            sent = stating_sentence(task, f, "procedure")
            if sent and inverted(sent) and f.value in (inverted(sent) or ""):
                out.append((f, sent))
        return out

    def applicable(self, task: Task) -> bool:
        return bool(self._targets(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact, sent = rng.choice(self._targets(task))
        new_sent = inverted(sent)
        assert new_sent is not None
        new = replace_text(task.surfaces, "procedure", sent, new_sent)
        return Edit(new, (Canary("inverted", fact.value, fact.id),), recovery=(fact.id,),
                    note=f"inverted: {sent.strip()} -> {new_sent.strip()}")


#: The operators of this module, in catalog order.
OPERATORS: tuple[Operator, ...] = (
    DropFactSentence("procedure"),
    VagueValue("procedure"),
    AppendUnrelated("procedure"),
    KeepObsolete("procedure"),
    SwapValue("procedure"),
    InvertCondition(),
)
