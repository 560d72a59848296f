"""A full disk, a store that fails at the session's end, and the files the command line writes for the user.

The full disk is a real one where the tests run as root (a tmpfs of a few
KiB, filled up); elsewhere those tests are skipped, saying why.  Whatever
fails, the failure is one line naming the target (never a temporary file)
and the fix, and the summary and the gate still run on what is stored.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pytest_agentperturb.cli import main
from pytest_agentperturb.model.errors import AgentPerturbError, StoreError
from pytest_agentperturb.model.records import EpisodeRecord
from pytest_agentperturb.report.files import unwritable, write_text
from pytest_agentperturb.run import store as store_mod
from pytest_agentperturb.run.store import Store, put_all

from task_files import report_of

ARGS = ("--agentperturb", "suites/workflows", "--agentperturb-families", "clean,user-missing", "-k",
        "book-offsite", "--agentperturb-model", "reference/literal", "-p", "no:cacheprovider")
ROOT = Path(__file__).resolve().parent.parent


def _mount(tmp_path: Path, size: str) -> Iterator[Path]:
    """A real file system of ``size`` (tmpfs), unmounted after."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip(f"a real full disk needs root to mount a {size} tmpfs; the monkeypatched tests cover the rest")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); a container without mount rights")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB disk."""
    yield from _mount(tmp_path, "64k")


@pytest.fixture
def store_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 160 KiB disk: room for a new store (its WAL index takes 32 KiB) and a few episodes."""
    yield from _mount(tmp_path, "160k")


def fill(disk: Path) -> None:
    """Fill ``disk`` to its last byte."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (4096, 1):   # whole blocks, then the last bytes
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)


def _lines(out: str, start: str) -> list[str]:
    return [x for x in out.splitlines() if x.startswith(start)]


# -- the report on a full disk ------------------------------------------------------------------


def test_report_on_a_full_disk_is_one_line_naming_it_and_the_fix(pytester: pytest.Pytester, suite: Path,
                                                                  small_disk: Path) -> None:
    fill(small_disk)
    result = pytester.runpytest(*ARGS, f"--agentperturb-report={small_disk}/rep.html")
    out = result.stdout.str()
    (line,) = _lines(out, "report: NOT written: ")
    assert "disk full" in line and "fix: free space" in line and str(small_disk) in line, line
    assert ".tmp" not in line and "Errno" not in line, line
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert "episodes run: 2" in out and "store:" in out   # the summary still printed
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not [p for p in small_disk.iterdir() if p.name.startswith(".")]   # no temporary file left


def test_a_half_failed_report_leaves_the_old_pages_and_page_intact(pytester: pytest.Pytester, suite: Path,
                                                                   small_disk: Path) -> None:
    rep = small_disk / "rep.html"
    first = pytester.runpytest(*ARGS[:2], "--agentperturb-families", "clean", *ARGS[4:],
                               f"--agentperturb-report={rep}")
    assert first.ret == 0, first.stdout.str()
    pages = small_disk / "rep-tasks"
    before = {p: p.read_bytes() for p in [rep, *pages.rglob("*")] if p.is_file()}
    assert len(before) >= 2, before.keys()
    fill(small_disk)
    again = pytester.runpytest(*ARGS, f"--agentperturb-report={rep}")   # another family: every page changes
    (line,) = _lines(again.stdout.str(), "report: NOT written: ")
    assert "disk full" in line and "fix:" in line and ".tmp" not in line, line
    after = {p: p.read_bytes() for p in [rep, *pages.rglob("*")] if p.is_file()}
    assert after == before   # the old set, whole: no mix of old and new pages
    assert again.ret == pytest.ExitCode.TESTS_FAILED


def test_cli_outputs_on_a_full_disk_are_one_line(small_disk: Path, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    store = _store(tmp_path)
    fill(small_disk)
    assert main(["export", "--store", str(store), "--out", str(small_disk / "e.csv")]) == 2
    assert f"{small_disk / 'e.csv'}: the CSV export could not be written (disk full); fix: " in caplog.text
    assert main(["analyze", "--results", str(ROOT / "fixtures" / "paper_table1" / "episodes.csv"),
                 "--json", str(small_disk / "s.json"), "--replicates", "50", "--permutations", "200"]) == 2
    assert "s.json: the --json summary could not be written (disk full)" in caplog.text
    assert "Traceback" not in caplog.text and not list(small_disk.glob(".*"))


# -- the store at the session's end ---------------------------------------------------------------


def test_a_store_filling_its_disk_leaves_the_summary_and_gate_on_what_is_stored(pytester: pytest.Pytester,
                                                                               suite: Path, store_disk: Path) -> None:
    result = pytester.runpytest(*ARGS[:2], *ARGS[6:], f"--agentperturb-store={store_disk}/s.sqlite",
                                "--agentperturb-max-drop=90")
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-3000:]
    assert "(database or disk is full); fix: free space on its disk" in out   # each episode not stored: an ERROR
    (line,) = _lines(out, "store: NOT fully written: ")   # and one line in the summary
    assert f"episode(s) not stored (each an ERROR); the first: {store_disk}/s.sqlite: cannot record" in line
    assert "fix: free space on its disk" in line, line
    (runs,) = _lines(out, "episodes run: ")
    assert int(runs.split()[2].rstrip(",")) >= 1 and "errors: 0" not in runs   # the summary of what is stored
    assert _lines(out, "report: ") and "gate" in out
    assert result.ret == pytest.ExitCode.TESTS_FAILED


class _FailingConnection:
    """A SQLite connection whose ``close`` (or whose reads) fail as on a full disk, after doing their work."""

    def __init__(self, conn: sqlite3.Connection, fail: str) -> None:
        self._conn, self._fail = conn, fail

    def close(self) -> None:
        self._conn.close()
        if self._fail == "close":
            raise sqlite3.OperationalError("database or disk is full")

    def execute(self, sql: str, *args: Any) -> Any:
        if self._fail == "read" and sql.lstrip().upper().startswith("SELECT") and "FROM episodes e" in sql:
            raise sqlite3.DatabaseError("disk I/O error")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize(("fail", "reason", "fix"), [
    ("close", "cannot close the results store (database or disk is full)", "fix: free space on its disk"),
    ("read", "cannot read the results store (disk I/O error)", "fix: point --agentperturb-store"),
])
def test_a_store_failing_at_the_end_is_one_red_line_and_the_summary_runs(
        pytester: pytest.Pytester, suite: Path, monkeypatch: pytest.MonkeyPatch, fail: str, reason: str,
        fix: str) -> None:
    first = pytester.runpytest(*ARGS)
    assert first.ret == 0, first.stdout.str()
    rep = report_of(first)   # a -k subset's own report
    page = rep.read_bytes()
    real_init = Store.__init__

    def init(self: Store, *a: Any, **kw: Any) -> None:
        real_init(self, *a, **kw)
        if (fail == "close") != self.readonly:   # close: the session's writer; read: the reader at the end
            self._conn = _FailingConnection(self._conn, fail)  # type: ignore[assignment]

    monkeypatch.setattr(Store, "__init__", init)
    result = pytester.runpytest(*ARGS, "--agentperturb-max-drop=90")
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    (line,) = _lines(out, "store: NOT fully written: ")
    assert str(pytester.path / "reports" / "agentperturb.sqlite") in line and reason in line and fix in line, line
    assert "episodes run: 2" in out and "gate" in out   # the summary and the gate still ran
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    if fail == "read":   # nothing could be read back: the last report is kept, not replaced by an empty one
        assert rep.read_bytes() == page
    else:   # every episode was stored before the close failed: the report is written from them
        assert "report: NOT written" not in out


def test_store_close_on_a_full_disk_names_the_file_and_the_fix(tmp_path: Path) -> None:
    st = Store(tmp_path / "s.sqlite")
    st._conn = _FailingConnection(st._conn, "close")  # type: ignore[assignment]
    with pytest.raises(StoreError, match=r"s\.sqlite: cannot close the results store \(database or disk is "
                                         r"full\); fix: free space on its disk"):
        st.close()
    assert store_mod._fix(sqlite3.OperationalError("database is locked")) == store_mod._FIX


# -- the files the command line writes for the user --------------------------------------------------


def _store(tmp_path: Path) -> Path:
    recs = [EpisodeRecord(run_id="r1", model="m", suite="s", task=f"t{i}", family=fam, target=fam.split("-")[0],
                          type=fam.partition("-")[2] or "clean", operator="op", seed=1, reward=1.0, success=True,
                          compliance=None, input_tokens=1, output_tokens=1, tool_calls=1, turns=1, trajectory=[])
            for i in range(2) for fam in ("clean", "tool-incorrect")]
    path = tmp_path / "store.sqlite"
    put_all(path, recs)
    return path


def test_export_never_replaces_a_store_or_a_users_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = _store(tmp_path)
    stored = store.read_bytes()
    assert main(["export", "--store", str(store), "--out", str(store)]) == 2
    assert store.read_bytes() == stored and "a SQLite database" in caplog.text
    mine = tmp_path / "mine.csv"
    mine.write_text("name,phone\nme,123\n")
    assert main(["export", "--store", str(store), "--out", str(mine)]) == 2
    assert mine.read_text() == "name,phone\nme,123\n" and "not this kind of agentperturb output" in caplog.text
    out = tmp_path / "e.csv"
    assert main(["export", "--store", str(store), "--out", str(out)]) == 0
    assert main(["export", "--store", str(store), "--out", str(out)]) == 0   # its own export is replaced
    assert len(pd.read_csv(out)) == 4
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_cli_outputs_never_written_through_a_link(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = _store(tmp_path)
    mine = tmp_path / "mine.txt"
    mine.write_text("my notes\n")
    for name in ("e.csv", "s.json", "k.json"):
        os.symlink(mine, tmp_path / name)
    assert main(["export", "--store", str(store), "--out", str(tmp_path / "e.csv")]) == 2
    assert main(["analyze", "--results", str(ROOT / "fixtures" / "paper_table1" / "episodes.csv"),
                 "--json", str(tmp_path / "s.json"), "--replicates", "50", "--permutations", "200"]) == 2
    assert main(["simulator-check", str(ROOT / "suites" / "workflows"), "--json", str(tmp_path / "k.json")]) != 0
    assert mine.read_text() == "my notes\n"
    assert caplog.text.count("never written through a link") == 3


def test_analyze_json_replaces_its_own_summary_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    args = ["analyze", "--results", str(ROOT / "fixtures" / "paper_table1" / "episodes.csv"),
            "--replicates", "50", "--permutations", "200", "--json"]
    theirs = tmp_path / "config.json"
    theirs.write_text('{"my": "settings"}')
    assert main([*args, str(theirs)]) == 2
    assert json.loads(theirs.read_text()) == {"my": "settings"}
    ours = tmp_path / "s.json"
    assert main([*args, str(ours)]) == 0 and main([*args, str(ours)]) == 0
    assert "gate" in json.loads(ours.read_text())


def test_write_text_keeps_the_old_file_when_the_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "s.json"
    target.write_text('{"gate": 1}')

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(AgentPerturbError) as err:
        write_text(target, '{"gate": 2}', ours=lambda p: True, what="summary")
    assert str(err.value) == f"{target}: the summary could not be written (disk full); fix: free space on that " \
                             "disk or write elsewhere"
    assert target.read_text() == '{"gate": 1}' and [p.name for p in tmp_path.iterdir()] == ["s.json"]
    assert "(is a folder)" in unwritable(target, IsADirectoryError(21, "Is a directory"))


def test_pages_are_swapped_in_as_a_set_a_failed_move_mixes_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_agentperturb.report import pages

    def page(text: str) -> str:
        return f"<!doctype html>{pages.GENERATOR}<p>{text}</p>"

    folder = tmp_path / "r-tasks"
    old = [("index.html", page("old index")), ("s/a.html", page("old a")), ("s/b.html", page("old b"))]
    pages.write_pages(folder, old)
    assert folder.stat().st_mode & 0o077   # not the private mode of a staging folder
    before = {p: p.read_text() for p in folder.rglob("*.html")}
    calls = []
    real = os.replace

    def replace_once(a: Any, b: Any) -> None:   # the second move of a page fails (a full disk)
        calls.append(b)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        real(a, b)

    monkeypatch.setattr(os, "replace", replace_once)
    new = [("index.html", page("new index")), ("s/a.html", page("new a"))]
    try:
        written = pages.write_pages(folder, new)
    except AgentPerturbError as exc:   # the one-file-at-a-time fallback (no renameat2 here)
        assert "disk full" in str(exc)
        pytest.skip("this system cannot exchange two folders in one step (renameat2); the fallback moved files")
    assert {p.relative_to(folder).as_posix() for p in written} == {"index.html", "s/a.html"}
    assert {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*.html")} == dict(new)
    assert before != {p: p.read_text() for p in folder.rglob("*.html")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-tasks"]   # the old set went with the staging folder
