"""What a run keeps of its episodes while it goes on, and the rows it reads back from the store at the end.

Every episode is written to the store as it is scored (buffered, and
committed in batches: :class:`~..run.store.Store`): by the
process that ran it when that process runs alone (:meth:`~..run.store.Store.put`),
by the controller under xdist, where a worker never opens the store and
sends the episode on its item's report instead (:mod:`.distribute`,
:meth:`~..run.store.Store.put_row`).  Its test report then
carries only a slim row (:func:`report_row`): the episode's key and
outcome, the reproduce line of a failure, and, once per task and process,
what the report needs about the task (its properties and an adapter's
notes); an image variant's edits travel once per variant and process.  The controller (the
only process without xdist) folds those rows into :class:`Results`: a few
counters, the episode keys, the first failures to print and the per-task
and per-variant extras.  Nothing of a trajectory stays in memory during the
run, so memory does not grow with the episodes run.

At the end :meth:`Results.rows` reads this session's episodes back from the
store, one pass in key order, each row with its variant's diff and canaries
(from the store) and the task's and variant's extras attached: the input of
the analysis, the report and the coverage section; :func:`preload_analysis`
imports what that needs while the episodes still run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.keys import EpisodeKey, VariantKey
from ..model.ownership import error_kind
from ..model.records import REPORTED
from ..model.trajectory import checks_line, failed_checks

if TYPE_CHECKING:
    from ..model.records import EpisodeRecord, Variant
    from ..model.task import Task
    from ..run.store import Store

_FAILURES_SHOWN = 5


def report_row(rec: EpisodeRecord, variant: Variant | None, *, reused: bool, reproduce: str,
               task: Task | None = None) -> dict[str, Any]:
    """The row an episode's test report carries (to the xdist controller): key and outcome, no trajectory.

    ``task`` is given with the first row of a task on this process, and
    ``variant`` with the first row of a variant: the task's properties and
    notes, and an image variant's edits, then travel once, not with every
    episode.
    """
    row: dict[str, Any] = {k: getattr(rec, k) for k in REPORTED}
    row["reused"] = reused
    if rec.error:   # whose it is needs the traceback, which stays here
        row["error_kind"] = error_kind(rec.error, rec.trajectory)
    if rec.success is False:
        row["reproduce"] = reproduce
        row["checks"] = checks_line(failed_checks(rec.trajectory))  # the failure's line names them
    if variant is not None and variant.image_edits:
        row["image_edits"] = [e.to_json() for e in variant.image_edits]
    if task is not None:
        from ..analysis.predictors import task_properties

        row["task_properties"] = task_properties(task)
        row["notes"] = list(task.notes)
    return row


def preload_analysis() -> threading.Thread:
    """Import what the session's analysis and report need (pandas, numpy, the analysis) in a daemon thread.

    Started on the xdist controller when the workers start (it idles while
    they run the episodes), and in a lone process when its last item starts
    (while the episodes still in flight finish), so that the imports are
    done by the time the last episode ends instead of after it; a failed
    import is left for the session's own import to raise.
    """
    def run() -> None:
        try:
            import pandas  # noqa: F401

            from .. import gate, report  # noqa: F401
            from ..analysis import baseline, cost, degradation, labels, predictors, repeats, sensitivity  # noqa: F401
            from ..report import coverage  # noqa: F401
        except BaseException:  # noqa: BLE001 - the session's own import raises it where it is handled
            pass

    thread = threading.Thread(target=run, name="agentperturb-preload", daemon=True)
    thread.start()
    return thread


class Results:
    """The controller's account of the episodes recorded in this session (no trajectories)."""

    def __init__(self) -> None:
        self.episodes = 0
        self.perturbed = 0  # episodes of a perturbed item (not clean)
        self.reused = 0
        self.errors = 0
        self.owners: dict[str, int] = {}   # errors per owner (agent, provider, harness: model/ownership.py)
        self.failed = 0
        self._keys: set[EpisodeKey] = set()
        self._failures: list[tuple[tuple[Any, ...], str, Any, str, str]] = []
        self._tasks: dict[tuple[str, str], dict[str, Any]] = {}
        self._images: dict[VariantKey, list[Any]] = {}  # variant -> its image edits (image variants only)

    def add(self, row: dict[str, Any], nodeid: str) -> None:
        """Count one episode's report row; the task's and variant's extras are taken off it and kept once."""
        self._keys.add(EpisodeKey.of(row))
        self.episodes += 1
        self.perturbed += row.get("family") != "clean"
        self.reused += bool(row.get("reused"))
        if row.get("error"):
            self.errors += 1
            kind = str(row.get("error_kind") or "harness")
            self.owners[kind] = self.owners.get(kind, 0) + 1
        if row.get("success") is False:
            self.failed += 1
            order = (row["model"], row["suite"], row["task"], row["family"], row.get("repeat", 0))
            self._failures.append((order, nodeid, row.get("reward"), str(row.get("reproduce", "")),
                                   str(row.get("checks", ""))))
            if len(self._failures) > 8 * _FAILURES_SHOWN:  # keep the first few only
                self._failures = sorted(self._failures, key=lambda f: f[0])[:_FAILURES_SHOWN]
        props = row.pop("task_properties", None)
        if props is not None:
            self._tasks.setdefault((str(row["suite"]), str(row["task"])),
                                   {"task_properties": props, "notes": row.pop("notes", None) or []})
        edits = row.pop("image_edits", None)
        if edits:
            self._images.setdefault(VariantKey.of(row), edits)

    def owners_note(self, harness: int = 0) -> str:
        """`` [agent a, provider p, harness h]`` for the summary's errors count (``harness``: errors not counted
        here, such as tasks that did not load), or nothing without errors."""
        owners = {**self.owners, "harness": self.owners.get("harness", 0) + harness}
        by = ", ".join(f"{k} {n}" for k in ("agent", "provider", "harness") if (n := owners.get(k)))
        return f" [{by}]" if by else ""

    def first_failures(self) -> list[tuple[str, Any, str, str]]:
        """(node id, reward, reproduce line, failed checks) of the first failures, in (model, suite, task, family,
        repeat) order."""
        return [(n, r, rep, c) for _, n, r, rep, c in sorted(self._failures, key=lambda f: f[0])[:_FAILURES_SHOWN]]

    def read(self, path: Path, run_id: str) -> list[dict[str, Any]]:
        """:meth:`rows` from the store file at ``path`` (its own connection, closed after; none without episodes)."""
        if not self.episodes:
            return []
        from ..run.store import Store

        with closing(Store(path, readonly=True)) as store:   # nothing more to write: a full disk still reads
            return self.rows(store, run_id)

    def rows(self, store: Store, run_id: str) -> list[dict[str, Any]]:
        """This session's episode rows from ``store``, in key order, with the task's and variant's extras."""
        return list(self.iter_rows(store, run_id))

    def iter_rows(self, store: Store, run_id: str) -> Iterator[dict[str, Any]]:
        """:meth:`rows` one at a time (rows of ``run_id`` that another session wrote are left out)."""
        for row in store.iter_rows(run_id):
            if EpisodeKey.of(row) not in self._keys:
                continue
            extra = self._tasks.get((str(row["suite"]), str(row["task"])))
            if extra is not None:
                row.update(extra)
            edits = self._images.get(VariantKey.of(row)) if self._images else None
            if edits is not None:
                row["image_edits"] = edits
            yield row
