"""Operators on the context surface (carried-over conversation turns).

Registers the shared fact operators for ``context-*`` plus
:class:`DropTurn` (a lost exchange) and :class:`PrependUnrelatedHistory`
(history carried over from an unrelated task).
"""

from __future__ import annotations

import random
from dataclasses import replace

from ..model.task import Task, Turn
from ..model.interfaces import Edit, Operator
from .helpers import facts_on, omission
from .text_ops import AppendUnrelated, DropFactSentence, MisattributeValue, SwapValue, unrelated


class DropTurn:
    """Lose the exchange that stated a needed fact (``drop_turn``).

    The user turn stating the fact and the assistant's acknowledgement right
    after it are removed, as when a summary or a truncated history loses an
    exchange.  Applicable only when other turns remain.  The recovery
    annotation names the lost facts; the user simulator supplies them.
    """

    id = "drop_turn"
    family = "context-missing"

    def _spans(self, task: Task) -> list[tuple[int, int]]:
        turns = task.surfaces.context
        spans = []
        for i, t in enumerate(turns):
            if any(f.stating(t.content) for f in facts_on(task, "context")):
                end = i + 2 if i + 1 < len(turns) and turns[i + 1].role == "assistant" else i + 1
                if end - i < len(turns):
                    spans.append((i, end))
        return spans

    def applicable(self, task: Task) -> bool:
        return bool(self._spans(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        i, end = rng.choice(self._spans(task))
        turns = task.surfaces.context
        new = replace(task.surfaces, context=turns[:i] + turns[end:])
        return omission(task, new, f"dropped turns {i}..{end - 1}")


class PrependUnrelatedHistory:
    """Carry over an exchange from an unrelated earlier request (``prepend_unrelated_history``).

    A question of the user and the assistant's answer about another, closed
    matter open the history, drawn from the ``history`` bank of the task's
    tool areas (``banks/redundant.toml``) and filled with the task's own
    people, folders and records.  The exchange mentions a decoy from the
    task's world; the current task's solution does not change.  The decoy
    is the canary.
    """

    id = "prepend_unrelated_history"
    family = "context-redundant"

    def applicable(self, task: Task) -> bool:
        return bool(task.facts)

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        got = unrelated(task, "history", rng)
        if got is None:
            return None
        turns = (Turn("user", got.text), Turn("assistant", got.reply))
        new = replace(task.surfaces, context=turns + task.surfaces.context)
        return Edit(new, got.canaries, note=f"prepended history mentioning {got.decoy}: {got.text} / {got.reply}")


#: The operators of this module, in catalog order.
OPERATORS: tuple[Operator, ...] = (
    DropFactSentence("context"),
    DropTurn(),
    AppendUnrelated("context"),
    PrependUnrelatedHistory(),
    SwapValue("context"),
    MisattributeValue("context"),
)
