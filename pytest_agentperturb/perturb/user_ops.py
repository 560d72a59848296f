"""Operators on the user surface (the goal as the user states it).

Registers the shared fact operators for ``user-*`` plus
:class:`AddBackground`, which buries the request under chit-chat.
"""

from __future__ import annotations

import random
from dataclasses import replace

from ..model.records import Canary
from ..model.task import Task
from .engine import Edit, Operator
from .text_ops import (
    AppendUnrelated,
    DropFactSentence,
    MisattributeValue,
    SwapValue,
    VagueValue,
    unrelated_thing,
)


class AddBackground:
    """Open the request with unrelated background (``add_background``).

    A paragraph of small talk about another matter, carrying a decoy value of
    a fact's shape, comes before the actual request.  The request itself is
    unchanged, so the solution is the same; the decoy is the canary.
    """

    id = "add_background"
    family = "user-redundant"

    def applicable(self, task: Task) -> bool:
        return bool(task.facts)

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        got = unrelated_thing(task, rng)
        if got is None:
            return None
        fact, d, thing = got
        intro = f"Some background first, just so you know: {thing}. Anyway, that is not why I am writing.\n"
        return Edit(replace(task.surfaces, user=intro + task.surfaces.user), (Canary("text", d, fact.id),),
                    note=f"background: {thing}")


#: The operators of this module, in catalog order.
OPERATORS: tuple[Operator, ...] = (
    DropFactSentence("user"),
    VagueValue("user"),
    AppendUnrelated("user"),
    AddBackground(),
    SwapValue("user"),
    MisattributeValue("user"),
)
