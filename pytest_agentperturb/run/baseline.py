"""Finding and reading the run named by ``--agentperturb-baseline`` (docs/design.md section 5).

A baseline is ``RUN_ID`` (a run of this session's store), ``last`` (the most
recent run of this store other than the current one), or another store as
``path.sqlite`` (its most recent run) or ``path.sqlite:RUN_ID``.  Another
store is opened read-only and never migrated: columns an older store lacks
are filled the way a migration would fill them (``baseline`` from the
``reference/`` names, ``repeat`` 0).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.errors import AgentPerturbError
from ..model.options import Settings
from ..model.records import STORE_COLUMNS, STORE_EXTRA

LAST = "last"
_SUFFIXES = (".sqlite", ".sqlite3", ".db")


@dataclass(frozen=True)
class BaselineRun:
    """A resolved baseline: the store file and the run in it."""

    path: Path
    run_id: str
    same_store: bool

    @property
    def label(self) -> str:
        """How reports and breach lines name it."""
        return f"baseline run {self.run_id!r}" + ("" if self.same_store else f" of {self.path}")


def parse_spec(spec: str, rootdir: Path) -> tuple[Path | None, str | None]:
    """(another store or None, run id or None for its most recent run / ``last``)."""
    spec = spec.strip()
    if spec == LAST:
        return None, None
    path, sep, run = spec.rpartition(":")
    if sep and path and "/" not in run and "\\" not in run and _is_store(path, rootdir):
        return _rooted(path, rootdir), run or None
    if _is_store(spec, rootdir):
        return _rooted(spec, rootdir), None
    return None, spec


def _rooted(p: str, rootdir: Path) -> Path:
    path = Path(p)
    return path if path.is_absolute() else rootdir / path


def _is_store(p: str, rootdir: Path) -> bool:
    return p.lower().endswith(_SUFFIXES) or _rooted(p, rootdir).is_file()


def _connect(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise AgentPerturbError(f"--agentperturb-baseline: no results store at {path}")
    return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=60.0)


def runs(path: Path) -> list[str]:
    """Run ids of a store, oldest first (read-only)."""
    with closing(_connect(path)) as c:
        try:
            cur = c.execute("SELECT run_id FROM episodes GROUP BY run_id ORDER BY MIN(recorded_at)")
        except sqlite3.DatabaseError as exc:
            raise AgentPerturbError(f"--agentperturb-baseline: {path} is not a results store ({exc})") from None
        return [str(r[0]) for r in cur]


def resolve_for_session(settings: Settings, max_regression_flag: str | None, rootdir: Path) -> BaselineRun | None:
    """The run ``--agentperturb-baseline`` names, or None when none is named.

    Raises:
        AgentPerturbError: a bad name, or a max-regression threshold (its flag
            given as ``max_regression_flag``) with nothing to compare with.
    """
    if not settings.baseline:
        if max_regression_flag:
            raise AgentPerturbError(f"{max_regression_flag}: there is nothing to compare with; name the baseline "
                                    "run with --agentperturb-baseline RUN_ID|last|path.sqlite[:RUN_ID]")
        return None
    return resolve(settings.baseline, settings.store, settings.run_id, rootdir)


def resolve(spec: str, store: Path, current_run: str, rootdir: Path) -> BaselineRun:
    """The baseline run ``spec`` names.

    Raises:
        AgentPerturbError: naming the spec, the store and the runs it holds.
    """
    other, run_id = parse_spec(spec, rootdir)
    path = other if other is not None else store
    same = other is None or path.resolve() == store.resolve()
    have = runs(path) if path.is_file() else []
    candidates = [r for r in have if not (same and r == current_run)]
    if run_id is None:
        if not candidates:
            raise AgentPerturbError(f"--agentperturb-baseline {spec}: {path} holds no run other than this one "
                                    f"({current_run!r}); give this run its own --agentperturb-run-id (episodes of "
                                    "one run id replace each other), run the baseline first, or name another store")
        return BaselineRun(path, candidates[-1], same)
    if same and run_id == current_run:
        raise AgentPerturbError(f"--agentperturb-baseline {spec}: that is this run; give this run another "
                                "--agentperturb-run-id or name an earlier run")
    if run_id not in have:
        raise AgentPerturbError(f"--agentperturb-baseline {spec}: no run {run_id!r} in {path}; runs: "
                                f"{', '.join(have) or 'none'}")
    return BaselineRun(path, run_id, same)


def read_rows(b: BaselineRun) -> list[dict[str, Any]]:
    """The baseline run's episode rows with ``variant_digest`` and ``recorded_at`` (read-only)."""
    with closing(_connect(b.path)) as c:
        have = {r[1] for r in c.execute("PRAGMA table_info(episodes)")}
        cols = [x for x in (*STORE_COLUMNS, *STORE_EXTRA) if x in have]
        cur = c.execute(f"SELECT {', '.join(cols)} FROM episodes WHERE run_id = ?", (b.run_id,))
        rows = [dict(zip(cols, r)) for r in cur]
    for r in rows:
        r.setdefault("baseline", str(r.get("model", "")).startswith("reference/"))
        r.setdefault("repeat", 0)
    return rows
