"""The per-episode path of the episode loop: pytest's waits, the frozen heap, deadlines, secrets, paths.

Its cost is measured by ``bench/overhead.py`` (harness CPU per episode
beyond litellm's own work); these tests pin what the path must do: pytest's thread waits for its own episode while the window is
full and for any episode when it has room, the heap is frozen only while the
episode loop runs (and never one that someone else froze) and again when
such a process exits, an episode past
its deadline is an error whose agent was cancelled, secrets follow the
environment from one call to the next, and a grader path reads the same
every time (a bad one still fails).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import gc
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from kv_benchmark import approval_task

from pytest_agentperturb.model.context import EpisodeContext
from pytest_agentperturb.model.redact import secrets
from pytest_agentperturb.model.vocab import select
from pytest_agentperturb.perturb import clean_variant
from pytest_agentperturb.run import batcher as batcher_module
from pytest_agentperturb.run import run_episode_sync
from pytest_agentperturb.run.batcher import Batcher

ROOT = Path(__file__).resolve().parents[1]


def test_a_full_window_wakes_pytests_thread_for_its_own_episode_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """While upcoming episodes fill the window, each item waits once, on its own future; other episodes'
    ends wake it only when the window has room (the tail of the run, or a short xdist queue)."""
    b = Batcher(concurrency=3, lookahead=3)
    queue = list(range(1, 40))
    waits: list[tuple[int, str, bool]] = []  # futures waited on, how, whether episodes were still to submit
    real_wait = cf.wait

    def counting(fs: Any, timeout: float | None = None, return_when: str = cf.ALL_COMPLETED) -> Any:
        fs = list(fs)
        waits.append((len(fs), return_when, bool(queue)))
        return real_wait(fs, timeout, return_when)

    monkeypatch.setattr(batcher_module.cf, "wait", counting)

    def factory(i: int) -> Any:
        async def ep() -> int:
            await asyncio.sleep(0.02 if i % 4 == 0 else 0.001)  # the others finish while pytest waits on a slow one
            return i * 10
        return ep

    def top_up(n: int) -> None:
        for i in [i for i in queue if not b.scheduled(str(i))][:n]:
            b.submit(str(i), factory(i))
        queue[:] = [i for i in queue if not b.scheduled(str(i))]

    try:
        got = [b.run(str(i), factory(i), top_up) for i in range(40)]
    finally:
        b.close()
    assert got == [i * 10 for i in range(40)]
    while_full = [w for w in waits if w[2]]
    assert while_full and all(n == 1 for n, _, _ in while_full)  # before: woken by every end, up to 6 futures
    assert all(not still for _, how, still in waits if how == cf.FIRST_COMPLETED)


def test_the_heap_is_frozen_while_the_episode_loop_runs_and_only_if_nothing_else_froze_it() -> None:
    assert gc.get_freeze_count() == 0  # this test process froze nothing

    async def frozen_now() -> int:
        return gc.get_freeze_count()

    def one_episode(b: Batcher) -> int:
        try:
            return int(b.run("a", frozen_now, lambda n: None))
        finally:
            b.close()

    assert one_episode(Batcher(2, freeze_heap=True)) > 0
    assert gc.get_freeze_count() == 0  # undone at close
    assert one_episode(Batcher(2)) == 0  # only the session's batcher asks for it
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        one_episode(Batcher(2, freeze_heap=True))
        assert gc.get_freeze_count() == before  # someone else's frozen heap is left as it was
    finally:
        gc.unfreeze()


def test_a_process_whose_episode_loop_froze_its_heap_freezes_it_again_at_exit() -> None:
    import subprocess
    import sys

    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('at exit', gc.get_freeze_count() > 0, flush=True))  # runs after later ones\n"
            "from pytest_agentperturb.run.batcher import Batcher\n"
            "async def nothing():\n    return 1\n"
            "b = Batcher(2, freeze_heap=sys.argv[1] == 'freeze')\n"
            "b.run('a', nothing, lambda n: None)\n"
            "b.close()\n"
            "print('after close', gc.get_freeze_count())\n")
    for mode, frozen in (("freeze", "True"), ("plain", "False")):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert out.stdout.split("\n")[:2] == ["after close 0", f"at exit {frozen}"], (mode, out.stdout, out.stderr)


def test_the_analysis_is_imported_in_a_daemon_thread_ahead_of_the_session_end() -> None:
    import subprocess
    import sys

    code = ("import sys\n"
            "from pytest_agentperturb.plugin.results import preload_analysis\n"
            "before = 'pandas' in sys.modules\n"
            "t = preload_analysis()\n"
            "t.join(120)\n"
            "mods = ('pandas', 'pytest_agentperturb.report', 'pytest_agentperturb.analysis.degradation')\n"
            "print(before, t.daemon, [m for m in mods if m not in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert out.stdout.strip() == "False True []", out.stderr


def test_a_session_leaves_nothing_frozen(pytester: pytest.Pytester) -> None:
    """Frozen still when pytest unconfigures (its full collections skip the heap), thawed by the run's end."""
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    pytester.makeconftest("import gc, pathlib\n"
                          "def pytest_unconfigure(config):\n"
                          "    pathlib.Path('frozen.txt').write_text(str(gc.get_freeze_count()))\n")
    result = pytester.runpytest_inprocess("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                          "-k", "forward-invoice and (clean or user-missing)",
                                          "--agentperturb-model", "reference/oracle", "--agentperturb-store", "s.sqlite")
    assert result.ret == 0 and "episodes run: 2," in result.stdout.str()
    assert int((pytester.path / "frozen.txt").read_text()) > 0
    assert gc.get_freeze_count() == 0


def test_an_episode_past_its_deadline_is_an_error_and_its_agent_is_cancelled() -> None:
    cancelled: list[bool] = []

    class Slow:
        name, baseline = "slow", False

        async def run(self, ctx: EpisodeContext) -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(ctx.cancelled)  # cancelled inside the deadline, before the harness's flag
                raise

    task = approval_task()
    rec = run_episode_sync(task, clean_variant(task), Slow(), run_id="t", seed=0, timeout_s=0.05)
    assert rec.error == "EpisodeTimeout: no answer within 0.05 s"
    assert rec.reward is None and rec.success is None and cancelled == [False]


def test_secrets_follow_the_environment_from_one_call_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only whether a variable's *name* looks key-like is remembered: values are read on every call."""
    monkeypatch.delenv("COST_TEST_API_KEY", raising=False)
    assert "sk-cost-first-0123456" not in secrets()
    monkeypatch.setenv("COST_TEST_API_KEY", "sk-cost-first-0123456")
    assert secrets()["sk-cost-first-0123456"] == "<COST_TEST_API_KEY>"
    monkeypatch.setenv("COST_TEST_API_KEY", "sk-cost-second-789012")
    now = secrets()
    assert "sk-cost-first-0123456" not in now and now["sk-cost-second-789012"] == "<COST_TEST_API_KEY>"
    monkeypatch.setenv("COST_TEST_SETTING", "not-a-secret-but-long")
    monkeypatch.delenv("COST_TEST_API_KEY")
    now = secrets()
    assert "sk-cost-second-789012" not in now and "not-a-secret-but-long" not in now
    key_like = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.I)  # the rule, walked the slow way
    expected: dict[str, str] = {}
    for name, value in os.environ.items():
        if len(value) >= 8 and key_like.search(name):
            expected.setdefault(value, f"<{name}>")
    assert {v: n for v, n in now.items() if not n.startswith("<litellm.")} == expected


def test_a_grader_path_reads_the_same_every_time_and_a_bad_one_still_fails() -> None:
    state = {"calendar": {"events": [{"id": "EV-1", "start": "9:00"}, {"id": "EV-2", "start": "10:00"}]}}
    for _ in range(3):  # parsed once, read many times
        assert select(state, "calendar.events[id=EV-2].start") == ["10:00"]
        assert select(state, "calendar.events[*].id") == ["EV-1", "EV-2"]
        assert select(state, "calendar.events[-1].start") == ["10:00"]
        assert select({}, "calendar.events[0]") == []
    for _ in range(2):
        with pytest.raises(ValueError, match="bad path segment 'ev-ents'"):
            select(state, "calendar.ev-ents")
        with pytest.raises(ValueError, match="bad path segment"):
            select({}, "nothing.here.b-ad")  # fails even where nothing before it matched
