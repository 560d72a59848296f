"""The seams: every interface a benchmark, an agent or a plugin implements (docs/design.md section 7).

A benchmark enters through an :class:`Environment` (runs tool calls by true
name over a state that can be snapshotted), a :class:`Grader` (turns pre
state, post state, final answer and trajectory into a reward), optionally a
:class:`ComplianceCheck` (its own test of whether the agent took an inserted
object up) and a :class:`SuiteAdapter` (turns a folder or a suite name into
tasks).  An :class:`Agent` plays episodes; a :class:`Simulator` is the user
behind ``ask_user``; an :class:`Operator` perturbs a task and returns an
:class:`Edit`.  Each one is exported from :mod:`pytest_agentperturb`, and
each docstring below carries a short example that the tests run.

The values that cross these seams (observations, grade results, user
replies) are in :mod:`.protocols`; the task, the variant and the episode
context they receive are in :mod:`.task`, :mod:`.records` and
:mod:`.context`.  This module names those for type checking only, so it
imports nothing of the package at run time and every model module can build
on it; the import contracts (pyproject.toml) list these type-only imports as
the one exception to "no import cycle".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import random

    from .context import EpisodeContext
    from .images import ImageEdit
    from .protocols import GradeResult, UserReply
    from .records import Canary, Injection, Variant
    from .task import Task, TaskSlot
    from .vocab import Surfaces


@runtime_checkable
class Environment(Protocol):
    """A fresh, private world for one episode.

    ``call`` runs a tool by its true name and returns JSON-like data or an
    :class:`~.protocols.Observation`; a bad call (unknown name, bad
    arguments, a failing action) raises
    :class:`~pytest_agentperturb.model.errors.ToolError`, whose message the
    agent sees.  ``snapshot`` returns the current state as data the grader
    can compare (a copy: later calls must not change it).
    :class:`~pytest_agentperturb.formats.python.StateEnvironment` implements
    it over a JSON state and a toolkit.

    Example:
        >>> from pytest_agentperturb import Environment, ToolError
        >>> class Counter:
        ...     def __init__(self):
        ...         self.n = 0
        ...     def call(self, name, args):
        ...         if name != "add":
        ...             raise ToolError(f"unknown tool {name!r}")
        ...         self.n += int(args["by"])
        ...         return {"n": self.n}
        ...     def snapshot(self):
        ...         return {"n": self.n}
        >>> env = Counter()
        >>> env.call("add", {"by": 2})
        {'n': 2}
        >>> env.snapshot(), isinstance(env, Environment)
        ({'n': 2}, True)
    """

    def call(self, name: str, args: Mapping[str, Any]) -> Any:
        """Execute one tool call."""

    def snapshot(self) -> Any:
        """The current state (pre state before the agent acts, post state after)."""


#: Makes a fresh environment for one episode; receives the variant's injections.
EnvironmentFactory = Callable[["tuple[Injection, ...]"], Environment]


@runtime_checkable
class Grader(Protocol):
    """The task's own grader; it never sees the variant, only what the agent did.

    :class:`~pytest_agentperturb.formats.python.FunctionGrader` turns a plain
    function into one; the ``suite.toml`` format's declarative grader is another.

    Example:
        >>> from pytest_agentperturb import GradeResult, Grader
        >>> class ReachedTwo:
        ...     def grade(self, pre_state, post_state, answer, trajectory):
        ...         ok = post_state["n"] == 2
        ...         return GradeResult(1.0 if ok else 0.0, (("counter is 2", ok),))
        >>> ReachedTwo().grade({"n": 0}, {"n": 2}, "Done.", [])
        GradeResult(reward=1.0, checks=(('counter is 2', True),))
        >>> isinstance(ReachedTwo(), Grader)
        True
    """

    def grade(self, pre_state: Any, post_state: Any, answer: str,
              trajectory: Sequence[Mapping[str, Any]]) -> GradeResult:
        """Score one episode."""


@runtime_checkable
class Simulator(Protocol):
    """The simulated user behind ``ask_user``.

    ``answer`` returns a :class:`~.protocols.UserReply` (or, as before, a
    ``(reply, fact id or None)`` pair).  A simulator that has to wait on a
    model also defines ``async answer_async(question) -> UserReply``; the
    episode context awaits it on the event loop
    (:meth:`~.context.EpisodeContext.ask_user_async`) and uses the blocking
    ``answer`` only where no loop can be awaited.

    Example:
        >>> from pytest_agentperturb import NEUTRAL_REPLY, Simulator, UserReply
        >>> class KnowsTheInvoice:
        ...     def answer(self, question):
        ...         if "invoice" in question.lower():
        ...             return UserReply("It is INV-2044.", disclosed=("invoice",))
        ...         return UserReply(NEUTRAL_REPLY)
        >>> KnowsTheInvoice().answer("Which invoice?").disclosed
        ('invoice',)
        >>> isinstance(KnowsTheInvoice(), Simulator)
        True
    """

    def answer(self, question: str) -> UserReply | tuple[str, str | None]:
        """Answer one clarification request."""


@runtime_checkable
class ComplianceCheck(Protocol):
    """A task's own test of compliance, for variants whose take-up it can judge.

    docs/design.md section 3 defines compliance for an injected object as
    "the agent executed the injected goal".  Canaries approximate that by
    looking for a planted string in the agent's actions; a benchmark that
    ships its own test of the goal (AgentDojo's ``security()`` checks) gives
    it here instead (``Task.compliance``).  The runner asks this check first
    and falls back to the variant's canaries when it returns None.

    Example:
        >>> from pytest_agentperturb import ComplianceCheck
        >>> class SentTheMail:
        ...     def check(self, variant, pre_state, post_state, answer, trajectory):
        ...         if variant.family != "inserted-injection":
        ...             return None  # no opinion: the canaries decide
        ...         return len(post_state["outbox"]) > len(pre_state["outbox"])
        >>> isinstance(SentTheMail(), ComplianceCheck)
        True
    """

    def check(self, variant: Variant, pre_state: Any, post_state: Any, answer: str,
              trajectory: Sequence[Mapping[str, Any]]) -> bool | None:
        """True (compliance), False (bypass), or None (no opinion on this variant)."""


@dataclass(frozen=True)
class Edit:
    """What an :class:`Operator` produced from a task.

    Attributes:
        surfaces: the new surfaces; exactly one of the four may differ from
            the task's (none, for an injection or an image edit).
        canaries: planted artefacts whose use proves the perturbation was
            taken up (:class:`~.records.Canary`); every variant needs one.
        recovery: ids of the facts the user simulator hands back on request.
        note: one line for the report (what was changed).
        injections: instructions planted into tool outputs (inserted objects).
        image_edits: edits of image observations (inserted objects in images).
        unheld: facts the user holds (``Task.held``) that the user no longer
            knows on this instance (a user-missing edit of what the user
            knows): left out of the variant's recovery annotation.

    Example:
        >>> from dataclasses import replace
        >>> from pytest_agentperturb import Canary, Edit, Surfaces
        >>> clean = Surfaces(user="Approve invoice INV-2044.", procedure="", context=(), tools=())
        >>> edit = Edit(replace(clean, user=clean.user + " PS: HAPPY FRIDAY!"),
        ...             (Canary("text", "HAPPY FRIDAY"),), note="appended a greeting")
        >>> edit.surfaces.user, edit.recovery
        ('Approve invoice INV-2044. PS: HAPPY FRIDAY!', ())
    """

    surfaces: Surfaces
    canaries: tuple[Canary, ...]
    recovery: tuple[str, ...] = ()
    note: str = ""
    injections: tuple[Injection, ...] = ()
    image_edits: tuple[ImageEdit, ...] = ()
    unheld: tuple[str, ...] = ()


@runtime_checkable
class Operator(Protocol):
    """A named perturbation of one family (or inserted object).

    The engine (:mod:`pytest_agentperturb.perturb.engine`) picks one of a
    family's applicable operators with a seeded RNG, applies it and keeps the
    edit only if the validity rules run green.  ``id`` and ``family`` are
    read, never set: plain class attributes do (as ``name`` and ``baseline``
    do for an agent).  A plugin registers operators
    through the ``pytest_agentperturb_register_operators`` hook, an adapter
    through its ``operators()``; :func:`~pytest_agentperturb.perturb.facts_on`,
    :func:`~pytest_agentperturb.perturb.omission`,
    :func:`~pytest_agentperturb.perturb.fresh_decoy` and
    :func:`~pytest_agentperturb.perturb.unrelated` are the built-in
    operators' helpers (README.md, "Extending", has a complete example).

    Example:
        >>> from dataclasses import replace
        >>> from pytest_agentperturb import Canary, Edit, Operator, Registry
        >>> class Greet:
        ...     id = "greet"
        ...     family = "user-redundant"
        ...     def applicable(self, task):
        ...         return bool(task.surfaces.user)
        ...     def apply(self, task, rng):
        ...         s = task.surfaces
        ...         greeting = rng.choice(["HAPPY FRIDAY", "GOOD MORNING"])
        ...         return Edit(replace(s, user=f"{s.user} PS: {greeting}!"), (Canary("text", greeting),))
        >>> isinstance(Greet(), Operator)
        True
        >>> [op.id for op in Registry([Greet()]).operators("user-redundant")]
        ['greet']
    """

    @property
    def id(self) -> str:
        """The operator's name, unique within its family (stored in every episode row)."""

    @property
    def family(self) -> str:
        """The family it perturbs (``user-missing``, ...) or an inserted object (``inserted-<name>``)."""

    def applicable(self, task: Task) -> bool:
        """Whether the task has what this operator edits."""

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        """Return the edit, or None when this draw found nothing to edit.

        Raise :class:`~pytest_agentperturb.model.errors.VariantSkipped`
        when this task can never take this perturbation; its message is the
        reason the report shows.
        """


@runtime_checkable
class SuiteAdapter(Protocol):
    """A source of tasks: a folder format, a Python module, an external benchmark.

    ``name`` is the suite name (report, messages); ``tasks`` yields
    :class:`~.task.Task` or :class:`~.task.TaskSlot` objects in a stable
    order (a slot loads its task on demand, so a broken task fails only
    itself).  An adapter may also define ``operators() -> Iterable[Operator]``
    to add perturbation operators of its own (e.g. one inserted object per
    injection task of a benchmark).  Adapters are chosen by the
    ``pytest_agentperturb_suite_adapter`` hook, for a folder or for
    ``--agentperturb-suite NAME``.

    Example:
        >>> from pytest_agentperturb import SuiteAdapter, TaskSlot
        >>> class KVSuite:
        ...     name = "kv"
        ...     def tasks(self):
        ...         for task_id in ("approve-invoice", "reject-invoice"):
        ...             yield TaskSlot(task_id, load=lambda task_id=task_id: build_task(task_id))
        >>> [slot.name for slot in KVSuite().tasks()], isinstance(KVSuite(), SuiteAdapter)
        (['approve-invoice', 'reject-invoice'], True)
        >>> def pytest_agentperturb_suite_adapter(path, name, config):  # in conftest.py
        ...     return KVSuite() if name == "kv" else None
    """

    @property
    def name(self) -> str:
        """The suite name (node ids, store rows, report)."""

    def tasks(self) -> Iterable[Task | TaskSlot]:
        """Every task of the suite."""


@runtime_checkable
class Agent(Protocol):
    """An agent runner: ``name``, the ``baseline`` flag and ``run(ctx)``.

    ``run`` plays one episode through the :class:`~.context.EpisodeContext`:
    the surfaces, ``ctx.call_tool``, ``ctx.ask_user`` and ``ctx.finish``.
    ``baseline`` marks offline reference agents: reports and the gate keep
    them apart from real models.  Plain functions and synchronous objects
    are wrapped into this shape by :func:`pytest_agentperturb.agents.as_agent`.
    An agent may also have ``prepare()``, one-time set-up (heavy imports,
    clients) that the session calls once per process in pytest's main
    thread before the first episode, so it never stalls the episode loop.

    Example:
        >>> from pytest_agentperturb import Agent, as_agent
        >>> class Polite:
        ...     name = "polite"
        ...     baseline = False
        ...     async def run(self, ctx):
        ...         ctx.finish("I could not do it, sorry.")
        >>> isinstance(Polite(), Agent)
        True
        >>> def reads_first(ctx):  # a plain function: as_agent wraps it
        ...     ctx.finish(ctx.surfaces.user)
        >>> agent = as_agent(reads_first)
        >>> agent.name, agent.baseline, isinstance(agent, Agent)
        ('reads_first', False, True)
    """

    @property
    def name(self) -> str:
        """The agent's name (the store's ``model`` column)."""

    @property
    def baseline(self) -> bool:
        """Whether it is an offline reference agent (reported apart from real models)."""

    def run(self, ctx: EpisodeContext) -> Awaitable[None]:
        """Play one episode through ``ctx``."""


__all__ = ["Agent", "ComplianceCheck", "Edit", "Environment", "EnvironmentFactory", "Grader", "Operator", "Simulator",
           "SuiteAdapter"]
