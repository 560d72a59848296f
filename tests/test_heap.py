"""model/heap.py: who freezes the heap, who thaws it, and that nothing else in the package calls ``gc``."""

from __future__ import annotations

import gc
import re
from pathlib import Path

from pytest_agentperturb.model.heap import FrozenHeap, collector_paused

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_agentperturb"


def test_a_frozen_heap_is_thawed_once_by_its_holder_and_never_one_that_someone_else_froze() -> None:
    assert gc.get_freeze_count() == 0
    heap = FrozenHeap()
    heap.freeze()
    assert heap.frozen and gc.get_freeze_count() > 0
    other = FrozenHeap()
    other.freeze()  # frozen already: not its to thaw
    assert not other.frozen
    other.thaw()
    assert gc.get_freeze_count() > 0
    heap.thaw()
    assert not heap.frozen and gc.get_freeze_count() == 0
    heap.thaw()  # once
    assert gc.get_freeze_count() == 0


def test_a_claimed_heap_owns_what_collector_paused_freezes_unless_something_was_frozen_before() -> None:
    heap = FrozenHeap().claim()
    assert heap.frozen
    enabled = gc.isenabled()
    with collector_paused(freeze=True):
        assert not gc.isenabled()
    assert gc.isenabled() == enabled and gc.get_freeze_count() > 0
    later = FrozenHeap().claim()  # frozen by the first: the second leaves it alone
    assert not later.frozen
    later.thaw()
    assert gc.get_freeze_count() > 0
    heap.thaw()
    assert gc.get_freeze_count() == 0


def test_only_the_heap_module_calls_the_garbage_collector() -> None:
    callers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if re.search(r"^\s*import gc\b|\bgc\.\w+\(", p.read_text(), re.M))
    assert callers == ["model/heap.py"]
