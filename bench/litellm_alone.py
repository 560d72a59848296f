"""litellm on its own: the ceiling the harness is measured against.

Calls ``litellm.acompletion`` directly -- no pytest, no episodes -- with the
keyword arguments the litellm agent sends (``call_kwargs``), awaited as the
agent awaits them (``with_deadline``) on the harness's own episode loop
(``Batcher``: the same thread and default executor), ``concurrency`` at a
time, each call the first request of a task of the built-in workflows suite
(its system prompt, earlier turns, request and tools), against an
OpenAI-compatible endpoint such as ``tests/fake_openai.py``.  After a
warm-up (clients, lazy imports) it prints the calls per second and
litellm's CPU milliseconds per call (every thread of this process, less
the driver's own: the same ``calls`` with a call that does nothing).
``bench/overhead.py`` and ``bench/concurrency.py`` run it next to the
harness.

The calls are metered (``bench/litellm_meter.py``) as in the benchmark's
pytest runs, and it also prints what the meter sees of a call (litellm's
coroutine steps and its threads) and the rest (``unmetered``: event-loop
work on litellm's behalf outside its coroutine), which ``bench/overhead.py``
adds to the metered share it measures in its own runs.

Usage::

    python bench/litellm_alone.py http://127.0.0.1:PORT/v1 [--calls 1000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from litellm_meter import Meter, other_threads_cpu  # noqa: E402 (a sibling bench module)
from pytest_agentperturb.agents.litellm_agent import (  # noqa: E402
    ASK_USER_TOOL, call_kwargs, import_litellm, with_deadline)
from pytest_agentperturb.model.options import LLMSettings  # noqa: E402
from pytest_agentperturb.run.batcher import Batcher  # noqa: E402

MODEL = "openai/fake"
SETTINGS = LLMSettings()


def first_requests(suite: Path) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(messages, tools) of the first request of every task of ``suite``, as the agent sends them."""
    out = []
    for task in sorted(p for p in suite.iterdir() if (p / "tools.json").is_file()):
        msgs = [{"role": "system", "content": (task / "procedure.md").read_text(encoding="utf-8")},
                *json.loads((task / "context.json").read_text(encoding="utf-8")),
                {"role": "user", "content": (task / "instruction.md").read_text(encoding="utf-8")}]
        out.append((msgs, [*json.loads((task / "tools.json").read_text(encoding="utf-8")), ASK_USER_TOOL]))
    return out


async def calls(litellm: Any, kw: dict[str, Any], requests: Any, n: int, concurrency: int) -> None:
    """``n`` calls, ``concurrency`` at a time, each awaited as the litellm agent awaits it (``with_deadline``)."""
    limit = asyncio.Semaphore(concurrency)

    async def one(msgs: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        async with limit:
            await with_deadline(litellm.acompletion(messages=msgs, tools=tools, seed=1, **kw), MODEL, SETTINGS)

    await asyncio.gather(*(one(*next(requests)) for _ in range(n)))


class NullLitellm:
    """A stand-in whose ``acompletion`` does nothing but yield once: the driver's own cost per call."""

    @staticmethod
    async def acompletion(**_: Any) -> None:
        await asyncio.sleep(0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("api_base")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    a = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-fake")
    litellm = import_litellm()
    meter = Meter()
    meter.wrap(litellm)
    kw = call_kwargs(MODEL, LLMSettings(api_base=a.api_base))
    requests = itertools.cycle(first_requests(ROOT / "suites" / "workflows"))

    async def run() -> tuple[float, float, float]:
        await calls(NullLitellm, kw, requests, a.calls, a.concurrency)  # warm-up of the driver
        cpu = time.process_time()
        await calls(NullLitellm, kw, requests, a.calls, a.concurrency)
        driver = time.process_time() - cpu
        await calls(litellm, kw, requests, min(a.calls, 2 * a.concurrency), a.concurrency)  # warm-up
        wall, cpu, metered, threads = time.perf_counter(), time.process_time(), meter.loop_cpu, other_threads_cpu()
        await calls(litellm, kw, requests, a.calls, a.concurrency)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu - driver
        metered = meter.loop_cpu - metered + sum(v - threads.get(k, 0.0) for k, v in other_threads_cpu().items())
        return wall, cpu, metered

    loop = Batcher(a.concurrency)  # the harness's episode loop: its thread and its default executor
    try:
        wall, cpu, metered = loop.call(run)
    finally:
        loop.close()
    print(f"calls_per_s: {a.calls / wall:.2f}")
    print(f"litellm_metered_ms_per_call: {metered / a.calls * 1000:.2f}")
    print(f"litellm_unmetered_ms_per_call: {(cpu - metered) / a.calls * 1000:.2f}")
    print(f"litellm_cpu_ms_per_call: {cpu / a.calls * 1000:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
