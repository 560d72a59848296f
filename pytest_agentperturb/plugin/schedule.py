"""Which items this process runs next, and how xdist sends them (prefetching for the batcher).

Without xdist the items after the current one in ``session.items`` come
next; on an xdist worker, exactly the items the controller has already sent
to this worker (its pending queue), so no episode runs on two workers.
:class:`Lookahead` hands each upcoming item to the prefetcher once per
session, so topping up the window costs the same at the first item and at
the ten-thousandth.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def upcoming(session: pytest.Session, item: pytest.Item) -> Iterator[pytest.Item]:
    """Items this process will run after ``item``, in order.

    On an xdist worker these are the indices the controller already sent
    (the worker's pending queue); otherwise the rest of ``session.items``.
    """
    interactor = _xdist_interactor(session.config)
    if interactor is not None:
        yield from _queued(session, item, interactor)
        return
    if getattr(session.config, "workerinput", None) is not None:
        return  # an xdist worker whose queue we cannot see: run one at a time
    try:
        start = _index(session, item) + 1
    except ValueError:
        return
    yield from session.items[start:]


def _queued(session: pytest.Session, item: pytest.Item, interactor: Any) -> Iterator[pytest.Item]:
    """The items of an xdist worker's pending queue, in order, ``item`` left out."""
    items = session.items
    indices: list[Any] = []
    nxt = getattr(interactor, "nextitem_index", None)
    if isinstance(nxt, int):
        indices.append(nxt)
    queue = getattr(interactor, "torun", None)
    if queue is not None and hasattr(queue, "lock"):
        with queue.lock() as pending:
            indices += [i for i in pending if isinstance(i, int)]
    for i in indices:
        if 0 <= i < len(items) and items[i] is not item:
            yield items[i]


class Lookahead:
    """Walks the items this process runs next, each at most once per session.

    The batcher asks for more episodes every time one finishes; an item
    it was already handed (submitted, or found to need no episode: a
    skipped variant, a reused result) is not handed again.  Without xdist
    that is a cursor into ``session.items``; on a worker, the set of queue
    indices already handed.
    """

    def __init__(self, session: pytest.Session) -> None:
        self.session = session
        self._cursor = 0
        self._handed: set[int] = set()
        self._worker = getattr(session.config, "workerinput", None) is not None
        self._interactor = _xdist_interactor(session.config) if self._worker else None

    def upcoming(self, item: pytest.Item) -> Iterator[pytest.Item]:
        """Items after ``item`` not handed out before, in order; each one yielded counts as handed."""
        session = self.session
        items = session.items
        if self._worker:
            if self._interactor is None:
                return  # an xdist worker whose queue we cannot see: run one at a time
            for nxt in _queued(session, item, self._interactor):
                i = _index(session, nxt)
                if i not in self._handed:
                    self._handed.add(i)
                    yield nxt
            return
        try:
            start = max(self._cursor, _index(session, item) + 1)
        except ValueError:
            return
        for i in range(start, len(items)):
            self._cursor = i + 1
            yield items[i]


_INDEX = pytest.StashKey[dict[str, int]]()


def _index(session: pytest.Session, item: pytest.Item) -> int:
    """Position of ``item`` in ``session.items`` (node id -> index, kept in the session's stash)."""
    index = session.stash.get(_INDEX, None)
    if index is None or len(index) != len(session.items):
        index = {it.nodeid: i for i, it in enumerate(session.items)}
        session.stash[_INDEX] = index
    if item.nodeid not in index:
        raise ValueError(item.nodeid)
    return index[item.nodeid]


def _xdist_interactor(config: pytest.Config) -> Any:
    """xdist's worker-side object holding the queue of item indices sent to this worker."""
    if getattr(config, "workerinput", None) is None:
        return None
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor" and hasattr(plugin, "torun"):
            return plugin
    return None
