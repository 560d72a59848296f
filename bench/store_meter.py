"""Time spent writing the results store inside a running process, for ``bench/overhead.py --main-job``.

Loaded into the benchmark's pytest runs as a plugin (``-p store_meter``, this
folder on ``PYTHONPATH``): with ``AGENTPERTURB_BENCH_STORE_METER`` naming a
file, it wraps the store's writing methods (``put``, ``put_row``,
``put_variant``, ``flush`` (the store's writer thread calls it), the flush timer's callback of older
checkouts, ``close``; those a
checkout lacks are left alone, so an older checkout is measured the same way)
and adds up the wall and CPU seconds (the calling thread's) spent in their outermost calls, on every thread
(the store's writer thread, or an older checkout's batch timer, too, which cProfile would not see), and the wall
seconds of the test loop (``pytest_runtestloop``: the episode phase).  At
the end of the session it writes both, and the number of calls, there.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

_WRAPPED = ("put", "put_row", "put_variant", "flush", "_on_timer", "close")


class StoreMeter:
    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu = 0.0
        self.main = 0.0  # the wall seconds of pytest's thread alone (what the test loop waits for)
        self.calls = 0
        self.loop = 0.0
        self._local = threading.local()
        self._lock = threading.Lock()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kw: Any) -> Any:
            depth = getattr(self._local, "depth", 0)
            self._local.depth = depth + 1
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                self._local.depth = depth
                if depth == 0:  # the outermost call only (put calls flush)
                    with self._lock:
                        self.seconds += time.perf_counter() - t0
                        self.cpu += time.thread_time() - c0
                        if threading.current_thread() is threading.main_thread():
                            self.main += time.perf_counter() - t0
                        self.calls += 1
        return timed


_meter: StoreMeter | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _meter
    if not os.environ.get("AGENTPERTURB_BENCH_STORE_METER"):
        return
    from pytest_agentperturb.run.store import Store

    _meter = StoreMeter()
    for name in _WRAPPED:
        if hasattr(Store, name):
            setattr(Store, name, _meter.wrap(getattr(Store, name)))


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, Any, Any]:
    t0 = time.perf_counter()
    try:
        return (yield)
    finally:
        if _meter is not None:
            _meter.loop += time.perf_counter() - t0


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get("AGENTPERTURB_BENCH_STORE_METER")
    if _meter is None or not path:
        return
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"store_write_s": _meter.seconds, "store_write_cpu_s": _meter.cpu, "store_main_s": _meter.main, "store_calls": _meter.calls, "loop_s": _meter.loop}, f)
