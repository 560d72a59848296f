"""Process start to the first model request: ``pytest --agentperturb`` against inspect_ai, in interleaved rounds.

Both talk to one local OpenAI-compatible server (``tests/fake_openai.py``,
on 127.0.0.1, in this process), which notes when each request arrives; a
run's figure is the time from just before its process is started to the
server's first request from it.  This checkout runs ``pytest --agentperturb
suites/workflows`` on one item (``--task``'s clean variant) with
``--agentperturb-model openai/<model>`` and ``--agentperturb-api-base``, from
its own folder (its pytest settings, as the README's main job); inspect_ai
runs ``inspect eval`` on an equivalent one-sample task (the same task's
procedure as the system message and its instruction as the input, one
``generate``) with ``--model openai/<model>``, ``--model-base-url`` and
``-M responses_api=false`` (its openai provider otherwise calls the
Responses API, which the server does not serve).  Each round runs every
contender once, in an order that rotates from round to round; the server
answers at once.

inspect_ai is never a dependency of the project: it is installed
(``inspect-ai==0.3.285`` and ``openai``, from the package registry) into a
virtual environment of its own under ``--cache`` (default ``.bench-cache/``,
git-ignored), once.  With ``--against DIR`` another checkout of the project
(e.g. the code before a change, from ``git worktree add``) runs in the same
rounds, from its folder with ``PYTHONPATH=DIR``.

Printed: each round's seconds per contender and the ratio of this checkout
to inspect_ai, then the median and range of the ratio over the rounds (and
of the other checkout's, with ``--against``); the last line is the headline
``first_request_ratio: <median of this checkout / inspect_ai>``.

Usage::

    python bench/startup.py [--rounds 5] [--against ../old-checkout] [--cache .bench-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_openai import FakeOpenAI, Reply, StepsPolicy  # noqa: E402 (the tests' local server)

INSPECT = "inspect-ai==0.3.285"
INSPECT_TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, system_message

SYSTEM = {system!r}
INPUT = {input!r}


@task
def one():
    return Task(dataset=[Sample(input=INPUT, target="done")], solver=[system_message(SYSTEM), generate()],
                scorer=includes())
'''


class Arrivals:
    """The server's policy (one answer per request) that notes when each request arrived."""

    def __init__(self) -> None:
        self._policy = StepsPolicy(steps=1, latency=0.0)
        self._lock = threading.Lock()
        self.times: list[float] = []

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.times.append(time.perf_counter())
        return self._policy(request)

    def first_after(self, t0: float) -> float | None:
        with self._lock:
            later = [t for t in self.times if t >= t0]
        return min(later) - t0 if later else None


def inspect_venv(cache: Path) -> Path:
    """The ``inspect`` command of a virtual environment with inspect_ai, created under ``cache`` at first use."""
    venv = cache / INSPECT.replace("==", "-")
    exe = venv / "bin" / "inspect"
    if not exe.is_file():
        print(f"installing {INSPECT} into {venv} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", INSPECT, "openai"], check=True)
    return exe


def timed(cmd: list[str], cwd: Path, env: dict[str, str], arrivals: Arrivals, limit: float) -> float:
    """Seconds from just before ``cmd`` starts to the server's first request from it (the run is waited for)."""
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=limit)
    first = arrivals.first_after(t0)
    if first is None:
        raise SystemExit(f"no request from {' '.join(cmd)} (exit {out.returncode}):\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache")
    ap.add_argument("--against", type=Path, help="another checkout of the project, run in the same rounds")
    ap.add_argument("--task", default="forward-invoice", help="the workflows task whose clean variant runs")
    ap.add_argument("--model", default="fake")
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args()

    inspect = inspect_venv(a.cache.resolve())
    task_dir = ROOT / "suites" / "workflows" / a.task
    arrivals = Arrivals()
    with FakeOpenAI(arrivals) as srv, tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "task.py").write_text(INSPECT_TASK.format(
            system=(task_dir / "procedure.md").read_text(encoding="utf-8"),
            input=(task_dir / "instruction.md").read_text(encoding="utf-8")), encoding="utf-8")
        base_env = {**os.environ, "OPENAI_API_KEY": "sk-bench-fake", "OPENAI_BASE_URL": srv.base}
        base_env.pop("PYTHONPATH", None)

        def ours(checkout: Path, n: int) -> tuple[list[str], Path, dict[str, str]]:
            out = tmp / f"run-{checkout.name}-{n}"
            return ([sys.executable, "-m", "pytest", "--agentperturb", "suites/workflows", "-q", "-p", "no:cacheprovider",
                     "-k", f"{a.task} and clean", "--agentperturb-model", f"openai/{a.model}",
                     "--agentperturb-api-base", srv.base, "--agentperturb-store", str(out / "s.sqlite"),
                     "--agentperturb-report", str(out / "r.html")],
                    checkout, {**base_env, "PYTHONPATH": str(checkout)})

        def theirs(n: int) -> tuple[list[str], Path, dict[str, str]]:
            return ([str(inspect), "eval", "task.py", "--model", f"openai/{a.model}",
                     "--model-base-url", srv.base, "-M", "responses_api=false", "--log-dir", str(tmp / f"logs-{n}"),
                     "--display", "plain"], tmp, base_env)

        contenders: dict[str, Any] = {"this": lambda n: ours(ROOT, n), "inspect_ai": theirs}
        if a.against:
            contenders["against"] = lambda n: ours(a.against.resolve(), n)
        names = list(contenders)
        rows: list[dict[str, float]] = []
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            row = {name: timed(*contenders[name](r), arrivals, a.timeout) for name in order}
            rows.append(row)
            figures = "  ".join(f"{n} {row[n]:.2f} s" for n in names)
            ratios = "  ".join(f"{n}/inspect_ai {row[n] / row['inspect_ai']:.2f}" for n in names if n != "inspect_ai")
            print(f"round {r + 1}: {figures}  |  {ratios}", flush=True)

    summary: dict[str, Any] = {}
    for n in names:
        secs = [row[n] for row in rows]
        print(f"{n}: median {statistics.median(secs):.2f} s ({min(secs):.2f}-{max(secs):.2f})")
        if n != "inspect_ai":
            ratio = [row[n] / row["inspect_ai"] for row in rows]
            summary[n] = statistics.median(ratio)
            print(f"{n} / inspect_ai: median {summary[n]:.2f} ({min(ratio):.2f}-{max(ratio):.2f})")
    print(json.dumps({"rounds": rows}), file=sys.stderr)
    print(f"first_request_ratio: {summary['this']:.2f}")


if __name__ == "__main__":
    main()
