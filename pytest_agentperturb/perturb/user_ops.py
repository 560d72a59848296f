"""Operators on the user surface (the goal as the user states it).

Registers the shared fact operators for ``user-*`` plus
:class:`AddBackground`, which buries the request under chit-chat.
"""

from __future__ import annotations

import random
from dataclasses import replace

from ..model.task import Task
from ..model.interfaces import Edit, Operator
from .text_ops import AppendUnrelated, DropFactSentence, MisattributeValue, SwapValue, VagueValue, unrelated


class AddBackground:
    """Open the request with unrelated background (``add_background``).

    A line of background about another, settled matter comes before the
    actual request, the way people open a message: drawn from the
    ``add_background`` bank of the task's tool areas (``banks/redundant.toml``)
    and filled with the task's own people, rooms, folders and records, it
    carries a decoy from the task's world.  The request itself is unchanged,
    so the solution is the same; the decoy is the canary.
    """

    id = "add_background"
    family = "user-redundant"

    def applicable(self, task: Task) -> bool:
        return bool(task.facts)

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        got = unrelated(task, "add_background", rng)
        if got is None:
            return None
        return Edit(replace(task.surfaces, user=got.text + "\n\n" + task.surfaces.user), got.canaries,
                    note=f"background: {got.text}")


#: The operators of this module, in catalog order.
OPERATORS: tuple[Operator, ...] = (
    DropFactSentence("user"),
    VagueValue("user"),
    AppendUnrelated("user"),
    AddBackground(),
    SwapValue("user"),
    MisattributeValue("user"),
)
