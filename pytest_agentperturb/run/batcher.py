"""Many episodes in flight per process, while pytest runs items one at a time.

Episodes are I/O-bound (they wait on model providers), so each process (the
only one, or each xdist worker) keeps a background event loop in a daemon
thread.  When an item runs, :class:`Batcher` submits its episode *and*
prefetches the episodes of the items this process is going to run next, up
to ``--agentperturb-concurrency`` in flight (a per-model connection limit
lives in the agent).  Each item then waits for its own recorded outcome, and
while it waits the window is topped up whenever an episode finishes, so the
pipeline stays full even when the current episode is the slowest.

The window counts every submitted episode whose result has not been taken,
finished or not: a finished episode of an item still to come holds its
slot until that item claims it.  Prefetching therefore runs at most
``window`` episodes ahead of pytest, however long the run, and the cost of
one call does not grow with the number of items (a run of thousands of
items keeps a few dozen futures, not thousands).

Which items come next is the plugin's business (:mod:`..plugin.schedule`).
Nothing here crosses processes: the loop, the semaphore and the API clients
are created lazily in the process that uses them.  The loop's default
executor is :class:`~..agents.litellm_agent.LoopExecutor` (litellm prepares
its requests there; inline rather than in a thread, where the provider
allows).

With a :class:`~..model.heap.FrozenHeap` (the session's batcher), starting
the loop freezes the heap and :meth:`Batcher.close` thaws it unless asked
not to; when and why is :mod:`..model.heap`'s business.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from ..model.heap import FrozenHeap

log = logging.getLogger("pytest_agentperturb.batcher")
Factory = Callable[[], Coroutine[Any, Any, Any]]


def window(concurrency: int, lookahead: int | None = None) -> int:
    """Submitted, unclaimed episodes a process keeps at most: ``concurrency`` plus the lookahead
    (default: ``concurrency`` more, at least 2).  The xdist scheduler keeps a worker this many items ahead."""
    return concurrency + (lookahead if lookahead is not None else max(2, concurrency))


class Batcher:
    """A background event loop that runs up to ``concurrency`` episodes at once.

    Args:
        concurrency: episodes in flight at most.
        lookahead: how many submitted-but-unclaimed episodes to keep beyond
            ``concurrency`` (default: ``concurrency`` more), so that the next one
            starts the moment a slot frees up and episodes that finish before
            the one pytest waits for do not idle the connection limit.
        freeze_heap: freeze the heap from the start of the loop to :meth:`close`
            (a :class:`~..model.heap.FrozenHeap` of its own).
        heap: the frozen heap to use instead, held by the caller too (the
            session's, thawed by the plugin's last cleanup).
    """

    def __init__(self, concurrency: int, lookahead: int | None = None, freeze_heap: bool = False,
                 heap: FrozenHeap | None = None) -> None:
        self.concurrency = concurrency
        self.heap = heap if heap is not None else FrozenHeap() if freeze_heap else None
        # finished episodes hold their slot until claimed: the default room of one more ``concurrency``
        # lets that many finish out of order before a slow one at the head of the queue starves the limit
        self.window = window(concurrency, lookahead)
        self._futures: dict[str, cf.Future[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sem: asyncio.Semaphore | None = None

    # -- the loop ------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            from ..agents.litellm_agent import LoopExecutor

            if self.heap is not None:
                self.heap.freeze()
            loop = asyncio.new_event_loop()
            loop.set_default_executor(LoopExecutor(thread_name_prefix="agentperturb-episode"))
            self._thread = threading.Thread(target=loop.run_forever, name="agentperturb-episodes", daemon=True)
            self._thread.start()
            self._loop = loop
        return self._loop

    async def _limited(self, factory: Factory) -> Any:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.concurrency)
        async with self._sem:
            return await factory()

    def submit(self, key: str, factory: Factory) -> None:
        """Schedule ``factory()`` under the concurrency limit, unless ``key`` is already scheduled."""
        if key not in self._futures:
            self._futures[key] = asyncio.run_coroutine_threadsafe(self._limited(factory), self._ensure_loop())

    def call(self, factory: Factory) -> Any:
        """Run one coroutine on the loop (outside the episode limit) and wait for its result."""
        return asyncio.run_coroutine_threadsafe(factory(), self._ensure_loop()).result()

    def in_flight(self) -> int:
        """Scheduled episodes that have not finished."""
        return sum(1 for f in self._futures.values() if not f.done())

    def unclaimed(self) -> int:
        """Submitted episodes whose result was not taken yet, finished or not (what fills the window)."""
        return len(self._futures)

    def scheduled(self, key: str) -> bool:
        """Whether ``key`` was submitted and its result not yet taken."""
        return key in self._futures

    def discard(self, key: str) -> None:
        """Forget ``key``'s episode (cancelled if it has not started): its item will not claim it."""
        fut = self._futures.pop(key, None)
        if fut is not None:
            fut.cancel()

    def run(self, key: str, factory: Factory, top_up: Callable[[int], None]) -> Any:
        """Submit ``key`` (if needed) and block until its result; keep the window full meanwhile.

        ``top_up(n)`` is asked to submit up to ``n`` more upcoming episodes;
        it is called before waiting and each time an episode finishes, and
        only while the window has room (``key``'s own episode counts in it).
        A full window gets room only when this thread claims a result, so
        then it waits for ``key``'s episode alone: the other episodes'
        ends do not wake it.
        """
        self.submit(key, factory)
        fut = self._futures[key]
        while True:
            room = self.window - len(self._futures)
            if room > 0:
                top_up(room)
            if fut.done():
                break
            if len(self._futures) >= self.window:  # full: nothing to top up before ``key`` is claimed
                cf.wait((fut,))
                break
            pending = [f for f in self._futures.values() if not f.done()]  # at most ``window`` futures
            cf.wait(pending, return_when=cf.FIRST_COMPLETED)
        del self._futures[key]
        return fut.result()

    def close(self, thaw: bool = True) -> None:
        """Cancel what is still scheduled, close API clients, stop the loop; unfreeze the heap in any case.

        With ``thaw=False`` the heap this batcher froze stays frozen for its
        holder to thaw (the session's, once pytest's own end-of-run
        collections are done).
        """
        try:
            self._close()
        finally:
            if thaw and self.heap is not None:
                self.heap.thaw()

    def _close(self) -> None:
        if self._loop is None:
            return
        for f in self._futures.values():
            f.cancel()
        self._futures.clear()
        if "litellm" in sys.modules:  # its cached API clients (a run without litellm has none)
            from ..agents.litellm_agent import close_clients

            try:
                asyncio.run_coroutine_threadsafe(close_clients(), self._loop).result(timeout=10)
            except Exception:  # pragma: no cover - best effort at shutdown
                log.debug("closing API clients failed", exc_info=True)
        loop = self._loop

        async def _drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(_drain(), loop).result(timeout=10)
        except Exception:  # pragma: no cover
            log.debug("draining the episode loop failed", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None
