"""The results store: one SQLite file, an ``episodes`` table, safe under xdist.

Every worker opens its own connection in WAL mode with a generous busy
timeout and commits each episode as soon as it is scored, so a run killed
mid-way loses at most the episodes in flight.  Rows are keyed by
(run_id, model, suite, task, family, seed, repeat): writing the same episode
again replaces it, never duplicates it.  ``variant_digest`` guards resume: a row is
reused only if the variant it was run on is byte-identical to today's.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..model.records import STORE_COLUMNS, EpisodeRecord, Variant

SCHEMA_VERSION = 3  # 2: the agent's baseline flag; 3: the repeat index in the key
_TYPES = {
    "baseline": "INTEGER", "repeat": "INTEGER",
    "seed": "INTEGER", "reward": "REAL", "success": "INTEGER", "compliance": "INTEGER",
    "input_tokens": "INTEGER", "output_tokens": "INTEGER", "reasoning_tokens": "INTEGER",
    "cost_usd": "REAL", "tool_calls": "INTEGER", "turns": "INTEGER", "wall_s": "REAL",
}
KEY = ("run_id", "model", "suite", "task", "family", "seed", "repeat")


def _episodes_ddl(table: str) -> str:
    cols = ", ".join(f"{c} {_TYPES.get(c, 'TEXT')}" for c in STORE_COLUMNS)
    return (f"CREATE TABLE IF NOT EXISTS {table} ({cols}, variant_digest TEXT, recorded_at REAL, "
            f"PRIMARY KEY ({', '.join(KEY)}))")


def _migrate_repeat(conn: sqlite3.Connection) -> None:
    """Schema 2 -> 3: every recorded episode becomes repeat 0, and the key gains ``repeat``.

    SQLite cannot change a primary key in place, so the table is rebuilt
    (inside the caller's transaction): rename, create, copy, drop.
    """
    old = [r[1] for r in conn.execute("PRAGMA table_info(episodes)")]
    conn.execute("ALTER TABLE episodes RENAME TO episodes_v2")
    conn.execute(_episodes_ddl("episodes"))
    cols = ", ".join(old)
    conn.execute(f"INSERT INTO episodes ({cols}, repeat) SELECT {cols}, 0 FROM episodes_v2")
    conn.execute("DROP TABLE episodes_v2")


class Store:
    """SQLite-backed episode store."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=60000")
        self._create()

    def _create(self) -> None:
        with self._tx():
            self._conn.execute(_episodes_ddl("episodes"))
            have = {r[1] for r in self._conn.execute("PRAGMA table_info(episodes)")}
            if "baseline" not in have:  # a version-1 store: the flag follows the built-in baselines' names
                self._conn.execute("ALTER TABLE episodes ADD COLUMN baseline INTEGER")
                self._conn.execute("UPDATE episodes SET baseline = (model LIKE 'reference/%')")
            if "repeat" not in have:
                _migrate_repeat(self._conn)
            self._conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, created REAL, config TEXT)"
            )
            self._conn.execute("CREATE TABLE IF NOT EXISTS variants (variant_digest TEXT PRIMARY KEY, "
                               "family TEXT, operator TEXT, diff TEXT, canaries TEXT)")

    def _tx(self) -> Any:
        conn = self._conn

        class _Tx:
            def __enter__(self) -> None:
                conn.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type: Any, *_: Any) -> None:
                conn.execute("ROLLBACK" if exc_type else "COMMIT")

        return _Tx()

    def close(self) -> None:
        self._conn.close()

    def record_run(self, run_id: str, config: dict[str, Any]) -> None:
        """Remember a run's configuration (first writer wins)."""
        with self._tx():
            self._conn.execute("INSERT OR IGNORE INTO runs VALUES (?, ?, ?)",
                               (run_id, time.time(), json.dumps(config, sort_keys=True)))

    def put(self, rec: EpisodeRecord, variant_digest: str = "", variant: Variant | None = None) -> None:
        """Insert or replace one episode, committed at once (with its variant's diff and canaries)."""
        row = rec.to_row()
        names = [*STORE_COLUMNS, "variant_digest", "recorded_at"]
        vals = [row[c] for c in STORE_COLUMNS] + [variant_digest, time.time()]
        with self._tx():
            self._conn.execute(
                f"INSERT OR REPLACE INTO episodes ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                vals,
            )
            if variant is not None and variant_digest:
                canaries = json.dumps([asdict(c) for c in variant.canaries], ensure_ascii=False, sort_keys=True)
                self._conn.execute("INSERT OR IGNORE INTO variants VALUES (?, ?, ?, ?, ?)",
                                   (variant_digest, variant.family, variant.operator, variant.edit_text, canaries))

    def get(self, key: tuple[str, str, str, str, str, int, int], variant_digest: str) -> EpisodeRecord | None:
        """A recorded, error-free episode of that key and variant, if any."""
        q = " AND ".join(f"{k} = ?" for k in KEY)
        cur = self._conn.execute(
            f"SELECT {', '.join(STORE_COLUMNS)} FROM episodes WHERE {q} AND variant_digest = ? "
            "AND (error IS NULL OR error = '')",
            (*key, variant_digest),
        )
        row = cur.fetchone()
        return EpisodeRecord.from_row(dict(zip(STORE_COLUMNS, row))) if row else None

    def episodes(self, run_id: str | None = None) -> Iterator[EpisodeRecord]:
        """All episodes (of one run), in key order."""
        where, args = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        cur = self._conn.execute(
            f"SELECT {', '.join(STORE_COLUMNS)} FROM episodes {where} ORDER BY {', '.join(KEY)}", args
        )
        for row in cur:
            yield EpisodeRecord.from_row(dict(zip(STORE_COLUMNS, row)))

    def rows(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Episode rows (of one run) joined with their variant's ``diff`` and ``canaries`` (JSON text).

        Each row also carries ``variant_digest`` and ``recorded_at``.
        """
        where, args = ("WHERE e.run_id = ?", (run_id,)) if run_id else ("", ())
        cur = self._conn.execute(
            f"SELECT {', '.join('e.' + c for c in STORE_COLUMNS)}, e.variant_digest, e.recorded_at, v.diff, "
            f"v.canaries FROM episodes e LEFT JOIN variants v ON v.variant_digest = e.variant_digest {where} "
            f"ORDER BY {', '.join('e.' + k for k in KEY)}", args)
        names = [*STORE_COLUMNS, "variant_digest", "recorded_at", "diff", "canaries"]
        return [dict(zip(names, r)) for r in cur]

    def runs(self) -> list[str]:
        """Run ids in the store, oldest first."""
        cur = self._conn.execute("SELECT run_id FROM episodes GROUP BY run_id ORDER BY MIN(recorded_at)")
        return [str(r[0]) for r in cur]

    def count(self, run_id: str | None = None) -> int:
        where, args = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        return int(self._conn.execute(f"SELECT COUNT(*) FROM episodes {where}", args).fetchone()[0])


def read_episodes(path: Path | str, run_id: str | None = None) -> list[EpisodeRecord]:
    """Every episode in a store file (read-only use)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no results store here; run pytest --agentperturb first "
                                "or pass --store PATH")
    with closing(Store(path)) as s:
        return list(s.episodes(run_id))


def put_all(path: Path | str, records: Iterable[EpisodeRecord]) -> None:
    """Write several records (tests and imports)."""
    with closing(Store(path)) as s:
        for r in records:
            s.put(r)
