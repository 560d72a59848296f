"""Which items this process runs next, and how xdist sends them (prefetching for the batcher).

Without xdist the items after the current one in ``session.items`` come
next; on an xdist worker, exactly the items the controller has already sent
to this worker (its pending queue), so no episode runs on two workers.
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
    items = session.items
    interactor = _xdist_interactor(session.config)
    if interactor is not None:
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
        return
    if getattr(session.config, "workerinput", None) is not None:
        return  # an xdist worker whose queue we cannot see: run one at a time
    try:
        start = _index(session, item) + 1
    except ValueError:
        return
    yield from items[start:]


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
