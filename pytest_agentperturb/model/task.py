"""The task model: a task, and how suites deliver tasks (docs/design.md section 1b).

A task is data: the four input surfaces an agent sees, the facts the
solution needs, a gold solution written against those facts, a native
grader and a factory of fresh environments that run the tools by their true
names.  Where a task comes from (a ``suite.toml`` folder, a Python module,
an external benchmark) is the business of a
:class:`~.interfaces.SuiteAdapter` (:mod:`pytest_agentperturb.formats`);
everything downstream (perturbation engine, agents, runner, analysis) sees
only this model.

The vocabulary (:mod:`.vocab`) is re-exported here, and so are the seams a
task holds or is handed to (defined in :mod:`.interfaces`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the seams a task holds or receives; re-exported, where adapters and operators have always found them
from .authored import Authored
from .interfaces import ComplianceCheck, Edit, EnvironmentFactory, Grader, Operator, SuiteAdapter
from .vocab import (
    CLEAN,
    FACT_KINDS,
    FAMILIES,
    IMAGE_OBJECTS,
    INSERTED,
    INSERTED_TYPE,
    SURFACE_FILES,
    TARGETS,
    TYPES,
    Fact,
    Step,
    Surfaces,
    Turn,
    family_parts,
    fill,
    inserted_base,
    parse_families,
    select,
    sentences,
)


@dataclass(frozen=True)
class Task:
    """A clean agentic task (docs/design.md section 1b).

    Attributes:
        suite: name of the suite the task belongs to (node ids, store rows).
        id: task id, unique within the suite.
        title: one line for people.
        surfaces: what the agent is shown, clean.
        facts: the information the solution needs; what ``missing`` removes,
            ``incorrect`` corrupts and the user simulator hands back.
        solution: the gold tool calls, arguments written against facts.
        answer: the gold final answer (a template over facts).
        grader: the task's own grader (never perturbed).
        environment: factory of a fresh environment per episode; it receives
            the variant's injections (planted into tool outputs).
        tools: true names of the tools the environment runs.
        threshold: reward at or above which an episode is a success.
        initial_state: the environment's initial state as JSON-like data,
            where fact domains (``contacts[*].email``) are looked up.
        path: the folder the task was read from, if any.
        fingerprint: bytes that identify the grader, solution and environment
            (named parts); part of :meth:`digest`.
        notes: remarks an adapter wants shown in the report.
        compliance: the task's own compliance test, if it has one (used
            before the variant's canaries; see :class:`ComplianceCheck`).
        held: ids of facts the user holds from the start and gives when
            asked, on every instance, clean included (a benchmark whose user
            knows things the request leaves out, as tau2's scenarios do):
            every variant's recovery annotation includes them.
        user_prompt: the user model's prompt when the benchmark ships its
            own (``{{facts}}`` and ``{{neutral}}`` are filled as in
            ``prompts/simulator.md``); empty: that file.
        authored: edits written by hand for this task, per family, and the
            families declared not applicable (:mod:`.authored`); the engine
            tries them before any rule operator.
    """

    suite: str
    id: str
    title: str
    surfaces: Surfaces
    facts: tuple[Fact, ...]
    solution: tuple[Step, ...]
    answer: str
    grader: Grader
    environment: EnvironmentFactory
    tools: tuple[str, ...]
    threshold: float = 1.0
    initial_state: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None
    fingerprint: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    notes: tuple[str, ...] = ()
    compliance: ComplianceCheck | None = field(default=None, repr=False, compare=False)
    held: tuple[str, ...] = ()
    user_prompt: str = field(default="", repr=False)
    authored: Authored = field(default_factory=Authored, repr=False)

    @property
    def key(self) -> str:
        """``suite/task``: stable across checkouts, used for seeds and ids."""
        return f"{self.suite}/{self.id}"

    def fact(self, fact_id: str) -> Fact:
        """The fact called ``fact_id``."""
        for f in self.facts:
            if f.id == fact_id:
                return f
        raise KeyError(fact_id)

    def fact_values(self) -> dict[str, str]:
        """True value of every fact, by id."""
        return {f.id: f.value for f in self.facts}

    def domain_values(self, fact: Fact) -> list[str]:
        """The valid values of a fact's domain in the initial state (empty without a domain)."""
        return [str(v) for v in select(self.initial_state, fact.domain)] if fact.domain else []

    def digest(self) -> str:
        """SHA-256 over the surfaces and the fingerprint (cache and run keys); computed once."""
        if "_digest" not in self.__dict__:
            h = hashlib.sha256()
            for t in TARGETS:
                h.update(self.surfaces.render(t).encode())
            for name in sorted(self.fingerprint):
                h.update(name.encode() + b"\0" + self.fingerprint[name])
            if self.authored:
                h.update(b"authored\0" + self.authored.key().encode())
            self.__dict__["_digest"] = h.hexdigest()
        return str(self.__dict__["_digest"])


@dataclass(frozen=True)
class TaskSlot:
    """One task of a suite, loaded on demand.

    An adapter yields slots when loading can fail per task: ``load`` raises
    :class:`~pytest_agentperturb.model.errors.TaskFormatError` and only that
    task becomes a collection error.  ``name`` is the task's node name.
    """

    name: str
    load: Callable[[], Task]
    path: Path | None = None


__all__ = [
    "CLEAN", "FACT_KINDS", "FAMILIES", "IMAGE_OBJECTS", "INSERTED", "INSERTED_TYPE", "SURFACE_FILES", "TARGETS",
    "TYPES", "ComplianceCheck", "Edit", "EnvironmentFactory", "Fact", "Operator", "Step", "SuiteAdapter", "Surfaces",
    "Task", "TaskSlot",
    "Turn", "family_parts", "fill", "inserted_base", "parse_families", "select", "sentences",
]
