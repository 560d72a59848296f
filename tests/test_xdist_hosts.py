"""Across hosts: episodes run on execnet socket servers, each in a folder of its own holding its own copy of
the suite (as another host would); only the controller stores them and writes the report, and it resumes.
The ssh form (``--tx ssh=...``) runs against an OpenSSH server started on 127.0.0.1 where one is installed."""

from __future__ import annotations

import getpass
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import execnet
import pytest

from pytest_agentperturb.run.store import Store

from task_files import line_counts, report_of

ROOT = Path(__file__).resolve().parents[1]
SERVER = Path(execnet.__file__).parent / "script" / "socketserver.py"
TASKS = ("reschedule-standup", "share-report", "forward-invoice", "archive-contract")

#: Every host's conftest: an agent that notes each episode it plays in its host's folder.
COUNTED_AGENT = '''
import pytest
from pytest_agentperturb.agents.reference import CarefulAgent

class Counted(CarefulAgent):
    name = "test/counted"
    def __init__(self, log):
        self.log = log
    async def run(self, ctx):
        with open(self.log, "a") as f:
            f.write("episode\\n")
        await super().run(ctx)

@pytest.hookimpl(tryfirst=True)
def pytest_agentperturb_make_agent(model, config):
    return Counted(config.rootpath / "episodes.log") if model == "test/counted" else None
'''


def _project(folder: Path) -> Path:
    """One host's copy of the project: the suite (four of its tasks) and the conftest, at the same relative paths."""
    suite = folder / "suites" / "workflows"
    suite.mkdir(parents=True)
    shutil.copy(ROOT / "suites" / "workflows" / "suite.toml", suite)
    for task in TASKS:
        shutil.copytree(ROOT / "suites" / "workflows" / task, suite / task)
    (folder / "conftest.py").write_text(COUNTED_AGENT)
    return folder


@contextmanager
def _socket_server(folder: Path, log: Path) -> Iterator[int]:
    """An execnet socket server on 127.0.0.1 (a free port), serving from ``folder``; killed on exit."""
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-u", str(SERVER), "127.0.0.1:0"], cwd=folder, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (m := re.search(r"Entering Accept loop \('127\.0\.0\.1', (\d+)\)", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield int(m.group(1))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@contextmanager
def _ssh_server(tmp: Path) -> Iterator[Path]:
    """An OpenSSH server on 127.0.0.1 (a free port) that lets this user in with a key of its own; killed on exit.

    Yields the ssh client configuration naming it as host ``agentperturb-test``.  Skips, saying why, where
    no OpenSSH server is installed or it cannot start here.
    """
    sshd = shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.access(p, os.X_OK)), None)
    if sshd is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("the ssh form needs an OpenSSH server and client here (sshd, ssh, ssh-keygen): "
                    "install openssh-server to run it")
    tmp.mkdir()
    for key in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / key)], check=True)
    (tmp / "authorized_keys").write_bytes((tmp / "user.pub").read_bytes())
    (tmp / "authorized_keys").chmod(0o600)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {tmp / 'sshd.pid'}\nPermitRootLogin prohibit-password\n")
    (tmp / "ssh_config").write_text(
        f"Host agentperturb-test\n  HostName 127.0.0.1\n  Port {port}\n  User {getpass.getuser()}\n"
        f"  IdentityFile {tmp / 'user'}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
        "  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)   # its privilege-separation folder, missing until a service ran
    log = tmp / "sshd.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(tmp / "sshd_config")], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while "Server listening on 127.0.0.1" not in log.read_text():
            if proc.poll() is not None:
                pytest.skip(f"the OpenSSH server does not start here: {log.read_text().strip()[-300:]}")
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield tmp / "ssh_config"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _socket_tx(ports: list[int]) -> list[str]:
    return [f"socket=127.0.0.1:{p}//chdir=." for p in ports]


def _controller(cwd: Path, tx: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    tx = [a for spec in tx for a in ("--tx", spec)]
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentperturb",
                           "--agentperturb-suite=suites/workflows", "--agentperturb-model",
                           "test/counted", "-d", *tx, *args],
                          cwd=cwd, capture_output=True, text=True, timeout=240)


def _summary(out: str) -> tuple[int, int]:
    m = re.search(r"episodes run: (\d+), reused: (\d+), errors: 0", out)
    assert m, out[-3000:]
    return int(m.group(1)), int(m.group(2))


def _rows(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT model, suite, task, family, seed, repeat, reward, success, compliance, operator, "
                         "variant_digest FROM episodes ORDER BY model, suite, task, family, seed").fetchall()


def _episodes_played(folder: Path) -> int:
    log = folder / "episodes.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _hosts_gained_no_store_or_report(before: dict[Path, set[str]]) -> None:
    """A worker's folder gains only the copy of pytest xdist sends, bytecode and the agent's episode log."""
    for folder, had in before.items():
        new = _files(folder) - had
        assert not [f for f in new if f.endswith((".html", ".sqlite", ".sqlite-wal", ".sqlite-shm"))], new
        assert all(f == "episodes.log" or f.split(os.sep)[0] in ("pytest", "_pytest") or "__pycache__" in f
                   for f in new), sorted(new)[:20]


def test_episodes_run_on_other_hosts_are_stored_once_by_the_controller_and_resume(tmp_path: Path) -> None:
    ctl = _project(tmp_path / "controller")
    db = ctl / "reports" / "agentperturb.sqlite"
    Store(db).close()  # count every write: a trigger bumps a counter on each insert (a replace is one too)
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE puts (n INTEGER)")
        c.execute("INSERT INTO puts VALUES (0)")
        c.execute("CREATE TRIGGER count_puts AFTER INSERT ON episodes BEGIN UPDATE puts SET n = n + 1; END")

    def puts() -> int:
        with sqlite3.connect(db) as c:
            return int(c.execute("SELECT n FROM puts").fetchone()[0])

    with ExitStack() as stack:  # first run: clean episodes of four tasks on two hosts
        hosts = [_project(tmp_path / f"host{i}") for i in (1, 2)]
        before = {h: _files(h) for h in hosts}
        ports = [stack.enter_context(_socket_server(h, tmp_path / f"server{i}.log")) for i, h in enumerate(hosts)]
        first = _controller(ctl, _socket_tx(ports), "--agentperturb-families", "clean", "-v")
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
        assert _summary(first.stdout) == (4, 0)
        assert {m for m in re.findall(r"\[(gw\d)\] .*? PASS", first.stdout)} == {"gw0", "gw1"}
        played = [_episodes_played(h) for h in hosts]
        assert sum(played) == 4 and min(played) >= 1, played  # each host played episodes...
        _hosts_gained_no_store_or_report(before)  # ... and kept no store and no report
    rows = _rows(db)
    assert len(rows) == 4 and {r[2] for r in rows} == set(TASKS) and len({r[:6] for r in rows}) == 4
    assert puts() == 4  # each row written exactly once, by the controller
    report = report_of(first.stdout)  # the report, written by the controller (a subset run's own)
    assert report.parent == ctl / "reports" and report.is_file()
    pages = report.with_name(f"{report.stem}-tasks") / "workflows"
    assert all("<ol class=traj>" in (pages / f"{t}.html").read_text(encoding="utf-8") for t in TASKS)
    with sqlite3.connect(db) as c:
        stamps = dict(c.execute("SELECT task, recorded_at FROM episodes").fetchall())

    with ExitStack() as stack:  # resume, from the controller, on two fresh hosts at other paths
        hosts = [_project(tmp_path / "elsewhere" / f"node-{i}") for i in ("a", "b")]
        before = {h: _files(h) for h in hosts}
        ports = [stack.enter_context(_socket_server(h, tmp_path / f"server-{i}.log")) for i, h in enumerate(hosts)]
        second = _controller(ctl, _socket_tx(ports), "--agentperturb-families", "clean,user-missing",
                             "--agentperturb-resume", "-v")
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
        assert _summary(second.stdout) == (4, 4)
        assert second.stdout.count("PASS (reused)") + second.stdout.count("FAIL (reused)") >= 4
        assert sum(_episodes_played(h) for h in hosts) == 4  # the four recorded episodes were not played again
        _hosts_gained_no_store_or_report(before)

        # a path argument cannot travel to another host: a usage error that says how to name the suite
        bad = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentperturb",
                              "suites/workflows", "-d", "--tx", f"socket=127.0.0.1:{ports[0]}//chdir=."],
                             cwd=ctl, capture_output=True, text=True, timeout=120)
        assert bad.returncode == 4, bad.stdout[-2000:] + bad.stderr[-2000:]
        assert "fix: name each suite folder with --agentperturb-suite=PATH" in bad.stderr
    rows = _rows(db)
    assert len(rows) == 8 and len({r[:6] for r in rows}) == 8
    assert puts() == 8  # the reused rows were not written again
    with sqlite3.connect(db) as c:
        assert dict(c.execute("SELECT task, recorded_at FROM episodes WHERE family = 'clean'").fetchall()) == stamps

    # the same episodes in one local process: the same rows
    serial = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentperturb",
                             "suites/workflows", "--agentperturb-model", "test/counted",
                             "--agentperturb-families", "clean,user-missing", "--agentperturb-store", "serial.sqlite",
                             "--agentperturb-report", "serial.html"],
                            cwd=ctl, capture_output=True, text=True, timeout=240)
    assert serial.returncode == 0, serial.stdout[-3000:]
    assert _rows(ctl / "serial.sqlite") == rows
    assert _variants(ctl / "serial.sqlite") == _variants(db) and len(_variants(db)) == 8  # diffs and canaries too


def test_episodes_run_over_ssh_are_stored_once_by_the_controller(tmp_path: Path) -> None:
    """``--tx ssh=HOST//python=...//chdir=...``: the README's ssh form, each host in a folder of its own."""
    ctl = _project(tmp_path / "controller")
    hosts = [_project(tmp_path / f"host{i}") for i in (1, 2)]
    before = {h: _files(h) for h in hosts}
    with _ssh_server(tmp_path / "ssh") as config:
        tx = [f"ssh=agentperturb-test//ssh_config={config}//python={sys.executable}//chdir={h}" for h in hosts]
        out = _controller(ctl, tx, "--agentperturb-families", "clean", "-v")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert _summary(out.stdout) == (4, 0)
    assert {m for m in re.findall(r"\[(gw\d)\] .*? PASS", out.stdout)} == {"gw0", "gw1"}
    played = [_episodes_played(h) for h in hosts]
    assert sum(played) == 4 and min(played) >= 1, played   # each host played episodes and kept no store or report
    _hosts_gained_no_store_or_report(before)
    rows = _rows(ctl / "reports" / "agentperturb.sqlite")
    assert len(rows) == 4 and {r[2] for r in rows} == set(TASKS) and len({r[:6] for r in rows}) == 4
    report = report_of(out.stdout)
    assert report.parent == ctl / "reports" and report.is_file()


def _variants(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT * FROM variants ORDER BY variant_digest").fetchall()


FULL_DISK = '''
import sqlite3
from pytest_agentperturb.run import store
from pytest_agentperturb.run.store import Store

def _full(self, *args):
    raise sqlite3.OperationalError("database or disk is full")

Store._put = _full  # only the controller ever writes, so only it can notice
store.BATCH_ROWS = 1  # every batch is due at once: the writer's fails, then each later episode's own put fails
'''


def test_a_store_write_that_fails_on_the_controller_is_an_error_naming_the_file(tmp_path: Path) -> None:
    proj = _project(tmp_path / "project")
    (proj / "conftest.py").write_text(COUNTED_AGENT + FULL_DISK)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentperturb",
                          "suites/workflows", "--agentperturb-model", "test/counted", "--agentperturb-families",
                          "clean", "-n", "2"], cwd=proj, capture_output=True, text=True, timeout=240)
    assert out.returncode == 1, out.stdout[-3000:]
    # the first batch fails on the store's writer thread; each episode whose report arrives after that writes
    # the due batch on its own put, fails, and its report is a failure naming the file; the rest are counted
    # by the line the store's close adds: all four are ERRORs
    assert "agentperturb.sqlite: cannot record 4 buffered episode(s) (database or disk is full)" in out.stdout
    assert "errors: 4 (excluded from every aggregate) [harness 4]" in out.stdout, out.stdout[-3000:]
    assert "store: NOT fully written: " in out.stdout, out.stdout[-3000:]
    counts = line_counts(out.stdout.splitlines()[-1])
    failed = counts.get("failed", 0)
    assert failed + counts.get("passed", 0) == 4, out.stdout[-3000:]
    assert failed == 0 or "results store error (not an agent failure): " in out.stdout


#: An agent that does nothing (every episode an agent failure), and a store that cannot write.
IDLE_AGENT_FULL_DISK = '''
import pytest
from pytest_agentperturb.agents.reference import CarefulAgent

class Idle(CarefulAgent):
    name = "test/idle"
    async def run(self, ctx):
        return None

@pytest.hookimpl(tryfirst=True)
def pytest_agentperturb_make_agent(model, config):
    return Idle() if model == "test/idle" else None
''' + FULL_DISK


def test_an_agent_failure_that_cannot_be_stored_is_an_error_that_fails_the_session(tmp_path: Path) -> None:
    """Under xdist an agent-failed episode (never exit status 1 by itself) whose store write fails is an ERROR:
    the session fails; the one whose batch failed on the store's writer thread is counted by the close."""
    proj = _project(tmp_path / "project")
    (proj / "conftest.py").write_text(IDLE_AGENT_FULL_DISK)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentperturb",
                          "suites/workflows", "--agentperturb-model", "test/idle", "--agentperturb-families",
                          "clean", "-n", "2"], cwd=proj, capture_output=True, text=True, timeout=240)
    assert out.returncode == 1, out.stdout[-3000:]
    # which episodes come after the writer's failed batch depends on when the reports arrive: those do fail
    # (the harness's failure, not the agent's), the rest are counted by the store's close; all are ERRORs
    counts = line_counts(out.stdout.splitlines()[-1])
    failed, agent_failed = counts.get("failed", 0), counts.get("agent-failed", 0)
    assert failed + agent_failed == 4, out.stdout[-3000:]
    assert "database or disk is full" in out.stdout
    assert "errors: 4 (excluded from every aggregate)" in out.stdout, out.stdout[-3000:]
    assert "store: NOT fully written: " in out.stdout, out.stdout[-3000:]
