"""Time of ``agentperturb report`` and the size of what it writes, at 288 and 5,760 episodes.

Builds two synthetic stores in a temporary folder (``tests/synthetic_store.py``:
9 and 180 tasks x 2 models x 16 families, trajectories of about 2 KB, every
tenth task with images), runs the real command on each in a subprocess --
``agentperturb report --store S --out R/agentperturb.html``, default
bootstrap replicates and permutations -- and prints the wall and CPU
seconds of the whole command, the size of the main page and of its task
pages folder, and the ratios between the two stores.  For scale it also
times the bare imports the analysis needs (pandas, scipy.stats), which no
report can go below.

Run: ``PYTHONPATH=. python bench/report.py [--tasks 180]``
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from synthetic_store import MODELS, PER_TASK, write_store  # noqa: E402


def _run(cmd: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of a subprocess (CPU: user + sys of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _size(path: Path) -> tuple[int, int]:
    """(bytes, files) under a folder."""
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def measure(tmp: Path, tasks: int) -> dict[str, float]:
    store, out = tmp / f"s{tasks}.sqlite", tmp / f"r{tasks}" / "agentperturb.html"
    n = write_store(store, tasks)
    wall, cpu = _run([sys.executable, "-m", "pytest_agentperturb.cli", "report", "--store", str(store),
                      "--out", str(out)])
    folder_bytes, pages = _size(out.parent / "agentperturb-tasks")
    main = out.stat().st_size
    print(f"{n:>5} episodes ({tasks} tasks): report {wall:.2f} s wall, {cpu:.2f} s CPU; main page "
          f"{main / 1e6:.3f} MB; task pages {folder_bytes / 1e6:.1f} MB in {pages} files")
    return {"episodes": n, "wall": wall, "cpu": cpu, "main": main, "folder": folder_bytes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=180, help="tasks of the large store (x 32 episodes)")
    args = ap.parse_args(argv)
    print(f"models: {len(MODELS)}, families per task: {len(PER_TASK)}")
    floor_wall, floor_cpu = _run([sys.executable, "-c", "import pandas, scipy.stats"])
    print(f"imports alone (pandas, scipy.stats): {floor_wall:.2f} s wall, {floor_cpu:.2f} s CPU")
    with tempfile.TemporaryDirectory(prefix="agentperturb-bench-") as d:
        small = measure(Path(d), 9)
        big = measure(Path(d), args.tasks)
    print(f"ratios {big['episodes'] / small['episodes']:.0f}x episodes: main page "
          f"{big['main'] / small['main']:.2f}x, task pages {big['folder'] / small['folder']:.1f}x, "
          f"wall {big['wall'] / small['wall']:.2f}x, CPU {big['cpu'] / small['cpu']:.2f}x")
    print(f"main page under 3 MB: {big['main'] < 3e6}")
    print(f"report_seconds_{big['episodes']}: {big['wall']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
