"""The built-in suite format: folders holding ``suite.toml`` (see :mod:`.loader`).

:class:`NativeSuiteAdapter` is the adapter the plugin falls back to: it
recognises a folder with ``suite.toml`` and yields one lazily loaded task
per sub-folder holding ``task.toml``, so a malformed task is an error of
that task only.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

from ...model.task import TaskSlot
from ...model.task import SURFACE_FILES
from .loader import GRADER_FILES, Suite, load_suite, load_task, load_tasks

SUITE_FILE = "suite.toml"


def is_suite(path: Path) -> bool:
    """Whether ``path`` is a folder in the native format: one that holds ``suite.toml``.

    A ``suite.toml`` that is not a regular file (a FIFO, a socket, a folder)
    counts too: the folder is meant as a suite, and loading it is then the
    error that names the file (:func:`.loader.load_suite` reads only regular
    files), never a folder passed over in silence.  Only ``stat`` is called.
    """
    return (path / SUITE_FILE).exists()


class NativeSuiteAdapter:
    """A ``suite.toml`` folder as a suite adapter (``suite.toml`` is read when tasks are asked for)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._suite: Suite | None = None

    @property
    def suite(self) -> Suite:
        """The parsed ``suite.toml`` (raises :class:`TaskFormatError` when it is malformed)."""
        if self._suite is None:
            self._suite = load_suite(self.path)
        return self._suite

    @property
    def name(self) -> str:
        return self.suite.name

    def tasks(self) -> Iterator[TaskSlot]:
        suite = self.suite
        for d in suite.task_dirs:
            yield TaskSlot(d.name, partial(load_task, d, suite.name, suite.threshold), d)


__all__ = ["GRADER_FILES", "SURFACE_FILES", "SUITE_FILE", "NativeSuiteAdapter", "Suite", "is_suite", "load_suite",
           "load_task", "load_tasks"]
