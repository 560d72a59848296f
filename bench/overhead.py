"""Per-episode harness overhead of ``pytest --agentperturb``: the litellm agent and a reference agent.

Each run is the real path -- ``pytest --agentperturb suites/workflows`` in a
subprocess -- once with ``--agentperturb-repeats`` at a small and once at a
large value (the same variants, more episodes), so start-up, collection,
variant generation and most of the report cancel out of the difference:

    marginal per episode = (large - small) / (episodes(large) - episodes(small))

for the wall time and for the CPU time (user + sys) of the pytest process.
The litellm agent (``openai/fake``) plays against ``tests/fake_openai.py``
answering at once (zero latency; ``k`` calls per episode: ``k - 1`` tool
calls, then an answer), served from a separate process whose CPU time is not
counted.  The reference agent (``reference/literal``) needs no server.  The
runs take this repository's pytest settings for third-party plugins (no
hypothesis or anyio plugin), as the README's main job does.

litellm's own share is measured on its own (``bench/litellm_alone.py``):
``litellm.acompletion`` called directly with the agent's arguments and the
suite's first requests, at the same concurrency against the same server, in
a fresh process (CPU per call, after a warm-up).  What the harness adds per
litellm episode is the marginal CPU time minus ``k`` such calls.  The
headline is the litellm agent's marginal CPU milliseconds per episode, all
of it (litellm's own work included): the CPU cost of one more episode.  The
wall figures are printed too; on a machine busy with other work they are
noisy.

For comparison (measured separately, not here; inspect_ai is not a
dependency): inspect_ai with its mock model spent about 8.8 ms per sample
(one model call) and 3.2 s of start-up on the same 2-core machine.

Usage::

    python bench/overhead.py [--small 1] [--large 3] [--steps 1] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: as in this repository's pytest settings (pyproject.toml): third-party plugins the runs do not use
PLUGINS_OFF = ["-p", "no:hypothesispytest", "-p", "no:anyio"]


def run(cwd: Path, agent: str, repeats: int, extra: list[str]) -> tuple[int, float, float]:
    """Episodes, wall seconds and CPU seconds of one ``pytest --agentperturb`` process."""
    tag = f"{agent.replace('/', '-')}-{repeats}"
    cmd = [sys.executable, "-m", "pytest", "--agentperturb", "suites/workflows", "-q", "-p", "no:cacheprovider",
           *PLUGINS_OFF, "--agentperturb-model", agent, "--agentperturb-repeats", str(repeats),
           "--agentperturb-store", f"{tag}.sqlite", "--agentperturb-report", f"{tag}.html", *extra]
    out, wall, cpu = timed(cmd, cwd, timeout=3600)
    m = re.search(r"episodes run: (\d+), reused: \d+, errors: (\d+)", out.stdout)
    if out.returncode not in (0, 1) or not m or int(m.group(2)):
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return int(m.group(1)), wall, cpu


def timed(cmd: list[str], cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run one process (a fake API key, this checkout importable): its output, wall and CPU seconds."""
    env = dict(os.environ, OPENAI_API_KEY="sk-bench-fake", PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def marginal(cwd: Path, agent: str, small: int, large: int, extra: list[str]) -> tuple[float, float, float]:
    """Marginal wall and CPU milliseconds per episode, and the fixed wall seconds (at zero episodes)."""
    n1, w1, c1 = run(cwd, agent, small, extra)
    n2, w2, c2 = run(cwd, agent, large, extra)
    wall_ms, cpu_ms = (w2 - w1) / (n2 - n1) * 1000, (c2 - c1) / (n2 - n1) * 1000
    print(f"{agent}: {n1} episodes {w1:.1f} s wall {c1:.1f} s CPU; {n2} episodes {w2:.1f} s wall {c2:.1f} s CPU",
          flush=True)
    return wall_ms, cpu_ms, w1 - n1 * wall_ms / 1000


def litellm_alone(base: str, calls: int, concurrency: int) -> float:
    """CPU milliseconds of one ``litellm.acompletion`` call (``bench/litellm_alone.py``, a fresh process)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "litellm_alone.py"), base, "--calls", str(calls),
                          "--concurrency", str(concurrency)], capture_output=True, text=True, timeout=1800)
    m = re.search(r"litellm_cpu_ms_per_call: ([\d.]+)", out.stdout)
    if not m:
        sys.exit(f"bench/litellm_alone.py failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=1, help="repeats of the small run")
    ap.add_argument("--large", type=int, default=3, help="repeats of the large run")
    ap.add_argument("--steps", type=int, default=1, help="model calls per litellm episode (k; 1 = one call per "
                                                         "sample, as in inspect_ai's figure)")
    ap.add_argument("--concurrency", type=int, default=16)
    a = ap.parse_args()
    if a.large <= a.small:
        ap.error("--large must be above --small")

    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--latency", "0",
                               "--steps", str(a.steps)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        base = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}/v1"
        with tempfile.TemporaryDirectory() as tmp:
            cwd = Path(tmp)
            shutil.copytree(ROOT / "suites" / "workflows", cwd / "suites" / "workflows")
            ref = marginal(cwd, "reference/literal", a.small, a.large, [])
            llm = marginal(cwd, "openai/fake", a.small, a.large,
                           ["--agentperturb-api-base", base, "--agentperturb-concurrency", str(a.concurrency)])
        per_call = litellm_alone(base, 1000, a.concurrency)
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"reference/literal: {ref[0]:.1f} ms wall, {ref[1]:.1f} ms CPU per episode; fixed {ref[2]:.1f} s wall")
    print(f"litellm agent (k={a.steps} call(s) per episode, zero latency): {llm[0]:.1f} ms wall, {llm[1]:.1f} ms CPU "
          f"per episode; fixed {llm[2]:.1f} s wall")
    print(f"litellm.acompletion alone: {per_call:.1f} ms CPU per call; the harness adds "
          f"{llm[1] - a.steps * per_call:.1f} ms CPU per litellm episode")
    print("for comparison: inspect_ai with its mock model, about 8.8 ms per sample and 3.2 s start-up "
          "(measured separately on the same machine)")
    print(f"litellm_overhead_ms: {llm[1]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
