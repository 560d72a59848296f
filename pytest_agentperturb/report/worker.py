"""The task pages written by a second process while the caller goes on with the analysis.

Rendering one page per task is most of a large report's work and needs
nothing the analysis computes after the labels, so ``agentperturb report``
hands it to a worker process: :meth:`PageWorker.start` launches
``python -c`` with this module's :func:`main` at once (its start-up overlaps
the caller's), :meth:`PageWorker.send` passes it the episode rows (pickled
over its standard input), and :meth:`PageWorker.wait` waits for it and
raises what it reported.  The worker calls the same
:func:`~.pages.render_pages` and :func:`~.pages.write_pages` as the
in-process path, so the pages are the same byte for byte; only the work
moves to a second core.  The worker imports this very package (by its
location, whatever the caller's ``sys.path``), renders nothing when its
input ends early (:meth:`PageWorker.cancel`), and a worker that cannot be
started leaves the caller to write the pages itself (:meth:`start` returns
None).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ..model.errors import AgentPerturbError

_PACKAGE = Path(__file__).resolve().parents[1]
# Imports the package from where the caller has it, then runs main(): the worker renders the same code.
_BOOT = ("import importlib.util as u, sys\n"
         "s = u.spec_from_file_location('pytest_agentperturb', sys.argv[1], submodule_search_locations=[sys.argv[2]])\n"
         "m = u.module_from_spec(s); sys.modules['pytest_agentperturb'] = m; s.loader.exec_module(m)\n"
         "from pytest_agentperturb.report.worker import main\n"
         "sys.exit(main())\n")


class PageWorker:
    """A worker process that writes one report's task pages (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen[bytes], errors: IO[bytes]) -> None:
        self._proc = proc
        self._errors = errors
        self._sent = False

    @classmethod
    def start(cls) -> PageWorker | None:
        """A started worker waiting for its job, or None where no second process can be started."""
        if not sys.executable:
            return None
        errors = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(_PACKAGE / "__init__.py"), str(_PACKAGE)],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors)
        except OSError:
            errors.close()
            return None
        return cls(proc, errors)

    def send(self, folder: Path | str, columns: Mapping[str, Sequence[Any]], *, main_name: str,
             baselines: frozenset[str]) -> bool:
        """Hand the worker its job: write the pages of the episodes into ``folder``.  False if it is gone.

        ``columns`` holds the labelled episode table column by column (name ->
        values, ``Series.tolist()``): the worker makes the rows of
        :func:`~pytest_agentperturb.report.records` from it.  On False the
        caller writes the pages itself.
        """
        job = {"folder": str(folder), "columns": {str(k): list(v) for k, v in columns.items()},
               "main_name": main_name, "baselines": sorted(baselines)}
        assert self._proc.stdin is not None
        try:
            pickle.dump(job, self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._proc.stdin.close()
        except (BrokenPipeError, OSError):
            self.cancel()
            return False
        self._sent = True
        return True

    def wait(self) -> None:
        """Wait for the worker to finish its job.

        Raises:
            AgentPerturbError: the worker failed; the message is what it reported.
        """
        rc = self._proc.wait()
        self._errors.seek(0)
        text = self._errors.read().decode("utf-8", "replace").strip()
        self._errors.close()
        if rc != 0:
            raise AgentPerturbError(text.splitlines()[-1] if text else f"the task pages' worker failed (exit {rc})")

    def cancel(self) -> None:
        """End the worker and wait for it: without a job it writes nothing; a job under way is finished."""
        try:
            if self._proc.stdin is not None and not self._proc.stdin.closed:
                self._proc.stdin.close()   # end of input before a whole job: the worker exits at once
        except OSError:
            pass
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._errors.close()


def main() -> int:
    """The worker: read a job from standard input, write its pages; 0 on success or on no job, 1 on failure."""
    from .pages import render_pages, write_pages

    try:
        job = pickle.load(sys.stdin.buffer)
    except (EOFError, pickle.UnpicklingError):
        return 0   # cancelled before the job was complete
    names = list(job["columns"])
    rows = [dict(zip(names, vals)) for vals in zip(*job["columns"].values())]
    try:
        write_pages(job["folder"], render_pages(rows, main_name=job["main_name"],
                                                baselines=frozenset(job["baselines"])))
    except AgentPerturbError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - reported to the caller, which raises it
        sys.stderr.write(f"task pages: {type(exc).__name__}: {exc}\n")
        return 1
    return 0
