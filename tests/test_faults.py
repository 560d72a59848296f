"""Faults and hostile paths: the report never destroys the store, never writes through a link or over a foreign file."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from task_files import report_of

ARGS = ("--agentperturb", "suites/workflows", "--agentperturb-families", "clean", "-k", "book-offsite",
        "--agentperturb-model", "reference/literal", "-p", "no:cacheprovider")


def test_report_path_equal_to_the_store_is_a_usage_error(pytester: pytest.Pytester, suite: Path) -> None:
    first = pytester.runpytest(*ARGS, "--agentperturb-store=st.sqlite")
    assert first.ret == 0, first.stdout.str()
    result = pytester.runpytest(*ARGS, "--agentperturb-store=st.sqlite", "--agentperturb-report=st.sqlite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the same path as the results store" in result.stderr.str()
    with sqlite3.connect(pytester.path / "st.sqlite") as conn:   # still the store, its runs kept
        assert conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] >= 1


def test_report_never_written_through_a_link(pytester: pytest.Pytester, suite: Path) -> None:
    mine = pytester.path / "mine.txt"
    mine.write_text("my notes\n")
    (pytester.path / "out").mkdir()
    os.symlink(mine, pytester.path / "out" / "rep.html")
    result = pytester.runpytest(*ARGS, "--agentperturb-report=out/rep.html")
    assert mine.read_text() == "my notes\n"
    out = result.stdout.str()
    assert "report: NOT written" in out and "symbolic link" in out
    assert "agentperturb" in out and "store:" in out   # the summary still printed
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("target_exists", [False, True])
def test_the_store_is_never_written_through_a_link(pytester: pytest.Pytester, suite: Path, target_exists: bool) -> None:
    """A store path that is a symbolic link (to a new file, or to an existing store) is a usage error naming it:
    the link's target is never created nor written."""
    elsewhere = pytester.path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "new.sqlite"
    if target_exists:
        first = pytester.runpytest(*ARGS, f"--agentperturb-store={target}")
        assert first.ret == 0
    before = target.read_bytes() if target_exists else None
    os.symlink(target, pytester.path / "st.sqlite")
    result = pytester.runpytest(*ARGS, "--agentperturb-store=st.sqlite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*st.sqlite: a symbolic link; the results store is never written through a link; "
                                 "fix: point --agentperturb-store (or --store) at the file itself*"])
    assert (target.read_bytes() if target_exists else None) == before and target.exists() == target_exists


def test_report_never_replaces_a_foreign_file(pytester: pytest.Pytester, suite: Path) -> None:
    other = pytester.path / "notes.html"
    other.write_text("<html>someone's page</html>")
    result = pytester.runpytest(*ARGS, "--agentperturb-report=notes.html")
    assert other.read_text() == "<html>someone's page</html>"
    assert "not an agentperturb report" in result.stdout.str()
    again = pytester.runpytest(*ARGS, "--agentperturb-report=rep.html")
    assert again.ret == 0
    rerun = pytester.runpytest(*ARGS, "--agentperturb-report=rep.html")   # its own report is replaced
    assert rerun.ret == 0 and "NOT written" not in rerun.stdout.str()
    assert not [p for p in pytester.path.iterdir() if p.name.endswith(".tmp")]


def test_report_path_a_folder_is_one_line(pytester: pytest.Pytester, suite: Path) -> None:
    (pytester.path / "rep.html").mkdir()
    result = pytester.runpytest(*ARGS, "--agentperturb-report=rep.html")
    out = result.stdout.str()
    assert "report: NOT written" in out and "Traceback" not in out and "INTERNALERROR" not in out


AGENT = '''
import time
def exits(ctx):
    raise SystemExit(3)
def interrupts(ctx):
    raise KeyboardInterrupt
async def exits_async(ctx):
    raise SystemExit(4)
def blocks(ctx):
    while True:
        time.sleep(0.05)
'''


@pytest.mark.parametrize("name", ["exits", "interrupts", "exits_async"])
def test_agent_raising_systemexit_is_a_stored_error(pytester: pytest.Pytester, suite: Path, name: str) -> None:
    pytester.makepyfile(myagent=AGENT)
    result = pytester.runpytest_subprocess(*ARGS[:-2], "--agentperturb-agent", f"myagent.py:{name}",
                                           "-p", "no:cacheprovider", timeout=120)
    out = result.stdout.str()
    assert "errors: 1" in out and "store:" in out, out
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as conn:
        (error, traj), = conn.execute("SELECT error, trajectory FROM episodes WHERE error != ''").fetchall()
    assert error.startswith(("SystemExit", "KeyboardInterrupt")) and "the agent raised" in traj


def test_blocking_agent_past_its_timeout_lets_pytest_exit(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makepyfile(myagent=AGENT)
    result = pytester.runpytest_subprocess(*ARGS[:-2], "--agentperturb-agent", "myagent.py:blocks",
                                           "--agentperturb-episode-timeout", "1", "-p", "no:cacheprovider",
                                           timeout=90)
    assert "EpisodeTimeout" in result.stdout.str() or "errors: 1" in result.stdout.str()


NOT_JSON = '''
class Obj:
    pass
def bytes_answer(ctx):
    ctx.finish(b"done")
def int_answer(ctx):
    ctx.finish(42)
def object_argument(ctx):
    ctx.call_tool("search", {"q": Obj()})
    ctx.finish("done")
def caught(ctx):
    try:
        ctx.finish(b"done")
    except TypeError:
        pass
    ctx.finish("done")
def appends(ctx):
    ctx.trajectory.append({"role": "assistant", "content": Obj()})
    ctx.finish("done")
def appends_object(ctx):
    ctx.trajectory.append(object())
    ctx.finish("done")
def appends_text(ctx):
    ctx.trajectory.append("hello")
    ctx.model_turn("thinking")   # counts what it was shown: the entry that is no dict too
    ctx.finish("done")
def appends_none(ctx):
    ctx.trajectory.append(None)
    ctx.finish("done")
'''


@pytest.mark.parametrize("name, says", [
    ("bytes_answer", "finish(): the answer must be str, got bytes"),
    ("int_answer", "finish(): the answer must be str, got int"),
    ("object_argument", "the arguments are not JSON"),
    ("caught", "finish(): the answer must be str, got bytes"),
    ("appends", "the trajectory holds a value that is not JSON"),
    ("appends_object", "the trajectory holds 1 entry that is not a dict (entry 0: object); kept as text"),
    ("appends_text", "the trajectory holds 1 entry that is not a dict (entry 0: str); kept as text"),
    ("appends_none", "the trajectory holds 1 entry that is not a dict (entry 0: NoneType); kept as text"),
])
def test_agent_value_not_json_is_a_stored_error(pytester: pytest.Pytester, suite: Path, name: str,
                                                says: str) -> None:
    pytester.makepyfile(myagent=NOT_JSON)
    result = pytester.runpytest_subprocess(*ARGS[:-4], "--agentperturb-agent", f"myagent.py:{name}",
                                           "-p", "no:cacheprovider", timeout=120)
    out = result.stdout.str()
    assert len(result.outlines) < 60 and "Traceback" not in out, out   # short: no 3,300-line traceback
    assert "episodes run: 1" in out and "errors: 1" in out and says in out, out
    assert report_of(result).is_file()  # the subset's own report
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as conn:
        (error, reward, traj), = conn.execute("SELECT error, reward, trajectory FROM episodes").fetchall()
    assert error.startswith("AgentValueError: ") and says in error and reward is None
    assert traj.startswith("[") and all(isinstance(e, dict) for e in json.loads(traj))   # every entry a dict
    if name.startswith("appends_"):   # the value itself kept as text, in a note of the harness
        assert "kept as text: the agent appended a value of type " in traj, traj


BIG = '''
def big_answer(ctx):
    ctx.finish("done " + "y" * 5_000_000)
def many_calls(ctx):
    for i in range(60):
        ctx.call_tool("mail_search", {"query": str(i) + "z" * 100_000})
    ctx.finish("done")
'''


@pytest.mark.parametrize("name, note", [
    ("big_answer", "truncated: the final answer was cut to 200,000 characters"),
    ("many_calls", "truncated: the stored trajectory is limited to 4,000,000 characters"),
])
def test_sizes_are_bounded_and_the_row_says_so(pytester: pytest.Pytester, suite: Path, name: str, note: str) -> None:
    from pytest_agentperturb.model.limits import MAX_TRAJECTORY_CHARS

    pytester.makepyfile(myagent=BIG)
    result = pytester.runpytest_subprocess(*ARGS[:-4], "--agentperturb-agent", f"myagent.py:{name}",
                                           "-p", "no:cacheprovider", timeout=120)
    assert "episodes run: 1" in result.stdout.str() and "Traceback" not in result.stdout.str()
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as conn:
        (error, traj), = conn.execute("SELECT error, trajectory FROM episodes").fetchall()
    assert error == "" and len(traj) <= MAX_TRAJECTORY_CHARS and note in traj
    assert json.loads(traj)[-1]["role"] == "grader"   # the grader's entry is kept


def test_a_huge_observation_is_cut_for_the_agent_and_the_trajectory() -> None:
    from pytest_agentperturb.model.context import EpisodeContext
    from pytest_agentperturb.model.limits import MAX_OBSERVATION_CHARS
    from pytest_agentperturb.model.protocols import Observation

    ctx = EpisodeContext(task=None, variant=None, env=None, simulator=None)  # type: ignore[arg-type]
    obs = ctx.record_observation("dump", Observation.of_text("w" * (MAX_OBSERVATION_CHARS * 5)))
    assert len(obs.text) <= MAX_OBSERVATION_CHARS and obs.text.endswith("characters left out]")
    assert ctx.trajectory[0]["content"] == obs.text
    assert ctx.trajectory[1]["content"].startswith("truncated: the observation of dump was cut")


def python_without_pytest() -> str | None:
    """A python on this machine that runs but cannot import pytest (a system python beside the venv), or None."""
    for name in ("/usr/bin/python3", "/usr/local/bin/python3", *filter(None, [shutil.which("python3")])):
        if Path(name).is_file() and os.access(name, os.X_OK):
            try:
                done = subprocess.run([name, "-c", "import _pytest"], capture_output=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if done.returncode != 0 and b"No module named '_pytest'" in done.stderr:
                return name
    return None


@pytest.mark.parametrize("tx", ["popen//python=/bin/false", "socket=127.0.0.1:1", "popen//python=(no pytest)"])
def test_an_unreachable_tx_target_is_one_usage_error_line(pytester: pytest.Pytester, suite: Path, tx: str) -> None:
    if tx.endswith("(no pytest)"):   # it starts, but xdist's worker cannot import pytest there
        python = python_without_pytest()
        if python is None:
            pytest.skip("no python without pytest on this machine (a system python beside the venv)")
        tx = f"popen//python={python}"
    result = pytester.runpytest_subprocess(*ARGS, "-d", "--tx", tx, timeout=120)
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + err
    assert "INTERNALERROR" not in result.stdout.str() + err and "Traceback" not in err
    (line,) = [x for x in result.errlines if x.startswith("ERROR: ")]
    assert line.startswith(f"ERROR: --tx {tx}: an xdist worker could not be started (") and "fix: " in line


def test_a_task_page_never_replaces_a_users_file(pytester: pytest.Pytester, suite: Path) -> None:
    mine = pytester.path / "reports" / "agentperturb-tasks" / "workflows" / "book-offsite.html"
    mine.parent.mkdir(parents=True)
    mine.write_text("my own notes")
    result = pytester.runpytest(*ARGS, "--agentperturb-report", "reports/agentperturb.html")  # its pages folder
    out = result.stdout.str()
    assert mine.read_text() == "my own notes"
    assert "report: NOT written" in out and "not a page of an agentperturb report" in out and "store:" in out
    assert not [p for p in (pytester.path / "reports").iterdir() if p.name.endswith(".tmp")]


def test_the_report_and_its_pages_have_the_modes_a_plain_write_gives(pytester: pytest.Pytester, suite: Path) -> None:
    """Written through temporary files (0600, 0700), the page, its pages folder and pages still get 0666 / 0777
    less the umask, so a web server publishing CI artefacts can read them."""
    old = os.umask(0o022)
    try:
        result = pytester.runpytest(*ARGS, "--agentperturb-report=out/rep.html")
    finally:
        os.umask(old)
    assert result.ret == 0, result.stdout.str()[-2000:]
    page = pytester.path / "out" / "rep.html"
    folders = [p for p in (pytester.path / "out").iterdir() if p.is_dir()]
    pages = [p for d in folders for p in d.rglob("*.html")]
    assert folders and pages
    assert stat.S_IMODE(page.stat().st_mode) == 0o644
    assert {stat.S_IMODE(d.stat().st_mode) for d in folders} == {0o755}
    assert {stat.S_IMODE(p.stat().st_mode) for p in pages} == {0o644}
