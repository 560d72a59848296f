"""Running under xdist, on this host or on others: only the controller touches the store and the report.

A worker (an ``-n`` process, or a ``--tx socket=``/``ssh=`` node on a host
that cannot see the controller's files) never opens the store and never
writes the report.  It sends each episode on its item's report
(:func:`episode_row`, beside the slim row the summary counts), and the
controller stores it as the report arrives and lets it go.  For
``--agentperturb-resume`` the controller reads the run's finished episodes
once and hands them, without trajectories, to every worker in xdist's
``workerinput``; a worker reuses one when its variant digest matches (the
report reads it back from the store at the end).  Nothing here depends on
a path: a worker resolves its suites against its own folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import pytest

from ..model.errors import StoreError
from ..model.keys import EpisodeKey
from ..model.records import EpisodeRecord, Variant
from ..model.options import Settings, option
from .finish import STORE_ERROR
from .results import preload_analysis

if TYPE_CHECKING:
    from ..run.store import Store

#: Key of the finished episodes in xdist's ``workerinput`` (a list of rows; only under resume).
FINISHED_INPUT = "agentperturb_finished"


class Finished:
    """A worker's view of the episodes the controller found in the store (resume without the store)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = {EpisodeKey.of(r): r for r in rows}

    @classmethod
    def of(cls, config: pytest.Config) -> Finished:
        """The table the controller sent in ``workerinput`` (empty when it sent none)."""
        workerinput = getattr(config, "workerinput", None) or {}
        return cls(list(workerinput.get(FINISHED_INPUT) or []))

    def get(self, key: EpisodeKey, variant_digest: str) -> EpisodeRecord | None:
        """The finished episode of that key if it ran on the same variant (its trajectory left at the controller)."""
        row = self._rows.get(key)
        if row is None or row.get("variant_digest") != variant_digest:
            return None
        return EpisodeRecord.from_row(row)


class Controller:
    """The hooks of the xdist controller (or of the only process, where most of them never fire)."""

    def __init__(self, config: pytest.Config, settings: Settings, store: Callable[[], Store],
                 concurrency: int = 16) -> None:
        if config.getoption("dist", None) == "each":
            raise pytest.UsageError(
                "--dist each plays every episode once per worker, and the store keeps one row per episode "
                "(the summary would count each twice); fix: -n N or --dist load to spread the episodes over "
                f"the workers, or {option('repeats').flag} K to play each one K times")
        self.config = config
        self.settings = settings
        self.concurrency = concurrency  # episodes in flight per worker
        self._store = store
        self._finished: list[dict[str, Any]] | None = None

    @property
    def distributed(self) -> bool:
        """Whether xdist sends the items to workers (then they report episodes and this process stores them)."""
        return self.config.pluginmanager.has_plugin("dsession")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Send each worker the run's finished episodes when resuming (read once; workers never open the store)."""
        if not self.settings.resume:
            return
        if self._finished is None:
            try:
                self._finished = self._store().finished(self.settings.run_id)
            except StoreError as exc:
                raise pytest.UsageError(str(exc)) from None
        node.workerinput[FINISHED_INPUT] = self._finished

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Tasks to workers, each worker kept a full window ahead, for ``--dist load`` (``-n``, ``-d``).

        A worker can only keep many episodes in flight if it already holds
        the items that come next.  xdist's ``load`` sends one or two at a time
        once items take long, and its ``loadscope`` tops a worker up only when
        two items are left, so the worker's episodes drain at every refill.
        :func:`scheduler` sends a task's items for one model to one worker and
        sends the next ones while the worker still holds a window's worth.
        Any other ``--dist`` mode is xdist's own.
        """
        if config.getvalue("dist") != "load":
            return None
        from ..run.batcher import window

        return scheduler(config, log, keep=window(self.concurrency))

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionstart(self, session: pytest.Session) -> Any:
        """xdist refuses a path argument it cannot send to another host: say how to name the suite instead.

        With workers, the analysis is imported meanwhile (:func:`.results.preload_analysis`): this process idles
        while they run the episodes.
        """
        if self.distributed:
            preload_analysis()
        try:
            return (yield)
        except Exception as exc:
            # a worker that cannot start (a --tx python that is not there, no socket server, an ssh host
            # execnet cannot reach): one usage error line, not xdist's INTERNALERROR traceback
            unreachable = isinstance(exc, (OSError, EOFError)) or type(exc).__name__ == "HostNotFound"
            if self.distributed and unreachable:
                raise pytest.UsageError(_unreachable(session.config, exc)) from None
            if not isinstance(exc, ValueError) or "not relative to an rsync root" not in str(exc):
                raise
            suite = option("suites").flag
            raise pytest.UsageError(
                f"{exc}: xdist rewrites path arguments for workers on other hosts (--tx socket=/ssh=) and "
                f"accepts only paths below an rsync root; fix: name each suite folder with {suite}=PATH (one "
                f"argument, with '='; each worker finds PATH below its own folder) or in the ini key "
                f"agentperturb_suites, and write other path options with '=' too "
                f"({option('store').flag}=PATH)") from None

    def store_reported(self, report: pytest.TestReport, episode: dict[str, Any]) -> bool:
        """Store an episode a worker sent on its report (:func:`episode_row`); the row is dropped after.

        Returns False when the store failed: the report then reads as a
        failure that names the file (a harness error, not the agent's).
        """
        try:
            self._store().put_row(episode)
        except StoreError as exc:
            report.outcome = "failed"
            report.longrepr = f"{STORE_ERROR}{exc}"
            return False
        return True


def _unreachable(config: pytest.Config, exc: BaseException) -> str:
    """One line for an xdist worker that could not be started: the --tx targets, what failed, the fix."""
    targets = " ".join(f"--tx {t}" for t in (config.getoption("tx", None) or [])) or "-n"
    why = f"{type(exc).__name__}: {exc}".strip().rstrip(":")[:200]
    return (f"{targets}: an xdist worker could not be started ({why}); fix: check that the python the "
            f"target names runs and has pytest-agentperturb installed, that a socket= server is listening "
            f"at that address, that an ssh= host is reachable; or run without --tx")


def scheduler(config: pytest.Config, log: Any, keep: int) -> Any:
    """xdist's ``loadscope`` with one task and model as a scope, topping a worker up while it holds under ``keep``.

    ``keep`` is the worker's prefetch window (:func:`..run.batcher.window`: the
    batcher keeps that many episodes submitted, finished ones included), so
    a worker never runs out of upcoming items to start while others wait at
    the controller.  A scope is a task's items for one model (``suite::task``
    and the item's parameter without the family), small enough that the
    last ones leave no worker idle for long, large enough that each worker
    generates a task's variants once per model at most.
    """
    from xdist.scheduler import LoadScopeScheduling

    class WindowScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type stubs
        def _split_scope(self, nodeid: str) -> str:
            task, _, name = nodeid.rpartition("::")
            _, bracket, param = name.partition("[")
            return f"{task}[{param}" if task and bracket and param.endswith("]") else nodeid.rsplit("::", 1)[0]

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            while self.workqueue and self._pending_of(self.assigned_work[node]) < keep:
                self._assign_work_unit(node)

    return WindowScheduling(config, log)


def episode_row(rec: EpisodeRecord, variant_digest: str, variant: Variant | None) -> dict[str, Any]:
    """What a worker sends for the controller to store: the episode's columns and its variant's diff and canaries."""
    row = rec.to_row()
    row["variant_digest"] = variant_digest
    row["diff"] = variant.edit_text if variant is not None else ""
    row["canaries"] = [asdict(c) for c in variant.canaries] if variant is not None else []
    return row
