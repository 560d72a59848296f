"""``agentperturb verify <suite | task | agentdojo:x | tau2:x>``: check a suite's edits before a run.

For each task and family (and each seed asked for) this checks what a run
would meet:

* every authored edit of the family (not only the one a seed draws): it
  applies, passes the validity rules and the oracle replay with recovery,
  and the realism lint (:func:`~pytest_agentperturb.perturb.realism.variant_problems`)
  finds no tell in what it adds;
* a family without authored edits: the rule operators' variant at each
  seed, with the same checks and the same lint;
* a family declared not applicable: listed with its reason;
* the same seed gives the same bytes (each variant is made twice).

Every breach is one line naming the task, family, where the edit was
written and what is wrong; the exit status is 1 on any breach.
``--require-authored`` also fails a family that has neither an authored
edit nor a not-applicable entry (for shipped suites, where every family is
written by hand).

``--judge-model MODEL`` also has a model read the checked texts blind, one
at a time (the perturbed surfaces and the clean surfaces of the same
tasks), and reports its flag rates and the texts it flagged, not as
breaches (:mod:`.judge`; ``--judge-fail-above RATE`` makes them a gate).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..model.errors import AgentPerturbError, TaskFormatError, VariantSkipped
from ..model.records import Variant
from ..model.task import FAMILIES, Task, TaskSlot, parse_families


def is_named_suite(arg: str) -> bool:
    """``agentdojo[:x]`` or ``tau2[:x]``: a benchmark's suite rather than a folder."""
    from ..formats import BENCHMARKS

    return arg.split(":", 1)[0] in BENCHMARKS and not Path(arg).exists()


def tasks_of(arg: str) -> Iterator[Task | TaskFormatError]:
    """The tasks of a suite folder, a task folder or a benchmark name (a task that fails to load: its error)."""
    if is_named_suite(arg):
        from ..formats import benchmark_adapter

        adapter = benchmark_adapter(arg)
        assert adapter is not None
        for item in adapter.tasks():
            try:
                yield item.load() if isinstance(item, TaskSlot) else item
            except TaskFormatError as exc:
                yield exc
        return
    from ..formats.native import is_suite, load_task, load_tasks

    path = Path(arg)
    if (path / "task.toml").is_file():
        try:
            yield load_task(path)
        except TaskFormatError as exc:
            yield exc
    elif is_suite(path):
        yield from load_tasks(path)
    else:
        raise AgentPerturbError(f"{arg}: neither a suite folder (suite.toml), a task folder (task.toml) nor a "
                                "benchmark name (agentdojo[:suite], tau2[:domain])")


def check_task(task: Task, engine: Any, families: Iterable[str], seeds: list[int],
               require_authored: bool = False, collect: list[tuple[Variant, str]] | None = None
               ) -> tuple[list[str], Counter[str]]:
    """(breaches, counts) for one task: see the module docstring.

    ``collect``, when given, receives (variant, where it came from) for every authored edit and every
    rule-made variant checked (for the judge, :mod:`.judge`).
    """
    from ..perturb.authored import AuthoredOperator
    from ..perturb.engine import variant_of
    from ..perturb.realism import variant_problems

    out: list[str] = []
    counts: Counter[str] = Counter()
    for family in families:
        label = f"{task.key} [{family}]"
        if family in task.authored.not_applicable:
            counts["not applicable"] += 1
            continue
        edits = task.authored.for_family(family)
        if edits:
            for e in edits:
                counts["authored edits"] += 1
                try:
                    edit = AuthoredOperator(e).apply(task, random.Random(0))
                except VariantSkipped as exc:
                    out.append(f"{label}: {exc}")
                    continue
                v = variant_of(task, family, "authored", 0, edit)
                if collect is not None:
                    collect.append((v, "authored, " + e.source.removesuffix(f" ({family})")))
                problems = engine.check_variant(task, v) + [f"realism: {p}" for p in variant_problems(task, v)]
                out += [f"{label} {e.source}: {p}" for p in problems]
        elif require_authored:
            out.append(f"{label}: no authored edit and no not_applicable entry. Fix: write one in "
                       f"{task.path / 'edits.toml' if task.path else 'the pack'} (docs/authoring.md)")
        for seed in seeds:
            try:
                v = engine.make_variant(task, family, seed)
            except VariantSkipped as exc:
                if not edits:
                    counts["skipped"] += 1
                    if require_authored:
                        out.append(f"{label} seed {seed}: skipped: {str(exc)[:300]}")
                continue
            counts["variants"] += 1
            again = engine.make_variant(task, family, seed)
            if v.surfaces.render(v.target) != again.surfaces.render(again.target) or v.diff != again.diff:
                out.append(f"{label} seed {seed}: not deterministic: the same seed gave other bytes")
            if v.operator != "authored":
                if collect is not None:
                    collect.append((v, f"{v.operator}, seed {seed}"))
                out += [f"{label} seed {seed} ({v.operator}): realism: {p}" for p in variant_problems(task, v)]
    return out, counts


def _seeds(spec: str) -> list[int]:
    lo, _, hi = spec.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def judge_settings(args: argparse.Namespace) -> Any:
    """The judge's :class:`~..model.options.LLMSettings` from ``verify``'s ``--api-base``, ``--attempts``... """
    from ..model.options import Option, resolve
    from .judge import LLM_OPTIONS

    def lookup(opt: Option) -> tuple[Any, str]:
        val = getattr(args, opt.dest, None) if opt.dest in LLM_OPTIONS else None
        return (val, opt.cli_flag) if val is not None else (None, "default")

    return resolve(lookup, Path.cwd()).llm


def _cmd_check(args: argparse.Namespace) -> int:
    from ..model.task import family_parts
    from ..run import make_engine
    from . import judge

    model = getattr(args, "judge_model", None)
    fail_above = judge.fail_rate(getattr(args, "judge_fail_above", None))
    if fail_above is not None and not model:
        raise AgentPerturbError("--judge-fail-above needs --judge-model (the model that reads the texts)")
    settings = judge_settings(args) if model else None  # a bad option stops the command before any check
    engine = make_engine()
    families = [f for f in parse_families(args.families)] if args.families else list(FAMILIES)
    targets = [family_parts(f)[0] for f in families]
    breaches: list[str] = []
    total: Counter[str] = Counter()
    pool: list[judge.Item] = []
    n = 0
    for item in tasks_of(args.folder):
        if isinstance(item, TaskFormatError):
            breaches.append(str(item))
            continue
        if args.task and item.id not in args.task:
            continue
        n += 1
        collect: list[tuple[Variant, str]] | None = [] if model else None
        found, counts = check_task(item, engine, families, _seeds(args.seeds), args.require_authored, collect)
        breaches += found
        total += counts
        if collect is not None:
            pool += judge.task_items(item, targets, collect)
    for b in breaches:
        sys.stdout.write(b + "\n")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(total.items()))
    sys.stdout.write(f"verified {n} task(s), seeds {args.seeds}: {summary or 'nothing to check'}; "
                     f"{len(breaches)} breach(es)\n")
    failed = False
    if model and settings is not None:
        picked = judge.draw(pool, args.judge_max, args.judge_seed)
        verdicts = judge.judge(picked, model, settings, args.judge_seed)
        lines, failures = judge.report(verdicts, model, pool, args.judge_max, args.judge_seed, fail_above)
        for line in lines + failures:
            sys.stdout.write(line + "\n")
        failed = bool(failures)
    return 1 if breaches or n == 0 or failed else 0


def describe_task(task: Task, engine: Any) -> str:
    """What an author of edits needs to see of one task: its four surfaces as the agent meets them, its facts
    (id, value, the surfaces that state it), the gold steps, and for each family whether an authored edit, a
    not-applicable entry or only the rule operators cover it (with the rule's reason where it skips)."""
    import json

    s = task.surfaces
    lines = [f"== {task.key}: {task.title}", "-- user", s.user.rstrip(), "-- procedure", s.procedure.rstrip(),
             "-- context"]
    lines += [f"[{t.role}] {t.content}" for t in s.context] or ["(none)"]
    lines.append("-- tools: " + ", ".join(str(t.get("name") or t.get("function", {}).get("name", "?")) for t in s.tools))
    lines.append("-- facts")
    lines += [f"{f.id} = {f.value!r} (kind {f.kind}; stated on {', '.join(f.surfaces) or 'no surface'})"
              for f in task.facts] or ["(none)"]
    lines.append("-- gold steps")
    lines += [f"{st.tool}({json.dumps(dict(st.args), ensure_ascii=False)})" for st in task.solution]
    lines.append("-- families")
    for family in FAMILIES:
        if family in task.authored.not_applicable:
            lines.append(f"{family}: not applicable: {task.authored.not_applicable[family]}")
        elif task.authored.for_family(family):
            lines.append(f"{family}: {len(task.authored.for_family(family))} authored edit(s)")
        else:
            try:
                v = engine.make_variant(task, family, 0)
                lines.append(f"{family}: rule operator {v.operator} (no authored edit)")
            except VariantSkipped as exc:
                lines.append(f"{family}: rule operators skip: {str(exc)[:200]}")
    return "\n".join(lines) + "\n"


def _cmd_show(args: argparse.Namespace) -> int:
    from ..run import make_engine

    engine = make_engine()
    n = 0
    for item in tasks_of(args.suite):
        if isinstance(item, TaskFormatError):
            sys.stdout.write(f"{item}\n")
            continue
        if args.task and item.id not in args.task:
            continue
        n += 1
        sys.stdout.write(describe_task(item, engine) + "\n")
    if n == 0:
        sys.stderr.write(f"{args.suite}: no task matched\n")
    return 0 if n else 1


def add_show(sub: Any) -> None:
    """``agentperturb show``: print what an author of edits works from."""
    p = sub.add_parser("show", help="print a task's surfaces, facts, gold steps and family coverage "
                                    "(for writing edits.toml).")
    p.add_argument("suite", help="a suite folder, a task folder, or agentdojo[:suite] / tau2[:domain]")
    p.add_argument("--task", action="append", default=[], metavar="ID", help="only this task (repeatable)")
    p.set_defaults(func=_cmd_show)


def add_arguments(v: argparse.ArgumentParser) -> None:
    """The options ``verify`` takes for a suite (a manifests folder takes none)."""
    v.add_argument("--task", action="append", default=[], metavar="ID", help="only this task (repeatable)")
    v.add_argument("--families", default=None, metavar="LIST", help="comma-separated families (default: all 12)")
    v.add_argument("--seeds", default="0-4", metavar="A-B", help="seeds of the rule-made variants (default: 0-4)")
    v.add_argument("--require-authored", action="store_true",
                   help="fail a family that has neither an authored edit nor a not_applicable entry")
    from ..model.options import OPTIONS
    from .judge import DEFAULT_MAX, LLM_OPTIONS

    j = v.add_argument_group("judge", "a model reads the checked texts blind, one at a time, and says whether "
                                      "each reads as genuine or edited (reported, not breaches)")
    j.add_argument("--judge-model", default=None, metavar="MODEL",
                   help="litellm model name of the judge (e.g. openai/gpt-4o-mini); off by default")
    j.add_argument("--judge-max", type=int, default=DEFAULT_MAX, metavar="N",
                   help=f"at most N calls (default: {DEFAULT_MAX}; a third on clean texts), drawn with --judge-seed")
    j.add_argument("--judge-seed", type=int, default=0, metavar="N",
                   help="seed of the draw of the texts judged (default: 0)")
    j.add_argument("--judge-fail-above", type=float, default=None, metavar="RATE",
                   help="exit 1 when a suite's perturbed flag rate exceeds its clean flag rate + RATE")
    by_dest = {o.dest: o for o in OPTIONS}
    for dest in LLM_OPTIONS:
        o = by_dest[dest]
        j.add_argument(o.cli_flag, o.flag, dest=dest, default=None, metavar=o.metavar,
                       help=f"{o.help} (for the judge model)")


__all__ = ["add_arguments", "add_show", "check_task", "describe_task", "is_named_suite", "tasks_of"]
