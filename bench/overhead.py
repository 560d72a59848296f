"""Per-episode harness overhead of ``pytest --agentperturb``: the litellm agent and a reference agent.

Each run is the real path -- ``pytest --agentperturb suites/workflows`` in a
subprocess -- once with ``--agentperturb-repeats`` at a small and once at a
large value (the same variants, more episodes), so start-up, collection,
variant generation and most of the report cancel out of the difference:

    marginal per episode = (large - small) / (episodes(large) - episodes(small))

for the wall time and for the CPU time (user + sys) of the pytest process
from the start of its test loop to the end of the session (start-up,
collection and litellm's import are outside that window; the analysis and
the report, which grow with the episodes, are inside).  The litellm agent
(``openai/fake``) plays against ``tests/fake_openai.py`` answering at once
(zero latency; ``k`` calls per episode: ``k - 1`` tool calls, then an
answer), served from a separate process whose CPU time is not counted.  The
reference agent (``reference/literal``) needs no server.  The runs take this
repository's pytest settings for third-party plugins (no hypothesis or anyio
plugin), as the README's main job does.

What the harness adds per litellm episode is the marginal CPU time less
litellm's own work, measured in the same runs: ``bench/litellm_meter.py``
(loaded into the pytest process as a plugin) adds up the CPU time spent in
every ``litellm.acompletion`` coroutine's steps on the episode loop and in
litellm's threads.  The event-loop work litellm causes outside its
coroutine (socket callbacks, the selector) is the one share the meter does
not see; ``bench/litellm_alone.py`` (litellm on its own, in a fresh process,
metered the same way) measures it per call, and it is counted as litellm's:

    harness = marginal CPU - litellm's metered CPU per episode - k x unmetered per call

The machine's noise moves a separate process's figures by a few
milliseconds, so everything runs in ``--rounds`` interleaved rounds (the
four pytest runs and one litellm-alone run each) and the figures printed
are medians over the rounds, each round's harness figure taken from its own
runs.  Printed too: the whole CPU cost of one more litellm episode (litellm
included), the harness figure obtained instead by subtracting litellm alone
in full (``k x`` its CPU per call in a separate process), the reference
agent's marginal CPU, and wall times (noisy on a busy machine).  The last
line is the headline ``harness_overhead_ms: <median harness CPU ms per
litellm episode>``.

For comparison (measured separately, not here; inspect_ai is not a
dependency): inspect_ai with its mock model (no HTTP call at all) spent
about 8.8 ms per sample (one model call) and 3.2 s of start-up on the same
2-core machine.

Usage::

    python bench/overhead.py [--rounds 3] [--small 1] [--large 3] [--steps 1] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: as in this repository's pytest settings (pyproject.toml): third-party plugins the runs do not use
PLUGINS_OFF = ["-p", "no:hypothesispytest", "-p", "no:anyio"]
LITELLM_AGENT = "openai/fake"
REFERENCE_AGENT = "reference/literal"


@dataclass
class Run:
    """One ``pytest --agentperturb`` process: its episodes, seconds and litellm's metered share."""

    episodes: int
    wall: float
    cpu: float  # the whole process (rusage)
    window_cpu: float  # from the start of the test loop to the end of the session
    litellm_cpu: float  # metered: litellm's coroutine steps on the episode loop and its threads
    calls: int
    main_cpu: float  # pytest's main thread over the window
    loop_cpu: float  # the episode loop's thread
    litellm_loop_cpu: float  # litellm's metered steps on the episode loop


@dataclass
class Marginal:
    """Per extra episode, between a small and a large run (milliseconds)."""

    wall_ms: float
    cpu_ms: float  # the test loop's window
    process_cpu_ms: float  # the whole process
    litellm_ms: float  # litellm's metered CPU
    calls: float  # litellm calls
    fixed_wall_s: float  # wall seconds at zero episodes
    main_ms: float  # pytest's main thread
    loop_ms: float  # the episode loop's thread, litellm's metered steps left out


def run(cwd: Path, agent: str, repeats: int, extra: list[str]) -> Run:
    """One ``pytest --agentperturb`` process with the meter plugin (litellm wrapped for the litellm agent)."""
    tag = f"{agent.replace('/', '-')}-{repeats}"
    meter_file = cwd / f"{tag}.meter.json"
    cmd = [sys.executable, "-m", "pytest", "--agentperturb", "suites/workflows", "-q", "-p", "no:cacheprovider",
           *PLUGINS_OFF, "-p", "litellm_meter", "--agentperturb-model", agent, "--agentperturb-repeats", str(repeats),
           "--agentperturb-store", f"{tag}.sqlite", "--agentperturb-report", f"{tag}.html", *extra]
    env = {"AGENTPERTURB_BENCH_METER": str(meter_file),
           "AGENTPERTURB_BENCH_METER_LITELLM": "1" if agent == LITELLM_AGENT else "0"}
    for old in cwd.glob(f"{tag}.*"):  # every run starts from an empty store
        old.unlink()
    out, wall, cpu = timed(cmd, cwd, timeout=3600, env=env)
    m = re.search(r"episodes run: (\d+), reused: \d+, errors: (\d+)", out.stdout)
    if out.returncode not in (0, 1) or not m or int(m.group(2)) or not meter_file.is_file():
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    meter = json.loads(meter_file.read_text(encoding="utf-8"))
    return Run(int(m.group(1)), wall, cpu, meter["window_cpu_s"],
               meter["litellm_loop_cpu_s"] + meter["litellm_threads_cpu_s"], meter["litellm_calls"],
               meter["main_thread_cpu_s"], meter["loop_thread_cpu_s"], meter["litellm_loop_cpu_s"])


def timed(cmd: list[str], cwd: Path, timeout: float,
          env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run one process (a fake API key, this checkout and its bench folder importable): output, wall, CPU seconds."""
    env = dict(os.environ, OPENAI_API_KEY="sk-bench-fake", PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "bench")]),
               **(env or {}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def marginal(small: Run, large: Run) -> Marginal:
    """The cost of one more episode, from a small and a large run."""
    dn = large.episodes - small.episodes

    def per(attr: str) -> float:
        return float(getattr(large, attr) - getattr(small, attr)) / dn

    wall_ms = per("wall") * 1000
    return Marginal(wall_ms, per("window_cpu") * 1000, per("cpu") * 1000, per("litellm_cpu") * 1000, per("calls"),
                    small.wall - small.episodes * wall_ms / 1000, per("main_cpu") * 1000,
                    (per("loop_cpu") - per("litellm_loop_cpu")) * 1000)


def litellm_alone(base: str, calls: int, concurrency: int) -> dict[str, float]:
    """litellm on its own (``bench/litellm_alone.py``, a fresh process): CPU ms per call, all and unmetered."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "litellm_alone.py"), base, "--calls", str(calls),
                          "--concurrency", str(concurrency)], capture_output=True, text=True, timeout=1800)
    found = dict(re.findall(r"^(litellm_\w+_ms_per_call): ([\d.-]+)$", out.stdout, re.M))
    if "litellm_cpu_ms_per_call" not in found or "litellm_unmetered_ms_per_call" not in found:
        sys.exit(f"bench/litellm_alone.py failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return {k: float(v) for k, v in found.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the figures are medians over them")
    ap.add_argument("--small", type=int, default=1, help="repeats of the small run")
    ap.add_argument("--large", type=int, default=3, help="repeats of the large run")
    ap.add_argument("--steps", type=int, default=1, help="model calls per litellm episode (k; 1 = one call per "
                                                         "sample, as in inspect_ai's figure)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--alone-calls", type=int, default=1000, help="calls of each litellm-alone run")
    a = ap.parse_args()
    if a.large <= a.small:
        ap.error("--large must be above --small")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")

    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--latency", "0",
                               "--steps", str(a.steps)], stdout=subprocess.PIPE, text=True)
    refs: list[Marginal] = []
    llms: list[Marginal] = []
    alones: list[dict[str, float]] = []
    harness: list[float] = []
    try:
        assert server.stdout is not None
        base = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}/v1"
        llm_args = ["--agentperturb-api-base", base, "--agentperturb-concurrency", str(a.concurrency)]
        with tempfile.TemporaryDirectory() as tmp:
            cwd = Path(tmp)
            shutil.copytree(ROOT / "suites" / "workflows", cwd / "suites" / "workflows")
            for i in range(a.rounds):
                ref_small = run(cwd, REFERENCE_AGENT, a.small, [])
                llm_small = run(cwd, LITELLM_AGENT, a.small, llm_args)
                ref_large = run(cwd, REFERENCE_AGENT, a.large, [])
                llm_large = run(cwd, LITELLM_AGENT, a.large, llm_args)
                alone = litellm_alone(base, a.alone_calls, a.concurrency)
                ref, llm = marginal(ref_small, ref_large), marginal(llm_small, llm_large)
                own = llm.litellm_ms + llm.calls * alone["litellm_unmetered_ms_per_call"]
                refs.append(ref)
                llms.append(llm)
                alones.append(alone)
                harness.append(llm.cpu_ms - own)
                print(f"round {i + 1}: {REFERENCE_AGENT} {ref.cpu_ms:.1f} ms CPU/episode "
                      f"({ref_small.episodes} -> {ref_large.episodes} episodes; whole process {ref.process_cpu_ms:.1f}); "
                      f"litellm agent {llm.cpu_ms:.1f} ms CPU/episode (whole process {llm.process_cpu_ms:.1f}), "
                      f"{llm.calls:.2f} calls/episode, litellm's own {own:.1f} (metered {llm.litellm_ms:.1f} + "
                      f"unmetered {alone['litellm_unmetered_ms_per_call']:.1f}/call), harness {harness[-1]:.1f}; "
                      f"litellm alone {alone['litellm_cpu_ms_per_call']:.1f} ms CPU/call", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    total = med([m.cpu_ms for m in llms])
    calls = med([m.calls for m in llms])
    own = med([m.litellm_ms + m.calls * al["litellm_unmetered_ms_per_call"] for m, al in zip(llms, alones)])
    alone_cpu = med([al["litellm_cpu_ms_per_call"] for al in alones])
    versus_alone = med([m.cpu_ms - m.calls * al["litellm_cpu_ms_per_call"] for m, al in zip(llms, alones)])
    head = med(harness)
    print(f"medians over {a.rounds} round(s), CPU from the start of the test loop to the end of the session:")
    print(f"{REFERENCE_AGENT}: {med([m.wall_ms for m in refs]):.1f} ms wall, {med([m.cpu_ms for m in refs]):.1f} ms "
          f"CPU per episode; fixed {med([m.fixed_wall_s for m in refs]):.1f} s wall")
    print(f"litellm agent (k={a.steps} call(s) per episode, zero latency): total {total:.1f} ms CPU per episode "
          f"(the whole cost of one more episode, litellm included), {med([m.wall_ms for m in llms]):.1f} ms wall; "
          f"fixed {med([m.fixed_wall_s for m in llms]):.1f} s wall")
    print(f"litellm.acompletion's own work in the same runs: {own:.1f} ms CPU per episode ({calls:.2f} calls; "
          f"metered {med([m.litellm_ms for m in llms]):.1f}, event-loop share outside the meter "
          f"{med([al['litellm_unmetered_ms_per_call'] for al in alones]):.1f} per call, from litellm alone)")
    print(f"litellm.acompletion alone, a separate process: {alone_cpu:.1f} ms CPU per call; "
          f"total minus k x that: {versus_alone:.1f} ms per litellm episode (cross-check)")
    unmetered = [m.calls * al["litellm_unmetered_ms_per_call"] for m, al in zip(llms, alones)]
    main_ms, loop_ms = med([m.main_ms for m in llms]), med([m.loop_ms - u for m, u in zip(llms, unmetered)])
    print(f"where the harness's CPU goes per litellm episode: pytest's main thread {main_ms:.1f} ms (items, hooks, "
          f"store, analysis and report), the episode loop's thread {loop_ms:.1f} ms (episodes and the agent's loop, "
          f"litellm's share left out), other threads {med([h - m.main_ms - (m.loop_ms - u) for h, m, u in zip(harness, llms, unmetered)]):.1f} ms; "
          f"{REFERENCE_AGENT}: main thread {med([m.main_ms for m in refs]):.1f} ms, episode loop "
          f"{med([m.loop_ms for m in refs]):.1f} ms")
    print(f"harness overhead per litellm episode (total minus litellm's own work, per round): "
          f"{', '.join(f'{h:.1f}' for h in harness)} ms; median {head:.1f} ms")
    print("for comparison: inspect_ai with its mock model (no HTTP call), about 8.8 ms per sample and 3.2 s "
          "start-up (measured separately on the same machine)")
    print(f"harness_overhead_ms: {head:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
