"""Collection: a suite folder becomes tasks, a task becomes one item per (family, model).

Node ids read ``suites/workflows::reschedule-standup::tool-missing[reference/literal]``.
Each item carries markers for its target and type, so ``-k "tool and missing"``
and ``-m "tool and missing"`` both select it.  A malformed task becomes a
collection error for that task only; the rest of the suite still runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .errors import TaskFormatError
from .records import EpisodeRecord, Variant
from .task import CLEAN, Task, family_parts, load_suite, load_task

if TYPE_CHECKING:
    from .session import AgentPerturbSession


def item_seed(session_seed: int, task_key: str, family: str) -> int:
    """Per-item seed: derived from the session seed and the item, not the model.

    Every model therefore meets the same variant, which is what makes
    clean/perturbed pairs comparable across models.
    """
    h = hashlib.sha256(f"{session_seed}|{task_key}|{family}".encode()).hexdigest()
    return int(h[:8], 16) % 2**31


class SuiteDirectory(pytest.Directory):
    """A folder holding ``suite.toml``."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        suite = load_suite(self.path)
        for d in suite.task_dirs:
            yield TaskCollector.from_parent(self, name=d.name, path=d, suite_name=suite.name,
                                            threshold=suite.threshold)


class TaskCollector(pytest.Collector):
    """One task folder; yields one :class:`PerturbItem` per (family, model)."""

    def __init__(self, *, suite_name: str, threshold: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.suite_name = suite_name
        self.threshold = threshold

    def collect(self) -> Iterator[pytest.Item]:
        session: AgentPerturbSession = self.config.stash[SESSION_KEY]
        task = load_task(self.path, self.suite_name, self.threshold)
        for family in session.settings.families:
            target, typ = family_parts(family)
            for model in session.settings.models:
                item = PerturbItem.from_parent(self, name=f"{family}[{model}]", task=task,
                                               family=family, model=model)
                if family == CLEAN:
                    item.add_marker("clean")
                else:
                    item.add_marker(target)
                    item.add_marker(typ)
                yield item

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, TaskFormatError):
            return f"invalid task: {excinfo.value}"
        return super().repr_failure(excinfo)


class EpisodeFailed(Exception):
    """Raised in strict mode, or for gate-level failures of one item."""


class PerturbItem(pytest.Item):
    """One episode: a task, a family (or clean) and a model."""

    def __init__(self, *, task: Task, family: str, model: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.task = task
        self.family = family
        self.model = model
        self.record: EpisodeRecord | None = None
        self.reused = False
        self.variant: Variant | None = None
        self.seed = item_seed(self.config.stash[SESSION_KEY].settings.seed, task.key, family)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.task.key}[{self.family}-{self.model}]"

    def setup(self) -> None:
        """Run (or reuse) the episode; an infrastructure error is a pytest ERROR.

        It is reported by message only (``pytrace=False``): the harness's own
        traceback says nothing about a provider failure, and pytest need not
        parse source to format one.
        """
        session: AgentPerturbSession = self.config.stash[SESSION_KEY]
        session.run_item(self)
        if self.record is not None and self.record.error:
            pytest.fail(f"infrastructure error (not an agent failure): {self.record.error}\n"
                        f"{self.reproduce_line()}", pytrace=False)

    def runtest(self) -> None:
        """The verdict is reported, not raised, unless strict mode asks for it."""
        session: AgentPerturbSession = self.config.stash[SESSION_KEY]
        session.check_item(self)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, EpisodeFailed):
            return f"episode failed: {excinfo.value}\n{self.reproduce_line()}"
        return super().repr_failure(excinfo)

    def reproduce_line(self) -> str:
        return reproduce_line(self.nodeid, self.model, self.config.stash[SESSION_KEY].settings.seed)


def reproduce_line(nodeid: str, model: str, seed: int) -> str:
    """A command that re-runs exactly one item (pytest rejects '::' after a folder, so -k)."""
    suite, task, name = nodeid.split("::")[:3]
    family = name.split("[", 1)[0]
    return (f"reproduce: pytest --agentperturb {suite} -k '{task} and {family}' "
            f"--agentperturb-model {model} --agentperturb-seed {seed}")


from .session import SESSION_KEY  # noqa: E402  (session imports this module's classes lazily)
