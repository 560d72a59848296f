"""A registry per session, variant construction and executable validity.

An operator edits exactly one surface of a task (the :class:`Operator`
protocol and its :class:`Edit` live with the other seams in
:mod:`pytest_agentperturb.model.interfaces`, so that adapters can ship
operators too; both are re-exported here).
:meth:`Engine.make_variant` picks an applicable operator for a family with a
seeded RNG, applies it, and keeps the result only if the rules of
docs/design.md section 2 *run* green:

1. exactly one surface differs; the other three render byte-identically
   (an injection or an image edit changes no surface: it is planted into
   one tool's outputs);
2. grader, gold solution and environment are untouched (a variant carries
   only surfaces; written-out variants are checked byte for byte);
3. the goal is preserved and 4. a successful path remains: the oracle,
   asking the user simulator for every fact in the recovery annotation,
   scores 1.0 and takes the same actions as on the clean task.

Every variant must also carry canaries, and none of them may already
appear in what the clean oracle does (else compliance would be vacuous).

A task's authored edits (:mod:`.authored`, written by hand as data) are its
catalog for a family when it has any; a family it declares not applicable
is skipped with the author's reason; only otherwise do the rule operators
of the registry apply.

The engine does not run episodes itself: it is given an *oracle runner*
(``(task, variant) -> OracleResult``), which the run layer provides.  A
failing candidate is regenerated with the next seed up to
:data:`MAX_ATTEMPTS` times, then :class:`VariantSkipped` names the reasons.
An operator that cannot handle a task (it raises) makes a skip with the
reason, never a crash: tasks come from adapters nobody here designed.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..model.errors import VariantSkipped
from ..model.records import Variant
from ..model.task import CLEAN, FAMILIES, INSERTED, SURFACE_FILES, TARGETS, Surfaces, Task, family_parts, inserted_base
from ..model.interfaces import Edit as Edit  # re-exported: operators import it from here
from ..model.interfaces import Operator as Operator
from ..model.trajectory import Trajectory, actions, actions_text
from .authored import authored_operators

MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class OracleResult:
    """What the oracle did on one instance: its reward (None on error) and trajectory."""

    reward: float | None
    trajectory: Trajectory = field(default_factory=list)
    error: str = ""


#: Plays the reference oracle on ``(task, variant)``; supplied by the run layer.
OracleRunner = Callable[[Task, Variant], OracleResult]

#: Families whose operators act on facts: a task without facts gets none.
FACT_FAMILIES: frozenset[str] = frozenset(
    f for f in FAMILIES if family_parts(f)[0] != "tool") | {"inserted-distractor-turn"}


class Registry:
    """The operator catalog of one session: family -> operators, ids unique per family.

    Built-in operators come from :func:`~pytest_agentperturb.perturb.builtin_registry`;
    plugins add theirs through the ``pytest_agentperturb_register_operators``
    hook, adapters through their ``operators()``.
    """

    def __init__(self, operators: Iterable[Operator] = ()) -> None:
        self._ops: dict[str, list[Operator]] = {f: [] for f in (*FAMILIES, *INSERTED)}
        for op in operators:
            self.register(op)

    def register(self, op: Operator) -> Operator:
        """Add an operator to its family's catalog.

        An inserted object may extend a built-in one as ``<id>-<name>``.
        Registering the same operator class under the same id again keeps one.

        Raises:
            ValueError: for an unknown family or an id taken by another operator.
        """
        if op.family not in self._ops:
            if inserted_base(op.family) is None:
                raise ValueError(f"operator {op.id!r}: unknown family {op.family!r}; expected one of "
                                 f"{', '.join(self._ops)} or an inserted object <id>-<name>")
            self._ops[op.family] = []
        ops = self._ops[op.family]
        for i, o in enumerate(ops):
            if o.id == op.id:
                same = (type(o).__module__, type(o).__qualname__) == (type(op).__module__, type(op).__qualname__)
                if not same:
                    raise ValueError(f"operator {op.id!r} is already registered for {op.family} "
                                     f"by {type(o).__module__}.{type(o).__qualname__}; choose another id")
                ops[i] = op
                return op
        ops.append(op)
        return op

    def operators(self, family: str) -> list[Operator]:
        """The catalog of one family (empty for an unknown one)."""
        return list(self._ops.get(family, ()))

    def families(self) -> tuple[str, ...]:
        """Every name :meth:`Engine.make_variant` accepts: clean, the 12 families, inserted objects."""
        return (CLEAN, *self._ops)

    def __contains__(self, family: object) -> bool:
        return family == CLEAN or family in self._ops


def clean_variant(task: Task) -> Variant:
    """The unperturbed instance (its recovery annotation: the facts the user holds, ``Task.held``)."""
    return Variant(task=task.key, family=CLEAN, operator="none", seed=0, surfaces=task.surfaces, recovery=task.held)


def surface_diff(task: Task, target: str, new: Surfaces) -> str:
    """Unified diff of one surface, clean -> perturbed."""
    name = SURFACE_FILES[target]
    return "".join(difflib.unified_diff(
        task.surfaces.render(target).splitlines(keepends=True),
        new.render(target).splitlines(keepends=True),
        fromfile=f"a/{task.key}/{name}", tofile=f"b/{task.key}/{name}",
    ))


def structural_problems(task: Task, variant: Variant) -> list[str]:
    """Breaches of the rules that need no episode: one surface, known facts, canaries."""
    problems = []
    target = variant.target
    changed = [t for t in TARGETS if task.surfaces.render(t) != variant.surfaces.render(t)]
    # what the user holds is part of the user surface: a fact it no longer gives back changes that surface
    if target == "user" and not changed and set(task.held) - set(variant.recovery):
        changed = ["user"]
    if variant.injections or variant.image_edits:
        if changed:
            problems.append("rule 1: an injection or image edit must leave every surface unchanged, "
                            f"found {changed}")
        known = set(task.tools)
        problems += [f"rule 1: injection into {i.tool!r}, which the task does not expose"
                     for i in variant.injections if i.tool not in known]
        problems += [f"rule 1: image edit of {e.tool!r} results, which the task does not expose"
                     for e in variant.image_edits if e.tool not in known]
    elif changed != [target]:
        problems.append(f"rule 1: expected only the {target} surface to differ, found {changed or 'none'}")
    elif variant.surfaces.render(target).strip() in ("", "[]"):
        problems.append(f"rule 1: the edit leaves the {target} surface empty: nothing is left to perturb")
    for fid in variant.recovery:
        if fid not in {f.id for f in task.facts}:
            problems.append(f"rule 4: recovery names unknown fact {fid!r}")
    if not variant.canaries:
        problems.append("canaries: the variant records none (every variant needs at least one)")
    return problems


def _gold_actions(trajectory: Trajectory, variant: Variant | None = None) -> list[tuple[str, str]]:
    """The oracle's :func:`~..model.trajectory.actions`, each compared by its arguments' ``repr`` (key order too).

    With a variant, argument values its injections rename (:attr:`~..model.records.Injection.renames`)
    are put back to their clean values first.
    """
    out = [(a.tool, repr(a.args)) for a in actions(trajectory)]
    for inj in variant.injections if variant is not None else ():
        for clean, injected in inj.renames:
            out = [(t, r.replace(repr(injected), repr(clean))) for t, r in out]
    return out


def variant_of(task: Task, family: str, operator: str, seed: int, edit: Edit) -> Variant:
    """The (unchecked) variant an operator's edit makes of ``task``; the recovery annotation adds ``task.held``
    (less the facts the edit says the user no longer knows, ``Edit.unheld``)."""
    v = Variant(task=task.key, family=family, operator=operator, seed=seed,
                surfaces=edit.surfaces.share_renders(task.surfaces), canaries=edit.canaries,
                recovery=tuple(dict.fromkeys((*edit.recovery, *(h for h in task.held if h not in edit.unheld)))),
                note=edit.note, injections=edit.injections, image_edits=edit.image_edits)
    return replace(v, diff=surface_diff(task, family_parts(family)[0], edit.surfaces))


class Engine:
    """Makes and checks variants with one registry and one oracle runner.

    The clean oracle's trajectory is computed once per task content (keyed
    by its digest) and kept for this engine's lifetime.
    """

    def __init__(self, registry: Registry, oracle: OracleRunner | None = None, *, authored: bool = True) -> None:
        self.registry = registry
        self.oracle = oracle
        self.authored = authored  # False: the rule operators only, a task's authored edits ignored
        self._clean_gold: dict[str, Trajectory] = {}

    def check_variant(self, task: Task, variant: Variant, oracle_check: bool = True) -> list[str]:
        """Every breached validity rule of docs/design.md section 2 (empty when valid)."""
        problems = structural_problems(task, variant)
        if oracle_check and not problems:
            problems += self._oracle_problems(task, variant)
        return problems

    def _run_oracle(self, task: Task, variant: Variant) -> OracleResult:
        if self.oracle is None:
            raise ValueError("this engine has no oracle runner: pass one, or validate=False")
        return self.oracle(task, variant)

    def clean_gold(self, task: Task) -> Trajectory:
        """The oracle's trajectory on the clean task."""
        key = task.digest()
        if key not in self._clean_gold:
            self._clean_gold[key] = self._run_oracle(task, clean_variant(task)).trajectory
        return self._clean_gold[key]

    def _oracle_problems(self, task: Task, variant: Variant) -> list[str]:
        res = self._run_oracle(task, variant)
        if res.error:
            return [f"rule 4: the oracle could not run: {res.error}"]
        if res.reward != 1.0:
            last: Mapping[str, Any] = res.trajectory[-1] if res.trajectory else {}
            failed = [c for c, ok in last.get("checks", []) if not ok]
            return [f"rule 4: the oracle with recovery scored {res.reward}: {'; '.join(failed)[:300]}"]
        clean = self.clean_gold(task)
        if _gold_actions(res.trajectory, variant) != _gold_actions(clean):
            return ["rule 3: the gold actions differ from the clean task's: the goal changed"]
        gold = actions_text(clean)
        stale = [c.text for c in variant.canaries if c.kind not in ("omitted", "inverted") and c.text in gold]
        if stale:
            return [f"canaries: {', '.join(map(repr, stale))} already appear in the clean gold actions"]
        return []

    def make_variant(self, task: Task, family: str, seed: int, *, validate: bool = True) -> Variant:
        """Deterministic variant of ``task`` for ``family`` and ``seed``.

        Raises:
            VariantSkipped: when no valid variant exists (the message lists why).
            ValueError: for a family this registry does not know.
        """
        if family == CLEAN:
            return clean_variant(task)
        if family not in self.registry:
            raise ValueError(f"unknown family {family!r}; expected one of {', '.join(self.registry.families())}")
        if self.authored and family in task.authored.not_applicable:
            raise VariantSkipped(f"{task.key} [{family}]: not applicable: {task.authored.not_applicable[family]}")
        authored: list[Operator] = list(authored_operators(task, family)) if self.authored else []
        if family in FACT_FAMILIES and not task.facts and not authored:
            where = f"{task.path / 'task.toml'}" if task.path is not None else "the task's adapter"
            raise VariantSkipped(
                f"{task.key} [{family}]: the task declares no facts, and {family} operators act on facts. "
                f"Fix: declare facts (id, value, surfaces, ...) in {where}")
        catalog = authored or self.registry.operators(family)  # authored edits first, the rules as fallback
        ops, reasons = [], []
        for op in catalog:
            try:
                if op.applicable(task):
                    ops.append(op)
            except Exception as exc:  # an adapter's task shape the operator does not handle
                reasons.append(f"{op.id}: cannot read this task ({type(exc).__name__}: {exc})"[:300])
        target, typ = family_parts(family)
        if (not ops and not reasons and typ in ("missing", "incorrect") and target != "tool"
                and not any(target in f.surfaces for f in task.facts)):
            raise VariantSkipped(f"{task.key} [{family}]: no fact is stated on the {target} surface, and "
                                 f"the {family} operators ({', '.join(o.id for o in catalog)}) remove or "
                                 "corrupt stated facts")
        if not ops:
            raise VariantSkipped(f"{task.key} [{family}]: no operator applies "
                                 f"(catalog: {', '.join(o.id for o in catalog) or 'empty'}); "
                                 "the task lacks what they edit (see each operator's docstring)"
                                 + (f": {' | '.join(reasons)}" if reasons else ""))
        attempts = 0
        for attempt in range(MAX_ATTEMPTS):
            if not ops:
                break
            attempts += 1
            rng = random.Random(f"{task.key}|{family}|{seed + attempt}")
            first = rng.choice(ops)
            edit = None
            for op in [first, *(o for o in ops if o is not first)]:  # the draw first, then the others in order
                try:
                    edit = op.apply(task, rng)
                except VariantSkipped as exc:  # the operator declines this task, with its reason: no retry
                    reasons.append(f"{op.id}: {exc}")
                    ops.remove(op)
                    continue
                except Exception as exc:
                    reasons.append(f"{op.id} (seed {seed + attempt}): failed on this task "
                                   f"({type(exc).__name__}: {exc})"[:300])
                    ops.remove(op)  # it would fail again: later attempts draw among the others
                    continue
                if edit is not None:
                    break
                reasons.append(f"{op.id} (seed {seed + attempt}): nothing to edit")
            if edit is None:
                continue
            v = variant_of(task, family, op.id, seed + attempt, edit)
            problems = self.check_variant(task, v, oracle_check=validate)
            if not problems:
                return v
            reasons.append(f"{op.id} (seed {seed + attempt}): {'; '.join(problems)}")
        raise VariantSkipped(f"{task.key} [{family}]: no valid variant after {attempts} attempts: "
                             + " | ".join(reasons))
