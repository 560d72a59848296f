"""Many episodes in flight per process; each runs exactly once, also under xdist."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, StepsPolicy, preimported  # noqa: F401 (fixture)

from pytest_agentperturb.run.batcher import Batcher

pytestmark = pytest.mark.usefixtures("preimported")
ROOT = Path(__file__).resolve().parents[1]


def max_overlap(times: list[tuple[float, float]]) -> int:
    """Most requests the server was handling at the same moment."""
    events = sorted([(a, 1) for a, _ in times] + [(b, -1) for _, b in times])
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def test_batcher_keeps_the_window_full_and_returns_each_result() -> None:
    b = Batcher(concurrency=4, lookahead=2)
    running: list[int] = []
    peak = [0]

    def factory(i: int):  # type: ignore[no-untyped-def]
        async def ep() -> int:
            running.append(i)
            peak[0] = max(peak[0], len(running))
            await asyncio.sleep(0.05)
            running.remove(i)
            return i * 10
        return ep

    queue = list(range(1, 20))

    def top_up(n: int) -> None:
        for i in [i for i in queue if not b.scheduled(str(i))][:n]:
            b.submit(str(i), factory(i))

    try:
        got = [b.run(str(i), factory(i), top_up) for i in [0, *queue]]
    finally:
        b.close()
    assert got == [i * 10 for i in range(20)]
    assert peak[0] == 4  # four at once, never more than the concurrency (speed: bench/concurrency.py)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "suites" / "workflows", tmp_path / "suites" / "workflows")
    return tmp_path


def test_episodes_overlap_up_to_the_concurrency_and_the_connection_limit(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake")
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    common = ["--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-k", "forward-invoice",
              "--agentperturb-model", "openai/fake", "--agentperturb-store", "s.sqlite"]
    with FakeOpenAI(StepsPolicy(steps=2, latency=0.4)) as srv:
        result = pytester.runpytest(*common, "--agentperturb-api-base", srv.base, "--agentperturb-concurrency", "8")
        n = len(srv.requests)
        overlap = max_overlap(srv.times)
    with sqlite3.connect(pytester.path / "s.sqlite") as c:
        episodes = c.execute("SELECT count(*) FROM episodes WHERE error = ''").fetchone()[0]
    assert episodes >= 10 and result.ret == 0
    assert n == 2 * episodes  # every episode ran exactly once, k=2 calls each
    assert overlap == 8  # eight requests in flight at once: the speed-up itself is measured in bench/concurrency.py
    with FakeOpenAI(StepsPolicy(steps=2, latency=0.1)) as srv:
        result = pytester.runpytest(*common, "--agentperturb-api-base", srv.base, "--agentperturb-concurrency", "8",
                                    "--agentperturb-connections", "3", "--agentperturb-run-id", "limited")
        assert max_overlap(srv.times) == 3
    assert result.ret == 0


def test_xdist_workers_run_each_episode_once(project: Path) -> None:
    """Prefetching reads each worker's own queue: no episode runs on two workers."""
    with FakeOpenAI(StepsPolicy(steps=2, latency=0.05)) as srv:
        env = dict(os.environ, OPENAI_API_KEY="sk-test-fake",
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-q",
             "-n", "2", "-k", "forward-invoice or share-report", "--agentperturb-model", "openai/fake",
             "--agentperturb-api-base", srv.base, "--agentperturb-concurrency", "6",
             "--agentperturb-store", "s.sqlite"],
            cwd=project, env=env, capture_output=True, text=True, timeout=300)
        n = len(srv.requests)
    assert out.returncode in (0, 1), out.stdout[-3000:] + out.stderr[-3000:]
    with sqlite3.connect(project / "s.sqlite") as c:
        rows = c.execute("SELECT task, family, error FROM episodes").fetchall()
    assert len(rows) >= 20 and all(e == "" for *_, e in rows)
    assert n == 2 * len(rows), (n, len(rows))
    assert f"episodes run: {len(rows)}, reused: 0, errors: 0" in out.stdout


class FakeNode:
    """What xdist's schedulers call on a worker: items sent, and the shutdown signal."""

    def __init__(self, name: str) -> None:
        self.sent: list[int]
        self.name, self.sent, self.shutting_down = name, [], False
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduled(pytester: pytest.Pytester, ids: list[str], keep: int) -> tuple[Any, FakeNode, FakeNode]:
    """The plugin's xdist scheduler after its first distribution of ``ids`` to two workers."""
    from pytest_agentperturb.plugin.distribute import scheduler

    sched = scheduler(pytester.parseconfig("--tx", "2*popen"), None, keep=keep)
    a, b = FakeNode("a"), FakeNode("b")
    for node in (a, b):
        sched.add_node(node)
        sched.add_node_collection(node, ids)
    sched.schedule()
    return sched, a, b


def test_the_scheduler_tops_a_worker_up_before_its_window_drains(pytester: pytest.Pytester) -> None:
    """A worker gets the next task while it still holds a window of items (xdist's loadscope waits for 2)."""
    ids = [f"suites/s::t{t}::f{f}[m]" for t in range(5) for f in range(10)]  # 5 tasks x 10 items
    sched, a, b = scheduled(pytester, ids, keep=8)
    assert a.sent == list(range(10)) and b.sent == list(range(10, 20))  # one whole task each
    for i in range(3):  # three of a's items done: 7 pending, under the window of 8
        sched.mark_test_complete(a, i)
    assert a.sent[10:] == list(range(20, 30))  # the next task now, not when 2 are left
    assert b.sent == list(range(10, 20)) and not a.shutting_down
    for i in range(10, 20):  # b: the next task when 7 of its items are left, no more while it holds 8+
        sched.mark_test_complete(b, i)
    assert b.sent[10:] == list(range(30, 40))
    for i in [*range(3, 10), 20, 21, 22]:  # a: 17 pending -> the last task when it holds 7
        sched.mark_test_complete(a, i)
    assert a.sent[20:] == list(range(40, 50)) and not a.shutting_down
    sched.mark_test_complete(a, 23)
    assert not a.shutting_down  # nothing left to send, but xdist shuts workers down at the end: a survivor
    # can still take the unstarted items of a worker that dies (plugin/distribute.py)
    assert sorted(a.sent + b.sent) == list(range(50))  # every item sent once


def test_a_scope_is_one_task_for_one_model(pytester: pytest.Pytester) -> None:
    """Each task's items for one model go to one worker (variants are made once per task there)."""
    ids = [f"suites/s::t{t}::f{f}[{m}]" for t in range(2) for f in range(4) for m in ("openai/x", "reference/y")]
    _, a, b = scheduled(pytester, ids, keep=2)
    assert [ids[i] for i in a.sent] == [f"suites/s::t0::f{f}[openai/x]" for f in range(4)]
    assert [ids[i] for i in b.sent] == [f"suites/s::t0::f{f}[reference/y]" for f in range(4)]

