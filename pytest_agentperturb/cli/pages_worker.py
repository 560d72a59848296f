"""The task pages of ``agentperturb report``, written by a second process that reads the store itself.

Rendering one page per task is most of a large report's work and needs
nothing the analysis computes, so ``agentperturb report`` starts a worker
process at once (:meth:`PageWorker.start`: ``python -c`` running this
module's :func:`main`, the package imported from where the caller has it)
and hands it the store and the run (:meth:`PageWorker.send`).  While the
caller imports pandas, the worker -- which needs neither pandas nor numpy --
reads the run's episodes and sends them to the caller without their
trajectories, diffs and canaries (:meth:`PageWorker.rows`: the store is
read once, so the analysis and the pages rest on the same snapshot of it),
normalises them (:func:`~..analysis.table.normalise_rows`, the values of
:func:`~..analysis.table.normalise`), labels them and sends the labels
(:func:`~..analysis.labels.auto_labels`, :meth:`PageWorker.labels`),
decodes each trajectory once and renders the pages.  It writes
them only when the caller says so (:meth:`PageWorker.go`, once the episodes
passed its checks); an input that ends first (:meth:`PageWorker.cancel`)
writes nothing.  Manual labels (``--labels``) reach the worker before it
renders (:meth:`PageWorker.manual`).  A worker that cannot be started, or
fails before it sends the labels, leaves the caller to do everything
itself; one that fails later makes :meth:`PageWorker.wait` raise what it
reported.  The pages are those of :func:`~..report.write_report` byte for byte.

Messages are pickles over the worker's standard input and output; its
standard error goes to a temporary file, whose last line is the error.
"""

from __future__ import annotations

import pickle
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..model.errors import AgentPerturbError
from ..model.heap import collector_paused
from ..model.records import KINDS, VARIANT_FIELDS

if TYPE_CHECKING:
    from ..analysis.labels import Labels

_PACKAGE = Path(__file__).resolve().parents[1]
# Imports the package from where the caller has it, then runs main(): the worker renders the same code.
_BOOT = ("import importlib.util as u, sys\n"
         "s = u.spec_from_file_location('pytest_agentperturb', sys.argv[1], submodule_search_locations=[sys.argv[2]])\n"
         "m = u.module_from_spec(s); sys.modules['pytest_agentperturb'] = m; s.loader.exec_module(m)\n"
         "from pytest_agentperturb.cli.pages_worker import main\n"
         "rc = main(); sys.stdout.flush(); sys.stderr.flush()\n"
         "import os; os._exit(rc)\n")   # no interpreter shutdown: the thread reading "go" may still wait
#: Columns the worker does not send back: the analysis reads none of them (the labels come computed).
HEAVY: tuple[str, ...] = (*KINDS["trajectory"], *VARIANT_FIELDS)
_GO = "go"


class PageWorker:
    """A worker process that reads a run's episodes and writes its task pages (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen[bytes], errors: IO[bytes]) -> None:
        self._proc = proc
        self._errors = errors

    @classmethod
    def start(cls) -> PageWorker | None:
        """A started worker waiting for its job, or None where no second process can be started."""
        if not sys.executable:
            return None
        errors = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(_PACKAGE / "__init__.py"), str(_PACKAGE)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
        except OSError:
            errors.close()
            return None
        return cls(proc, errors)

    def _put(self, message: Any, *, last: bool = False) -> bool:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            pickle.dump(message, stdin, protocol=pickle.HIGHEST_PROTOCOL)
            if last:
                stdin.close()
            else:
                stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def send(self, store: Path | str, run_id: str | None, folder: Path | str, *, main_name: str,
             manual: bool = False) -> bool:
        """Hand the worker its job: the episodes of ``run_id`` (None: every run) in ``store``, pages into ``folder``.

        ``manual``: manual labels follow (:meth:`manual`) before it renders.
        False if the worker is gone.
        """
        return self._put({"store": str(store), "run_id": run_id, "folder": str(folder), "main_name": main_name,
                          "manual": manual})

    def manual(self, rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> bool:
        """The manual labels (:func:`~..analysis.labels.manual_rows` and the key columns they name)."""
        return self._put((list(rows), list(keys)))

    def _get(self) -> Any:
        assert self._proc.stdout is not None
        try:
            return pickle.load(self._proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError, ValueError, TypeError):
            return None

    def rows(self) -> list[dict[str, Any]] | None:
        """The episodes as read, without :data:`HEAVY`; None if the worker failed first."""
        got = self._get()
        if got is None:
            return None
        names, values = got
        return [dict(zip(names, v)) for v in zip(*values)] if names else []

    def labels(self) -> Labels | None:
        """:func:`~..analysis.labels.auto_labels` of those episodes (for :func:`~..analysis.labels.label`'s
        ``auto``); None if the worker failed first."""
        got = self._get()
        return None if got is None else tuple(got)

    def go(self) -> bool:
        """Let the worker write the pages (the episodes passed the caller's checks).  False if it is gone."""
        return self._put(_GO, last=True)

    def wait(self) -> None:
        """Wait for the worker to finish writing the pages.

        Raises:
            AgentPerturbError: the worker failed; the message is what it reported.
        """
        rc = self._proc.wait()
        self._close()
        self._errors.seek(0)
        text = self._errors.read().decode("utf-8", "replace").strip()
        self._errors.close()
        if rc != 0:
            raise AgentPerturbError(text.splitlines()[-1] if text else f"the task pages' worker failed (exit {rc})")

    def cancel(self) -> None:
        """End the worker and wait for it; without :meth:`go` it writes nothing."""
        self._close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._errors.close()

    def _close(self) -> None:
        for f in (self._proc.stdin, self._proc.stdout):
            try:
                if f is not None and not f.closed:
                    f.close()   # end of input before "go": the worker writes nothing and exits
            except OSError:
                pass


class _Cancelled(Exception):
    """The caller's input ended before it said "go"."""


class _Gate:
    """Whether the caller said "go": read from the worker's input by a thread, while the pages render."""

    def __init__(self, stdin: IO[bytes]) -> None:
        self._event = threading.Event()
        self.go = False
        self._thread = threading.Thread(target=self._read, args=(stdin,), daemon=True)
        self._thread.start()

    def _read(self, stdin: IO[bytes]) -> None:
        try:
            self.go = pickle.load(stdin) == _GO
        except (EOFError, OSError, pickle.UnpicklingError, ValueError):
            self.go = False
        self._event.set()

    def open(self) -> bool:
        """Whether "go" came already (a cancel counts as not yet)."""
        return self._event.is_set() and self.go

    def wait(self) -> None:
        """Block until the caller says; raise :class:`_Cancelled` if it cancelled."""
        self._event.wait()
        if not self.go:
            raise _Cancelled


def _gated(pages: Iterable[tuple[str, str]], gate: _Gate) -> Iterator[tuple[str, str]]:
    """``pages`` as they render, held back until "go" (none at all on a cancel)."""
    held: list[tuple[str, str]] = []
    for page in pages:
        if gate.open():
            yield from held
            held.clear()
            yield page
        else:
            held.append(page)
    gate.wait()
    yield from held


class _Sender:
    """Messages to the caller, written in order by a thread: the worker goes on while the caller is busy."""

    def __init__(self, out: IO[bytes]) -> None:
        self._queue: queue.Queue[bytes | None] = queue.Queue()
        self._thread = threading.Thread(target=self._write, args=(out,), daemon=True)
        self._thread.start()

    def _write(self, out: IO[bytes]) -> None:
        while (data := self._queue.get()) is not None:
            try:
                out.write(data)
                out.flush()
            except (BrokenPipeError, OSError, ValueError):
                return   # the caller gave up on the worker (it cancels)

    def put(self, message: Any) -> None:
        self._queue.put(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def close(self) -> None:
        """Wait until every message is written (or the caller is gone)."""
        self._queue.put(None)
        self._thread.join()


def main() -> int:
    """The worker: read a job, send the episodes and labels, render the pages, write them on "go".

    0 on success or when the caller cancelled, 1 on failure (the message on standard error).
    """
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        job = pickle.load(stdin)
    except (EOFError, pickle.UnpicklingError):
        return 0   # cancelled before the job was complete
    sender = _Sender(stdout)
    try:
        from ..run.store import read_rows

        with collector_paused(freeze=True):
            raw = read_rows(job["store"], job["run_id"])
        from ..report.failures import CHECKS, checks_column

        names = [c for c in (raw[0] if raw else ()) if c not in HEAVY]
        values = [[r[c] for r in raw] for c in names]
        if raw:   # the failing episodes' checks, for the main page's failures list (their trajectories stay here)
            names, values = [*names, CHECKS], [*values, checks_column(raw)]
        sender.put((names, values))   # first: the caller analyses these

        from ..analysis.labels import FLIP_COLUMNS, LABEL_COLUMNS, auto_labels, flip_flags, manual_updates
        from ..analysis.table import normalise_rows
        from ..report.episodes import decoded
        from ..report.pages import render_pages, write_pages

        rows = normalise_rows(raw)
        del raw
        columns = {c: [r.get(c) for r in rows] for c in FLIP_COLUMNS}
        flips = flip_flags(columns)
        decoded([r for r, f in zip(rows, flips) if f])   # the labels read the harmful flips' trajectories alone
        columns.update({c: [r.get(c) for r in rows] for c in LABEL_COLUMNS})
        labels = auto_labels(columns, flips)
        sender.put(labels)
        with collector_paused(freeze=True):
            decoded(rows)   # the others', for the pages (each decoded once)
        flags, aw, aws, be, bes = labels
        for r, f, a, a_s, b, b_s in zip(rows, flags, aw, aws, be, bes):
            r.update(harmful_flip=f, awareness=a, awareness_source=a_s, behaviour=b, behaviour_source=b_s)
        if job["manual"]:
            try:
                manual, keys = pickle.load(stdin)
            except (EOFError, pickle.UnpicklingError):
                return 0
            for i, col, v in manual_updates({k: [r[k] for r in rows] for k in keys}, manual, keys, len(rows)):
                rows[i][col], rows[i][f"{col}_source"] = v, "manual"
        gate = _Gate(stdin)
        baselines = frozenset(str(r["model"]) for r in rows if r["baseline"])
        write_pages(job["folder"], _gated(render_pages(rows, main_name=job["main_name"], baselines=baselines), gate))
    except _Cancelled:
        return 0
    except AgentPerturbError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - reported to the caller, which raises it
        sys.stderr.write(f"task pages: {type(exc).__name__}: {exc}\n")
        return 1
    finally:
        sender.close()
    return 0

