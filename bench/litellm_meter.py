"""litellm's own CPU time inside a running process, for ``bench/overhead.py`` and ``bench/litellm_alone.py``.

:class:`Meter` wraps ``litellm.acompletion``: every call's coroutine is
driven step by step and the CPU time of the calling thread (the episode
loop) spent inside each step is added up, so the work litellm does on the
event loop is counted however its calls interleave with the harness's own
code.  What litellm runs on other threads (``completion`` on the loop's
default executor, its logging pool) is read from those threads' CPU clocks:
:func:`other_threads_cpu` sums every thread except pytest's main thread and
the episode loop's (in a ``pytest --agentperturb`` run with the litellm
agent the harness starts no other thread before the session ends).

Not seen by the meter: event-loop work on litellm's behalf outside its
coroutine (socket callbacks, the selector).  ``bench/litellm_alone.py``
measures that share as the process's CPU minus the meter's, and
``bench/overhead.py`` adds it back; the harness is never credited with it.

Loaded into the benchmark's pytest runs as a plugin (``-p litellm_meter``,
this folder on ``PYTHONPATH``): with ``AGENTPERTURB_BENCH_METER`` naming a
file, it writes there at the end of the session the process's CPU seconds
of the test loop (from its start to the start of the session's end:
start-up, collection and litellm's import left out) and of the end (the
analysis and the report), those pytest's thread spent making variants (and
their digests) and spent in the test loop, those of the episode loop's thread, litellm's
metered CPU seconds and its number of calls, and the samples of those
times taken every few items during the test loop; with
``AGENTPERTURB_BENCH_METER_LITELLM=1`` it also imports and wraps litellm
(in ``pytest_configure``, so the import is outside every phase).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

#: the episode loop's thread (``pytest_agentperturb/run/batcher.py``)
LOOP_THREAD = "agentperturb-episodes"
#: items between two samples of the cumulative CPU times, and what each sample holds
SAMPLE_EVERY = 8
SAMPLE_FIELDS = ("items", "process", "variants", "litellm_loop", "litellm_threads", "main_thread", "loop_thread")


class Meter:
    """CPU seconds litellm spends on the calling thread inside ``acompletion``, and its number of calls."""

    def __init__(self) -> None:
        self.loop_cpu = 0.0
        self.calls = 0

    def wrap(self, litellm: Any) -> None:
        """Replace ``litellm.acompletion`` by a metered one (same arguments, same result)."""
        original = litellm.acompletion
        meter = self

        def acompletion(*args: Any, **kwargs: Any) -> Metered:
            t = time.thread_time()
            coro = original(*args, **kwargs)
            meter.loop_cpu += time.thread_time() - t
            meter.calls += 1
            return Metered(coro, meter)

        litellm.acompletion = acompletion


class Metered:
    """An awaitable that drives ``coro`` and adds the thread CPU time of each of its steps to ``meter``."""

    __slots__ = ("coro", "meter")

    def __init__(self, coro: Any, meter: Meter) -> None:
        self.coro, self.meter = coro, meter

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, meter, clock = self.coro, self.meter, time.thread_time
        value: Any = None
        exc: BaseException | None = None
        while True:
            t = clock()
            try:
                out = coro.send(value) if exc is None else coro.throw(exc)
            except StopIteration as stop:
                meter.loop_cpu += clock() - t
                return stop.value
            except BaseException:
                meter.loop_cpu += clock() - t
                raise
            meter.loop_cpu += clock() - t
            try:
                value, exc = (yield out), None
            except BaseException as e:  # a cancellation or timeout thrown into the awaiting task
                value, exc = None, e


def loop_thread_cpu() -> float:
    """CPU seconds of the episode loop's thread so far (0 when there is none)."""
    for t in threading.enumerate():
        if t.name == LOOP_THREAD and t.ident is not None:
            try:
                return time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except OSError:
                return 0.0
    return 0.0


def other_threads_cpu() -> dict[str, float]:
    """CPU seconds of every live thread but the main one, the episode loop's and the caller's, by name."""
    skip = {threading.main_thread().ident, threading.get_ident()}
    out: dict[str, float] = {}
    for t in threading.enumerate():
        if t.ident is None or t.ident in skip or t.name == LOOP_THREAD:
            continue
        try:
            out[t.name] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except OSError:  # the thread ended meanwhile
            pass
    return out


class MeterPlugin:
    """The pytest side: CPU seconds of the run's phases and litellm's metered share, written to a JSON file.

    Phases: the test loop (from its start to the start of the session's
    end; the episodes, and the variants made on the way, whose CPU time on
    pytest's thread is taken apart) and the end (the analysis, the report,
    the summary, to the end of ``pytest_unconfigure``).  During the test
    loop, every ``SAMPLE_EVERY`` items, the cumulative CPU times are sampled
    (:data:`SAMPLE_FIELDS`): their slope against the items done is the cost
    of one more episode within this one process.
    """

    def __init__(self, path: str, meter_litellm: bool) -> None:
        self.path = path
        self.meter: Meter | None = None
        self.threads: dict[str, float] = {}
        self.loop_thread = self.variants = 0.0
        self.cpu0 = self.main0 = self.end0 = 0.0
        self.loop_phase = self.main_loop_phase = 0.0
        self.items = 0
        self.samples: list[tuple[int, float, float, float, float, float, float]] = []
        self._wrap_variants()
        if meter_litellm:
            from pytest_agentperturb.agents.litellm_agent import import_litellm

            self.meter = Meter()
            self.meter.wrap(import_litellm())

    def _wrap_variants(self) -> None:
        """Count the CPU time of making variants and their digests (once per task, family and seed, on pytest's
        thread, however many episodes use them)."""
        from pytest_agentperturb.plugin.variants import VariantCache

        original = VariantCache.get
        plugin = self

        def get(cache: Any, item: Any) -> Any:
            t = time.thread_time()
            try:
                return original(cache, item)
            finally:
                plugin.variants += time.thread_time() - t

        VariantCache.get = get  # type: ignore[method-assign,assignment]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self) -> None:
        self.cpu0, self.main0 = time.process_time(), time.thread_time()

    def pytest_runtest_logfinish(self) -> None:
        """Every ``SAMPLE_EVERY`` items: cumulative CPU seconds against the number of items done."""
        self.items += 1
        if self.items % SAMPLE_EVERY:
            return
        litellm_threads = sum(other_threads_cpu().values()) if self.meter else 0.0
        self.samples.append((self.items, time.process_time(), self.variants,
                             self.meter.loop_cpu if self.meter else 0.0, litellm_threads, time.thread_time(),
                             loop_thread_cpu()))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self.end0 = time.process_time()
        self.loop_phase, self.main_loop_phase = self.end0 - self.cpu0, time.thread_time() - self.main0
        self.threads = other_threads_cpu()  # before the episode loop shuts its executor down
        self.loop_thread = loop_thread_cpu()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self) -> None:
        data = {"loop_phase_cpu_s": self.loop_phase, "end_cpu_s": time.process_time() - self.end0,
                "variants_cpu_s": self.variants, "main_loop_phase_cpu_s": self.main_loop_phase,
                "loop_thread_cpu_s": self.loop_thread,
                "litellm_loop_cpu_s": self.meter.loop_cpu if self.meter else 0.0,
                "litellm_threads_cpu_s": sum(self.threads.values()) if self.meter else 0.0,
                "litellm_calls": self.meter.calls if self.meter else 0,
                "threads": sorted(self.threads),
                "items": self.items, "sample_fields": list(SAMPLE_FIELDS), "samples": self.samples}
        with open(self.path, "w", encoding="utf-8") as fh:
            json.dump(data, fh)


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("AGENTPERTURB_BENCH_METER")
    if path:
        config.pluginmanager.register(
            MeterPlugin(path, os.environ.get("AGENTPERTURB_BENCH_METER_LITELLM") == "1"), "litellm-meter")
