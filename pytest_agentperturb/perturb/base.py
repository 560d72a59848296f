"""Operator protocol, registry, variant construction and executable validity.

An operator edits exactly one surface of a task.  :func:`make_variant` picks
an applicable operator for a family with a seeded RNG, applies it, and keeps
the result only if the rules of DESIGN.md section 2 *run* green:

1. exactly one surface differs; the other three render byte-identically
   (an injection changes no surface: it filters one tool's outputs);
2. grader, gold solution and environment are untouched (a variant carries
   only surfaces; written-out variants are checked byte for byte);
3. the goal is preserved and 4. a successful path remains: the oracle,
   asking the user simulator for every fact in the recovery annotation,
   scores 1.0 and reaches the same end state as on the clean task.

Every variant must also carry canaries, and none of them may already
appear in what the clean oracle does (else compliance would be vacuous).

A failing candidate is regenerated with the next seed up to
:data:`MAX_ATTEMPTS` times, then :class:`VariantSkipped` names the reasons.
"""

from __future__ import annotations

import difflib
import json
import random
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from ..errors import VariantSkipped
from ..records import Canary, Injection, Variant
from ..task import CLEAN, FAMILIES, INSERTED, SURFACE_FILES, TARGETS, Surfaces, Task, family_parts

MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class Edit:
    """What an operator produced: new surfaces, canaries, recovery annotation."""

    surfaces: Surfaces
    canaries: tuple[Canary, ...]
    recovery: tuple[str, ...] = ()
    note: str = ""
    injections: tuple[Injection, ...] = ()


@runtime_checkable
class Operator(Protocol):
    """A named, registered perturbation of one family."""

    id: str
    family: str

    def applicable(self, task: Task) -> bool:
        """Whether the task has what this operator edits."""

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        """Return the edit, or None when this draw found nothing to edit."""


REGISTRY: dict[str, list[Operator]] = {f: [] for f in (*FAMILIES, *INSERTED)}
#: Families whose operators act on facts: a task without facts gets none.
FACT_FAMILIES: frozenset[str] = frozenset(
    f for f in FAMILIES if family_parts(f)[0] != "tool") | {"inserted-distractor-turn"}


def known_families() -> tuple[str, ...]:
    """Every name :func:`make_variant` accepts: clean, the 12 families, inserted objects."""
    return (CLEAN, *FAMILIES, *INSERTED)


def register(op: Operator) -> Operator:
    """Add an operator to its family's catalog (ids are unique per family)."""
    if op.family not in REGISTRY:
        raise ValueError(f"operator {op.id!r}: unknown family {op.family!r}")
    ops = REGISTRY[op.family]
    for i, o in enumerate(ops):
        if o.id == op.id:
            same = (type(o).__module__, type(o).__qualname__) == (type(op).__module__, type(op).__qualname__)
            if not same:
                raise ValueError(f"operator {op.id!r} is already registered for {op.family} "
                                 f"by {type(o).__module__}.{type(o).__qualname__}; choose another id")
            ops[i] = op  # the same operator registered again (a module imported twice): keep one
            return op
    ops.append(op)
    return op


def operators(family: str) -> list[Operator]:
    """The catalog of one family."""
    _load_builtin()
    return list(REGISTRY[family])


def clean_variant(task: Task) -> Variant:
    """The unperturbed instance."""
    return Variant(task=task.key, family=CLEAN, operator="none", seed=0, surfaces=task.surfaces)


def surface_diff(task: Task, target: str, new: Surfaces) -> str:
    """Unified diff of one surface, clean -> perturbed."""
    name = SURFACE_FILES[target]
    return "".join(difflib.unified_diff(
        task.surfaces.render(target).splitlines(keepends=True),
        new.render(target).splitlines(keepends=True),
        fromfile=f"a/{task.key}/{name}", tofile=f"b/{task.key}/{name}",
    ))


def check_variant(task: Task, variant: Variant, oracle_check: bool = True) -> list[str]:
    """Every breached validity rule of DESIGN.md section 2 (empty when valid)."""
    problems = []
    target = variant.target
    changed = [t for t in TARGETS if task.surfaces.render(t) != variant.surfaces.render(t)]
    if variant.injections:
        if changed:
            problems.append(f"rule 1: an injection must leave every surface unchanged, found {changed}")
        known = set(task.tools)
        problems += [f"rule 1: injection into {i.tool!r}, which the task does not expose"
                     for i in variant.injections if i.tool not in known]
    elif changed != [target]:
        problems.append(f"rule 1: expected only the {target} surface to differ, found {changed or 'none'}")
    for fid in variant.recovery:
        if fid not in {f.id for f in task.facts}:
            problems.append(f"rule 4: recovery names unknown fact {fid!r}")
    if not variant.canaries:
        problems.append("canaries: the variant records none (every variant needs at least one)")
    if oracle_check and not problems:
        problems += _oracle_problems(task, variant)
    return problems


_CLEAN_GOLD: dict[str, list[dict[str, object]]] = {}


def _clean_gold(task: Task) -> list[dict[str, object]]:
    """The oracle's trajectory on the clean task, run once per task content (keyed by its digest)."""
    from ..agents.reference import OracleAgent
    from ..runner import run_episode_sync

    key = task.digest()
    if key not in _CLEAN_GOLD:
        if len(_CLEAN_GOLD) > 512:
            _CLEAN_GOLD.clear()
        _CLEAN_GOLD[key] = run_episode_sync(task, clean_variant(task), OracleAgent(), run_id="validity",
                                            seed=0).trajectory
    return _CLEAN_GOLD[key]


def _oracle_problems(task: Task, variant: Variant) -> list[str]:
    from ..agents.reference import OracleAgent
    from ..runner import run_episode_sync

    rec = run_episode_sync(task, variant, OracleAgent(), run_id="validity", seed=variant.seed)
    if rec.error:
        return [f"rule 4: the oracle could not run: {rec.error}"]
    if rec.reward != 1.0:
        failed = [c for c, ok in rec.trajectory[-1].get("checks", []) if not ok]
        return [f"rule 4: the oracle with recovery scored {rec.reward}: {'; '.join(failed)[:300]}"]
    clean = _clean_gold(task)
    if _actions(rec.trajectory) != _actions(clean):
        return ["rule 3: the gold actions differ from the clean task's: the goal changed"]
    gold = "\n".join(_action_texts(clean))
    stale = [c.text for c in variant.canaries if c.kind not in ("omitted", "inverted") and c.text in gold]
    if stale:
        return [f"canaries: {', '.join(map(repr, stale))} already appear in the clean gold actions"]
    return []


def _action_texts(trajectory: list[dict[str, object]]) -> list[str]:
    out = []
    for e in trajectory:
        if e.get("role") == "assistant" and e.get("tool") != "ask_user":
            out.append(str(e.get("tool", "")) + " " + json.dumps(e.get("args"), ensure_ascii=False)
                       if "tool" in e else str(e.get("content", "")))
    return out


def _actions(trajectory: list[dict[str, object]]) -> list[tuple[str, str]]:
    return [(str(e["tool"]), repr(e.get("args"))) for e in trajectory
            if e.get("role") == "assistant" and "tool" in e and e["tool"] != "ask_user"]


def make_variant(task: Task, family: str, seed: int, *, validate: bool = True) -> Variant:
    """Deterministic variant of ``task`` for ``family`` and ``seed``."""
    if family == CLEAN:
        return clean_variant(task)
    if family not in REGISTRY:
        raise ValueError(f"unknown family {family!r}; expected one of {', '.join(known_families())}")
    if family in FACT_FAMILIES and not task.facts:
        raise VariantSkipped(
            f"{task.key} [{family}]: the task declares no facts, and {family} operators act on facts. "
            f"Fix: add [[facts]] tables (id, value, surfaces, ...) to {task.path / 'task.toml'}")
    ops = [op for op in operators(family) if op.applicable(task)]
    if not ops:
        raise VariantSkipped(f"{task.key} [{family}]: no operator applies "
                             f"(catalog: {', '.join(o.id for o in operators(family)) or 'empty'}); "
                             "the task lacks what they edit (see each operator's docstring)")
    reasons = []
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(f"{task.key}|{family}|{seed + attempt}")
        op = rng.choice(ops)
        edit = op.apply(task, rng)
        if edit is None:
            reasons.append(f"{op.id}: nothing to edit")
            continue
        v = Variant(task=task.key, family=family, operator=op.id, seed=seed + attempt,
                    surfaces=edit.surfaces, canaries=edit.canaries, recovery=edit.recovery,
                    note=edit.note, injections=edit.injections)
        v = replace(v, diff=surface_diff(task, family_parts(family)[0], edit.surfaces))
        problems = check_variant(task, v, oracle_check=validate)
        if not problems:
            return v
        reasons.append(f"{op.id} (seed {seed + attempt}): {'; '.join(problems)}")
    raise VariantSkipped(f"{task.key} [{family}]: no valid variant after {MAX_ATTEMPTS} attempts: "
                         + " | ".join(reasons))


_LOADED: list[bool] = []


def _load_builtin() -> None:
    """Import the built-in operator modules once (they register on import)."""
    if not _LOADED:
        _LOADED.append(True)
        from . import context_ops, inserted_ops, procedure_ops, tool_ops, user_ops  # noqa: F401

