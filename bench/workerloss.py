"""How soon the xdist controller finishes after one of its workers is SIGKILLed mid-run.

Each run is the real path -- ``pytest --agentperturb suites/workflows -n 2``
in a subprocess -- on the workflows suite with a slow reference agent (the
one of ``tests/test_xdist_resume.py``: 0.15 s per episode, three families,
two episodes in flight per worker)
and a conftest that writes each worker's process id to a file.  Once a
third of the episodes are in the store, this process SIGKILLs worker
``gw0`` and waits for the controller to exit.  The time of the last stored
row is the largest ``recorded_at`` of the store (the controller's clock
when it stored the row); the figure of a run is the controller's exit time
less that.  Printed per run: the whole run's wall time, kill to exit, last
stored row to exit, the exit status, the rows stored of those expected, the
``WorkerLost`` ERROR rows, whether xdist started a worker in place of the
dead one (``gw2``), and (unless ``--no-resume``) what
``--agentperturb-resume`` then ran and reused and the ERROR rows left: it
should run exactly the lost rows and leave none.  The runs take this
repository's pytest settings for third-party plugins (no hypothesis or
anyio plugin), as the README's main job does.

Each run has a temporary root of its own (``PYTEST_DEBUG_TEMPROOT``):
pytest prunes the numbered ``pytest-N`` folders of earlier sessions (all
but the last three) at the end of every session that made one, and the
xdist controller makes one for its workers, so in the shared
``/tmp/pytest-of-$USER`` the controller's exit would wait for however much
other sessions left there (a delay of pytest's, not of the worker's loss).
``--old-temp-files N`` shows that delay: before each run it fills five
earlier sessions' folders of the run's temporary root with N files each.

The last line is the median over the runs, ``worker_loss_exit_s: <s>``.

Usage::

    python bench/workerloss.py [--runs 3] [--no-resume] [--old-temp-files 0]
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_xdist_resume import SLOW_AGENT  # noqa: E402 (the tests' slow reference agent)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import PLUGINS_OFF  # noqa: E402 (a sibling bench script)

FAMILIES = "clean,user-missing,tool-incorrect"
#: Episodes in flight per worker: few, so that the episode phase lasts seconds and the kill lands mid-way.
CONCURRENCY = 2
#: Each worker writes its process id to ``workers/<gwN>.pid`` when it starts (the controller writes none).
PID_CONFTEST = SLOW_AGENT + '''
import os
from pathlib import Path

def pytest_configure(config):
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker:
        folder = Path(__file__).with_name("workers")
        folder.mkdir(exist_ok=True)
        (folder / f"{worker}.pid").write_text(str(os.getpid()))
'''


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(db, timeout=5)) as c:
            return int(c.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet, or being written
        return 0


def old_sessions(temproot: Path, files: int) -> None:
    """Five earlier sessions' numbered folders under pytest's temporary root, ``files`` files in each."""
    for k in range(1, 6):
        folder = temproot / f"pytest-of-{getpass.getuser()}" / f"pytest-{k}" / "left-behind"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(files):
            (folder / f"f{i}").write_bytes(b"x")


def one_run(proj: Path, expected: int, resume: bool, old_temp_files: int = 0) -> dict[str, object]:
    """One killed run in ``proj`` (its store, pid files and temporary root emptied first): its figures."""
    db = proj / "reports" / "agentperturb.sqlite"
    for folder in ("reports", "workers", "temproot"):
        shutil.rmtree(proj / folder, ignore_errors=True)
    (proj / "temproot").mkdir()
    if old_temp_files:
        old_sessions(proj / "temproot", old_temp_files)
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PLUGINS_OFF, "--agentperturb",
            "suites/workflows", "--agentperturb-model", "test/slow", "--agentperturb-families", FAMILIES,
            "--agentperturb-concurrency", str(CONCURRENCY), "-q"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTEST_DEBUG_TEMPROOT=str(proj / "temproot"))
    out = proj / "run.out"
    t0 = time.time()
    with out.open("w") as sink:
        proc = subprocess.Popen([*args, "-n", "2"], cwd=proj, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while _count(db) < expected // 3:
                if proc.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the run ended (status {proc.returncode}) or took 300 s before a third of its "
                             f"episodes were stored:\n{out.read_text()[-3000:]}")
                time.sleep(0.05)
            pid = int((proj / "workers" / "gw0.pid").read_text())
            killed = time.time()
            os.kill(pid, signal.SIGKILL)
            code = proc.wait(timeout=600)
            ended = time.time()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    with closing(sqlite3.connect(db)) as c:
        rows, last = c.execute("SELECT COUNT(*), MAX(recorded_at) FROM episodes").fetchone()
        lost = [e for (e,) in c.execute("SELECT error FROM episodes WHERE error LIKE 'WorkerLost:%'")]
    fig: dict[str, object] = {"wall": ended - t0, "kill_to_exit": ended - killed, "exit_s": ended - float(last),
                              "code": code, "rows": rows, "lost": len(lost),
                              "replaced": (proj / "workers" / "gw2.pid").exists()}
    if resume:
        again = subprocess.run([*args, "-n", "2", "--agentperturb-resume"], cwd=proj, env=env, capture_output=True,
                               text=True, timeout=600)
        m = re.search(r"episodes run: (\d+), reused: (\d+)", again.stdout)
        with closing(sqlite3.connect(db)) as c:
            left = c.execute("SELECT COUNT(*) FROM episodes WHERE COALESCE(error, '') != ''").fetchone()[0]
        fig["resume"] = (f"status {again.returncode}, ran {m.group(1)}, reused {m.group(2)}" if m else
                         f"status {again.returncode}, no summary") + f", error rows left {left}"
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-resume", action="store_true", help="skip the --agentperturb-resume run after each")
    ap.add_argument("--old-temp-files", type=int, default=0,
                    help="files in each of five earlier sessions' temporary folders (pytest prunes them at the end)")
    a = ap.parse_args()
    suite = ROOT / "suites" / "workflows"
    n_tasks = sum(1 for p in suite.iterdir() if (p / "task.toml").is_file())
    expected = n_tasks * len(FAMILIES.split(","))
    figures = []
    with tempfile.TemporaryDirectory(prefix="agentperturb-workerloss-") as tmp:
        proj = Path(tmp)
        shutil.copytree(suite, proj / "suites" / "workflows")
        (proj / "conftest.py").write_text(PID_CONFTEST)
        print(f"{expected} episodes per run (-n 2, {CONCURRENCY} in flight per worker, test/slow: 0.15 s each); gw0 SIGKILLed once {expected // 3} "
              f"are stored")
        for i in range(a.runs):
            f = one_run(proj, expected, resume=not a.no_resume, old_temp_files=a.old_temp_files)
            figures.append(float(f["exit_s"]))  # type: ignore[arg-type]
            print(f"run {i + 1}: wall {f['wall']:.1f} s, kill to exit {f['kill_to_exit']:.2f} s, "
                  f"last stored row to exit {f['exit_s']:.2f} s, exit status {f['code']}, rows {f['rows']}/"
                  f"{expected}, WorkerLost rows {f['lost']}, replacement worker {'yes' if f['replaced'] else 'no'}"
                  + (f"; resume: {f['resume']}" if "resume" in f else ""),
                  flush=True)
    print(f"last stored row to exit: median {statistics.median(figures):.2f} s "
          f"(min {min(figures):.2f}, max {max(figures):.2f}, {len(figures)} runs)")
    print(f"worker_loss_exit_s: {statistics.median(figures):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
