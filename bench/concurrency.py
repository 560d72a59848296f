"""Throughput of ``pytest --agentperturb`` against a local OpenAI-compatible server.

Serves ``tests/fake_openai.py`` (every reply after a fixed latency, ``k`` calls
per episode) from a thread of this process, then runs the real path --
``pytest --agentperturb suites/workflows --agentperturb-model openai/fake-*`` --
in a subprocess, and prints:

* achieved episodes/s over the ideal ``concurrency / (k x latency)``, both
  end to end (the whole pytest process, start-up and collection included)
  and over the episode phase (the session's own "wall time");
* where the rest of the wall time goes, from the server's side: start-up
  (process start to the first request: imports, collection, litellm's
  import), the episode phase (first request to last reply) with the mean
  number of requests in flight and its share of the ideal, and the tail
  (last reply to exit: analysis, report);
* the fake server's own time per request (mean and 99th percentile, from
  reading the request to writing the reply), against the latency;
* the harness's own CPU seconds per episode (user + sys of the pytest
  process; the server's thread runs in this one);
* what the fixed costs (start-up and tail) allow at this run size: the
  end-to-end share if the episode phase were ideal, and if it ran at
  litellm's own ceiling (below);
* the ceiling: litellm on its own (``bench/litellm_alone.py``: the same
  calls straight through ``litellm.acompletion``, as many in flight, no
  pytest, no episodes) as a share of the same ideal, so what the harness
  loses can be told from what litellm's own per-call work costs.

The pytest run takes this repository's pytest settings for third-party
plugins (no hypothesis or anyio plugin), as the README's main job does, and
the package's bytecode is compiled first (``compileall``, as ``pip install``
does), so a ``PYTHONDONTWRITEBYTECODE`` environment does not time the
compiler at every start.  The end-to-end share includes the fixed costs
(5 to 8 s before the first call, most of it litellm's import, and 1.5 to
3 s after the last reply, on the shared 2-core machine), so it grows with
the run (``--repeats``).  The
last line is the end-to-end share of the ideal, ``efficiency: <ratio>``.

Usage::

    python bench/concurrency.py [--concurrency 32] [--latency 2.0] [--steps 4] [--models 3] [--repeats 1]
                                [-n 0] [--ceiling 1600]

With ``-n N`` each of the N worker processes keeps ``--concurrency`` episodes
in flight, so the ideal is N times as high (``-n 2 --concurrency 16``: 32 in
flight in all).
"""

from __future__ import annotations

import argparse
import bisect
import compileall
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import PLUGINS_OFF, timed  # noqa: E402 (a sibling bench script)

sys.path.insert(0, str(ROOT / "tests"))
from fake_openai import FakeOpenAI, StepsPolicy  # noqa: E402 (the tests' local server)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=2.0, help="seconds per model call (a typical tool-calling turn)")
    ap.add_argument("--steps", type=int, default=4, help="model calls per episode (k)")
    ap.add_argument("--models", type=int, default=3, help="fake models (each x the suite's 472 items)")
    ap.add_argument("--repeats", type=int, default=1, help="--agentperturb-repeats (episodes per item)")
    ap.add_argument("-n", "--workers", type=int, default=0, help="xdist workers (0: no xdist)")
    ap.add_argument("--ceiling", type=int, default=1600, help="calls of the litellm-alone run (0: skip it)")
    a = ap.parse_args()
    compileall.compile_dir(str(ROOT / "pytest_agentperturb"), quiet=1)   # what an installed package has

    with FakeOpenAI(StepsPolicy(a.steps, a.latency)) as server:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(ROOT / "suites" / "workflows", Path(tmp) / "suites" / "workflows")
            models = [arg for i in range(a.models) for arg in ("--agentperturb-model", f"openai/fake-{i}")]
            cmd = [sys.executable, "-m", "pytest", "--agentperturb", "suites/workflows", "-q", "-p", "no:cacheprovider",
                   *PLUGINS_OFF, *models, "--agentperturb-api-base", server.base,
                   "--agentperturb-concurrency", str(a.concurrency), "--agentperturb-repeats", str(a.repeats),
                   "--agentperturb-store", "bench.sqlite", "--agentperturb-report", "bench.html"]
            if a.workers:
                cmd += ["-n", str(a.workers)]
            t0 = time.perf_counter()
            out, wall, cpu = timed(cmd, Path(tmp), timeout=3600)
        times = sorted(server.times)
        ceiling = _alone(server.base, a.ceiling, a.concurrency) if a.ceiling else None
    if out.returncode not in (0, 1):
        print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
        return 1
    m = re.search(r"episodes run: (\d+), reused: \d+, errors: (\d+)", out.stdout)
    if not m or not times:
        print(out.stdout[-3000:], file=sys.stderr)
        return 1
    episodes, errors = int(m.group(1)), int(m.group(2))
    in_flight = a.concurrency * max(1, a.workers)
    ideal = in_flight / (a.steps * a.latency)
    phase = _episode_phase(out.stdout)
    print(f"episodes: {episodes} (errors {errors}), k={a.steps} calls, latency {a.latency} s, "
          f"concurrency {a.concurrency} x {max(1, a.workers)} process(es)")
    print(f"ideal: {ideal:.2f} episodes/s ({episodes / ideal:.1f} s for these episodes)")
    print(f"end to end: {wall:.1f} s, {episodes / wall:.2f} episodes/s = {episodes / wall / ideal:.2f} of ideal")
    if phase:
        print(f"session (pytest_configure to summary): {phase:.1f} s, {episodes / phase:.2f} episodes/s = "
              f"{episodes / phase / ideal:.2f} of ideal")
    first, last = times[0][0] - t0, max(end for _, end in times) - t0
    steady = last - first
    print(f"start-up (process start to first request): {first:.1f} s; episode phase (first request to last "
          f"reply): {steady:.1f} s = {episodes / steady / ideal:.2f} of ideal, {_mean_in_flight(times):.1f} "
          f"requests in flight of {in_flight}; tail (last reply to exit): {wall - last:.1f} s")
    served = sorted(end - start for start, end in times)
    print(f"server time per request (request read to reply written): mean {sum(served) / len(served) * 1000:.1f} ms, "
          f"p99 {served[int(0.99 * (len(served) - 1))] * 1000:.1f} ms, for a latency of {a.latency * 1000:.0f} ms")
    print(f"harness CPU: {cpu:.1f} s = {cpu / max(episodes, 1) * 1000:.1f} ms per episode")
    per_process = a.concurrency / a.latency
    if ceiling is not None:
        print(f"litellm alone ({a.ceiling} calls, {a.concurrency} in flight, no harness): {ceiling:.1f} calls/s = "
              f"{ceiling / per_process:.2f} of the ideal {per_process:.1f} calls/s")
    ideal_s, fixed = episodes / ideal, first + (wall - last)
    bound = (f"at most {ideal_s / (ideal_s + fixed):.2f} of ideal end to end with every call answered in exactly "
             "the latency")
    if ceiling is not None:
        share = ceiling / per_process
        bound += f", {ideal_s / (ideal_s / share + fixed):.2f} with litellm's own ceiling in the phase"
    print(f"fixed costs {fixed:.1f} s (start-up and tail): at this run size, {bound}")
    print(f"efficiency: {episodes / wall / ideal:.2f}")
    return 0


def _mean_in_flight(times: list[tuple[float, float]]) -> float:
    """Requests the server was handling, averaged over the episode phase (sampled every 10 ms)."""
    starts, ends = sorted(s for s, _ in times), sorted(e for _, e in times)
    t, stop, samples = starts[0], ends[-1], []
    while t < stop:
        samples.append(bisect.bisect(starts, t) - bisect.bisect(ends, t))
        t += 0.01
    return sum(samples) / max(len(samples), 1)


def _alone(base: str, calls: int, concurrency: int) -> float:
    """Calls per second of litellm on its own (``bench/litellm_alone.py``, a fresh process)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "litellm_alone.py"), base, "--calls", str(calls),
                          "--concurrency", str(concurrency)], capture_output=True, text=True, timeout=1800)
    m = re.search(r"calls_per_s: ([\d.]+)", out.stdout)
    if not m:
        raise SystemExit(f"bench/litellm_alone.py failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return float(m.group(1))


def _episode_phase(stdout: str) -> float | None:
    """Wall time of the episodes as the session reports it (``wall time: X s``)."""
    m = re.search(r"wall time: ([\d.]+) s", stdout)
    return float(m.group(1)) if m else None


if __name__ == "__main__":
    sys.exit(main())
