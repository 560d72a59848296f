"""Each variant made once per process, and dropped once no item still to run needs it.

Every model and every repeat of an item meets the same variant (its
:class:`~..model.keys.VariantKey`: the task, the family and the item's
seed), so it is made, validated and
digested once.  A long run does not keep them all: when the last item of a
key this process may run has finished, the variant is forgotten (the store
and the report keep what they need of it).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable

from ..model import __version__
from ..model.errors import VariantSkipped
from ..model.keys import EpisodeKey, VariantKey
from ..model.records import Variant
from ..model.task import TARGETS
from .collect import PerturbItem

def variant_digest(task_digest: str, variant: Variant, user_model: str = "") -> str:
    """Identity of the exact instance an episode ran on, and of the user behind ``ask_user`` (guards resume)."""
    h = hashlib.sha256()
    for part in (__version__, task_digest, variant.family, variant.operator, str(variant.seed)):
        h.update(part.encode() + b"\0")
    for t in TARGETS:
        h.update(variant.surfaces.render(t).encode())
    for inj in variant.injections:  # an injection edits no surface but is part of the instance
        h.update(f"{inj.tool}\0{inj.text}\0{inj.goal}".encode() + (f"\0{inj.vector}".encode() if inj.vector else b""))
        for clean, injected in inj.renames:
            h.update(f"\0rename\0{clean}\0{injected}".encode())
    for e in variant.image_edits:  # nor does an image edit
        h.update(f"{e.tool}\0{e.match}\0{e.box}\0".encode() + e.data)
    if user_model:  # another user simulator is another episode (the keyword simulator adds nothing)
        h.update(b"user-model\0" + user_model.encode())
    return h.hexdigest()


def key_of(item: PerturbItem) -> VariantKey:
    """The variant an item runs on: the same for every model and repeat."""
    return VariantKey(item.task.suite, item.task.id, item.family, item.seed)


def episode_key(run_id: str, item: PerturbItem) -> EpisodeKey:
    """The store key of the episode an item plays in run ``run_id`` (what resume looks up)."""
    return EpisodeKey(run_id, item.model, item.task.suite, item.task.id, item.family, item.seed, item.repeat)


class VariantCache:
    """Variants (with their digests) or the reasons they were skipped, by :func:`key_of`."""

    def __init__(self, make: Callable[[PerturbItem], Variant], user_model: str = "") -> None:
        self._make = make
        self._user_model = user_model
        self._entries: dict[VariantKey, tuple[Variant, str] | VariantSkipped] = {}
        self._uses: Counter[VariantKey] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, item: PerturbItem) -> tuple[Variant, str] | VariantSkipped:
        """The item's variant and its digest, made on first use, or why it is skipped."""
        key = key_of(item)
        if key not in self._entries:
            try:
                v = self._make(item)
                self._entries[key] = (v, variant_digest(item.task.digest(), v, self._user_model))
            except VariantSkipped as exc:
                self._entries[key] = exc
        return self._entries[key]

    def done(self, item: PerturbItem, items: Iterable[object]) -> None:
        """``item`` has finished; its variant goes once every item of its key among ``items`` has.

        ``items`` are the items this process may run (``session.items``),
        counted at the first call.
        """
        if self._uses is None:
            self._uses = Counter(key_of(i) for i in items if isinstance(i, PerturbItem))
        key = key_of(item)
        self._uses[key] -= 1
        if self._uses[key] <= 0:
            self._entries.pop(key, None)
            del self._uses[key]
