"""The cyclic garbage collector kept off objects that live until the process ends: every ``gc`` call is here.

An import as large as litellm's (about a million objects) or a large
report's decoded episodes build objects that hold no reference cycle and
stay until the end; while they are built, every collection the allocations
set off walks them again.  Three ways out, each used where it pays:

- :func:`collector_paused` turns the collector off around such work (litellm's
  import, the report's decoded episodes) and, for a command's own process,
  freezes what it built (:func:`gc.freeze`) so later collections skip it too.
  A command that runs in another program's process (a test, a caller's
  script) claims the heap first (:meth:`FrozenHeap.claim`) and thaws it at its
  end, leaving that program's collector as it was.
- :class:`FrozenHeap`, the episode loop's: when the session's batcher starts
  its loop (:mod:`..run.batcher`), every object alive at that moment (modules,
  litellm's tables, the collected items: they live until the session ends)
  moves out of the collector's reach until the heap is thawed, so the full
  collections that the episodes' allocations set off now and then walk what
  the episodes made, not the whole heap of a process that imported litellm.
  Only a heap nothing else froze is frozen.  The session closes its batcher
  without thawing: the heap stays frozen through the full collections pytest
  runs when it unconfigures (to report unraisable exceptions), and the
  plugin's last cleanup thaws it (registered first, in ``pytest_cmdline_main``),
  so the run leaves the collector as it was.
- At interpreter exit: a process whose episode loop froze its heap freezes
  it again then (an ``atexit`` handler, registered once), so the collections
  of its finalization skip what was alive at exit instead of walking
  litellm's heap several times (about 1.3 s after an import of litellm;
  0.07 s frozen).  Objects in reference cycles that are still alive at exit
  are then freed by the operating system without their finalizers, which
  Python does not promise to run at exit either.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused(freeze: bool = False) -> Iterator[None]:
    """The collector off inside, and on again after if it was on.

    ``freeze``: at the end, freeze everything there is (later collections
    skip it).  Only for a process of our own (``agentperturb report``, which
    thaws it again at its end when it runs inside another program, and its
    page worker); the episode loop decides about freezing a pytest process
    itself (:class:`FrozenHeap`).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


@functools.cache
def _freeze_at_exit() -> None:
    """Freeze the heap when the interpreter exits (registered once per process; see the module's docstring)."""
    atexit.register(gc.freeze)


class FrozenHeap:
    """A frozen heap and who thaws it: :meth:`thaw` unfreezes only what this holder froze (or claimed)."""

    def __init__(self) -> None:
        self.frozen = False

    def freeze(self) -> None:
        """Freeze the heap unless something is frozen already; then freeze it again at interpreter exit."""
        if not self.frozen and not gc.get_freeze_count():
            gc.freeze()
            self.frozen = True
            _freeze_at_exit()

    def claim(self) -> FrozenHeap:
        """Own what gets frozen from now on (e.g. by :func:`collector_paused`) unless something is frozen already."""
        self.frozen = not gc.get_freeze_count()
        return self

    def thaw(self) -> None:
        """Unfreeze the heap if this holder froze (or claimed) it; once."""
        if self.frozen:
            self.frozen = False
            gc.unfreeze()
