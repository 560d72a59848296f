"""How the harness's own cost grows with the size of a run: CPU per episode and peak memory.

Builds synthetic suites of N tasks (default 9, 45 and 180) from the
built-in ``suites/workflows`` tasks: task ``i`` is a copy of the ``i mod 29``-th
task (sorted by name) under the id ``<name>-x<k>`` for its ``k``-th copy
(``k = 0`` keeps the name), so the suites are deterministic and need no
network.  Each suite runs serially in its own subprocess, with a fresh store
and report::

    pytest --agentperturb <suite> --agentperturb-model reference/literal
           --agentperturb-model reference/careful -p no:randomly -p no:cacheprovider

For each size it prints the episodes, the CPU seconds of the run (user + sys
of that child alone, from ``os.wait4``), the marginal CPU per episode, the
peak RSS of the run (``ru_maxrss`` of that child), and the sizes of the store
and the report.  A small probe plugin (``-p``, written next to the suites)
also reads the child's own CPU time and peak RSS when ``pytest_sessionfinish``
starts, before the analysis and the report: the *episode phase*
(collection, variants, episodes, the store) apart from the *end* (reading
the store back, the analysis, the HTML report).

*Marginal CPU per episode* at size N is ``(cpu(N) - cpu(smallest)) /
(episodes(N) - episodes(smallest))``: what the episodes beyond the smallest
run cost, start-up, imports and other fixed costs cancelled (at a few hundred
episodes they are a large share of the total, so a plain ``cpu / episodes``
would fall with size even for a harness that slows down).  Everything that
grows with the run stays in: task loading, variants and validity checks,
episodes, the store, the final analysis and report.  When every episode costs
the same whatever the size of the run, the marginal figure is the same at
every size.  The ratios printed are marginal CPU per episode at the largest
size over that at the second largest (so at least three sizes are needed),
and peak RSS at the largest size over that at the smallest.  The last line is
``scale_cpu_ratio: <value>``.

Usage::

    python bench/scale.py [--sizes 9,45,180] [--python PATH] [--keep DIR]

``--python`` runs the suites under another interpreter (e.g. another
checkout's virtual environment, to measure before and after a change).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "suites" / "workflows"
MODELS = ("reference/literal", "reference/careful")
PROBE = "agentperturb_scale_probe"
PROBE_SOURCE = '''"""Records the process's CPU time and peak RSS when the session finishes (before the report)."""
import json
import os
import resource

import pytest


@pytest.hookimpl(wrapper=True)  # a wrapper's first half runs before every plain implementation: the plugin's too
def pytest_sessionfinish(session):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["AGENTPERTURB_SCALE_PROBE"], "w", encoding="utf-8") as fh:
        json.dump({"cpu": ru.ru_utime + ru.ru_stime, "maxrss": ru.ru_maxrss}, fh)
    return (yield)
'''


@dataclass
class Child:
    """What one finished subprocess cost (CPU seconds, peak RSS in MiB, wall seconds) and its exit code."""

    cpu: float
    rss_mib: float
    wall: float
    code: int
    out: str


def build_suite(dest: Path, n: int) -> Path:
    """A suite folder of ``n`` tasks copied from the workflows suite under new ids (deterministic)."""
    names = sorted(p.name for p in SOURCE.iterdir() if (p / "task.toml").is_file())
    suite = dest / f"scale{n}"
    suite.mkdir(parents=True)
    shutil.copy(SOURCE / "suite.toml", suite / "suite.toml")
    for i in range(n):
        src, k = names[i % len(names)], i // len(names)
        tid = src if k == 0 else f"{src}-x{k}"
        shutil.copytree(SOURCE / src, suite / tid)
        toml = suite / tid / "task.toml"
        text, count = re.subn(r'^id = "[^"]*"', f'id = "{tid}"', toml.read_text(encoding="utf-8"), count=1,
                              flags=re.M)
        if count != 1:
            raise SystemExit(f"{toml}: no id line to rewrite")
        toml.write_text(text, encoding="utf-8")
    return suite


def run_child(cmd: list[str], cwd: Path, log: Path, timeout: float, env: dict[str, str]) -> Child:
    """Run ``cmd`` and account for it alone: ``os.wait4`` gives this child's CPU time and peak RSS."""
    env = dict(env)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    t0 = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
    wall = time.perf_counter() - t0
    return Child(usage.ru_utime + usage.ru_stime, _mib(usage.ru_maxrss), wall, proc.returncode,
                 log.read_text(encoding="utf-8"))


def _mib(maxrss: float) -> float:
    """``ru_maxrss`` in MiB (kilobytes on Linux, bytes on macOS)."""
    return maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)


def measure(python: str, work: Path, n: int, timeout: float) -> dict[str, float]:
    """Build the suite of ``n`` tasks and run it; the figures of that size."""
    where = work / f"n{n}"
    suite = build_suite(where, n)
    (where / f"{PROBE}.py").write_text(PROBE_SOURCE, encoding="utf-8")
    env = dict(os.environ, AGENTPERTURB_SCALE_PROBE=str(where / "probe.json"),
               PYTHONPATH=os.pathsep.join(p for p in (str(where), os.environ.get("PYTHONPATH", "")) if p))
    base = [python, "-m", "pytest", "--agentperturb", suite.name, *(a for m in MODELS for a in ("--agentperturb-model", m)),
            "-p", "no:randomly", "-p", "no:cacheprovider", "-p", PROBE, "-q", "--agentperturb-store", "store.sqlite",
            "--agentperturb-report", "report.html"]
    run = run_child(base, where, where / "run.log", timeout, env)
    m = re.search(r"episodes run: (\d+), reused: (\d+), errors: (\d+)", run.out)
    if run.code not in (0, 1) or m is None:
        raise SystemExit(f"the run of {n} tasks failed (exit {run.code}):\n{run.out[-3000:]}")
    episodes, errors = int(m.group(1)), int(m.group(3))
    store = sum(p.stat().st_size for p in where.glob("store.sqlite*"))
    report = (where / "report.html").stat().st_size if (where / "report.html").is_file() else 0
    probe = json.loads((where / "probe.json").read_text(encoding="utf-8"))
    return {"tasks": n, "episodes": episodes, "errors": errors, "cpu": run.cpu, "rss": run.rss_mib,
            "phase_cpu": float(probe["cpu"]), "phase_rss": _mib(float(probe["maxrss"])),
            "wall": run.wall, "store_mib": store / 2**20, "report_mib": report / 2**20}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="9,45,180", help="task counts, comma-separated (at least three)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs pytest (default: this one)")
    ap.add_argument("--keep", type=Path, help="build the suites, stores and logs here and keep them")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per subprocess")
    a = ap.parse_args()
    try:
        sizes = sorted({int(s) for s in a.sizes.split(",") if s.strip()})
    except ValueError:
        ap.error(f"--sizes {a.sizes!r}: expected task counts such as 9,45,180")
    if len(sizes) < 3 or sizes[0] < 1:
        ap.error(f"--sizes {a.sizes!r}: expected at least three different positive task counts (the smallest "
                 "is the base of the marginal cost, the two largest are compared)")

    if a.keep is not None:
        a.keep.mkdir(parents=True, exist_ok=True)
        work_cm: tempfile.TemporaryDirectory[str] | None = None
        work = a.keep
    else:
        work_cm = tempfile.TemporaryDirectory(prefix="agentperturb-scale-")
        work = Path(work_cm.name)
    try:
        rows = []
        for n in sizes:
            rows.append(measure(a.python, work, n, a.timeout))
            r = rows[-1]
            print(f"measured {n} tasks: {r['episodes']} episodes in {r['wall']:.1f} s", file=sys.stderr)
    finally:
        if work_cm is not None:
            work_cm.cleanup()

    small = rows[0]
    for r in rows[1:]:
        extra = max(r["episodes"] - small["episodes"], 1)
        r["marginal_ms"] = 1000 * (r["cpu"] - small["cpu"]) / extra
        r["phase_marginal_ms"] = 1000 * (r["phase_cpu"] - small["phase_cpu"]) / extra
    print(f"serial, {len(MODELS)} reference agents, python {a.python}")
    print(f"marginal = (cpu(N) - cpu({small['tasks']} tasks)) / (episodes(N) - episodes({small['tasks']} tasks)), "
          "whole run and episode phase (up to pytest_sessionfinish); RSS = peak of the run's process, whole run "
          "and episode phase")
    print(f"{'tasks':>6} {'episodes':>8} {'errors':>6} {'cpu s':>7} {'cpu/ep ms':>9} {'marginal ms':>11} "
          f"{'phase marg ms':>13} {'RSS MiB':>8} {'phase RSS':>9} {'wall s':>7} {'store MiB':>9} {'report MiB':>10}")
    for r in rows:
        dash = f"{'-':>11}"
        print(f"{r['tasks']:>6} {r['episodes']:>8} {r['errors']:>6} {r['cpu']:>7.2f} "
              f"{1000 * r['cpu'] / max(r['episodes'], 1):>9.2f} "
              + (f"{r['marginal_ms']:>11.2f} {r['phase_marginal_ms']:>13.2f}" if "marginal_ms" in r
                 else f"{dash} {'-':>13}")
              + f" {r['rss']:>8.1f} {r['phase_rss']:>9.1f} {r['wall']:>7.1f} {r['store_mib']:>9.2f} "
              f"{r['report_mib']:>10.2f}")
    big, mid = rows[-1], rows[-2]
    cpu_ratio = big["marginal_ms"] / mid["marginal_ms"]
    more = big["episodes"] - small["episodes"]
    print(f"marginal cpu/episode {big['tasks']} vs {mid['tasks']} tasks: {cpu_ratio:.2f}x (episode phase "
          f"{big['phase_marginal_ms'] / mid['phase_marginal_ms']:.2f}x)")
    print(f"peak RSS {big['tasks']} vs {small['tasks']} tasks: {big['rss'] / small['rss']:.2f}x "
          f"({big['rss'] - small['rss']:+.1f} MiB for {more} more episodes); episode phase "
          f"{big['phase_rss'] / small['phase_rss']:.2f}x ({big['phase_rss'] - small['phase_rss']:+.1f} MiB, "
          f"{1024 * (big['phase_rss'] - small['phase_rss']) / max(more, 1):.1f} KiB per episode)")
    print(f"scale_cpu_ratio: {cpu_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
