"""Scale: prefetching, validity checks, state copies and memory cost the same per episode at any run size.

The speed itself is measured by ``bench/scale.py`` (one quick run of it is
checked here); these tests pin the properties that make it so: the
batcher's window holds finished-but-unclaimed episodes too, each upcoming
item is looked at once, the oracle runs without an event loop, no process
keeps records or trajectories during the run, and the report is built from
this session's rows of the store.
"""

from __future__ import annotations

import asyncio
import copy
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_agentperturb.formats.python import copy_state
from pytest_agentperturb.model.redact import secrets
from pytest_agentperturb.perturb.engine import OracleResult, clean_variant
from pytest_agentperturb.plugin.schedule import Lookahead
from pytest_agentperturb.run import make_engine, run_episode
from pytest_agentperturb.run.batcher import Batcher
from pytest_agentperturb.run.episode import drive, oracle_runner

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / "suites" / "workflows"


# -- the batcher's window and the lookahead ------------------------------------------------
def test_finished_but_unclaimed_episodes_fill_the_window() -> None:
    """However fast upcoming episodes finish, no more than ``window`` are ever held unclaimed."""
    b = Batcher(concurrency=2, lookahead=2)
    queue = list(range(1, 60))
    peak = [0]

    def factory(i: int) -> Any:
        async def ep() -> int:
            await asyncio.sleep(0.02 if i % 5 == 0 else 0)  # every fifth is slow: the others finish first
            return i * 10
        return ep

    def top_up(n: int) -> None:
        for i in [i for i in queue if not b.scheduled(str(i))][:n]:
            b.submit(str(i), factory(i))
        peak[0] = max(peak[0], b.unclaimed())
        queue[:] = [i for i in queue if not b.scheduled(str(i))]

    try:
        got = [b.run(str(i), factory(i), top_up) for i in range(60)]
    finally:
        b.close()
    assert got == [i * 10 for i in range(60)]
    assert peak[0] == b.window == 4  # filled, never overfilled (before: every finished one left a free slot)


def _fake_session(n: int) -> Any:
    items = [SimpleNamespace(nodeid=f"s::t{i}") for i in range(n)]
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugins=lambda: []))
    return SimpleNamespace(items=items, config=config, stash=pytest.Stash())


def test_lookahead_hands_each_upcoming_item_once() -> None:
    """Topping up walks on from where it stopped: over a whole run, each item is looked at once."""
    session = _fake_session(500)
    look = Lookahead(session)
    handed: list[str] = []
    for current in session.items:  # pytest runs the items in order; the batcher tops up 3 at a time
        for k, nxt in enumerate(look.upcoming(current)):
            handed.append(nxt.nodeid)
            if k == 2:
                break
    assert handed == [it.nodeid for it in session.items[1:]]  # each once, in order, never the current one
    assert list(look.upcoming(session.items[10])) == []  # nothing is handed twice


def test_lookahead_starts_after_the_current_item_when_it_is_ahead_of_the_cursor() -> None:
    session = _fake_session(10)
    look = Lookahead(session)
    first = look.upcoming(session.items[0])
    assert [next(first).nodeid, next(first).nodeid] == ["s::t1", "s::t2"]
    assert [i.nodeid for i in look.upcoming(session.items[5])] == ["s::t6", "s::t7", "s::t8", "s::t9"]


# -- the oracle without an event loop ------------------------------------------------------
def _tasks() -> list[Any]:
    from pytest_agentperturb.formats.native import load_task

    return [load_task(p, "workflows") for p in sorted(WORKFLOWS.iterdir()) if (p / "task.toml").is_file()]


def test_the_oracle_runs_without_a_loop_and_matches_asyncio_run() -> None:
    """The validity checks' oracle (driven without a loop) records what asyncio.run would."""
    from pytest_agentperturb.agents.reference import OracleAgent

    engine = make_engine()
    runner = oracle_runner()
    compared = 0
    for task in _tasks()[:6]:
        for family in ("clean", "user-missing", "tool-incorrect", "inserted-injection"):
            try:
                v = engine.make_variant(task, family, 3) if family != "clean" else clean_variant(task)
            except Exception:  # a skipped variant: nothing to compare
                continue
            ours = runner(task, v)
            rec = asyncio.run(run_episode(task, v, OracleAgent(), run_id="validity", seed=v.seed))
            assert ours == OracleResult(rec.reward, rec.trajectory, rec.error)
            compared += 1
    assert compared >= 12


def test_drive_runs_coroutines_that_await_nothing_real() -> None:
    async def plain() -> int:
        await asyncio.sleep(0)  # a bare yield is stepped over
        return 7

    assert drive(plain()) == 7

    async def needs_a_loop() -> None:
        await asyncio.sleep(0.01)

    with pytest.raises(RuntimeError):  # no running loop: it cannot pretend to have slept
        drive(needs_a_loop())


# -- state copies and shared renders --------------------------------------------------------
def test_copy_state_is_a_deep_copy_of_json_trees() -> None:
    state: dict[str, Any] = {"a": [{"b": 1, "c": [1, 2, {"d": "x"}]}], "e": None, "f": 1.5, "g": True,
             "h": (1, [2]), "i": {3, 4}}
    out = copy_state(state)
    assert out == copy.deepcopy(state)
    out["a"][0]["c"][2]["d"] = "changed"
    out["h"][1].append(9)  # a tuple holding a list: copied by deepcopy, not shared
    assert state["a"][0]["c"][2]["d"] == "x" and state["h"] == (1, [2])


def test_a_variant_reuses_the_task_rendering_of_surfaces_it_did_not_edit() -> None:
    task = _tasks()[0]
    v = make_engine().make_variant(task, "user-missing", 0)
    assert v.surfaces.tools is task.surfaces.tools
    rendered = v.surfaces.__dict__["_rendered"]
    assert rendered["tool"] is task.surfaces.render("tool")  # shared, not serialised again
    assert rendered["context"] is task.surfaces.render("context")
    fresh = type(v.surfaces)(v.surfaces.user, v.surfaces.procedure, v.surfaces.context, v.surfaces.tools)
    assert all(fresh.render(t) == v.surfaces.render(t) for t in ("user", "procedure", "context", "tool"))


def test_secrets_survive_another_thread_changing_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes are redacted on the loop thread while pytest sets PYTEST_CURRENT_TEST on its own."""
    monkeypatch.setenv("SCALE_TEST_API_KEY", "sk-scale-test-0123456789")
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            os.environ[f"SCALE_CHURN_{i % 7}"] = "x"
            os.environ.pop(f"SCALE_CHURN_{(i + 3) % 7}", None)
            i += 1

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        for _ in range(3000):
            assert secrets()["sk-scale-test-0123456789"] == "<SCALE_TEST_API_KEY>"
    finally:
        stop.set()
        t.join()
        for i in range(7):
            os.environ.pop(f"SCALE_CHURN_{i}", None)


# -- the session keeps no trajectories; the report comes from the store -------------------
PROBE = '''
import pytest
from pytest_agentperturb.plugin.collect import PerturbItem
from pytest_agentperturb.plugin.reporting import REPORT_ATTR
from pytest_agentperturb.plugin.session import SESSION_KEY
ROWS = []

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    row = getattr(report, REPORT_ATTR, None)
    if row is not None:
        ROWS.append(dict(row))

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    items = [i for i in session.items if isinstance(i, PerturbItem)]
    ap = session.config.stash[SESSION_KEY]
    print("\\nPROBE", len(items), sum(i.record is not None or i.variant is not None for i in items),
          len(ap.runner.variants), sum("trajectory" in r for r in ROWS), len(ROWS),
          session.config.pluginmanager.has_plugin("agentperturb-html-extras"))
'''


def _project(pytester: pytest.Pytester) -> None:
    shutil.copytree(WORKFLOWS / "forward-invoice", pytester.path / "suites" / "workflows" / "forward-invoice")
    shutil.copytree(WORKFLOWS / "share-report", pytester.path / "suites" / "workflows" / "share-report")
    shutil.copy(WORKFLOWS / "suite.toml", pytester.path / "suites" / "workflows" / "suite.toml")
    pytester.makepyfile(scale_probe=PROBE)  # a plugin (-p), not a conftest: it sees every item's reports
    pytester.syspathinsert()


def test_no_record_variant_or_trajectory_stays_in_memory(pytester: pytest.Pytester) -> None:
    _project(pytester)
    result = pytester.runpytest("--agentperturb", "suites/workflows", "--agentperturb-model", "reference/literal",
                                "--agentperturb-model", "reference/careful", "-p", "no:cacheprovider",
                                "-p", "no:randomly", "-p", "scale_probe", "-s", "--agentperturb-store", "s.sqlite")
    line = next(x for x in result.outlines if x.startswith("PROBE"))
    _, items, holding, variants, with_traj, rows, extras = line.split()
    assert int(items) > 40 and int(rows) == int(items)
    assert (holding, variants, with_traj) == ("0", "0", "0")  # released after each item, rows slim
    assert extras == "False"  # no --html: pytest-html's extras hook is not registered
    with sqlite3.connect(pytester.path / "s.sqlite") as c:
        assert c.execute("SELECT count(*) FROM episodes").fetchone()[0] == int(items)


def test_the_report_has_only_this_sessions_rows_of_the_run(pytester: pytest.Pytester) -> None:
    """A store already holding rows of the same run id (other tasks, other items) adds none to the report."""
    _project(pytester)
    common = ["--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-p", "no:randomly",
              "--agentperturb-store", "s.sqlite", "--agentperturb-model", "reference/literal"]
    first = pytester.runpytest(*common, "--agentperturb-report", "all.html")
    assert first.ret in (0, 1)
    second = pytester.runpytest(*common, "-k", "forward-invoice and clean", "--agentperturb-report", "one.html")
    assert second.ret in (0, 1)
    second.stdout.fnmatch_lines(["*episodes run: 1, reused: 0, errors: 0*",
                                 "*coverage workflows: 1 tasks, 1 episodes in 1 families*"])
    page = (pytester.path / "one.html").read_text(encoding="utf-8")
    assert "1 episodes." in page and "share-report" not in page
    assert "share-report" in (pytester.path / "all.html").read_text(encoding="utf-8")


# -- the bench -----------------------------------------------------------------------------
def test_the_scale_bench_runs_and_prints_its_ratio(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--sizes", "1,2,3",
                          "--keep", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    table = [line.split() for line in lines if re.match(r"\s*\d+\s+\d+\s+\d+\s", line)]
    assert [int(r[0]) for r in table] == [1, 2, 3]
    episodes = [int(r[1]) for r in table]
    assert episodes[0] > 0 and episodes == sorted(episodes) and len(set(episodes)) == 3
    assert all(r[2] == "0" for r in table)  # no errors
    assert all(float(r[-2]) > 0 and float(r[-1]) > 0 for r in table)  # a store and a report were written
    assert table[0][5] == "-" and all(math.isfinite(float(r[5])) for r in table[1:])  # marginal ms
    name, value = lines[-1].split(": ")
    assert name == "scale_cpu_ratio" and math.isfinite(float(value))  # at 1-3 tasks, noise can make it anything


def test_the_bench_copies_tasks_under_new_ids_deterministically(tmp_path: Path) -> None:
    """Beyond the 29 workflow tasks, copies get ``-x<k>`` ids that the loader accepts."""
    import importlib.util

    from pytest_agentperturb.formats.native import load_task

    spec = importlib.util.spec_from_file_location("scale_bench", ROOT / "bench" / "scale.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["scale_bench"] = bench  # its dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules["scale_bench"]
    names = sorted(p.name for p in WORKFLOWS.iterdir() if (p / "task.toml").is_file())
    suite = bench.build_suite(tmp_path / "a", len(names) + 2)
    again = bench.build_suite(tmp_path / "b", len(names) + 2)
    got = sorted(p.name for p in suite.iterdir() if p.is_dir())
    assert got == sorted([*names, f"{names[0]}-x1", f"{names[1]}-x1"])
    assert got == sorted(p.name for p in again.iterdir() if p.is_dir())
    copy_task = load_task(suite / f"{names[1]}-x1", "scale")
    original = load_task(WORKFLOWS / names[1], "scale")
    assert copy_task.id == f"{names[1]}-x1" and copy_task.surfaces == original.surfaces


def test_a_resumed_episode_of_a_store_without_its_variant_row_still_shows_its_diff(pytester: pytest.Pytester) -> None:
    """The report reads diffs from the store: a reused episode brings its variant's row back if it is missing."""
    _project(pytester)
    common = ["--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-p", "no:randomly",
              "-k", "forward-invoice and user-missing", "--agentperturb-store", "s.sqlite",
              "--agentperturb-model", "reference/literal"]
    assert pytester.runpytest(*common).ret in (0, 1)
    with sqlite3.connect(pytester.path / "s.sqlite") as c:
        # as an older store would lack them: the perturbed variant and its clean partner's (-k keeps the pair)
        assert c.execute("DELETE FROM variants").rowcount == 2
    again = pytester.runpytest(*common, "--agentperturb-resume", "--agentperturb-report", "again.html")
    again.stdout.fnmatch_lines(["*episodes run: 0, reused: 2, errors: 0*"])
    page = (pytester.path / "again-tasks" / "workflows" / "forward-invoice.html").read_text(encoding="utf-8")
    assert "diff not recorded" not in page and "+++ b/workflows/forward-invoice/" in page
