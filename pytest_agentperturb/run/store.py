"""The results store: one SQLite file, an ``episodes`` table, safe under xdist.

One process writes it: the pytest process that ran the episodes, or,
under xdist, the controller as each item's report arrives (workers, perhaps
on other hosts, never open it).  It is opened in WAL mode with a generous
busy timeout.  Episodes are committed in groups, one transaction per batch,
by a writer thread of the store's own: :meth:`Store.put` serialises the row
and buffers it (pytest's thread never waits for SQLite), and the writer
commits what is buffered once :data:`BATCH_ROWS` rows are pending or
:data:`BATCH_SECONDS` after the first of them was buffered, whichever comes
first; every read of this connection, and :meth:`Store.close`, commits what
is buffered first (:meth:`Store.get`, resume's look-up per item, looks in the
buffer instead).  A run killed mid-way (SIGKILL: nothing can run) therefore
loses the episodes in flight plus at most the episodes finished in the last
``BATCH_SECONDS`` (fewer than ``BATCH_ROWS`` of them); ``--agentperturb-resume``
reruns exactly those.  A batch that cannot be written stays buffered; from
then on each put that finds a batch due commits it on its own thread, and
raises a :class:`~..model.errors.StoreError` saying how many episodes it
holds, until a write succeeds again (:meth:`Store.close` raises it too).
Rows are keyed by
the :class:`~..model.keys.EpisodeKey` (run_id, model, suite, task, family, seed, repeat): writing the same episode
again replaces it, never duplicates it.  ``variant_digest`` guards resume: a row is
reused only if the variant it was run on is byte-identical to today's.

A store is opened read-only (``Store(path, readonly=True)``: ``report`` and
``export`` never write, so they work on a read-only file and never turn an
empty file into a database) or for writing, when its schema is checked: an
older store gains the columns it lacks, a newer one (or a file that is not a
store) is refused with a :class:`~..model.errors.StoreError` naming the file
and the fix.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..model.errors import StoreError
from ..model.keys import KEY_FIELDS, EpisodeKey
from ..model.records import SCHEMA, STORE_COLUMNS, STORE_EXTRA, VARIANT_FIELDS, EpisodeRecord, Variant

SCHEMA_VERSION = 3  # 2: the agent's baseline flag; 3: the repeat index in the key
#: SQLite type of every column of the ``episodes`` table (the schema's, then the store's own).
_TYPES = {**{c.name: c.sql for c in SCHEMA}, "variant_digest": "TEXT", "recorded_at": "REAL"}
KEY = KEY_FIELDS  # the primary key, in order (the order every read sorts by)
#: The columns of a stored row, as :meth:`Store.finished` reads them.
_STORED = (*STORE_COLUMNS, *STORE_EXTRA)
#: The columns of a row joined with its variant, as :meth:`Store.rows` reads them.
_JOINED = (*_STORED, *VARIANT_FIELDS)
_FIX = "point --agentperturb-store (or --store) at another file, or move this one away"
_FULL_FIX = "free space on its disk, or point --agentperturb-store (or --store) at a file on another disk"


def _fix(exc: sqlite3.Error) -> str:
    """The fix for a failed write: free space when the disk is full, another file otherwise."""
    return _FULL_FIX if "full" in str(exc).lower() else _FIX


#: The configuration of a run :meth:`Store.claim_run` reserved, until :meth:`Store.record_run` gives its own.
_CLAIMED = "{}"
#: A batch is committed once this many episodes are buffered ...
BATCH_ROWS = 64
#: ... or this many seconds after its first episode was buffered, whichever comes first.
BATCH_SECONDS = 0.5
_INSERT_EPISODE = f"INSERT OR REPLACE INTO episodes ({', '.join(_STORED)}) VALUES ({', '.join('?' * len(_STORED))})"


#: A variant as its row describes it (family, operator, diff, canaries), or the variant, described when written.
_Described = tuple[str, str, str, list[Any]] | Variant
_Buffered = tuple[EpisodeRecord, float, str, _Described | None]  # record, when it was put, digest, its variant


def _describe(variant: Variant) -> tuple[str, str, str, list[Any]]:
    return variant.family, variant.operator, variant.edit_text, [asdict(c) for c in variant.canaries]


def _episodes_ddl(table: str) -> str:
    cols = ", ".join(f"{c} {_TYPES[c]}" for c in _STORED)
    return f"CREATE TABLE IF NOT EXISTS {table} ({cols}, PRIMARY KEY ({', '.join(KEY)}))"


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
    """SQLite-backed episode store (``readonly=True``: never writes, not even the schema)."""

    def __init__(self, path: Path | str, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._have: set[str] = set()
        self._variants_written: set[str] = set()  # digests this connection already wrote to ``variants``
        # the batch not yet committed: episode key -> (record, when it was put, digest, variant described or None)
        self._pending: dict[tuple[Any, ...], _Buffered] = {}
        self._pending_variants: dict[str, _Described] = {}  # put_variant's rows not yet committed
        self._raised: set[tuple[Any, ...]] = set()  # buffered episodes whose own put raised (their item's ERROR)
        self._oldest = 0.0  # monotonic time the batch's first row was buffered
        self._writing: dict[tuple[Any, ...], _Buffered] = {}
        self._lock = threading.Lock()  # the buffer (see "the batch" below)
        self._wake = threading.Condition(self._lock)  # the writer waits on it for a batch to be due
        self._conn_lock = threading.RLock()  # the connection, shared with the writer's thread
        self._writer: threading.Thread | None = None  # started with the first buffered row
        self._closing = False
        self._failed = False  # the writer's last batch failed: due batches are committed by put (which raises)
        try:
            if readonly:
                self._conn = _connect_readonly(self.path)
                self._check_version()
                self._have = self._columns("episodes")
                missing = [k for k in KEY if k not in self._have and k != "repeat"] if self._have else []
                if missing:
                    raise StoreError(f"{self.path}: its episodes table lacks the key column(s) "
                                     f"{', '.join(missing)}: not a pytest-agentperturb store; fix: {_FIX}")
            else:
                for p in (self.path, *(self.path.with_name(self.path.name + x) for x in ("-wal", "-shm"))):
                    if p.is_symlink():  # the link's target may be anybody's file: never written through
                        raise StoreError(f"{p}: a symbolic link; the results store is never written through a "
                                         f"link; fix: point --agentperturb-store (or --store) at the file itself")
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None,
                                             check_same_thread=False)  # the writer's flush: under ``_conn_lock``
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute("PRAGMA busy_timeout=60000")
                self._create()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: not a usable results store ({exc}); fix: {_fix(exc)}") from None
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot open the results store ({exc}); fix: {_FIX}") from None

    def _columns(self, table: str) -> set[str]:
        with self._conn_lock:
            return {str(r[1]) for r in self._conn.execute(f"PRAGMA table_info({table})")}

    def _check_version(self) -> None:
        """Refuse a store written by a newer schema (its rows may mean something else)."""
        if "value" not in self._columns("meta"):
            return
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        try:
            version = int(row[0]) if row else 1
        except (TypeError, ValueError):
            raise StoreError(f"{self.path}: unreadable schema version {row[0]!r}; fix: {_FIX}") from None
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: written by a newer pytest-agentperturb (store schema {version}; this "
                             f"version reads up to {SCHEMA_VERSION}); fix: upgrade pytest-agentperturb, or {_FIX}")

    def _create(self) -> None:
        with self._tx():
            self._check_version()
            self._conn.execute(_episodes_ddl("episodes"))
            have = self._columns("episodes")
            missing = [k for k in KEY if k not in have and k != "repeat"]
            if missing:
                raise StoreError(f"{self.path}: its episodes table lacks the key column(s) {', '.join(missing)}: "
                                 f"not a pytest-agentperturb store; fix: {_FIX}")
            for c in _STORED:  # an older schema: add what it lacks (all nullable)
                if c not in have and c != "repeat":
                    self._conn.execute(f"ALTER TABLE episodes ADD COLUMN {c} {_TYPES[c]}")
            if "baseline" not in have:  # a version-1 store: the flag follows the built-in baselines' names
                self._conn.execute("UPDATE episodes SET baseline = (model LIKE 'reference/%')")
            if "repeat" not in have:  # schema 2 and older: the key gains the repeat (a rebuild)
                _migrate_repeat(self._conn)
            self._have = self._columns("episodes")
            self._conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, created REAL, config TEXT)"
            )
            self._conn.execute("CREATE TABLE IF NOT EXISTS variants (variant_digest TEXT PRIMARY KEY, "
                               "family TEXT, operator TEXT, diff TEXT, canaries TEXT)")

    def _tx(self) -> _Tx:
        return _Tx(self._conn)

    def close(self) -> None:
        """Commit what is buffered, then close the connection (closed even when the commit fails).

        Raises:
            StoreError: when the buffered episodes cannot be written (they are lost; the message counts them).
        """
        self._stop_writer()
        try:
            self.flush()
        finally:
            with self._conn_lock:
                try:  # in WAL mode its last write to the file: a full disk fails here too
                    self._conn.close()
                except sqlite3.Error as exc:
                    raise StoreError(f"{self.path}: cannot close the results store ({exc}); "
                                     f"fix: {_fix(exc)}") from None

    # -- the batch ----------------------------------------------------------------
    # Two locks: ``_lock`` guards the buffer (held for moments: pytest's thread never waits for a write behind
    # it), ``_conn_lock`` the connection (held through a batch's transaction, by the writer's thread or by a
    # read).  Never take ``_conn_lock`` while holding ``_lock``.
    def pending(self) -> int:
        """Episodes buffered and not yet committed (a batch being written counts until it is)."""
        with self._lock:
            return len(self._pending) + len(self._writing)

    def flush(self) -> None:
        """Commit the buffered episodes and variants in one transaction (nothing to do: no transaction).

        Raises:
            StoreError: naming the file and how many episodes are buffered; they stay buffered for the next try.
        """
        with self._conn_lock:
            with self._lock:
                if not self._pending and not self._pending_variants:
                    return
                taken, variants, oldest = dict(self._pending), dict(self._pending_variants), self._oldest
                self._writing = taken  # still seen by get() while it is written
                self._pending.clear()
                self._pending_variants.clear()
            try:
                self._put(list(taken.values()), variants)
            except Exception as exc:  # a StoreError below; a row that would not serialise (a bug) as it is
                with self._lock:  # back into the buffer, behind any newer row of the same key
                    for k, v in taken.items():
                        self._pending.setdefault(k, v)
                    for d, described in variants.items():
                        self._pending_variants.setdefault(d, described)
                    self._oldest = min(oldest, self._oldest) if len(self._pending) > len(taken) else oldest
                    self._writing = {}
                    unreported = len(self._pending.keys() - self._raised)
                    n = len(self._pending)
                if not isinstance(exc, sqlite3.Error):
                    raise
                what = f"{n} buffered episode(s)" if n else f"{len(variants)} buffered variant(s)"
                raise StoreError(f"{self.path}: cannot record {what} ({exc}); fix: {_fix(exc)}",
                                 unreported=unreported) from None
            with self._lock:
                self._writing = {}
                self._failed = False
                self._raised -= taken.keys()
                self._variants_written.update(variants)
                self._variants_written.update(d for _, _, d, described in taken.values() if d and described is not None)

    def _due(self) -> bool:
        """Under ``_lock``: whether the buffered batch is due (full, or its first row old enough)."""
        return bool(self._pending or self._pending_variants) and (
            len(self._pending) >= BATCH_ROWS or time.monotonic() - self._oldest >= BATCH_SECONDS)

    def _buffered(self) -> bool:
        """Under ``_lock``, a row just buffered: whether the caller commits the batch itself.

        It does only when the batch is due and the writer's last write failed
        (then the error is the caller's item's to report); otherwise the
        writer is woken (started with the first row) and pytest's thread goes on.
        """
        if self._failed or self._closing:
            return self._due()
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="agentperturb-store-writer", daemon=True)
            self._writer.start()
        if len(self._pending) + len(self._pending_variants) == 1 or len(self._pending) >= BATCH_ROWS:
            self._wake.notify()  # a new batch (the writer learns its deadline), or a full one; else it sleeps on
        return False

    def _write_loop(self) -> None:
        """The writer's thread: commit each batch when it is due, until :meth:`close` (a failure stays buffered)."""
        while True:
            with self._lock:
                while not self._closing and (self._failed or not self._due()):
                    wait = None if self._failed or not (self._pending or self._pending_variants) \
                        else max(0.0, BATCH_SECONDS - (time.monotonic() - self._oldest))
                    self._wake.wait(wait)
                if self._closing:
                    return
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - a StoreError, or a row that would not serialise (a bug)
                with self._lock:  # either way the next put whose batch is due writes it, and raises for its item
                    self._failed = True

    def _stop_writer(self) -> None:
        with self._lock:
            self._closing = True
            self._wake.notify()
            writer, self._writer = self._writer, None
        if writer is not None and writer is not threading.current_thread():
            writer.join()

    def _start_batch(self) -> None:
        if not self._pending and not self._pending_variants:
            self._oldest = time.monotonic()

    def record_run(self, run_id: str, config: dict[str, Any]) -> None:
        """Remember a run's configuration (first writer wins; a run :meth:`claim_run` reserved gets it)."""
        try:
            with self._conn_lock, self._tx():
                self._conn.execute(f"INSERT INTO runs VALUES (?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                                   f"config = excluded.config WHERE runs.config = '{_CLAIMED}'",
                                   (run_id, time.time(), json.dumps(config, sort_keys=True)))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot record the run ({exc}); fix: {_fix(exc)}") from None

    def claim_run(self, base: str) -> str:
        """Reserve a run id no run of this store has: ``base``, else ``base-2``, ``base-3``, ...

        Chosen and recorded in one write transaction (its configuration
        empty until :meth:`record_run`), so sessions started in the same
        second against one store each get their own.

        Raises:
            StoreError: naming the file, when SQLite cannot write.
        """
        try:
            with self._conn_lock, self._tx():
                taken = {str(r[0]) for r in self._conn.execute("SELECT run_id FROM runs")}
                taken.update(str(r[0]) for r in self._conn.execute("SELECT DISTINCT run_id FROM episodes"))
                n, run_id = 1, base
                while run_id in taken:
                    n += 1
                    run_id = f"{base}-{n}"
                self._conn.execute("INSERT INTO runs VALUES (?, ?, ?)", (run_id, time.time(), _CLAIMED))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot record the run ({exc}); fix: {_fix(exc)}") from None
        return run_id

    def put(self, rec: EpisodeRecord, variant_digest: str = "", variant: Variant | None = None) -> None:
        """Insert or replace one episode (with its variant's diff and canaries), committed with its batch.

        Raises:
            StoreError: naming the file, when the writer could not commit an earlier batch and this one,
                due now, cannot be written either (disk full, locked, read-only).
        """
        described = None if variant_digest in self._variants_written else variant  # (described by the writer)
        self._put_safely(rec, variant_digest, described)

    def put_row(self, row: dict[str, Any]) -> None:
        """Insert or replace one episode given as a row: the inverse of :meth:`rows`.

        The row holds the :data:`STORE_COLUMNS` (the trajectory as a list or
        as JSON text), ``variant_digest``, and the variant's ``diff`` and
        ``canaries`` (a list of dicts or JSON text).  This is how the xdist
        controller stores the episodes its workers report.

        Raises:
            StoreError: naming the file, when SQLite cannot write.
        """
        rec = EpisodeRecord.from_row(row)
        digest = str(row.get("variant_digest") or "")
        canaries = row.get("canaries") or []
        if isinstance(canaries, str):
            canaries = json.loads(canaries)
        self._put_safely(rec, digest, (rec.family, rec.operator, str(row.get("diff") or ""), list(canaries)))

    def _put_safely(self, rec: EpisodeRecord, variant_digest: str, described: _Described | None) -> None:
        """Buffer one episode (replacing a buffered one of its key); the writer serialises and commits it.

        The record is not copied: nothing changes a record once it is put (its trajectory is the episode's
        own JSON-safe copy, ``run.episode``).
        """
        key = tuple(rec.key)
        with self._lock:
            self._start_batch()
            self._pending[key] = (rec, time.time(), variant_digest, described)
            due = self._buffered()
        if due:
            try:
                self.flush()
            except StoreError:
                with self._lock:
                    self._raised.add(key)  # its item reports the error; the row stays buffered for the next try
                raise

    def _put(self, batch: list[_Buffered], variants: dict[str, _Described]) -> None:
        """One transaction: the batch's episodes, and their variants (family, operator, diff, canaries) if new."""
        rows = [[*rec.to_row().values(), digest, at] for rec, at, digest, _ in batch]  # in STORE_COLUMNS order
        with self._tx():
            self._conn.executemany(_INSERT_EPISODE, rows)
            new = dict(variants)
            for _, _, digest, described in batch:
                if described is not None and digest:
                    new.setdefault(digest, described)
            for digest, described in new.items():
                if digest not in self._variants_written:
                    self._put_variant(digest, described)

    def put_variant(self, variant_digest: str, variant: Variant) -> None:
        """Record a variant's diff and canaries if the store lacks them (a reused episode of an older store).

        Buffered like an episode (committed with the batch).

        Raises:
            StoreError: naming the file, when the batch is due and SQLite cannot write.
        """
        if variant_digest in self._variants_written or variant_digest in self._pending_variants:
            return
        with self._lock:
            self._start_batch()
            self._pending_variants[variant_digest] = variant  # described by the writer
            due = self._buffered()
        if due:
            self.flush()

    def _put_variant(self, variant_digest: str, described: _Described) -> None:
        """Write a variant's row (family, operator, diff, canaries) unless one exists; inside a transaction."""
        family, operator, diff, canaries = _describe(described) if isinstance(described, Variant) else described
        text = json.dumps(canaries, ensure_ascii=False, sort_keys=True)
        self._conn.execute("INSERT OR IGNORE INTO variants VALUES (?, ?, ?, ?, ?)",
                           (variant_digest, family, operator, diff, text))

    def _select(self, prefix: str = "", skip: tuple[str, ...] = ()) -> str:
        """The stored columns, read from an older schema too (a missing or skipped column reads as NULL)."""
        def col(c: str) -> str:
            if c in skip:
                return "NULL"
            if c in self._have:
                return prefix + c
            if c == "baseline":
                return f"({prefix}model LIKE 'reference/%')"
            if c == "repeat":
                return "0"
            return "NULL"
        return ", ".join(col(c) for c in _STORED)

    def _order(self, prefix: str = "") -> str:
        """ORDER BY the key (a store older than repeats has none: every row is repeat 0)."""
        return ", ".join(prefix + k for k in KEY if k in self._have)

    def _read(self, sql: str, args: tuple[Any, ...] = (), *, flush: bool = True) -> list[Any]:
        """Rows of a query, what is buffered committed first (unless ``flush=False``: the caller looked there)."""
        if not self._have:  # an empty file or a store without episodes yet
            return []
        if flush:
            self.flush()
        try:
            with self._conn_lock:
                return list(self._conn.execute(sql, args))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the results store ({exc}); fix: {_FIX}") from None

    def _fetch(self, cursor: sqlite3.Cursor, n: int) -> list[Any]:
        with self._conn_lock:
            return cursor.fetchmany(n)

    def get(self, key: EpisodeKey, variant_digest: str) -> EpisodeRecord | None:
        """A recorded, error-free episode of that key and variant, if any (a buffered one too: no commit)."""
        with self._lock:
            buffered = self._pending.get(tuple(key)) or self._writing.get(tuple(key))
        if buffered is not None:
            rec, _, digest, _ = buffered
            return rec if digest == variant_digest and not rec.error else None
        q = " AND ".join(f"{k} = ?" if k in self._have else "? = 0" for k in KEY)
        rows = self._read(f"SELECT {self._select()} FROM episodes WHERE {q} AND variant_digest = ? "
                          "AND (error IS NULL OR error = '')", (*key, variant_digest), flush=False)
        return EpisodeRecord.from_row(dict(zip(STORE_COLUMNS, rows[0]))) if rows else None

    def finished(self, run_id: str) -> list[dict[str, Any]]:
        """The recorded, error-free episodes of one run, without their trajectories: what resume reuses.

        Each row holds the :data:`STORE_COLUMNS` (``trajectory`` NULL) and
        ``variant_digest``; the xdist controller sends them to its workers.
        """
        rows = self._read(f"SELECT {self._select(skip=('trajectory',))} FROM episodes WHERE run_id = ? "
                          f"AND (error IS NULL OR error = '') ORDER BY {self._order()}", (run_id,))
        return [dict(zip(_STORED, r)) for r in rows]

    def episodes(self, run_id: str | None = None) -> Iterator[EpisodeRecord]:
        """All episodes (of one run), in key order."""
        where, args = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        for row in self._read(f"SELECT {self._select()} FROM episodes {where} ORDER BY {self._order()}", args):
            yield EpisodeRecord.from_row(dict(zip(STORE_COLUMNS, row)))

    def rows(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Episode rows (of one run) joined with their variant's ``diff`` and ``canaries`` (JSON text).

        Each row also carries ``variant_digest`` and ``recorded_at``.
        """
        return list(self.iter_rows(run_id))

    def iter_rows(self, run_id: str | None = None) -> Iterator[dict[str, Any]]:
        """:meth:`rows` one at a time, read as they are consumed (a long run is never all in memory here)."""
        if not self._have:  # an empty file or a store without episodes yet
            return
        where, args = ("WHERE e.run_id = ?", (run_id,)) if run_id else ("", ())
        names = _JOINED
        try:
            if {"diff", "canaries", "variant_digest"} <= self._columns("variants") and "variant_digest" in self._have:
                sql = (f"SELECT {self._select('e.')}, v.diff, v.canaries FROM episodes e LEFT JOIN variants v "
                       f"ON v.variant_digest = e.variant_digest {where} ORDER BY {self._order('e.')}")
            else:
                sql = (f"SELECT {self._select('e.')}, NULL, NULL FROM episodes e {where} "
                       f"ORDER BY {self._order('e.')}")
            self.flush()
            with self._conn_lock:
                cursor = self._conn.execute(sql, args)
            while batch := self._fetch(cursor, 256):
                for r in batch:
                    yield dict(zip(names, r))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the results store ({exc}); fix: {_FIX}") from None

    def runs(self) -> list[str]:
        """Run ids in the store, oldest first."""
        ids = self._read("SELECT DISTINCT run_id FROM episodes")   # the key's index alone: no table scan
        if len(ids) < 2:
            return [str(r[0]) for r in ids]
        order = "MIN(recorded_at)" if "recorded_at" in self._have else "run_id"
        return [str(r[0]) for r in self._read(f"SELECT run_id FROM episodes GROUP BY run_id ORDER BY {order}")]

    def listing(self) -> Iterator[dict[str, Any]]:
        """Every episode of every run without its trajectory, in key order, read as consumed (``agentperturb view``).

        Each row holds the :data:`STORE_COLUMNS` (``trajectory`` NULL), ``variant_digest`` and ``recorded_at``.
        """
        if not self._have:
            return
        self.flush()
        try:
            with self._conn_lock:
                cursor = self._conn.execute(f"SELECT {self._select(skip=('trajectory',))} FROM episodes "
                                            f"ORDER BY {self._order()}")
            while batch := self._fetch(cursor, 512):
                for r in batch:
                    yield dict(zip(_STORED, r))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the results store ({exc}); fix: {_FIX}") from None

    def run_configs(self) -> dict[str, tuple[float | None, dict[str, Any]]]:
        """Run id -> (when it was recorded, its configuration), from the ``runs`` table (empty without one)."""
        if not {"run_id", "created", "config"} <= self._columns("runs"):
            return {}
        out: dict[str, tuple[float | None, dict[str, Any]]] = {}
        for run_id, created, config in self._read("SELECT run_id, created, config FROM runs"):
            try:
                cfg = json.loads(config) if config else {}
            except ValueError:
                cfg = {}
            out[str(run_id)] = (float(created) if isinstance(created, (int, float)) else None,
                                cfg if isinstance(cfg, dict) else {})
        return out

    def count(self, run_id: str | None = None) -> int:
        where, args = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        rows = self._read(f"SELECT COUNT(*) FROM episodes {where}", args)
        return int(rows[0][0]) if rows else 0


class _Tx:
    """One write transaction: ``BEGIN IMMEDIATE``, then ``COMMIT`` (``ROLLBACK`` on an exception)."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write (``mode=ro``); ``immutable`` where the folder is read-only too.

    Opening never creates the file, a journal or a schema.
    """
    if not path.is_file():
        raise StoreError(f"{path}: no results store here; run pytest --agentperturb first or pass --store PATH")
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    for suffix in ("", "&immutable=1"):  # a WAL store in a read-only folder: no -shm file can be made
        conn = sqlite3.connect(uri + suffix, uri=True, timeout=60.0, isolation_level=None)
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            conn.close()
            if suffix:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def write_tables(path: Path | str, tables: Iterable[tuple[str, Sequence[tuple[str, str]], Iterable[Sequence[Any]],
                                                         Sequence[Sequence[str]]]]) -> None:
    """Write a new SQLite file of plain tables (``agentperturb view``'s snapshot of a store).

    Each table is (name, [(column, SQL type)], rows, indexes: column lists); names are the caller's own
    identifiers, never data.  The file must not exist yet.

    Raises:
        StoreError: naming the file, when it exists or SQLite cannot write it.
    """
    p = Path(path)
    if p.exists():
        raise StoreError(f"{p}: exists already; the snapshot is written to a new file")
    try:
        with closing(sqlite3.connect(p, isolation_level=None)) as conn:
            conn.execute("BEGIN")
            for name, cols, rows, indexes in tables:
                conn.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)})")
                conn.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)
                for i, idx in enumerate(indexes):
                    conn.execute(f"CREATE INDEX {name}_{i} ON {name} ({', '.join(idx)})")
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise StoreError(f"{p}: cannot write the snapshot ({exc})") from None


def read_rows(path: Path | str, run_id: str | None = None) -> list[dict[str, Any]]:
    """The episode rows of ``run_id`` (None: every run) in a store file, opened read-only (:meth:`Store.rows`)."""
    with closing(Store(path, readonly=True)) as s:
        return s.rows(run_id)


def read_episodes(path: Path | str, run_id: str | None = None) -> list[EpisodeRecord]:
    """Every episode in a store file (opened read-only)."""
    with closing(Store(path, readonly=True)) as s:
        return list(s.episodes(run_id))


def put_all(path: Path | str, records: Iterable[EpisodeRecord]) -> None:
    """Write several records (tests and imports)."""
    with closing(Store(path)) as s:
        for r in records:
            s.put(r)
