"""Time of ``agentperturb report`` and the size of what it writes, at 288 and 5,760 episodes.

Builds two synthetic stores in a temporary folder (``tests/synthetic_store.py``:
9 and 180 tasks x 2 models x 16 families, trajectories of about 2 KB, every
tenth task with images), runs the real command on each in a subprocess --
``agentperturb report --store S --out R/agentperturb.html``, default
bootstrap replicates and permutations -- and prints the wall and CPU
seconds of the whole command (CPU: user + system of the command and of its
page worker), the size of the main page and of its task pages folder, and
the ratios between the two stores.  The large store is run ``--runs`` times
(median) with the default ``--jobs auto`` (a second process, which reads the
store and writes the task pages, when a processor is idle), with ``--jobs 1``
(one process) and with ``--jobs 2`` (two processes whatever the load), in
turn; ``--vs DIR`` runs another checkout's command (e.g. the previous
release, default options) in the same turns, so old and new are measured
under the same load.  Other processes on the machine stretch the wall time;
the load average is printed before and after, and the CPU time of a fixed
pure-Python workload, which tells a slower machine (a shared host's busy
hour) from a slower report.  For scale it also times the bare import a
report needs (pandas), which no report can go below.  The package's
bytecode is compiled first (``compileall``, as ``pip install`` does), so a
``PYTHONDONTWRITEBYTECODE`` environment does not time the compiler.

Run: ``PYTHONPATH=. python bench/report.py [--tasks 180] [--runs 3] [--vs ../old-checkout]``
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from synthetic_store import MODELS, PER_TASK, write_store  # noqa: E402


def _run(cmd: list[str], src: Path = ROOT) -> tuple[float, float]:
    """(wall, CPU) seconds of a subprocess run in ``src`` (CPU: user + sys of it and of what it waited for)."""
    import time

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=src, capture_output=True, env={**os.environ, "PYTHONPATH": str(src)})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _size(path: Path) -> tuple[int, int]:
    """(bytes, files) under a folder."""
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def _report(store: Path, out: Path, src: Path = ROOT, extra: Sequence[str] = ()) -> tuple[float, float]:
    return _run([sys.executable, "-m", "pytest_agentperturb.cli", "report", "--store", str(store), "--out", str(out),
                 *extra], src)


def _calibration() -> float:
    """CPU seconds of a fixed pure-Python workload (sorting, dict and string work), the best of three."""
    import random
    import time

    best = float("inf")
    for _ in range(3):
        rng = random.Random(0)
        t = time.process_time()
        words = ["".join(rng.choice("abcdefgh") for _ in range(8)) for _ in range(60_000)]
        counts: dict[str, int] = {}
        for w in sorted(words):
            counts[w] = counts.get(w, 0) + len(w.upper())
        best = min(best, time.process_time() - t)
    return best


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "n/a"


def measure(tmp: Path, tasks: int) -> dict[str, float]:
    store, out = tmp / f"s{tasks}.sqlite", tmp / f"r{tasks}" / "agentperturb.html"
    n = write_store(store, tasks)
    wall, cpu = _report(store, out)
    folder_bytes, pages = _size(out.parent / "agentperturb-tasks")
    main = out.stat().st_size
    print(f"{n:>5} episodes ({tasks} tasks): report {wall:.2f} s wall, {cpu:.2f} s CPU; main page "
          f"{main / 1e6:.3f} MB; task pages {folder_bytes / 1e6:.1f} MB in {pages} files")
    return {"episodes": n, "wall": wall, "cpu": cpu, "main": main, "folder": folder_bytes, "store": str(store)}


def repeated(tmp: Path, store: Path, runs: int, vs: Path | None) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) per variant over ``runs`` turns, the variants taking turns within each."""
    variants: dict[str, tuple[Path, tuple[str, ...]]] = {"jobs auto": (ROOT, ()), "jobs 1": (ROOT, ("--jobs", "1")),
                                                         "jobs 2": (ROOT, ("--jobs", "2"))}
    if vs is not None:
        variants["--vs"] = (vs, ())
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for i in range(runs):
        for name, (src, extra) in variants.items():
            got[name].append(_report(store, tmp / f"rep-{i}-{name.replace(' ', '')}" / "agentperturb.html", src,
                                     extra))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in got.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=180, help="tasks of the large store (x 32 episodes)")
    ap.add_argument("--runs", type=int, default=3, help="turns of the large store's repeated runs (median)")
    ap.add_argument("--vs", type=Path, default=None, help="another checkout whose command runs in the same turns")
    args = ap.parse_args(argv)
    print(f"models: {len(MODELS)}, families per task: {len(PER_TASK)}; processors: {os.cpu_count()}; "
          f"load average {_load()}")
    for src in (ROOT, *([args.vs] if args.vs else [])):   # what an installed package has: its bytecode
        compileall.compile_dir(str(src / "pytest_agentperturb"), quiet=1)
    floor_wall, floor_cpu = _run([sys.executable, "-c", "import pandas"])
    print(f"import alone (pandas): {floor_wall:.2f} s wall, {floor_cpu:.2f} s CPU")
    print(f"machine: {_calibration():.3f} s of CPU for a fixed pure-Python workload (the same work every run: "
          "it tells a slower machine from a slower report)")
    with tempfile.TemporaryDirectory(prefix="agentperturb-bench-") as d:
        small = measure(Path(d), 9)
        big = measure(Path(d), args.tasks)
        med = repeated(Path(d), Path(str(big["store"])), args.runs, args.vs)
    print(f"ratios {big['episodes'] / small['episodes']:.0f}x episodes: main page "
          f"{big['main'] / small['main']:.2f}x, task pages {big['folder'] / small['folder']:.1f}x, "
          f"wall {big['wall'] / small['wall']:.2f}x, CPU {big['cpu'] / small['cpu']:.2f}x")
    for name, (wall, cpu) in med.items():
        label = f"--vs {args.vs}" if name == "--vs" else name
        print(f"{big['episodes']:>5} episodes, median of {args.runs}, {label}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    if args.vs is not None:
        (w_new, c_new), (w_old, c_old) = med["jobs auto"], med["--vs"]
        print(f"new / --vs: wall {w_new / w_old:.2f}x, CPU {c_new / c_old:.2f}x")
    print(f"main page under 3 MB: {big['main'] < 3e6}; load average after {_load()}")
    wall, cpu = med["jobs auto"]
    print(f"report_cpu_seconds_{big['episodes']}: {cpu:.2f}")
    print(f"report_seconds_{big['episodes']}: {wall:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
