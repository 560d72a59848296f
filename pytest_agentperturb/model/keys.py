"""The identity of an episode and of the variant it ran on, each defined once.

An :class:`EpisodeKey` names one row of the store's ``episodes`` table:
the run, the model, the task (suite and id), the family, the item's seed
and the repeat index.  Its field order is the store's primary key and the
order every reader sorts episodes in.  A :class:`VariantKey` names the
instance an episode ran on within one run: every model and every repeat
of an item share it.  Both are tuples, so they hash and compare like the
plain tuples they replace; :meth:`EpisodeKey.of` and :meth:`VariantKey.of`
read them off any episode row (a record's row, a store row, a report row).

Adding a key column is one edit here (and the record's field of the same
name, :class:`~.records.EpisodeRecord`): the store's key, the resume look-up,
the xdist hand-over and the results derive their field lists from these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class VariantKey(NamedTuple):
    """The variant an episode ran on, within one run: the same for every model and repeat of an item."""

    suite: str
    task: str
    family: str
    seed: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> VariantKey:
        """The variant key of an episode row."""
        return cls(str(row["suite"]), str(row["task"]), str(row["family"]), int(row["seed"]))


class EpisodeKey(NamedTuple):
    """Identity of an episode within the store (its primary key, in this order)."""

    run_id: str
    model: str
    suite: str
    task: str
    family: str
    seed: int
    repeat: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> EpisodeKey:
        """The key of an episode row (a row without ``repeat`` is repeat 0)."""
        return cls(str(row["run_id"]), str(row["model"]), str(row["suite"]), str(row["task"]), str(row["family"]),
                   int(row["seed"]), int(row.get("repeat") or 0))

    @property
    def variant(self) -> VariantKey:
        """The variant this episode ran on."""
        return VariantKey(self.suite, self.task, self.family, self.seed)


#: The fields of an episode key, in the store's order.
KEY_FIELDS: tuple[str, ...] = EpisodeKey._fields
#: The fields of a variant key.
VARIANT_KEY_FIELDS: tuple[str, ...] = VariantKey._fields
