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

The blind-read kit (docs/authoring.md) is the same script with a sub-command:

* ``realism.py items --out DIR [--seed 0] [--suite DIR|agentdojo:<suite> ...] [--per-suite N]`` writes ``DIR/items.md`` (one surface text
  per item: a request, a policy or the earlier turns; one item per task and surface, perturbed or clean,
  shuffled, never two versions of one text) and ``DIR/key.json`` (what each item is). Give a reader
  only ``items.md``.
* ``realism.py world --suite S [--seeds 0-4]`` counts where the wrong values of the incorrect variants
  come from: the task's world (environment state, tool contract), the replaced value's shape, or neither
  (listed). Last line ``world_or_shape: <share>``.
* ``realism.py score --key DIR/key.json --verdicts FILE`` scores the reader's verdicts (one line per
  item, ``<id> genuine`` or ``<id> edited``) against the key: the flag rate on perturbed and on clean
  items, per suite, type and operator. Last line ``flag_gap: <perturbed rate - clean rate>``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# bench/agentdojo.py and bench/tau2.py would shadow the benchmarks' packages (agentdojo:<suite> items)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_agentperturb.formats import shipped  # noqa: E402
from pytest_agentperturb.formats.native import is_suite, load_tasks  # noqa: E402
from pytest_agentperturb.model.errors import VariantSkipped  # noqa: E402
from pytest_agentperturb.model.records import Variant  # noqa: E402
from pytest_agentperturb.model.task import FAMILIES, IMAGE_OBJECTS, INSERTED, Task  # noqa: E402
from pytest_agentperturb.perturb.realism import frame_shares, variant_problems  # noqa: E402
from pytest_agentperturb.run import make_engine  # noqa: E402


def _seeds(spec: str) -> list[int]:
    lo, _, hi = spec.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def suite_variants(suite: Path, seeds: list[int]) -> tuple[list[tuple[Task, Variant]], int]:
    """Every (task, variant) of a suite for the given seeds, and how many were skipped."""
    engine = make_engine(authored=False)  # the rule operators' frames (authored edits are read blind instead)
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


def _suite_tasks(suite: Path | str) -> tuple[str, list[Task]]:
    """(name, tasks) of a suite folder or a benchmark's named suite (``agentdojo:banking``), loaded as
    ``agentperturb verify`` loads them."""
    from pytest_agentperturb.cli.check import is_named_suite, tasks_of

    name = str(suite) if is_named_suite(str(suite)) else Path(suite).name
    return name, [t for t in tasks_of(str(suite)) if isinstance(t, Task)]


def write_items(out: Path, suites: list[Path | str], seed: int, perturbed_share: float = 2 / 3,
                per_suite: int = 0) -> tuple[int, int]:
    """The items file and the key (see the module docstring); returns (perturbed, clean) counts.

    ``per_suite`` > 0 draws that many tasks of each suite (seeded); a text already taken (the system message
    every task of a benchmark suite shares) is never taken twice."""
    import json
    import random

    engine = make_engine()
    rng = random.Random(f"blind-read|{seed}")
    items: list[dict[str, str]] = []
    seen: set[str] = set()
    shared: set[str] = set()  # clean texts already drawn from (a near copy of one would give an edit away)
    for suite in suites:
        name, tasks = _suite_tasks(suite)
        if per_suite and len(tasks) > per_suite:
            tasks = sorted(rng.sample(tasks, per_suite), key=lambda t: t.id)
        for task in tasks:
            for target in ("user", "procedure", "context"):
                clean_text = task.surfaces.render(target).strip()
                if clean_text not in ("", "[]"):
                    if clean_text in shared:
                        continue  # a surface the suite's tasks share (a benchmark's system message): read once
                    shared.add(clean_text)
                entry = {"suite": name, "task": task.id, "surface": target}
                variant = None
                if rng.random() < perturbed_share:
                    typ = rng.choice(("missing", "redundant", "incorrect"))
                    try:
                        variant = engine.make_variant(task, f"{target}-{typ}", seed)
                    except VariantSkipped:
                        variant = None
                surfaces = variant.surfaces if variant is not None else task.surfaces
                if target == "context":
                    text = "\n".join(f"{t.role}: {t.content}" for t in surfaces.context)
                else:
                    text = surfaces.render(target)
                if not text.strip() or text.strip() in seen:
                    continue
                seen.add(text.strip())
                entry.update(text=text, kind="perturbed" if variant else "clean",
                             family=variant.family if variant else "clean",
                             operator=variant.operator if variant else "none")
                items.append(entry)
    rng.shuffle(items)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Items", "", "Each item is one text an assistant was given: a request, a policy, or earlier "
             "conversation turns. For each item on its own, say whether a careful reader would take it as "
             "genuine input or as edited by someone (answer one line per item: `<id> genuine` or `<id> edited`, "
             "with a short reason).", ""]
    key = {}
    for i, it in enumerate(items):
        iid = f"i{i:03d}"
        lines += [f"## {iid} ({it['surface'].replace('user', 'request').replace('procedure', 'policy')})", "",
                  "```", it["text"].strip(), "```", ""]
        key[iid] = {k: v for k, v in it.items() if k != "text"}
    (out / "items.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "key.json").write_text(json.dumps(key, indent=1, sort_keys=True), encoding="utf-8")
    n_pert = sum(1 for k in key.values() if k["kind"] == "perturbed")
    return n_pert, len(key) - n_pert


def _shape(value: str) -> str:
    """A value's shape: letters and digits by class, runs collapsed (``GB29NWBK...`` -> ``A9A9``)."""
    import re

    out = re.sub(r"[A-Z]", "A", re.sub(r"[a-z]", "a", re.sub(r"[0-9]", "9", value)))
    return re.sub(r"(.)\1+", r"\1", out)


def world_values(suites: list[Path | str], seeds: list[int]) -> list[str]:
    """Where the wrong values of the incorrect variants come from (issue: at least 95 % from the task's world
    or of the replaced value's shape): per suite, how many come from the environment's initial state or the
    tool contract, how many only keep the shape, how many neither (listed)."""
    import json

    engine = make_engine()
    out: list[str] = []
    total = good = 0
    for suite in suites:
        name, tasks = _suite_tasks(suite)
        counts = {"world": 0, "shape": 0, "neither": 0}
        odd: list[str] = []
        for task in tasks:
            env = task.environment()
            world = json.dumps(env.snapshot(), default=str, ensure_ascii=False) + task.surfaces.render("tool")
            done: set[tuple[str, str]] = set()
            for family in FAMILIES:
                if not family.endswith("incorrect"):
                    continue
                for seed in seeds:
                    try:
                        v = engine.make_variant(task, family, seed)
                    except VariantSkipped:
                        continue
                    for c in v.canaries:
                        if c.kind != "value" or not c.fact or (family, c.text) in done:
                            continue
                        done.add((family, c.text))
                        true = task.fact(c.fact).value
                        where = "world" if c.text in world else "shape" if _shape(c.text) == _shape(true) else "neither"
                        counts[where] += 1
                        if where == "neither":
                            odd.append(f"  {task.id} {family} ({v.operator}): {true!r} -> {c.text!r}")
        n = sum(counts.values())
        total += n
        good += counts["world"] + counts["shape"]
        out.append(f"{name}: {n} wrong values: from the world {counts['world']}, same shape {counts['shape']}, "
                   f"neither {counts['neither']}")
        out += odd
    out.append(f"world_or_shape: {good / total if total else float('nan'):.3f}")
    return out


def score(key_path: Path, verdicts_path: Path) -> list[str]:
    """The report lines of a blind read (see the module docstring)."""
    import json
    import re
    from collections import defaultdict

    key = json.loads(key_path.read_text(encoding="utf-8"))
    verdicts = {}
    for line in verdicts_path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*[-*]?\s*`?(i\d{3})`?\W+(genuine|edited)\b", line, re.I)
        if m:
            verdicts[m.group(1)] = m.group(2).lower() == "edited"
    missing = sorted(set(key) - set(verdicts))
    groups: dict[str, list[bool]] = defaultdict(list)
    for iid, k in key.items():
        if iid not in verdicts:
            continue
        flag = verdicts[iid]
        groups[k["kind"]].append(flag)
        groups[f"{k['kind']} suite {k['suite']}"].append(flag)
        if k["kind"] == "perturbed":
            groups[f"type {k['family'].split('-')[1]}"].append(flag)
            groups[f"operator {k['operator']}"].append(flag)
    rate = {g: (sum(v) / len(v) if v else float("nan")) for g, v in groups.items()}
    out = [f"{g:40} {sum(v):3d}/{len(v):<3d} {rate[g]:.3f}" for g, v in sorted(groups.items())]
    if missing:
        out.append(f"no verdict for {len(missing)} item(s): {', '.join(missing[:10])}")
    gap = rate.get("perturbed", float("nan")) - rate.get("clean", float("nan"))
    out.append(f"flag_gap: {gap:.3f}")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["items"]:
        p = argparse.ArgumentParser(prog="realism.py items")
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--suite", action="append", help="suite folder or agentdojo:<suite> (repeatable)")
        p.add_argument("--per-suite", type=int, default=0, help="draw this many tasks of each suite (default: all)")
        a = p.parse_args(argv[1:])
        suites: list[Path | str] = a.suite or sorted(q for q in shipped("suites").iterdir() if is_suite(q))
        n_pert, n_clean = write_items(a.out, suites, a.seed, per_suite=a.per_suite)
        sys.stdout.write(f"wrote {a.out / 'items.md'} and {a.out / 'key.json'}\n")
        sys.stdout.write(f"items: {n_pert} perturbed, {n_clean} clean\n")
        return 0
    if argv[:1] == ["world"]:
        p = argparse.ArgumentParser(prog="realism.py world")
        p.add_argument("--suite", action="append", required=True, help="suite folder or agentdojo:<suite>")
        p.add_argument("--seeds", default="0-4")
        a = p.parse_args(argv[1:])
        sys.stdout.write("\n".join(world_values(a.suite, _seeds(a.seeds))) + "\n")
        return 0
    if argv[:1] == ["score"]:
        p = argparse.ArgumentParser(prog="realism.py score")
        p.add_argument("--key", type=Path, required=True)
        p.add_argument("--verdicts", type=Path, required=True)
        a = p.parse_args(argv[1:])
        sys.stdout.write("\n".join(score(a.key, a.verdicts)) + "\n")
        return 0
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
