"""The cyclic garbage collector kept off objects that live until the process ends.

An import as large as litellm's (about a million objects) or a large
report's decoded episodes build objects that hold no reference cycle and
stay until the end; while they are built, every collection the allocations
set off walks them again.  :func:`collector_paused` turns the collector off
around such work and, for a command's own process, freezes what it built
(:func:`gc.freeze`) so later collections skip it too.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused(freeze: bool = False) -> Iterator[None]:
    """The collector off inside, and on again after if it was on.

    ``freeze``: at the end, freeze everything there is (later collections
    skip it).  Only for a process of our own (``agentperturb report``, which
    thaws it again at its end when it runs inside another program, and its
    page worker); the episode loop decides about freezing a pytest process
    itself (:mod:`..run.batcher`).
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
