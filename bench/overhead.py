"""Per-episode harness overhead of ``pytest --agentperturb``: the litellm agent and a reference agent.

Each run is the real path -- ``pytest --agentperturb suites/workflows`` in a
subprocess -- with the meter plugin ``bench/litellm_meter.py`` loaded.  The
litellm agent (``openai/fake``) plays against ``tests/fake_openai.py``
answering at once (zero latency; ``k`` calls per episode: ``k - 1`` tool
calls, then an answer), served from a separate process whose CPU time is not
counted; the reference agent (``reference/literal``) needs no server.  The
runs take this repository's pytest settings for third-party plugins (no
hypothesis or anyio plugin), as the README's main job does.

What one episode costs is measured inside each run, so that the machine's
speed, which drifts by tens of percent on a shared machine, moves every part
of it alike instead of being amplified by a difference between two
processes.  The meter samples the process's cumulative CPU time every few
items of the test loop; the cost of one more episode is the slope of that
time against the items done over the steady part of the loop (from a
quarter of its items to nine tenths: after the first uses of everything,
before the prefetch window drains), with the CPU time pytest's thread spent
making variants and their digests (once per task, family and seed, however
many episodes use them) taken out, plus the end of the session (analysis, report), which grows
with the episodes and enters by its cost per extra episode between a run
with ``--small`` and one with ``--large`` repeats (the same variants, more
episodes).  Each run gives one estimate; the figures printed are those of
the runs with ``--small`` repeats (default 1: every episode on a variant of
its own, as in the usual run; repeats sharing a variant run warmer, and
their figures are printed beside).

litellm's own work is measured in the same runs and samples: the meter adds
up the CPU time spent in every ``litellm.acompletion`` coroutine's steps on
the episode loop and in litellm's threads.  The event-loop work litellm
causes outside its coroutine (socket callbacks, the selector) is the one
share the meter does not see; ``bench/litellm_alone.py`` (litellm on its own, in a fresh
process, metered the same way) measures it per call, and it is counted as
litellm's (the harness is never credited with it):

    harness = slope(CPU - variants) + end per episode - slope(litellm's metered CPU) - k x unmetered per call

Everything runs in ``--rounds`` interleaved rounds (four pytest runs and
one litellm-alone run each); the figures printed are medians over the rounds.
Printed too: the whole CPU cost of one more litellm episode (litellm
included), where the harness's share goes (pytest's thread, the episode
loop's thread, the end of the session), the reference agent's cost per
episode (its own play included), and two cross-checks: the harness figure
from the marginal between the two run sizes (the cost of one more repeat,
as this benchmark measured it at first; noisier), and the total less ``k x``
litellm alone's CPU per call in full.  The machine's speed moves every figure in milliseconds (by tens of
percent from one minute to the next on a shared machine), not the harness's
share of litellm's own work, which is printed as well.  With ``--against
DIR`` another checkout of the project runs in the same rounds, each of its
pytest runs next to this checkout's, and the ratios of this checkout's
figures to that one's, round by round, are printed: before/after figures
measured together.  The last line is the headline ``harness_overhead_ms:
<median harness CPU ms per litellm episode>``.

For comparison (measured separately, not here; inspect_ai is not a
dependency): inspect_ai with its mock model (no HTTP call at all) spent
about 8.8 ms per sample (one model call) and 3.2 s of start-up on the same
2-core machine.

With ``--main-job`` it measures the README's main job instead (the
workflows suite, both reference agents, serially), ``--rounds`` times, each
run beside ``--against DIR``'s: the wall and CPU seconds of the whole
process, and the wall seconds spent writing the results store (every
thread, the batch timer's too: ``bench/store_meter.py``) as a share of the
test loop (the episode phase); whether both checkouts recorded the same
episodes (rewards, verdicts, operators) and printed the same summary.  Its
last line is ``main_job_store_share_pct: <median share of this checkout>``, the
share of the writes on pytest's thread (what the test loop waits for).

Usage::

    python bench/overhead.py [--rounds 3] [--small 1] [--large 3] [--steps 1] [--concurrency 16] [--against DIR]
    python bench/overhead.py --main-job [--rounds 3] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: as in this repository's pytest settings (pyproject.toml): third-party plugins the runs do not use
PLUGINS_OFF = ["-p", "no:hypothesispytest", "-p", "no:anyio"]
LITELLM_AGENT = "openai/fake"
REFERENCE_AGENT = "reference/literal"
#: the steady part of a run's test loop, as shares of its items: after the first uses of everything, before
#: the prefetch window drains at the end
STEADY = (0.25, 0.9)


@dataclass
class Run:
    """One ``pytest --agentperturb`` process: episodes, wall and CPU seconds of its phases (the meter's file)."""

    episodes: int
    wall: float
    cpu: float  # the whole process (rusage)
    loop_phase: float  # the test loop: episodes, and variants made on the way
    end: float  # the session's end: analysis, report, summary
    variants: float  # pytest's thread making variants
    main: float  # pytest's thread during the test loop
    loop_thread: float  # the episode loop's thread
    litellm_loop: float  # litellm's metered coroutine steps on the episode loop
    litellm_threads: float  # litellm's threads
    calls: int
    items: int
    samples: list[dict[str, float]]  # cumulative seconds every few items (bench/litellm_meter.py's SAMPLE_FIELDS)

    def per_episode(self, attr: str) -> float:
        """Milliseconds of ``attr`` per episode of this run."""
        return float(getattr(self, attr)) / self.episodes * 1000

    def slope(self, *plus: str, minus: tuple[str, ...] = ()) -> float:
        """Milliseconds per episode: the least-squares slope of ``sum(plus) - sum(minus)`` against the items
        done, over the steady part of the test loop (:data:`STEADY`)."""
        lo, hi = STEADY
        pts = [p for p in self.samples if lo * self.items <= p["items"] <= hi * self.items]
        if len(pts) < 3:
            sys.exit(f"too few samples in the steady part of a run of {self.items} items")
        xs = [p["items"] for p in pts]
        ys = [sum(p[f] for f in plus) - sum(p[f] for f in minus) for p in pts]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        per_item = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        return per_item * self.items / self.episodes * 1000


@dataclass
class Estimate:
    """Milliseconds per episode, from one run (the end of the session by its marginal over two runs)."""

    total: float  # the whole CPU cost of one more episode
    litellm: float  # litellm's own work: metered, plus k x its unmetered share per call
    main: float  # pytest's thread, variants left out
    loop: float  # the episode loop's thread, litellm's share left out
    end: float  # the end of the session, per extra episode

    @property
    def harness(self) -> float:
        return self.total - self.litellm

    @property
    def other(self) -> float:
        """Other threads of the harness during the test loop (none expected)."""
        return self.harness - self.main - self.loop - self.end


def run(cwd: Path, agent: str, repeats: int, extra: list[str], root: Path = ROOT) -> Run:
    """One ``pytest --agentperturb`` process of the checkout at ``root``, with the meter plugin (litellm wrapped
    for the litellm agent)."""
    tag = f"{agent.replace('/', '-')}-{repeats}"
    meter_file = cwd / f"{tag}.meter.json"
    cmd = [sys.executable, "-m", "pytest", "--agentperturb", "suites/workflows", "-q", "-p", "no:cacheprovider",
           *PLUGINS_OFF, "-p", "litellm_meter", "--agentperturb-model", agent, "--agentperturb-repeats", str(repeats),
           "--agentperturb-store", f"{tag}.sqlite", "--agentperturb-report", f"{tag}.html", *extra]
    env = {"AGENTPERTURB_BENCH_METER": str(meter_file),
           "AGENTPERTURB_BENCH_METER_LITELLM": "1" if agent == LITELLM_AGENT else "0"}
    for old in cwd.glob(f"{tag}.*"):  # every run starts from an empty store
        old.unlink()
    out, wall, cpu = timed(cmd, cwd, timeout=3600, env=env, root=root)
    m = re.search(r"episodes run: (\d+), reused: \d+, errors: (\d+)", out.stdout)
    if out.returncode not in (0, 1) or not m or int(m.group(2)) or not meter_file.is_file():
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    d = json.loads(meter_file.read_text(encoding="utf-8"))
    samples = [dict(zip(d["sample_fields"], p)) for p in d["samples"]]
    return Run(int(m.group(1)), wall, cpu, d["loop_phase_cpu_s"], d["end_cpu_s"], d["variants_cpu_s"],
               d["main_loop_phase_cpu_s"], d["loop_thread_cpu_s"], d["litellm_loop_cpu_s"],
               d["litellm_threads_cpu_s"], d["litellm_calls"], d["items"], samples)


def timed(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None,
          root: Path = ROOT) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run one process (a fake API key; the checkout at ``root`` and this bench folder importable): output, wall
    and CPU seconds."""
    env = dict(os.environ, OPENAI_API_KEY="sk-bench-fake", PYTHONPATH=os.pathsep.join([str(root), str(ROOT / "bench")]),
               **(env or {}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def marginal(small: Run, large: Run, attr: str) -> float:
    """Milliseconds of ``attr`` per extra episode, from a small and a large run."""
    return float(getattr(large, attr) - getattr(small, attr)) / (large.episodes - small.episodes) * 1000


def estimate(r: Run, end_ms: float, unmetered_ms: float) -> Estimate:
    """One run's per-episode figures: slopes over its test loop, plus ``end_ms`` (the end of the session per
    extra episode)."""
    k = r.calls / r.episodes
    return Estimate(total=r.slope("process", minus=("variants",)) + end_ms,
                    litellm=r.slope("litellm_loop", "litellm_threads") + k * unmetered_ms,
                    main=r.slope("main_thread", minus=("variants",)),
                    loop=r.slope("loop_thread", minus=("litellm_loop",)) - k * unmetered_ms,
                    end=end_ms)


def two_run_harness(small: Run, large: Run, unmetered_ms: float) -> float:
    """The cross-check: marginal CPU (test loop and end) less litellm's marginal work, between two runs."""
    cpu = marginal(small, large, "loop_phase") + marginal(small, large, "end") - marginal(small, large, "variants")
    own = marginal(small, large, "litellm_loop") + marginal(small, large, "litellm_threads")
    return cpu - own - marginal(small, large, "calls") / 1000 * unmetered_ms


def litellm_alone(base: str, calls: int, concurrency: int) -> dict[str, float]:
    """litellm on its own (``bench/litellm_alone.py``, a fresh process): CPU ms per call, all and unmetered."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "litellm_alone.py"), base, "--calls", str(calls),
                          "--concurrency", str(concurrency)], capture_output=True, text=True, timeout=1800)
    found = dict(re.findall(r"^(litellm_\w+_ms_per_call): ([\d.-]+)$", out.stdout, re.M))
    if "litellm_cpu_ms_per_call" not in found or "litellm_unmetered_ms_per_call" not in found:
        sys.exit(f"bench/litellm_alone.py failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return {k: float(v) for k, v in found.items()}


@dataclass
class Checkout:
    """One checkout's runs: its estimates per run, and per round the two-run cross-check and wall times."""

    label: str
    root: Path
    refs: list[Estimate]
    llms: list[Estimate]
    cross: list[float]
    walls: list[tuple[float, float]]

    def round(self, cwd: Path, a: argparse.Namespace, llm_args: list[str]) -> tuple[Run, Run, Run, Run]:
        """The four pytest runs of one round: each agent at ``--small`` and at ``--large`` repeats."""
        return (run(cwd, REFERENCE_AGENT, a.small, [], self.root), run(cwd, LITELLM_AGENT, a.small, llm_args, self.root),
                run(cwd, REFERENCE_AGENT, a.large, [], self.root), run(cwd, LITELLM_AGENT, a.large, llm_args, self.root))

    def add(self, runs: tuple[Run, Run, Run, Run], unmetered: float) -> None:
        ref_small, llm_small, ref_large, llm_large = runs
        ref_end, llm_end = marginal(ref_small, ref_large, "end"), marginal(llm_small, llm_large, "end")
        self.refs += [estimate(r, ref_end, 0.0) for r in (ref_small, ref_large)]
        self.llms += [estimate(r, llm_end, unmetered) for r in (llm_small, llm_large)]
        self.cross.append(two_run_harness(llm_small, llm_large, unmetered))
        self.walls.append((marginal(ref_small, ref_large, "wall"), marginal(llm_small, llm_large, "wall")))

    def line(self, i: int, alone: float, unmetered: float) -> str:
        """What round ``i`` measured."""
        refs, llms = self.refs[2 * i:2 * i + 2], self.llms[2 * i:2 * i + 2]

        def two(values: list[float]) -> str:
            return " ".join(f"{v:.1f}" for v in values)

        return (f"round {i + 1}{self.label}, ms CPU per episode (small and large run): {REFERENCE_AGENT} "
                f"{two([e.total for e in refs])}; litellm agent total {two([e.total for e in llms])}, litellm's own "
                f"{two([e.litellm for e in llms])} (unmetered {unmetered:.1f} per call), harness "
                f"{two([e.harness for e in llms])}; litellm alone {alone:.1f} per call")


def med(values: list[float]) -> float:
    return statistics.median(values)


MAIN_JOB_AGENTS = ("reference/literal", "reference/careful")
_SAME = ("model, suite, task, family, seed, repeat, reward, success, compliance, operator, error, tool_calls, "
         "turns, input_tokens, output_tokens")


@dataclass
class MainJob:
    """One run of the README's main job: wall and CPU seconds, store-writing and test-loop wall seconds."""

    wall: float
    cpu: float
    store: float
    store_cpu: float
    store_main: float
    loop: float
    calls: int
    rows: list[tuple[Any, ...]]
    summary: list[str]

    @property
    def share(self) -> float:
        """The store's writes, as a percentage of the test loop's wall time."""
        return 100 * self.store / self.loop

    @property
    def main_share(self) -> float:
        """The store's writes on pytest's thread, as a percentage of the test loop's wall time."""
        return 100 * self.store_main / self.loop


def main_job(cwd: Path, root: Path) -> MainJob:
    """The main job (README's first command) in ``cwd`` with the checkout at ``root``, metered by store_meter."""
    meter = cwd / "main.store.json"
    for old in cwd.glob("main.*"):
        old.unlink()
    models = [arg for m in MAIN_JOB_AGENTS for arg in ("--agentperturb-model", m)]
    cmd = [sys.executable, "-m", "pytest", "--agentperturb", "suites/workflows", "-q", "-p", "no:cacheprovider",
           *PLUGINS_OFF, "-p", "store_meter", *models, "--agentperturb-store", "main.sqlite",
           "--agentperturb-report", "main.html"]
    out, wall, cpu = timed(cmd, cwd, timeout=3600, env={"AGENTPERTURB_BENCH_STORE_METER": str(meter)}, root=root)
    m = re.search(r"episodes run: (\d+), reused: \d+, errors: (\d+)", out.stdout)
    if out.returncode not in (0, 1) or not m or int(m.group(2)) or not meter.is_file():
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    d = json.loads(meter.read_text(encoding="utf-8"))
    with sqlite3.connect(cwd / "main.sqlite") as c:
        rows = c.execute(f"SELECT {_SAME} FROM episodes ORDER BY model, suite, task, family, seed, repeat").fetchall()
    lines = out.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if " agentperturb " in line and line.startswith("=")), len(lines))
    summary = [re.sub(r"wall time: [\d.]+ s", "", line) for line in lines[start:]
               if not line.startswith(("report:", "store:")) and " in " not in line]  # paths and pytest's timing
    return MainJob(wall, cpu, d["store_write_s"], d["store_write_cpu_s"], d["store_main_s"], d["loop_s"], d["store_calls"], rows, summary)


def main_jobs(a: argparse.Namespace, sides: list[Checkout]) -> int:
    """``--main-job``: the main job, this checkout beside ``--against``'s in each round."""
    runs: list[list[MainJob]] = [[] for _ in sides]
    with tempfile.TemporaryDirectory() as tmp:
        cwds = [Path(tmp) / str(n) for n in range(len(sides))]
        for side, cwd in zip(sides, cwds):
            shutil.copytree(side.root / "suites" / "workflows", cwd / "suites" / "workflows")
        for i in range(a.rounds):
            for side, cwd, side_runs in zip(sides, cwds, runs):
                r = main_job(cwd, side.root)
                side_runs.append(r)
                print(f"round {i + 1}{side.label}: {len(r.rows)} episodes, wall {r.wall:.2f} s, CPU {r.cpu:.2f} s, "
                      f"store writes {r.store:.3f} s ({r.store_cpu:.3f} s CPU; pytest's thread {r.store_main:.3f} s) in {r.calls} "
                      f"call(s), {r.share:.1f} % of the test loop's "
                      f"{r.loop:.2f} s", flush=True)
    for side, side_runs in zip(sides, runs):
        print(f"main job{side.label or ' (this checkout)'}, medians over {a.rounds} round(s): wall "
              f"{med([r.wall for r in side_runs]):.2f} s, CPU {med([r.cpu for r in side_runs]):.2f} s, store writes "
              f"{med([r.store for r in side_runs]):.3f} s ({med([r.store_cpu for r in side_runs]):.3f} s CPU), "
              f"{med([r.share for r in side_runs]):.1f} % of the test loop; on pytest's thread "
              f"{med([r.store_main for r in side_runs]):.3f} s, {med([r.main_share for r in side_runs]):.2f} %")
    if len(sides) > 1:
        this, other = runs

        def ratio(attr: str) -> float:
            return med([getattr(x, attr) / getattr(y, attr) for x, y in zip(this, other)])

        same_rows = all(x.rows == this[0].rows for x in this + other)
        same_summary = all(x.summary == this[0].summary for x in this + other)
        print(f"this checkout / {sides[1].root}, round by round (medians): wall {ratio('wall'):.2f}, "
              f"CPU {ratio('cpu'):.2f}, store writes {ratio('store'):.3f} (CPU {ratio('store_cpu'):.3f}), their share of the test loop "
              f"{ratio('share'):.3f}, on pytest's thread {ratio('main_share'):.3f}; same episodes recorded: {'yes' if same_rows else 'NO'}; same summary: "
              f"{'yes' if same_summary else 'NO'}")
    print(f"main_job_store_share_pct: {med([r.main_share for r in runs[0]]):.2f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the figures are medians over them")
    ap.add_argument("--small", type=int, default=1, help="repeats of the small run (the figures' run)")
    ap.add_argument("--large", type=int, default=3, help="repeats of the large run")
    ap.add_argument("--steps", type=int, default=1, help="model calls per litellm episode (k; 1 = one call per "
                                                         "sample, as in inspect_ai's figure)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--alone-calls", type=int, default=1000, help="calls of each litellm-alone run")
    ap.add_argument("--against", type=Path, help="another checkout of this project (its package and suites), run "
                                                 "in the same rounds: before/after figures measured together")
    ap.add_argument("--main-job", action="store_true", help="measure the README's main job instead (wall, CPU, the "
                                                            "store's writes): see the module's docstring")
    a = ap.parse_args()
    if a.large <= a.small:
        ap.error("--large must be above --small")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    sides = [Checkout("", ROOT, [], [], [], [])]
    if a.against is not None:
        if not (a.against / "pytest_agentperturb").is_dir():
            ap.error(f"--against {a.against}: not a checkout of pytest-agentperturb")
        sides.append(Checkout(f" against {a.against}", a.against.resolve(), [], [], [], []))
    if a.main_job:
        return main_jobs(a, sides)

    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--latency", "0",
                               "--steps", str(a.steps)], stdout=subprocess.PIPE, text=True)
    alone: list[float] = []
    try:
        assert server.stdout is not None
        base = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}/v1"
        llm_args = ["--agentperturb-api-base", base, "--agentperturb-concurrency", str(a.concurrency)]
        with tempfile.TemporaryDirectory() as tmp:
            cwds = [Path(tmp) / str(n) for n in range(len(sides))]
            for side, cwd in zip(sides, cwds):
                shutil.copytree(side.root / "suites" / "workflows", cwd / "suites" / "workflows")
            for i in range(a.rounds):
                runs = [side.round(cwd, a, llm_args) for side, cwd in zip(sides, cwds)]
                al = litellm_alone(base, a.alone_calls, a.concurrency)
                alone.append(al["litellm_cpu_ms_per_call"])
                for side, side_runs in zip(sides, runs):
                    side.add(side_runs, al["litellm_unmetered_ms_per_call"])
                    print(side.line(i, alone[-1], al["litellm_unmetered_ms_per_call"]), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)

    this, k = sides[0], a.steps
    # the figures: the small runs (at --small 1, the usual run: every episode on a variant of its own)
    refs, llms, large = this.refs[0::2], this.llms[0::2], this.llms[1::2]
    alone_by_run = alone
    head = med([e.harness for e in llms])
    print(f"medians over {a.rounds} round(s), runs with {a.small} repeat(s) (every {a.small} episode(s) on a variant "
          f"of their own; making variants and their digests left out):")
    print(f"{REFERENCE_AGENT}: {med([e.total for e in refs]):.1f} ms CPU per episode (its own play included; "
          f"pytest's thread {med([e.main for e in refs]):.1f}, the episode loop {med([e.loop for e in refs]):.1f}, "
          f"the session's end {med([e.end for e in refs]):.1f}); {med([w for w, _ in this.walls]):.1f} ms wall")
    print(f"litellm agent (k={k} call(s) per episode, zero latency): total {med([e.total for e in llms]):.1f} ms CPU "
          f"per episode (the whole cost of one more episode, litellm included), "
          f"{med([w for _, w in this.walls]):.1f} ms wall")
    print(f"litellm.acompletion's own work in the same runs: {med([e.litellm for e in llms]):.1f} ms CPU per "
          f"episode (metered in the runs, plus the event-loop share outside the meter from litellm alone)")
    print(f"where the harness's CPU goes per litellm episode: pytest's thread {med([e.main for e in llms]):.1f} ms "
          f"(the item protocol, hooks, store), the episode loop {med([e.loop for e in llms]):.1f} ms (episode, "
          f"agent loop, asyncio; litellm's share left out), the session's end {med([e.end for e in llms]):.1f} ms "
          f"(analysis, report), other threads {med([e.other for e in llms]):.1f} ms")
    print(f"harness / litellm's own work, run by run (the machine's speed cancels): "
          f"{med([e.harness / e.litellm for e in llms]):.2f}; with {a.large} repeats sharing each variant: harness "
          f"{med([e.harness for e in large]):.1f} ms, {REFERENCE_AGENT} {med([e.total for e in this.refs[1::2]]):.1f} ms")
    print(f"cross-checks: the marginal between the two run sizes gives {med(this.cross):.1f} ms "
          f"({', '.join(f'{c:.1f}' for c in this.cross)}; the cost of one more repeat); the total less k x litellm "
          f"alone in a separate process ({med(alone):.1f} ms CPU per call) "
          f"{med([e.total - k * al for e, al in zip(llms, alone_by_run)]):.1f} ms")
    for other in sides[1:]:
        o_refs, o_llms = other.refs[0::2], other.llms[0::2]
        print(f"against {other.root}: harness {med([e.harness for e in o_llms]):.1f} ms per litellm episode "
              f"(harness / litellm's own {med([e.harness / e.litellm for e in o_llms]):.2f}), {REFERENCE_AGENT} "
              f"{med([e.total for e in o_refs]):.1f} ms per episode; this checkout / that one, round by round: "
              f"harness {med([x.harness / y.harness for x, y in zip(llms, o_llms)]):.2f}, harness / litellm's own "
              f"{med([(x.harness / x.litellm) / (y.harness / y.litellm) for x, y in zip(llms, o_llms)]):.2f}, "
              f"{REFERENCE_AGENT} {med([x.total / y.total for x, y in zip(refs, o_refs)]):.2f}")
    print(f"harness overhead per litellm episode: {', '.join(f'{e.harness:.1f}' for e in llms)} ms; "
          f"median {head:.1f} ms")
    print("for comparison: inspect_ai with its mock model (no HTTP call), about 8.8 ms per sample and 3.2 s "
          "start-up (measured separately on the same machine)")
    print(f"harness_overhead_ms: {head:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
