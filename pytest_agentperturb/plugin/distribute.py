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

A worker that dies (killed, out of memory) loses the episode it was
running: :class:`Controller` records which items each worker started and
which reports came back, the scheduler (:func:`scheduler`) hands the item
that was running to xdist as the crashed one and sends only the items
that never started to another worker, and the controller stores the
crashed item as one ERROR row (:meth:`Controller.lost_record`, put on
xdist's crash report by :meth:`.reporting.ReportHooks.pytest_handlecrashitem`),
which ``--agentperturb-resume`` runs again.  No replacement worker is
started when the workers left can take what is left.  A worker that never
starts (a ``--tx`` python that is not there or has no pytest, no socket
server, an unreachable ssh host) ends the run in one usage error line that
names the target and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import pytest

from ..model.errors import StoreError
from ..model.keys import EpisodeKey
from ..model.records import EpisodeRecord, Variant
from ..model.options import Settings, option
from ..model.vocab import family_parts
from .finish import AGENT_FAILED_ATTR, STORE_ERROR
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
        self.started: dict[str, str] = {}  # node id -> its location name ("suite/task[family-model-rN]")
        self.reported: set[str] = set()  # node ids whose final report (and so its row) came back
        self._down: dict[str, str] = {}  # worker id -> why it went down

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

        return scheduler(config, log, keep=window(self.concurrency), controller=self)

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        """A worker began an item (its location names the suite, task, family, model and repeat)."""
        self.started[nodeid] = location[2]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """The item's outcome came back (the call report, or a setup report that did not pass)."""
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.reported.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """Remember why a worker went down; one that never started is the run's one usage error line.

        A worker whose python starts but cannot run xdist's worker (a
        ``--tx popen//python=`` without pytest, say) goes down before it is
        ready, and xdist would replace it again and again, then end in an
        INTERNALERROR; it is the same fault as a python that is not there.
        """
        if error is None:
            return
        self._down[str(node.gateway.id)] = str(error)
        dsession = self.config.pluginmanager.getplugin("dsession")
        if getattr(dsession, "shuttingdown", False):   # going down with the run (an interrupt): not a fault of its own
            return
        if getattr(node, "workerinfo", None) is None:   # never sent workerready: it did not start
            raise pytest.UsageError(_unreachable(self.config, _last_line(error)))

    def no_replacement(self) -> None:
        """Start no worker in place of the one that just died: nothing is left to send it.

        xdist would start one and wait for it to start and collect (seconds)
        before the run ends; it starts none once ``--max-worker-restart`` is
        reached, so the limit is set to the crashes so far (xdist counts this
        one after).
        """
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is not None and isinstance(getattr(dsession, "_failed_nodes_count", None), int):
            dsession._max_worker_restart = dsession._failed_nodes_count

    def lost_record(self, nodeid: str, worker: str) -> EpisodeRecord | None:
        """The ERROR record (``WorkerLost``) of an item whose worker died while running it; resume runs it again.

        Its key comes from the item's location (:meth:`.collect.PerturbItem.reportinfo`); None for an item
        of no episode or one that never started.
        """
        from .collect import item_seed

        where = self.started.get(nodeid)
        m = re.fullmatch(r"(.+)/([^/\[]+)\[(.+)\]", where or "")
        if m is None:
            return None
        suite, task, param = m.groups()
        repeat = 0
        if self.settings.repeats > 1:
            r = re.fullmatch(r"(.+)-r(\d+)", param)
            if r is None:
                return None
            param, repeat = r.group(1), int(r.group(2))
        model = max((name for name in self.settings.runners if param.endswith("-" + name)), key=len, default=None)
        if model is None:
            return None
        family = param[:-len(model) - 1]
        target, typ = family_parts(family)
        why = self._down.get(worker, "")
        return EpisodeRecord(
            run_id=self.settings.run_id, model=model, suite=suite, task=task, family=family, target=target,
            type=typ, operator="", seed=item_seed(self.settings.variant_seed, f"{suite}/{task}", family),
            repeat=repeat,
            error=f"WorkerLost: worker {worker} died{f' ({why})' if why else ''} while running this episode"[:500])

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
        failure that names the file (a harness error, not the agent's: an
        agent-failed report is one no longer, and an ERROR keeps its own
        text, a ``WorkerLost`` one say, below that line).  The session
        fails (:meth:`.finish.Finish.pytest_sessionfinish` counts it).
        """
        try:
            self._store().put_row(episode)
        except StoreError as exc:
            agent_failed = getattr(report, AGENT_FAILED_ATTR, False)
            before = report.longreprtext if report.failed and not agent_failed else ""
            if agent_failed:
                delattr(report, AGENT_FAILED_ATTR)
            report.outcome = "failed"
            report.longrepr = f"{STORE_ERROR}{exc}" + (f"\n{before}" if before else "")
            return False
        return True


def _unreachable(config: pytest.Config, exc: BaseException | str) -> str:
    """One line for an xdist worker that could not be started: the --tx targets, what failed, the fix.

    ``exc`` is the exception the controller caught, or the last line of the
    traceback the worker sent before it went down.
    """
    targets = " ".join(f"--tx {t}" for t in (config.getoption("tx", None) or [])) or "-n"
    why = (exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}").strip().rstrip(":")[:200]
    return (f"{targets}: an xdist worker could not be started ({why}); fix: check that the python the "
            f"target names runs and has pytest-agentperturb installed, that a socket= server is listening "
            f"at that address, that an ssh= host is reachable; or run without --tx")


def _last_line(error: object) -> str:
    """The last line of what a worker that went down sent (a remote traceback ends in the exception's line)."""
    lines = [x.strip() for x in str(error).splitlines() if x.strip()]
    return lines[-1] if lines else type(error).__name__


def scheduler(config: pytest.Config, log: Any, keep: int, controller: Controller | None = None) -> Any:
    """xdist's ``loadscope`` with one task and model as a scope, topping a worker up while it holds under ``keep``.

    ``keep`` is the worker's prefetch window (:func:`..run.batcher.window`: the
    batcher keeps that many episodes submitted, finished ones included), so
    a worker never runs out of upcoming items to start while others wait at
    the controller.  A scope is a task's items for one model (``suite::task``
    and the item's parameter without the family), small enough that the
    last ones leave no worker idle for long, large enough that each worker
    generates a task's variants once per model at most.

    When a worker dies (:meth:`remove_node`), its items whose report came
    back are done, the one it had started is returned as the crashed item
    (xdist reports it once, and :meth:`Controller.lost_record` is its
    ERROR row), and only the units with items it never started go back to
    the queue: none is played twice.  When the queue then holds at most a
    window for each worker left, they get all of it and no worker replaces
    the dead one (xdist would wait for it to start and collect before the
    run ends).  A worker is not shut down when the queue runs dry, only
    when xdist ends the run, so it can still take those items.  Without the ``controller`` (no record of starts and
    reports) it is xdist's own.
    """
    from xdist.scheduler import LoadScopeScheduling

    class WindowScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type stubs
        def _split_scope(self, nodeid: str) -> str:
            task, _, name = nodeid.rpartition("::")
            _, bracket, param = name.partition("[")
            return f"{task}[{param}" if task and bracket and param.endswith("]") else nodeid.rsplit("::", 1)[0]

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:  # no shutdown once the queue is empty: xdist's when all are done
                return  # (a worker left running can take the items of one that dies)
            while self.workqueue and self._pending_of(self.assigned_work[node]) < keep:
                self._assign_work_unit(node)

        def remove_node(self, node: Any) -> str | None:
            if controller is None or not self._pending_of(self.assigned_work.get(node, {})):
                return super().remove_node(node)  # type: ignore[no-any-return]
            crashitem = None
            workload = self.assigned_work.pop(node)
            for unit in workload.values():
                for nodeid, done in unit.items():
                    if done:
                        continue
                    if nodeid in controller.reported:  # its row came back: done
                        unit[nodeid] = True
                    elif crashitem is None and nodeid in controller.started:  # it was running: lost
                        unit[nodeid] = True
                        crashitem = nodeid
            for scope, unit in workload.items():
                if not all(unit.values()):  # never started here: to another worker
                    self.workqueue[scope] = unit
            for other in self.assigned_work:
                self._reschedule(other)
            queued = sum(self._pending_of({scope: unit}) for scope, unit in self.workqueue.items())
            if queued <= keep * len(self.assigned_work):  # the workers left take it all within a window or two
                while self.workqueue:  # now: xdist shuts them down when it starts no replacement
                    live = [n for n in self.assigned_work if not n.shutting_down]
                    if not live:
                        return crashitem
                    self._assign_work_unit(min(live, key=lambda n: self._pending_of(self.assigned_work[n])))
                controller.no_replacement()
            return crashitem

    return WindowScheduling(config, log)


def episode_row(rec: EpisodeRecord, variant_digest: str, variant: Variant | None) -> dict[str, Any]:
    """What a worker sends for the controller to store: the episode's columns and its variant's diff and canaries."""
    row = rec.to_row()
    row["variant_digest"] = variant_digest
    row["diff"] = variant.edit_text if variant is not None else ""
    row["canaries"] = [asdict(c) for c in variant.canaries] if variant is not None else []
    return row
