"""The results store's failures name the file; report and export only read; schemas are checked and migrated.

A corrupt store is a usage error, a newer schema is refused and an older one migrated, a store that
fails while running is an error (never a silent zero), and ``report`` / ``export`` work on a store
that nobody may write.
"""

from __future__ import annotations

import logging
import os
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from task_files import N_TASKS, cli, report_of, run_clean

def test_a_corrupt_store_is_a_usage_error_naming_the_file(pytester: pytest.Pytester, suite: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    store = pytester.path / "reports" / "agentperturb.sqlite"
    store.parent.mkdir()
    store.write_bytes(b"this is not a database, it is a shopping list\n" * 100)
    result = run_clean(pytester, "-k", "share-report")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in result.stdout.str()
    result.stderr.fnmatch_lines([f"*{store}: not a usable results store (file is not a database); fix: point "
                                 "--agentperturb-store (or --store) at another file, or move this one away*"])
    assert cli("report", "--store", str(store), "--out", str(pytester.path / "r.html")) == 2
    assert f"{store}: not a usable results store" in caplog.text


def test_report_and_export_only_read_the_store(pytester: pytest.Pytester, suite: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    from pytest_agentperturb.run.store import Store

    caplog.set_level(logging.INFO)
    empty = pytester.path / "empty.sqlite"
    empty.write_bytes(b"")
    assert cli("report", "--store", str(empty), "--out", str(pytester.path / "e.html"), "--max-drop", "10") == 1
    assert empty.read_bytes() == b"" and "the store holds no episodes" in caplog.text  # not a 36 KB store
    assert "not evaluated for this run: no scored episodes" in caplog.text
    run_clean(pytester, "-k", "share-report").assert_outcomes(passed=1)
    store = pytester.path / "reports" / "agentperturb.sqlite"
    before = store.read_bytes()
    assert cli("report", "--store", str(store), "--out", str(pytester.path / "r.html")) == 0
    assert cli("export", "--store", str(store), "--out", str(pytester.path / "e.csv")) == 0
    assert store.read_bytes() == before
    import sqlite3

    ro = Store(store, readonly=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro._conn.execute("CREATE TABLE x (a)")  # (the process runs as root here: file modes do not stop it)
    ro.close()


def test_an_older_store_is_migrated_and_a_newer_one_refused(pytester: pytest.Pytester, suite: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    import sqlite3

    run_clean(pytester, "-k", "share-report").assert_outcomes(passed=1)
    store = pytester.path / "reports" / "agentperturb.sqlite"
    with closing(sqlite3.connect(store)) as db:
        db.execute("ALTER TABLE episodes DROP COLUMN reasoning_tokens")
        db.execute("ALTER TABLE episodes DROP COLUMN baseline")
        db.commit()
    assert cli("report", "--store", str(store), "--out", str(pytester.path / "r.html")) == 0  # reads NULLs
    result = run_clean(pytester, "-k", "share-report or forward-invoice")
    result.assert_outcomes(passed=2)
    assert "errors: 0" in result.stdout.str()
    with closing(sqlite3.connect(store)) as db:
        cols = {r[1] for r in db.execute("PRAGMA table_info(episodes)")}
        assert {"reasoning_tokens", "baseline"} <= cols
        assert db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == 3  # each run keeps its own rows
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        db.commit()
    result = run_clean(pytester, "-k", "share-report")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    from pytest_agentperturb.run.store import SCHEMA_VERSION

    result.stderr.fnmatch_lines(["*written by a newer pytest-agentperturb (store schema 99; this version reads "
                                 f"up to {SCHEMA_VERSION}); fix: upgrade pytest-agentperturb*"])
    assert cli("export", "--store", str(store), "--out", str(pytester.path / "e.csv")) == 2
    assert "store schema 99" in caplog.text


def test_a_store_that_fails_while_running_is_an_error_not_a_silent_zero(pytester: pytest.Pytester, suite: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches that cannot be written while items run: each later item whose batch is due is an ERROR naming the
    file, and the episodes the writer's failed batch held are counted by the close: none is a silent pass.

    Batches of one row (``BATCH_ROWS = 1``): the first episode's batch fails on the store's writer thread and
    stays buffered; from then on each item's own put writes the due batch, fails, and that item is an ERROR.
    """
    import sqlite3

    from pytest_agentperturb.run import store as store_module
    from pytest_agentperturb.run.store import Store

    def boom(self: Any, *args: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "_put", boom)  # (the in-process run shares this module; undone after the test)
    monkeypatch.setattr(store_module, "BATCH_ROWS", 1)
    result = run_clean(pytester)
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) >= 1 and outcomes["errors"] + outcomes.get("passed", 0) == N_TASKS
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*results store error (not an agent failure): *agentperturb.sqlite: cannot record "
                                 "* buffered episode(s) (database or disk is full)*", f"*errors: {N_TASKS} (excluded*",
                                 "*store: NOT fully written: *"])


def test_a_last_batch_that_cannot_be_written_fails_the_session(pytester: pytest.Pytester, suite: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch committed when the store closes fails: a harness error, a failing exit status, one line naming
    the file and the episodes lost, and a note in the report (the episode passed; its row is not in the store)."""
    import sqlite3

    from pytest_agentperturb.run.store import Store

    def boom(self: Any, *args: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "_put", boom)
    result = run_clean(pytester, "-k", "share-report")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*errors: 1 (excluded*", "*store: NOT fully written: "
                                 "*agentperturb.sqlite: cannot record 1 buffered episode(s) (database or disk is full)*"])
    page = report_of(result).read_text()  # the -k subset's own report
    assert "episodes missing from the store" in page


def test_report_and_export_work_on_a_store_nobody_may_write(tmp_path: Path) -> None:
    """A read-only store in a read-only folder (made immutable with chattr when the tests run as root)."""
    import subprocess

    from pytest_agentperturb.model.records import EpisodeRecord
    from pytest_agentperturb.run.store import put_all

    ro_dir, out_dir = tmp_path / "ro", tmp_path / "out"
    ro_dir.mkdir()
    recs = [EpisodeRecord("r", "m", "s", t, fam, *(("clean", "clean") if fam == "clean" else ("tool", "missing")),
                          "op", 0, reward=1.0 if fam == "clean" else 0.0, success=fam == "clean")
            for t in ("a", "b") for fam in ("clean", "tool-missing")]
    put_all(ro_dir / "s.sqlite", recs)
    before = (ro_dir / "s.sqlite").read_bytes()
    root = os.geteuid() == 0  # root writes through file modes: make the file and folder immutable instead

    def lock(on: bool) -> bool:
        if not root:
            os.chmod(ro_dir / "s.sqlite", 0o444 if on else 0o644)
            os.chmod(ro_dir, 0o555 if on else 0o755)
            return True
        flag = "+i" if on else "-i"
        return all(subprocess.run(["chattr", flag, str(p)], capture_output=True).returncode == 0
                   for p in (ro_dir / "s.sqlite", ro_dir))

    try:
        if not lock(True):
            pytest.skip("cannot make a file read-only for root on this filesystem (no chattr)")
        with pytest.raises(OSError):
            (ro_dir / "probe").write_text("x")  # really read-only
        assert cli("report", "--store", str(ro_dir / "s.sqlite"), "--out", str(out_dir / "r.html")) == 0
        assert cli("export", "--store", str(ro_dir / "s.sqlite"), "--out", str(out_dir / "e.csv")) == 0
    finally:
        lock(False)
    assert (out_dir / "r.html").is_file() and (out_dir / "e.csv").read_text().count("\n") == 5
    assert (ro_dir / "s.sqlite").read_bytes() == before and sorted(p.name for p in ro_dir.iterdir()) == ["s.sqlite"]
