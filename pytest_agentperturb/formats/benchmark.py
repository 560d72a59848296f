"""What the adapters of installed benchmarks share (:mod:`.agentdojo`, :mod:`.tau2`).

A benchmark is read in named parts (AgentDojo's suites, tau2's domains).
:class:`BenchmarkAdapter` loads each part's data once, on first use, and
yields its tasks as :class:`~pytest_agentperturb.model.task.TaskSlot` s
that build the task only when it is collected; a task the adapter cannot
map becomes a :class:`~pytest_agentperturb.model.errors.TaskFormatError`
of that task alone, naming the benchmark's pinned version.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import ClassVar, Generic, Protocol, TypeVar

from ..model.errors import TaskFormatError
from ..model.task import Task, TaskSlot


class PartData(Protocol):
    """The loaded data of one part of a benchmark: its name and a way to build each of its tasks."""

    @property
    def name(self) -> str: ...

    def make_task(self, task_id: str) -> Task: ...


D = TypeVar("D", bound=PartData)


class BenchmarkAdapter(Generic[D]):
    """A suite adapter over the named parts of one benchmark.

    A subclass names the benchmark (``benchmark``, ``requirement``), what a
    task that cannot be mapped is reported against (``task_field``,
    ``task_kind``) and implements :meth:`load_part`, :meth:`task_ids` and
    :meth:`source`.
    """

    benchmark: ClassVar[str]
    requirement: ClassVar[str]
    task_field: ClassVar[str]
    task_kind: ClassVar[str]

    def __init__(self, name: str, parts: Sequence[str]) -> None:
        self.name = name
        self.parts = tuple(parts)
        self._data: dict[str, D] = {}

    def load_part(self, part: str) -> D:
        """Read one part of the benchmark (called once per part)."""
        raise NotImplementedError

    def task_ids(self, data: D) -> Iterable[str]:
        """The ids of a part's tasks, in a stable order."""
        raise NotImplementedError

    def source(self, data: D, task_id: str) -> str:
        """The benchmark's own name of a task (for error messages)."""
        raise NotImplementedError

    def data(self, part: str) -> D:
        """The data of one part, loaded on first use."""
        if part not in self._data:
            self._data[part] = self.load_part(part)
        return self._data[part]

    def tasks(self) -> Iterator[TaskSlot]:
        for part in self.parts:
            data = self.data(part)
            for task_id in self.task_ids(data):
                yield TaskSlot(task_id, functools.partial(self._task, data, task_id))

    def _task(self, data: D, task_id: str) -> Task:
        try:
            return data.make_task(task_id)
        except Exception as exc:  # a task this adapter cannot read: an error of that task only
            raise TaskFormatError(f"{self.benchmark}:{data.name}/{self.source(data, task_id)}", self.task_field,
                                  self.task_kind, f"{type(exc).__name__}: {exc}"[:300],
                                  f"report it; the pinned version is {self.requirement}") from exc
