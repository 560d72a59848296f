"""Operators on the procedure surface (policies, runbooks, system prompt).

Registers the shared fact operators for ``procedure-*`` plus
:class:`InvertCondition`, which negates the rule that governs a needed fact.
"""

from __future__ import annotations

import random

from ..model.records import Canary
from ..model.task import Fact, Task
from ..model.interfaces import Edit, Operator
from .helpers import facts_on, replace_text, stating_sentence
from .phrasing import invert_rule
from .text_ops import AppendUnrelated, DropFactSentence, KeepObsolete, SwapValue, VagueValue


def inverted(sentence: str, value: str | None = None) -> str | None:
    """The sentence with its rule negated (see :func:`.phrasing.invert_rule`); None if it has none."""
    return invert_rule(sentence, value)


class InvertCondition:
    """Invert the rule that states a needed fact (``invert_condition``).

    The main clause holding the value is negated, not a justification after
    it: "Hotel stays are filed under category travel" becomes "... are not
    filed under ...", "always" becomes "never", an imperative "Book room
    "Fjord" for offsites; it is the only room that seats twelve" becomes
    "Do not book room "Fjord" for offsites."; an existing negation is
    removed rather than doubled (:func:`.phrasing.invert_rule`).  The value
    is still there but the rule now says the opposite, so a follower drops
    or avoids the true value.  Recoverable: the recovery annotation
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
            if sent and inverted(sent, f.value) is not None:
                out.append((f, sent))
        return out

    def applicable(self, task: Task) -> bool:
        return bool(self._targets(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        fact, sent = rng.choice(self._targets(task))
        new_sent = inverted(sent, fact.value)
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
