"""The store commits episodes in batches: fewer transactions, and a SIGKILL loses at most the last batch.

A unit test counts the transactions of many puts; a real pytest subprocess, killed with SIGKILL mid-run, shows
what a kill can lose (the episodes in flight and those finished in the last ``BATCH_SECONDS``, fewer than
``BATCH_ROWS``) and that ``--agentperturb-resume`` reruns exactly those.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pytest_agentperturb.model.errors import StoreError
from pytest_agentperturb.model.records import EpisodeRecord
from pytest_agentperturb.run import store as store_module
from pytest_agentperturb.run.store import Store
from test_xdist_resume import SLOW_AGENT  # the slow reference agent a kill test needs

ROOT = Path(__file__).resolve().parents[1]
N_TASKS = len([p for p in (ROOT / "suites" / "workflows").iterdir() if (p / "task.toml").is_file()])


def _rec(i: int, error: str = "") -> EpisodeRecord:
    return EpisodeRecord("r", "m", "s", f"t{i:03d}", "clean", "clean", "clean", "op", 0, reward=1.0, success=True,
                         error=error)


def test_many_puts_are_few_transactions_and_every_read_sees_them(tmp_path: Path) -> None:
    commits: list[str] = []
    with closing(Store(tmp_path / "s.sqlite")) as s:
        s._conn.set_trace_callback(lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None)
        for i in range(100):
            s.put(_rec(i), "digest")
        assert s.get(_rec(99).key, "digest") == _rec(99)  # resume's look-up sees the buffer, and commits nothing
        assert s.get(_rec(99).key, "other digest") is None
        assert len(commits) <= 2  # the writer commits a full batch (64 or more rows) at a time
        assert s.count("r") == 100  # a read commits what is buffered first
        assert 1 <= len(commits) <= 3
    with closing(Store(tmp_path / "s.sqlite", readonly=True)) as r:
        assert [e.task for e in r.episodes()] == [f"t{i:03d}" for i in range(100)]


def test_the_callers_thread_never_writes_sqlite_while_the_writer_is_healthy(tmp_path: Path) -> None:
    writers: list[str] = []
    with closing(Store(tmp_path / "s.sqlite")) as s:
        s._conn.set_trace_callback(lambda sql: writers.append(threading.current_thread().name)
                                   if sql.lstrip().upper().startswith(("INSERT", "BEGIN", "COMMIT")) else None)
        for i in range(3 * store_module.BATCH_ROWS):
            s.put(_rec(i), "digest")
        deadline = time.monotonic() + 10
        while s.pending() and time.monotonic() < deadline:  # the writer commits every full batch on its own
            time.sleep(0.01)
        assert s.pending() == 0
    assert writers and set(writers) == {"agentperturb-store-writer"}, set(writers)


def test_a_batch_the_writer_cannot_write_is_the_next_due_puts_error_then_recovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failures = [2]  # the writer's write fails, then the first due put's own try fails too; then the disk is back
    real = Store._put

    def put(self: Store, *a: Any) -> None:
        if failures[0]:
            failures[0] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        real(self, *a)

    monkeypatch.setattr(Store, "_put", put)
    db = tmp_path / "s.sqlite"
    s = Store(db)
    for i in range(store_module.BATCH_ROWS):
        s.put(_rec(i), "d")  # the last one makes the batch due: the writer tries it and fails
    deadline = time.monotonic() + 10
    while failures[0] == 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert failures[0] == 1 and s.pending() == store_module.BATCH_ROWS  # kept, not lost
    with pytest.raises(StoreError, match=r"cannot record 65 buffered episode\(s\) \(database or disk is full\); "
                                         r"fix: free space on its disk"):
        s.put(_rec(64), "d")  # due and the writer failed: this put writes the batch on its own thread, and raises
    s.put(_rec(65), "d")  # the disk is back: this put's write succeeds, and the writer takes over again
    assert s.pending() == 0
    s.put(_rec(66), "d")
    s.close()
    with closing(sqlite3.connect(db)) as c:
        assert c.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == 67


def test_a_buffered_episode_is_committed_by_the_writer_and_by_close(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"

    def on_disk() -> int:
        with closing(sqlite3.connect(db)) as c:
            return int(c.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])

    s = Store(db)
    s.put(_rec(0), "d")
    assert on_disk() == 0 and s.pending() == 1
    deadline = time.monotonic() + store_module.BATCH_SECONDS + 10
    while s.pending() and time.monotonic() < deadline:  # no more puts: the writer commits it
        time.sleep(0.02)
    assert on_disk() == 1 and s.pending() == 0
    s.put(_rec(1), "d")
    s.close()
    assert on_disk() == 2


KILL_CONFTEST = SLOW_AGENT + '''
import json
import os
import time

def pytest_agentperturb_episode_recorded(record, config):
    # right after the episode was handed to the store (buffered, or committed with its batch)
    with open(os.environ["AGENTPERTURB_FINISHED_LOG"], "a") as f:
        f.write(f"{time.time()!r} {json.dumps([record.model, record.suite, record.task, record.family, record.seed])}\\n")
'''


def _logged(log: Path) -> list[tuple[float, tuple[object, ...]]]:
    """(when, episode key without the run id) of each logged episode (a line cut short by the kill is left out)."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        stamp, _, key = line.partition(" ")
        try:
            out.append((float(stamp), tuple(json.loads(key))))
        except ValueError:
            continue
    return out


def _stored(db: Path) -> dict[tuple[object, ...], float]:
    with closing(sqlite3.connect(db)) as c:
        return {r[:5]: float(r[5]) for r in c.execute("SELECT model, suite, task, family, seed, recorded_at "
                                                      "FROM episodes")}


def test_sigkill_loses_at_most_the_last_batch_and_resume_reruns_exactly_it(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "suites" / "workflows", tmp_path / "suites" / "workflows")
    (tmp_path / "conftest.py").write_text(KILL_CONFTEST)
    log, out = tmp_path / "finished.log", tmp_path / "killed.out"
    env = {**os.environ, "AGENTPERTURB_FINISHED_LOG": str(log)}
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentperturb", "suites/workflows",
            "--agentperturb-model", "test/slow", "--agentperturb-families", "clean,user-missing,tool-incorrect",
            "--agentperturb-concurrency", "2", "-q"]
    expected, at_least = N_TASKS * 3, 12
    db = tmp_path / "reports" / "agentperturb.sqlite"
    with out.open("w") as sink:
        proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.monotonic() + 180
        try:
            while len(_logged(log)) < at_least:
                if proc.poll() is not None:
                    raise AssertionError(f"the run ended (status {proc.returncode}) before {at_least} episodes "
                                         f"were logged to {log}; its output:\n{out.read_text()[-3000:]}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"{len(_logged(log))} episodes logged to {log} after 180 s, not "
                                         f"{at_least}; the run's output:\n{out.read_text()[-3000:]}")
                time.sleep(0.02)
        finally:
            killed_at = time.time()
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    finished = _logged(log)
    stored = _stored(db)
    assert len(finished) < expected, "the run was not killed mid-way; slow the agent down"
    by_key = {k: t for t, k in finished}
    assert len(by_key) == len(finished)
    assert set(stored) <= set(by_key)  # nothing is stored that had not finished
    lost = {k: t for k, t in by_key.items() if k not in stored}
    # what the kill lost: fewer than a batch, all finished in the last BATCH_SECONDS (plus slack for a busy machine)
    assert len(lost) < store_module.BATCH_ROWS, (len(finished), len(stored), len(lost))
    slack = 2.0
    assert all(t > killed_at - store_module.BATCH_SECONDS - slack for t in lost.values()), (lost, killed_at)

    resumed = subprocess.run([*args, "--agentperturb-resume"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-2000:]
    m = re.search(r"episodes run: (\d+), reused: (\d+)", resumed.stdout)
    assert m and (int(m.group(1)), int(m.group(2))) == (expected - len(stored), len(stored)), resumed.stdout[-1500:]
    after = _stored(db)
    assert len(after) == expected
    assert {k: after[k] for k in stored} == stored  # the stored episodes were reused, not rerun
    assert all(after[k] > killed_at for k in lost)  # the lost ones were rerun
