"""The project store: one SQLite database (WAL) per project home, blobs beside it.

`Store` is a writer (aiosqlite; each run's engine writes its own run). `ReadStore` is the
read-only view used by the TUI and `cuco report` (plain sqlite3 with mode=ro). Every change that a
viewer should see is written together with its event, in one transaction: a crash leaves either both
or neither.

Writes reach the database in the order they were made (one FIFO): a `Batch` submitted with `submit`
waits a moment for company and goes with the others in one trip to the database thread and one commit;
`transaction()` (for writes that read back) first sends what is queued.

Several engines may write one home at once (runs and forks side by side), so nothing is numbered in memory:
an event's `seq` is the database's, given by its INSERT inside the write transaction. Write transactions
are serial (BEGIN IMMEDIATE), so seqs rise in commit order across every writer and a viewer reading
`seq > last` never skips an event committed late. Candidate ids are needed before their row is written
(a proposal's jobs and events name it), so each writer reserves a block of them from the `id_counters`
row in a write transaction of its own (docs/engine.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from ..contract import Event, checked
from .blobs import BlobStore
from .schema import SCHEMA_VERSION, pending_migrations
from .store_check import check_store_file, connect_for_reading, damaged, empty_store, not_usable

log = logging.getLogger(__name__)

DB_NAME = "cuco.db"
DB_TIMEOUT_S = 30.0
CANDIDATE_ID_BLOCK = 64  # ids a writer reserves at a time (unused ones are skipped, never reused)
GROUP_WINDOW_S = 0.003  # a submitted batch waits this long for others (one trip and one commit for all)
READ_RETRIES = 3  # a reader's "disk I/O error" beside writers coming and going: reopen and read again
LAZY_WINDOW_S = 0.25  # display-only writes (a stage start) wait at most this long


def _pragmas() -> list[str]:
    return [
        "PRAGMA journal_mode=WAL",
        "PRAGMA synchronous=NORMAL",
        "PRAGMA foreign_keys=ON",
        "PRAGMA busy_timeout=10000",
    ]


def _row_dict(cursor: sqlite3.Cursor | aiosqlite.Cursor, row: Sequence[Any]) -> dict[str, Any]:
    return {d[0]: v for d, v in zip(cursor.description, row)}


class Store:
    """One writer of the home (an engine, or the CLI briefly); others may write beside it."""

    def __init__(self, home: Path):
        self.home = Path(home)
        self.db_path = self.home / DB_NAME
        self.blobs = BlobStore(self.home / "blobs")
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._ids: list[int] = []  # candidate ids reserved for this writer, not yet handed out
        self.on_event: Callable[[dict[str, Any]], None] | None = None  # set by the engine / daemon
        self._queue: list[tuple[Batch, asyncio.Future]] = []  # submitted, not yet sent
        self._flush_at: asyncio.TimerHandle | None = None
        self._flusher: asyncio.Task | None = None

    async def open(self) -> Store:
        self.home.mkdir(parents=True, exist_ok=True)
        check_store_file(self.db_path)  # garbage, foreign or newer: a clear error, not a traceback
        self._db = await asyncio.wait_for(aiosqlite.connect(self.db_path, isolation_level=None), DB_TIMEOUT_S)
        try:
            for pragma in _pragmas():
                await self._db.execute(pragma)
            await self._check_pages()
            await self._migrate()
        except BaseException as exc:  # a damaged store, or SQLite's refusal: closed, then said
            await self._db.close()
            self._db = None
            if isinstance(exc, sqlite3.Error):
                raise (not_usable(self.db_path, exc) or exc) from None
            raise
        return self

    async def reserve_candidate_ids(self, n: int = 1) -> None:
        """Make sure `n` ids are reserved for `next_candidate_id` (a trip to the database only when the
        block is used up)."""
        assert self._db is not None, "store not open"
        if len(self._ids) >= n:
            return
        want = max(n - len(self._ids), CANDIDATE_ID_BLOCK)
        async with self._lock:  # never inside another writer's open transaction on this connection
            start = await asyncio.wait_for(self._db._execute(_reserve_ids, self._db._conn, want, True), DB_TIMEOUT_S)
        self._ids.extend(range(start, start + want))

    def next_candidate_id(self) -> int:
        """A reserved id (`reserve_candidate_ids` first), so a proposal needs no round trip to get one."""
        if not self._ids:
            raise RuntimeError("no candidate id reserved: await store.reserve_candidate_ids() first")
        return self._ids.pop(0)

    async def run_batch(self, statements: list[tuple[str, tuple]]) -> None:
        """Several statements in one trip to the database thread (a transaction's writes)."""
        assert self._db is not None

        def batch(conn: sqlite3.Connection) -> None:
            for row in statements:
                _execute(conn, row)

        await asyncio.wait_for(self._db._execute(batch, self._db._conn), DB_TIMEOUT_S)

    async def close(self) -> None:
        if self._db is not None:
            # What was submitted is written, never dropped; a trip under way (it holds the lock) ends first.
            await asyncio.wait_for(self._lock.acquire(), DB_TIMEOUT_S)
            try:
                await self._drain()
            finally:
                self._lock.release()
            if self._flush_at is not None:
                self._flush_at.cancel()
                self._flush_at = None
            await asyncio.wait_for(self._db.close(), DB_TIMEOUT_S)
            self._db = None

    # ----- batched writes -------------------------------------------------------------------------

    def submit(self, batch: Batch, lazy: bool = False) -> asyncio.Future:
        """Queue a batch's writes; the future gives its events' seqs once they are committed (or the
        error that undid this batch alone). `lazy`: nobody waits on it, it may ride with a later trip."""
        assert self._db is not None, "store not open"
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._queue.append((batch, done))
        due = loop.time() + (LAZY_WINDOW_S if lazy else GROUP_WINDOW_S)
        if self._flush_at is None or self._flush_at.when() > due:
            if self._flush_at is not None:
                self._flush_at.cancel()
            self._flush_at = loop.call_at(due, self._start_flush)
        return done

    def _start_flush(self) -> None:
        self._flush_at = None
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        async with self._lock:
            await self._drain()

    async def _drain(self) -> None:
        """Send every queued batch (the caller holds the lock): one trip, one commit. A batch that fails
        is undone alone; the others still commit. Errors go to the batches' futures, not to the caller."""
        assert self._db is not None
        while self._queue:
            queued, self._queue = self._queue, []
            groups = [batch.rows(self) for batch, _ in queued]
            trip = asyncio.ensure_future(
                asyncio.wait_for(self._db._execute(_commit_groups, self._db._conn, groups), DB_TIMEOUT_S)
            )
            # settled by the trip itself: a cancelled waiter neither loses the outcome nor reorders trips
            trip.add_done_callback(functools.partial(self._settle, queued))
            try:
                await asyncio.shield(trip)
            except Exception:
                pass

    def _settle(self, queued: list[tuple[Batch, asyncio.Future]], trip: asyncio.Future) -> None:
        failure = RuntimeError("the write was cancelled") if trip.cancelled() else trip.exception()
        if failure is not None:
            for _, done in queued:
                if not done.done():
                    done.set_exception(failure)
            return
        for (batch, done), error in zip(queued, trip.result()):
            if error is not None:
                if not done.done():
                    done.set_exception(error)
                continue
            if self.on_event is not None:
                for event in batch.delivered:
                    try:
                        self.on_event(event)
                    except Exception:  # a viewer's bug must not leave the writer waiting forever
                        log.exception("delivering event %s", event.get("seq"))
            if not done.done():
                done.set_result([e["seq"] for e in batch.delivered])

    async def _check_pages(self) -> None:
        """Refuse a damaged store before writing to it: SQLite writes into one whose untouched pages are
        garbage, and the write would look like a success. `quick_check` reads every page once (a
        fraction of a second for a store of tens of MB)."""
        assert self._db is not None
        cur = await self._db.execute("PRAGMA quick_check(1)")
        row = await cur.fetchone()
        if row is not None and row[0] != "ok":
            raise damaged(self.db_path, str(row[0])[:200])

    async def _migrate(self) -> None:
        assert self._db is not None
        await self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        cur = await self._db.execute("SELECT value FROM meta WHERE key='schema_version'")
        row = await cur.fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.db_path}: schema version {version} is newer than this cuco ({SCHEMA_VERSION}); upgrade cuco"
            )
        for _, script in pending_migrations(version):
            await self._db.executescript("BEGIN;" + script + "COMMIT;")

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """Writes that need no answer are buffered and sent with COMMIT in one trip; a read or an
        insert whose id is needed sends what is buffered first."""
        assert self._db is not None, "store not open"
        async with self._lock:
            await self._drain()  # what was submitted before goes first
            tx = Tx(self._db, self)
            try:
                yield tx
                tx.pending.append(("COMMIT", ()))
                await asyncio.shield(tx.flush())
            except BaseException:
                if tx.began:
                    await asyncio.shield(self._rollback())
                raise
        if self.on_event is not None:
            for event in tx.events:
                self.on_event(event)

    async def _rollback(self) -> None:
        assert self._db is not None
        if self._db._conn.in_transaction:
            await self._db.execute("ROLLBACK")

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        assert self._db is not None
        async with self._lock:
            await self._drain()  # a read sees every write made before it
            cur = await self._db.execute(sql, tuple(params))
            rows = await cur.fetchall()
            return [_row_dict(cur, r) for r in rows]

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> dict[str, Any] | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    # Convenience writes, each its own transaction with its event.

    async def event(self, run_id: str | None, record: Event) -> int:
        batch = Batch()
        batch.event(run_id, record)
        return (await asyncio.shield(self.submit(batch)))[0]


class _EventInsert(tuple):
    """An event's INSERT; executing it gives its `event` dict the seq the database chose."""

    event: dict[str, Any]


def _event_row(run_id: str | None, ts: float, kind: str, data: dict[str, Any]) -> _EventInsert:
    row = _EventInsert(
        (
            "INSERT INTO events (run_id, ts, kind, data_json) VALUES (?,?,?,?)",
            (run_id, ts, kind, json.dumps(data, default=str, sort_keys=True)),
        )
    )
    row.event = {"seq": None, "run": run_id, "ts": ts, "kind": kind, "data": data}
    return row


def _execute(conn: sqlite3.Connection, row: tuple[str, tuple]) -> None:
    cur = conn.execute(*row)
    if isinstance(row, _EventInsert):
        row.event["seq"] = cur.lastrowid


def _reserve_ids(conn: sqlite3.Connection, n: int, own_transaction: bool) -> int:
    """Runs in the database thread: the first of `n` candidate ids no writer has or will have. Above every
    existing row too (a store written before the counter, or rows inserted without an id)."""
    if own_transaction:
        conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT next FROM id_counters WHERE name='candidates'").fetchone()
        top = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM candidates").fetchone()[0]
        start = max(row[0] if row else 1, top)
        conn.execute(
            "INSERT INTO id_counters (name, next) VALUES ('candidates', ?) "
            "ON CONFLICT(name) DO UPDATE SET next=excluded.next",
            (start + n,),
        )
        if own_transaction:
            conn.execute("COMMIT")
    except BaseException:
        if own_transaction and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return start


def _commit_groups(conn: sqlite3.Connection, groups: list[list[tuple[str, tuple]]]) -> list[Exception | None]:
    """Runs in the database thread: all groups in one transaction; if one fails, each group again in its
    own transaction, so only the failing one is lost. Returns each group's error (None: committed)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        for group in groups:
            for row in group:
                _execute(conn, row)
        conn.execute("COMMIT")
        return [None] * len(groups)
    except Exception:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if len(groups) == 1:
            raise
    errors: list[Exception | None] = []
    for group in groups:
        try:
            conn.execute("BEGIN IMMEDIATE")
            for row in group:
                _execute(conn, row)
            conn.execute("COMMIT")
            errors.append(None)
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            errors.append(exc)
    return errors


class Batch:
    """The writes of one transaction that needs no answer from the database, made without awaiting and
    sent by `Store.submit` with others. Its events get their `seq` from the database when it is written."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple]] = []
        self.events: list[tuple[str | None, float, str, dict[str, Any]]] = []
        self.delivered: list[dict[str, Any]] = []

    def execute(self, sql: str, params: tuple = ()) -> None:
        self.statements.append((sql, params))

    def event(self, run_id: str | None, record: Event) -> None:
        """Queue an event the contract declares (engine/contract.py); any other is refused now."""
        self.events.append((run_id, time.time(), checked(record).kind, record.data()))

    def rows(self, store: Store) -> list[tuple[str, tuple]]:
        """The statements to send; each event's dict gets its seq when its INSERT runs."""
        rows: list[tuple[str, tuple]] = list(self.statements)
        self.delivered = []
        for run_id, ts, kind, data in self.events:
            row = _event_row(run_id, ts, kind, data)
            rows.append(row)
            self.delivered.append(row.event)
        return rows


class Tx:
    """Statements inside one transaction; events are delivered to live viewers after the commit."""

    def __init__(self, db: aiosqlite.Connection, store: Store):
        self.db = db
        self.store = store
        self.events: list[dict[str, Any]] = []
        self.pending: list[tuple[str, tuple]] = [("BEGIN IMMEDIATE", ())]
        self.began = False

    async def flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.began = True
            await self.store.run_batch(batch)

    async def execute(self, sql: str, params: Iterable[Any] = ()) -> None:
        self.pending.append((sql, tuple(params)))

    async def insert(self, sql: str, params: Iterable[Any] = ()) -> int:
        await self.flush()
        cur = await self.db.execute(sql, tuple(params))
        if cur.lastrowid is None:
            raise RuntimeError(f"no row id after {sql!r}")
        return cur.lastrowid

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> dict[str, Any] | None:
        await self.flush()
        cur = await self.db.execute(sql, tuple(params))
        row = await cur.fetchone()
        return _row_dict(cur, row) if row else None

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[Sequence[Any]]:
        await self.flush()
        return list(await self.db.execute_fetchall(sql, tuple(params)))

    async def event(self, run_id: str | None, record: Event) -> int:
        """Written now (its seq is the database's), delivered to viewers after the commit. Only an event
        the contract declares (engine/contract.py)."""
        row = _event_row(run_id, time.time(), checked(record).kind, record.data())
        self.pending.append(row)
        await self.flush()
        self.events.append(row.event)
        return int(row.event["seq"])

    async def reserve_candidate_ids(self, n: int) -> list[int]:
        """`n` candidate ids reserved inside this transaction (see `Store.reserve_candidate_ids`)."""
        await self.flush()
        start = await asyncio.wait_for(self.db._execute(_reserve_ids, self.db._conn, n, False), DB_TIMEOUT_S)
        return list(range(start, start + n))


def _schema_version(conn: sqlite3.Connection) -> int:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.OperationalError:  # no meta table: a store from before versions
        return 0
    return int(row[0]) if row else 0


def _statements(script: str) -> list[str]:
    """A script's statements, one by one (SQLite's own test of where a statement ends)."""
    out, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                out.append(pending)
            pending = ""
    return out


def bring_up_to_date(db_path: Path) -> None:
    """A store an earlier cuco wrote, migrated before it is read: the readers' queries name today's columns,
    and the migrations only ever add. Each step in one immediate transaction that reads the version again
    first, so two commands starting at once migrate it once."""
    with contextlib.closing(sqlite3.connect(db_path, timeout=DB_TIMEOUT_S, isolation_level=None)) as conn:
        for v, script in pending_migrations(_schema_version(conn)):
            conn.execute("BEGIN IMMEDIATE")
            try:
                if _schema_version(conn) < v:
                    for statement in _statements(script):  # executescript would commit the transaction first
                        conn.execute(statement)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise


class ReadStore:
    """Read-only view (TUI, report, CLI). Never writes; safe beside a live engine (WAL)."""

    def __init__(self, home: Path):
        self.home = Path(home)
        self.db_path = self.home / DB_NAME
        if not self.db_path.exists():
            raise FileNotFoundError(f"{self.db_path}: no cuco store here (run `cuco run` first, or pass --home)")
        if not check_store_file(self.db_path):
            raise empty_store(self.db_path)
        self.blobs = BlobStore(self.home / "blobs")
        self._conn = connect_for_reading(self.db_path, DB_TIMEOUT_S, check_same_thread=False)
        if _schema_version(self._conn) < SCHEMA_VERSION:
            self._conn.close()
            bring_up_to_date(self.db_path)
            self._conn = connect_for_reading(self.db_path, DB_TIMEOUT_S, check_same_thread=False)

    def close(self) -> None:
        self._conn.close()

    def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        for attempt in range(READ_RETRIES + 1):
            try:
                cur = self._conn.execute(sql, tuple(params))
                return [_row_dict(cur, r) for r in cur.fetchall()]
            except sqlite3.OperationalError as exc:
                # A read-only connection cannot recreate the WAL's -shm and -wal files, which the last writer
                # to close deletes: with engines and CLI commands coming and going it now and then reads
                # "disk I/O error". A fresh connection reads again.
                if "disk I/O error" not in str(exc) or attempt == READ_RETRIES:
                    raise
                time.sleep(0.05 * (attempt + 1))
                self._reopen()
        raise AssertionError("unreachable")

    def _reopen(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._conn = connect_for_reading(self.db_path, DB_TIMEOUT_S, check_same_thread=False)

    def fetchone(self, sql: str, params: Iterable[Any] = ()) -> dict[str, Any] | None:
        rows = self.fetchall(sql, params)
        return rows[0] if rows else None

    def runs(self) -> list[dict[str, Any]]:
        return self.fetchall("SELECT * FROM runs ORDER BY created_at")

    def run(self, run_id: str) -> dict[str, Any] | None:
        return self.fetchone("SELECT * FROM runs WHERE id=?", (run_id,))

    def candidate(self, candidate_id: int) -> dict[str, Any] | None:
        return self.fetchone("SELECT * FROM candidates WHERE id=?", (candidate_id,))

    def candidates(
        self, run_id: str, limit: int = 5000, offset: int = 0, order: str = "id DESC"
    ) -> list[dict[str, Any]]:
        if order not in ("id DESC", "id", "fitness DESC", "speedup DESC"):
            raise ValueError(f"unsupported order {order!r}")
        return self.fetchall(
            f"SELECT * FROM candidates WHERE run_id=? ORDER BY {order} LIMIT ? OFFSET ?", (run_id, limit, offset)
        )

    def events_since(self, since: int, run_id: str | None = None, limit: int = 10000) -> list[dict[str, Any]]:
        if run_id is None:
            rows = self.fetchall("SELECT * FROM events WHERE seq>? ORDER BY seq LIMIT ?", (since, limit))
        else:
            rows = self.fetchall(
                "SELECT * FROM events WHERE seq>? AND run_id=? ORDER BY seq LIMIT ?", (since, run_id, limit)
            )
        return [
            {"seq": r["seq"], "run": r["run_id"], "ts": r["ts"], "kind": r["kind"], "data": json.loads(r["data_json"])}
            for r in rows
        ]

    def source(self, candidate_id: int) -> str:
        row = self.candidate(candidate_id)
        if row is None:
            raise KeyError(candidate_id)
        return self.blobs.get_text(row["source_hash"])

    def latest_mark(self, candidate_id: int) -> dict[str, Any] | None:
        return self.fetchone("SELECT * FROM marks WHERE candidate_id=? ORDER BY id DESC LIMIT 1", (candidate_id,))
