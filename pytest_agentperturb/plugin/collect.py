"""Collection: a suite becomes tasks, a task becomes one item per (family, agent).

Node ids read ``suites/workflows::reschedule-standup::tool-missing[reference/literal]``
for a folder suite and ``agentdojo:banking::banking-ut00::clean[...]`` for a
named one; with ``--agentperturb-repeats K`` (K >= 2) each item becomes K
adjacent items ``...[reference/literal-r0]`` to ``...-r<K-1>]`` (K = 1 keeps
the ids without a suffix).  Each item carries markers for its target and type, so
``-k "tool and missing"`` and ``-m "tool and missing"`` both select it.  A
malformed task (or suite), or a second task with an id already collected,
becomes one :class:`InvalidTask` item whose setup fails with the loader's
message (a pytest ERROR): the session goes on with every other task, which a
collection error would stop.

The collectors ask one interface, :class:`Plan` (which families, agents,
seeds and repeats a task's items get; which task keys are taken), and the
items another, :class:`ItemRunner` (run, check, reproduce); the session
hands both to the suite nodes it makes, and each node passes them to its
children, so this module does not import the session.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest

from ..model.errors import TaskFormatError
from ..model.options import OPTIONS, Settings, option
from ..model.ownership import error_text
from ..model.interfaces import SuiteAdapter
from ..model.task import TaskSlot
from ..model.records import EpisodeRecord, Variant
from ..model.redact import mask_url, redact_text, secrets
from ..model.task import CLEAN, FAMILIES, INSERTED, Task, family_parts


class Plan(Protocol):
    """What the collectors ask: which items a task becomes (the session answers)."""

    seed: int
    #: seed of the variants (the session seed unless ``--agentperturb-variant-seed`` pins it)
    variant_seed: int
    #: episodes per (task, family, agent)
    repeats: int

    def families_for(self, adapter: SuiteAdapter, task: Task) -> tuple[str, ...]:
        """Families to collect for ``task``, one of the tasks of ``adapter``."""

    def task_keywords(self, task: Task) -> tuple[str, ...]:
        """Markers every item of ``task`` gets (e.g. ``image``)."""

    def runner_names(self) -> tuple[str, ...]:
        """Agent names, in id order."""

    def claim_task(self, key: str, nodeid: str) -> str | None:
        """Remember that ``nodeid`` holds task ``key``; the node id of an earlier holder, if any."""

    def task_invalid(self, nodeid: str, message: str) -> None:
        """Remember a task (or suite) that could not be loaded."""


class ItemRunner(Protocol):
    """What an item asks to run (:class:`~.running.Runner`)."""

    def run_item(self, item: PerturbItem) -> None:
        """Run (or reuse) the item's episode and set ``item.record``."""

    def check_item(self, item: PerturbItem) -> None:
        """Raise :class:`EpisodeFailed` when strict mode fails the item."""

    def reproduce(self, item: PerturbItem) -> str:
        """The reproduce line of an item."""


def item_seed(session_seed: int, task_key: str, family: str) -> int:
    """Per-item seed: derived from the session seed and the item, not the model.

    Every model therefore meets the same variant, which is what makes
    clean/perturbed pairs comparable across models.
    """
    h = hashlib.sha256(f"{session_seed}|{task_key}|{family}".encode()).hexdigest()
    return int(h[:8], 16) % 2**31


def episode_seed(session_seed: int, task_key: str, family: str, repeat: int) -> int:
    """Seed of one repeated episode (``ctx.seed``; passed to providers that accept a seed).

    Repeat 0 keeps :func:`item_seed` of the session seed, so a run without
    repeats sees the seeds it always did; repeat r >= 1 hashes that seed
    with r.  Like the item seed it does not depend on the model; unlike the
    variant it changes with every repeat.
    """
    base = item_seed(session_seed, task_key, family)
    if repeat == 0:
        return base
    h = hashlib.sha256(f"{base}|repeat|{repeat}".encode()).hexdigest()
    return int(h[:8], 16) % 2**31


def repeat_suffix(repeat: int, repeats: int) -> str:
    """``-r<repeat>`` inside the item id when there are several repeats, else nothing."""
    return f"-r{repeat}" if repeats > 1 else ""


def _task_collectors(parent: _SuiteNode) -> Iterator[TaskCollector | InvalidTask]:
    adapter, plan, runner = parent.adapter, parent.plan, parent.runner
    try:
        entries = list(adapter.tasks())
    except Exception as exc:  # a malformed suite: an error of this suite, not of the session
        yield InvalidTask.from_parent(parent, name="invalid-suite", message=load_error(exc, "suite"), plan=plan)
        return
    for entry in entries:
        if isinstance(entry, TaskSlot):
            name, load, path = entry.name, entry.load, entry.path
        else:
            name, path = entry.id, entry.path
            load = (lambda t: lambda: t)(entry)
        yield TaskCollector.from_parent(parent, name=name, path=path or parent.path, load=load, adapter=adapter,
                                        plan=plan, runner=runner)


class _SuiteNode(pytest.Collector):
    """A collector whose children are the tasks of one suite adapter."""

    def __init__(self, *, adapter: SuiteAdapter, plan: Plan, runner: ItemRunner, **kw: Any) -> None:
        super().__init__(**kw)
        self.adapter = adapter
        self.plan, self.runner = plan, runner

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        return _task_collectors(self)


class SuiteDirectory(_SuiteNode, pytest.Directory):
    """A folder that a suite adapter recognised."""


class NamedSuite(_SuiteNode):
    """A suite named with ``--agentperturb-suite`` (not a folder); a child of the session."""


class TaskCollector(pytest.Collector):
    """One task; yields one :class:`PerturbItem` per (family, agent)."""

    def __init__(self, *, load: Callable[[], Task], adapter: SuiteAdapter, plan: Plan, runner: ItemRunner,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.load = load
        self.adapter = adapter
        self.plan, self.runner = plan, runner
        self.task: Task | None = None  # once collected

    def collect(self) -> Iterator[pytest.Item]:
        plan = self.plan
        try:
            task = self.load()
        except Exception as exc:  # TaskFormatError, or a bug in an adapter's loader: this task only
            yield InvalidTask.from_parent(self, name="invalid-task", message=load_error(exc, "task"), plan=plan)
            return
        other = plan.claim_task(task.key, self.nodeid)
        if other is not None:
            where = task.path / "task.toml" if task.path is not None else self.nodeid
            err = TaskFormatError(where, "id", f"a task id unique within suite {task.suite!r}",
                                  f"{task.id!r}, already the id of {other}",
                                  "rename one of the two tasks (both would write the same store rows)")
            yield InvalidTask.from_parent(self, name="invalid-task", message=load_error(err, "task"), plan=plan)
            return
        self.task = task
        for family in plan.families_for(self.adapter, task):
            for model in plan.runner_names():
                for r in range(plan.repeats):  # repeats adjacent: the batcher prefetches them together
                    yield self.item(family, model, r)

    def item(self, family: str, model: str, repeat: int) -> PerturbItem:
        """The item of one (family, agent, repeat) of this collector's task, with its markers.

        Also what :mod:`.subsets` asks for a clean partner that ``--agentperturb-families`` left out.
        """
        plan, task = self.plan, self.task
        assert task is not None, "collected first"
        item = PerturbItem.from_parent(self, name=f"{family}[{model}{repeat_suffix(repeat, plan.repeats)}]",
                                       task=task, family=family, model=model, repeat=repeat, plan=plan,
                                       runner=self.runner)
        for kw in plan.task_keywords(task):
            item.add_marker(kw)
        if family == CLEAN:
            item.add_marker("clean")
        else:
            target, typ = family_parts(family)
            item.add_marker(target)
            item.add_marker(typ)
        return item


def load_error(exc: BaseException, what: str) -> str:
    """The message of a task (suite) that could not be loaded."""
    if isinstance(exc, TaskFormatError):
        return f"invalid {what}: {exc}"
    return f"{what} not loaded: {type(exc).__name__}: {exc}"


class InvalidTask(pytest.Item):
    """A task or suite that could not be loaded: an ERROR at setup, with the loader's message.

    It matches every family, type, target and agent word for ``-k`` and
    carries every family marker for ``-m``, so a selection that would have
    run the task still shows why it did not.
    """

    def __init__(self, *, message: str, plan: Plan, **kw: Any) -> None:
        super().__init__(**kw)
        self.message = message
        words = {CLEAN, "invalid", *plan.runner_names()}
        markers = {CLEAN}
        for family in (*FAMILIES, *INSERTED):
            words.update((family, *family_parts(family)))
            markers.update(family_parts(family)[1:] if family in INSERTED else family_parts(family))
        self.extra_keyword_matches.update(words)
        for name in sorted(markers):
            self.add_marker(name)
        plan.task_invalid(self.nodeid, message)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name

    def setup(self) -> None:
        """Fail by message (``pytrace=False``): the harness's traceback says nothing about the task."""
        pytest.fail(self.message, pytrace=False)

    def runtest(self) -> None:  # pragma: no cover - setup always fails
        pytest.fail(self.message, pytrace=False)


class EpisodeFailed(Exception):
    """Raised in strict mode, or for gate-level failures of one item."""


#: Node id of the gate's item: ``pytest ... --deselect agentperturb::gate`` leaves it out on purpose.
GATE_NODEID = "agentperturb::gate"


class GateJudge(Protocol):
    """What the gate's item asks (:class:`~.finish.Finish`): the verdict over the episodes run before it."""

    def gate_lines(self) -> tuple[bool, list[str]]:
        """(failed, the verdict's lines) once every episode of the session has run."""


class GateFailed(Exception):
    """The gate's verdict: one breach line per breached (or unevaluable) threshold."""


def gate_failure(lines: Sequence[str]) -> str:
    """The gate item's failure: a count of the breaches, then every line of the verdict, indented."""
    n = sum(1 for ln in lines if "breached" in ln or "not evaluated" in ln)
    return (f"{n} gate threshold{'s' if n != 1 else ''} breached or not evaluated\n"
            + "\n".join(f"  {ln}" for ln in lines))


class GateItem(pytest.Item):
    """The gate as a test: the session's last item, collected when a threshold is set.

    It is appended after ``-k`` and ``-m`` have deselected what they do, so
    no selection leaves it out by accident (``--deselect agentperturb::gate``
    does, on purpose); it runs after every episode and fails with the breach
    lines, so JUnit, pytest-html and pytest's last line all carry the gate's
    verdict.  Under xdist the controller reports it instead (no worker can
    see every episode): :meth:`~.finish.Finish.pytest_sessionfinish`.
    """

    is_gate = True

    def __init__(self, *, judge: GateJudge, **kw: Any) -> None:
        super().__init__(**kw)
        self.judge = judge

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, GATE_NODEID

    def runtest(self) -> None:
        failed, lines = self.judge.gate_lines()
        if failed:
            raise GateFailed(gate_failure(lines))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, GateFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class PerturbItem(pytest.Item):
    """One episode: a task, a family (or clean), an agent and a repeat index.

    ``seed`` is the item's seed (it picks the variant, the same for every
    repeat and every model); ``episode_seed`` is the seed of this repeat's
    episode.
    """

    def __init__(self, *, task: Task, family: str, model: str, plan: Plan, runner: ItemRunner, repeat: int = 0,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.runner = runner
        self.repeats = plan.repeats
        self.task = task
        self.family = family
        self.model = model
        self.repeat = repeat
        self.record: EpisodeRecord | None = None
        self.reused = False
        self.variant: Variant | None = None
        self.skip_reason = ""
        self.error_message = ""  # the text of the episode's error, as the setup raised it
        self.digest = ""
        self.seed = item_seed(plan.variant_seed, task.key, family)
        self.episode_seed = episode_seed(plan.seed, task.key, family, repeat)

    def reportinfo(self) -> tuple[Path, int, str]:
        suffix = repeat_suffix(self.repeat, self.repeats)
        return self.path, 0, f"{self.task.key}[{self.family}-{self.model}{suffix}]"

    def setup(self) -> None:
        """Run (or reuse) the episode; an episode's error is a pytest ERROR that says whose it is.

        It is reported by message only (``pytrace=False``): the harness's own
        traceback says nothing about a provider failure, and pytest need not
        parse source to format one.  An agent's error shows the last frames
        of the user's own code (:func:`~..model.ownership.error_text`); its
        full traceback is in the store and on the task page.
        """
        self.runner.run_item(self)
        if self.record is not None and self.record.error:
            self.error_message = f"{error_text(self.record.error, self.record.trajectory)}\n{self.reproduce_line()}"
            pytest.fail(self.error_message, pytrace=False)

    def runtest(self) -> None:
        """The verdict is reported, not raised, unless strict mode asks for it."""
        self.runner.check_item(self)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, EpisodeFailed):
            return f"episode failed: {excinfo.value}\n{self.reproduce_line()}"
        return super().repr_failure(excinfo)

    def reproduce_line(self) -> str:
        return self.runner.reproduce(self)


def result_args(s: Settings) -> list[str]:
    """Flags (beyond the agent and the seed) whose values change an item's result, as set for this run.

    The endpoint and the model protocol (attempts, backoff, limits,
    timeouts, generator), explicitly chosen families, strict mode and the
    AgentDojo attacks chosen; not concurrency, connections or the cache folder.
    """
    out: list[str] = []
    for o in OPTIONS:
        if o.group == "llm" and o.dest not in ("concurrency", "connections", "cache"):
            value = getattr(s.llm, o.dest)
            if value != o.default:
                out += [o.flag, str(value)]
    if s.sources.get("families", "default") != "default":
        out += [option("families").flag, ",".join(s.families)]
    if s.strict:
        out.append(option("strict").flag)
    for attack in s.agentdojo_attacks:  # which AgentDojo attacks exist as families, and their payloads
        out += [option("agentdojo_attacks").flag, attack]
    return out


def plugin_args(args: Sequence[str]) -> list[str]:
    """The ``-p NAME`` options of a command line (``-p NAME``, ``-pNAME``) that load a plugin, in order.

    A reproduce line repeats them: a suite adapter a ``-p`` plugin provides
    (``pytest -p tests.kv_benchmark --agentperturb-suite kv``) is unknown
    without it.  ``-p no:NAME`` (a plugin blocked) is left out: it changes
    how pytest runs, not what an episode gives.  Options from ``addopts``
    apply again by themselves.
    """
    out: list[str] = []
    it = iter(args)
    for a in it:
        value = next(it, None) if a == "-p" else a[2:] if a.startswith("-p") and len(a) > 2 else None
        if value is not None and not value.startswith("no:"):
            out += ["-p", value]
    return out


def reproduce_line(nodeid: str, runner_args: list[str], seed: int, named: bool = False,
                   extra: Sequence[str] = (), repeat: int | None = None, plugins: Sequence[str] = ()) -> str:
    """A command that re-runs one item and, for a perturbed one, its clean partner (pytest rejects '::' after a
    folder, so -k): the pair the item's figures compare.

    ``runner_args`` are the flag and value that select the agent
    (``--agentperturb-model M`` or ``--agentperturb-agent SPEC``); ``extra``
    are the other flags that change the result (endpoint, protocol limits,
    families, strict mode, ``--agentperturb-repeats K``, a pinned variant
    seed); ``repeat`` adds ``-k ... and r<repeat>]`` to select one repeat;
    ``plugins`` are the ``-p NAME`` options of the run (:func:`plugin_args`).
    Every value is shell-quoted, so the line is safe to paste; no value
    carries a secret (a URL's credentials are masked, every secret the
    redactor knows is replaced by its name).
    """
    suite, task, name = nodeid.split("::")[:3]
    family = name.split("[", 1)[0]
    where = ["--agentperturb-suite", suite] if named else [suite]
    which = (f"{task} and clean" if family == CLEAN else f"{task} and ({family} or clean)") \
        + (f" and r{repeat}]" if repeat is not None else "")  # a perturbed item with its clean partner
    args = ["pytest", *plugins, "--agentperturb", *where, "-k", which, *runner_args, *extra,
            "--agentperturb-seed", str(seed)]
    known = secrets()
    return "reproduce: " + " ".join(shlex.quote(redact_text(mask_url(a), known)) for a in args)
