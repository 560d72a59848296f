"""How varied is what the rule operators write?  Frame shares over the built-in suites.

Generates every variant (all families and inserted objects) of each built-in
suite for seeds 1-5, as ``agentperturb generate`` would, and prints per
operator: how many variants it made, how many distinct frames it added, its
most frequent frame, and the share of the suite's variants that carry that
frame (a frame is an added sentence with the task's values, names and
copied text masked; see ``pytest_agentperturb.perturb.realism.frame``).
It also counts variants with a known-bad shape.  The last line is
``max_frame_share: <ratio>``, the largest share over all operators and suites;
the target is at most 0.05.

Run: ``PYTHONPATH=. python bench/realism.py [--seeds 1-5] [--suite DIR ...]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_agentperturb.formats import shipped
from pytest_agentperturb.formats.native import is_suite, load_tasks
from pytest_agentperturb.model.errors import VariantSkipped
from pytest_agentperturb.model.records import Variant
from pytest_agentperturb.model.task import FAMILIES, IMAGE_OBJECTS, INSERTED, Task
from pytest_agentperturb.perturb.realism import frame_shares, variant_problems
from pytest_agentperturb.run import make_engine


def _seeds(spec: str) -> list[int]:
    lo, _, hi = spec.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def suite_variants(suite: Path, seeds: list[int]) -> tuple[list[tuple[Task, Variant]], int]:
    """Every (task, variant) of a suite for the given seeds, and how many were skipped."""
    engine = make_engine()
    out, skipped = [], 0
    for task in load_tasks(suite):
        if not isinstance(task, Task):
            continue
        # what a default run collects: the 12 families, the inserted objects, and the image objects
        # where the task's tools return images
        images = [f for f in IMAGE_OBJECTS if any(op.applicable(task) for op in engine.registry.operators(f))]
        for seed in seeds:
            for family in (*FAMILIES, *INSERTED, *images):
                try:
                    out.append((task, engine.make_variant(task, family, seed)))
                except VariantSkipped:
                    skipped += 1
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-5", help="seed range, e.g. 1-5 (default)")
    parser.add_argument("--suite", action="append", type=Path, help="suite folder (default: every built-in one)")
    args = parser.parse_args(argv)
    suites = args.suite or sorted(p for p in shipped("suites").iterdir() if is_suite(p))
    worst = 0.0
    for suite in suites:
        pairs, skipped = suite_variants(suite, _seeds(args.seeds))
        bad = [(t.id, v.family, v.operator, p) for t, v in pairs for p in variant_problems(t, v)]
        out = sys.stdout
        out.write(f"suite {suite.name}: {len(pairs)} variants (seeds {args.seeds}, {skipped} skipped), "
                  f"{len(bad)} known-bad shapes\n")
        out.write(f"{'operator':28} {'variants':>8} {'frames':>7} {'top':>4} {'share':>7}  most frequent frame\n")
        for fs in frame_shares(pairs):
            worst = max(worst, fs.share)
            out.write(f"{fs.operator:28} {fs.variants:8d} {fs.frames:7d} {fs.count:4d} {fs.share:7.3f}  "
                      f"{fs.frame[:90]}\n")
        for task_id, family, op, problem in bad[:20]:
            out.write(f"  bad shape: {task_id} {family} {op}: {problem}\n")
    sys.stdout.write(f"max_frame_share: {worst:.4f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
