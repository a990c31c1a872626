"""The project store (engine/store/store.py): WAL, schema version, events, atomic transactions, read-only
readers, event delivery after commit, content-addressed blobs. Real SQLite files in tmp_path."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.contract import Log
from engine.store.schema import SCHEMA_VERSION
from engine.store.store import DB_NAME, Batch, ReadStore, Store
from remote.errors import InputError


@pytest.fixture
async def store(tmp_path: Path):
    s = await Store(tmp_path / "home").open()
    try:
        yield s
    finally:
        await s.close()


def note(text: str) -> Log:
    """An event told apart by its message (the store writes every declared kind the same way)."""
    return Log(level="info", message=text)


def messages(rows: list[dict]) -> list[str]:
    return [json.loads(r["data_json"])["message"] for r in rows]


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=10)


async def add_run(tx, run_id: str = "r1") -> None:
    now = time.time()
    await tx.execute(
        "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, updated_at) "
        "VALUES (?,?,?,?,?,?,?)",
        (run_id, "demo", "/x", "running", "{}", now, now),
    )


async def add_candidate(tx, run_id: str = "r1", number: int = 0, source_hash: str = "h0") -> int:
    return await tx.insert(
        "INSERT INTO candidates (run_id, number, island, generation, operator, mutator, source_hash, "
        "descriptor_json, cell, status, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (run_id, number, 0, 0, "seed", "design-space", source_hash, "{}", "c", "pending", time.time()),
    )


async def test_new_store_is_wal_with_schema_version(store: Store):
    assert store.db_path == store.home / DB_NAME and store.db_path.is_file()
    con = raw(store.db_path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()
    assert {"runs", "candidates", "evaluations", "jobs", "events", "marks", "llm_calls", "timelines"} <= tables


async def test_reopen_keeps_data_and_version(tmp_path: Path):
    home = tmp_path / "home"
    s = await Store(home).open()
    async with s.transaction() as tx:
        await add_run(tx)
        seq = await tx.event("r1", note("run_created"))
    await s.close()
    s2 = await Store(home).open()
    try:
        assert (await s2.fetchone("SELECT value FROM meta WHERE key='schema_version'"))["value"] == str(SCHEMA_VERSION)
        assert (await s2.fetchone("SELECT id FROM runs"))["id"] == "r1"
        assert await s2.event("r1", note("again")) > seq
    finally:
        await s2.close()


async def test_newer_schema_is_refused(tmp_path: Path):
    home = tmp_path / "home"
    s = await Store(home).open()
    await s.close()
    con = raw(home / DB_NAME)
    con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="newer cuco"):  # the CLI's exit 2, naming the file
        s2 = Store(home)
        try:
            await s2.open()
        finally:
            await s2.close()


async def test_event_seq_strictly_increasing(store: Store):
    seqs = [await store.event(None, note(f"tick {i}")) for i in range(5)]
    async with store.transaction() as tx:
        seqs += [await tx.event(None, note(f"tock {i}")) for i in range(5)]
    seqs.append(await store.event(None, note("tick 99")))
    assert all(b > a for a, b in zip(seqs, seqs[1:])), seqs
    rows = await store.fetchall("SELECT seq, kind, data_json FROM events ORDER BY seq")
    assert [r["seq"] for r in rows] == seqs
    assert json.loads(rows[6]["data_json"]) == {"level": "info", "message": "tock 1"}


async def test_seq_is_not_reused_after_a_rollback(store: Store):
    first = await store.event(None, note("a"))
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.event(None, note("doomed"))
            raise RuntimeError("boom")
    after = await store.event(None, note("b"))
    assert after > first
    assert messages(await store.fetchall("SELECT data_json FROM events ORDER BY seq")) == ["a", "b"]


async def test_failed_transaction_leaves_nothing(store: Store):
    delivered = []
    store.on_event = delivered.append
    async with store.transaction() as tx:
        await add_run(tx)
    delivered.clear()
    with pytest.raises(ValueError, match="mid-way"):
        async with store.transaction() as tx:
            cid = await add_candidate(tx)
            assert cid >= 1
            await tx.event("r1", note(f"candidate {cid} added"))
            raise ValueError("mid-way")
    assert await store.fetchall("SELECT * FROM candidates") == []
    assert await store.fetchall("SELECT * FROM events") == []
    assert delivered == []  # no viewer was told about what never happened
    # The store is usable afterwards (the transaction was really closed).
    async with store.transaction() as tx:
        await add_candidate(tx)
    assert len(await store.fetchall("SELECT * FROM candidates")) == 1


async def test_cancelled_transaction_rolls_back_and_store_stays_usable(store: Store):
    async with store.transaction() as tx:
        await add_run(tx)
    inside = asyncio.Event()

    async def writer():
        async with store.transaction() as tx:
            await add_candidate(tx)
            await tx.event("r1", note("x"))
            inside.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(writer())
    await asyncio.wait_for(inside.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.fetchall("SELECT * FROM candidates") == []
    assert await store.fetchall("SELECT * FROM events") == []
    seq = await asyncio.wait_for(store.event("r1", note("after")), 10)
    assert seq >= 1


async def test_read_store_cannot_write(store: Store):
    await store.event(None, note("hello"))
    rs = ReadStore(store.home)
    try:
        assert [e["data"]["message"] for e in rs.events_since(0)] == ["hello"]
        with pytest.raises(sqlite3.OperationalError):
            rs._conn.execute("INSERT INTO events (run_id, ts, kind, data_json) VALUES (NULL, 0, 'x', '{}')")
        with pytest.raises(sqlite3.OperationalError):
            rs.fetchall("DELETE FROM events")
    finally:
        rs.close()
    assert messages(await store.fetchall("SELECT data_json FROM events")) == ["hello"]


def test_read_store_without_database_says_what_to_do(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="cuco run"):
        ReadStore(tmp_path)
    assert not (tmp_path / DB_NAME).exists()  # opening read-only never creates a database


async def test_read_store_sees_commits_of_a_live_writer(store: Store):
    rs = ReadStore(store.home)
    try:
        s1 = await store.event(None, note("one"))
        assert [e["seq"] for e in rs.events_since(0)] == [s1]
        s2 = await store.event(None, note("two"))
        got = rs.events_since(s1)
        assert [(e["seq"], e["kind"], e["data"]) for e in got] == [(s2, "log", {"level": "info", "message": "two"})]
    finally:
        rs.close()


async def test_a_reader_opened_beside_a_writer_keeps_its_wal_when_another_process_closes(store: Store):
    """An engine opens its read view beside its writer (the daemon does). Checking the store file must not
    drop the writer's locks: if it did, another process closing its last connection (a `cuco report`)
    would take the database for unused, checkpoint it and delete the WAL the writer still appends to, and
    the next reader would find the database malformed."""
    import subprocess
    import sys

    await store.event(None, note("before"))
    rs = ReadStore(store.home)
    try:
        wal = store.db_path.with_name(DB_NAME + "-wal")
        assert wal.exists()
        closer = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('SELECT COUNT(*) FROM events').fetchall(); c.close()"
        )
        subprocess.run([sys.executable, "-c", closer, str(store.db_path)], check=True, timeout=60)
        assert wal.exists(), "the WAL was deleted under a live writer"
        after = await store.event(None, note("after"))
        assert [e["data"]["message"] for e in rs.events_since(after - 1)] == ["after"]
    finally:
        rs.close()


async def test_on_event_fires_only_after_commit(store: Store):
    seen: list[tuple[dict, bool]] = []

    def on_event(event):
        # When a viewer is told, a separate connection must already see the row.
        con = raw(store.db_path)
        try:
            visible = con.execute("SELECT 1 FROM events WHERE seq=?", (event["seq"],)).fetchone() is not None
        finally:
            con.close()
        seen.append((event, visible))

    store.on_event = on_event
    async with store.transaction() as tx:
        await add_run(tx)
        s1 = await tx.event("r1", note("first"))
        s2 = await tx.event("r1", note("second"))
        assert seen == []  # nothing delivered before the commit
    assert [(e["seq"], e["data"]["message"]) for e, _ in seen] == [(s1, "first"), (s2, "second")]
    assert all(visible for _, visible in seen)
    assert seen[0][0]["kind"] == "log" and seen[0][0]["run"] == "r1"


async def test_blobs_are_content_addressed(store: Store):
    h1 = store.blobs.put_text("int main() { return 0; }\n")
    h2 = store.blobs.put(b"int main() { return 0; }\n")
    h3 = store.blobs.put_text("int main() { return 1; }\n")
    assert h1 == h2 != h3
    assert len(h1) == 64
    files = [p for p in (store.home / "blobs").rglob("*") if p.is_file()]
    assert sorted(p.name for p in files) == sorted([h1, h3])  # one file per content, no temp files left
    assert store.blobs.get_text(h1) == "int main() { return 0; }\n"
    assert store.blobs.has(h3) and not store.blobs.has("0" * 64)
    # A reader finds the same blob by its hash.
    rs = ReadStore(store.home)
    try:
        assert rs.blobs.get(h3) == b"int main() { return 1; }\n"
    finally:
        rs.close()


async def test_candidate_source_hash_unique_per_run(store: Store):
    async with store.transaction() as tx:
        await add_run(tx)
        await add_candidate(tx, number=0, source_hash="same")
    with pytest.raises(sqlite3.IntegrityError):
        async with store.transaction() as tx:
            await add_candidate(tx, number=1, source_hash="same")
    assert len(await store.fetchall("SELECT * FROM candidates")) == 1


async def test_a_version_1_store_is_migrated_in_place(tmp_path: Path):
    """A store written by an older cuco opens: its data stays and the new index appears."""
    from engine.store.schema import SCHEMA_V1

    home = tmp_path / "old"
    home.mkdir()
    con = sqlite3.connect(home / DB_NAME)
    con.executescript(
        SCHEMA_V1 + "INSERT INTO meta VALUES ('schema_version', '1');"
        "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, updated_at) "
        "VALUES ('old', 'demo', '/x', 'finished', '{}', 0, 0);"
    )
    con.close()
    s = await Store(home).open()
    try:
        assert (await s.fetchone("SELECT value FROM meta WHERE key='schema_version'"))["value"] == str(SCHEMA_VERSION)
        assert (await s.fetchone("SELECT id FROM runs"))["id"] == "old"
        cols = {r["name"] for r in await s.fetchall("PRAGMA table_info(evaluations)")}
        assert "fault" in cols  # v3's column on a v1 table
        idx = await s.fetchone("SELECT name FROM sqlite_master WHERE type='index' AND name='candidates_run_island'")
        assert idx is not None
    finally:
        await s.close()


async def test_submitted_batches_commit_in_order_and_a_bad_one_alone_is_undone(store: Store):
    """Write-behind batches: sent together, committed in submission order with their events numbered in
    that order; a batch that breaks a constraint is undone alone and its future says why."""
    from engine.store.store import Batch

    delivered = []
    store.on_event = delivered.append
    async with store.transaction() as tx:
        await add_run(tx)
    delivered.clear()
    futures = []
    for i in range(5):
        b = Batch()
        # the third batch repeats the first one's id: a primary-key violation
        b.execute(
            "INSERT INTO candidates (id, run_id, number, island, generation, operator, mutator, source_hash, "
            "descriptor_json, cell, status, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (100 + (0 if i == 2 else i), "r1", i, 0, 0, "knob", "design-space", f"h{i}", "{}", "c", "pending", 0.0),
        )
        b.event("r1", note(str(i)))
        futures.append(store.submit(b))
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert isinstance(results[2], sqlite3.IntegrityError), results
    good = [r for i, r in enumerate(results) if i != 2]
    assert all(isinstance(r, list) and len(r) == 1 for r in good)
    seqs = [r[0] for r in good]
    assert seqs == sorted(seqs)
    rows = await store.fetchall("SELECT number FROM candidates ORDER BY id")
    assert [r["number"] for r in rows] == [0, 1, 3, 4]
    events = await store.fetchall("SELECT seq, data_json FROM events WHERE kind='log' ORDER BY seq")
    assert [int(m) for m in messages(events)] == [0, 1, 3, 4]
    assert [e["seq"] for e in events] == seqs
    assert [int(d["data"]["message"]) for d in delivered] == [0, 1, 3, 4]  # viewers hear only what committed


async def test_queued_batches_are_written_before_a_read_and_on_close(tmp_path: Path):
    from engine.store.store import Batch

    s = await Store(tmp_path / "home").open()
    b = Batch()
    b.event(None, note("queued"))
    s.submit(b, lazy=True)
    assert messages(await s.fetchall("SELECT data_json FROM events")) == ["queued"]
    b2 = Batch()
    b2.event(None, note("at-close"))
    s.submit(b2, lazy=True)
    await s.close()
    con = raw(tmp_path / "home" / DB_NAME)
    try:
        assert [json.loads(r[0])["message"] for r in con.execute("SELECT data_json FROM events ORDER BY seq")] == [
            "queued",
            "at-close",
        ]
    finally:
        con.close()


WRITER = """
import asyncio, sys, time
from engine.contract import Log
from engine.store.store import Batch, Store

async def main(home, run, n):
    store = await Store(home).open()
    for i in range(n):
        await store.reserve_candidate_ids()
        cid = store.next_candidate_id()
        batch = Batch()
        batch.execute("INSERT INTO candidates (id, run_id, number, island, generation, operator, mutator, "
                      "source_hash, descriptor_json, cell, status, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                      (cid, run, i, 0, 0, "seed", "design-space", f"{run}-{i}", "{}", "c", "pending", time.time()))
        batch.event(run, Log("info", str(i)))
        await store.submit(batch)
    await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_engines_writing_one_home_at_once_never_collide(tmp_path: Path):
    """Two runs' writers (one in another process) propose and log at once: every candidate id and event
    seq is distinct, each run's events are all there, and seqs rise in commit order."""
    import sys

    home = tmp_path / "home"
    store = await Store(home).open()
    try:
        async with store.transaction() as tx:
            await add_run(tx, "a")
            await add_run(tx, "b")
        n = 150
        other = await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, str(home), "b", str(n))
        for i in range(n):
            await store.reserve_candidate_ids()
            cid = store.next_candidate_id()
            batch = Batch()
            batch.execute(
                "INSERT INTO candidates (id, run_id, number, island, generation, operator, mutator, "
                "source_hash, descriptor_json, cell, status, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (cid, "a", i, 0, 0, "seed", "design-space", f"a-{i}", "{}", "c", "pending", time.time()),
            )
            batch.event("a", note(str(i)))
            store.submit(batch)
            if i % 10 == 0:
                await asyncio.sleep(0.005)
        assert await asyncio.wait_for(other.wait(), 120) == 0
        rows = await store.fetchall("SELECT id, run_id FROM candidates")
        assert len(rows) == 2 * n and len({r["id"] for r in rows}) == 2 * n
        events = await store.fetchall("SELECT seq, run_id, data_json FROM events WHERE kind='log' ORDER BY seq")
        for run in ("a", "b"):
            mine = [int(json.loads(e["data_json"])["message"]) for e in events if e["run_id"] == run]
            assert mine == list(range(n)), run  # none lost, none twice, each run's in its commit order
        assert {r["run_id"] for r in rows} == {"a", "b"}
    finally:
        await store.close()


async def test_a_version_8_store_gets_the_id_counter_above_its_candidates(tmp_path: Path):
    """A store written before several engines could share a home opens; new ids go above the old ones."""
    from engine.store.schema import MIGRATIONS

    home = tmp_path / "home"
    home.mkdir()
    con = raw(home / DB_NAME)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for v in sorted(m for m in MIGRATIONS if m <= 8):
        con.executescript(MIGRATIONS[v])
    con.execute("INSERT INTO meta VALUES ('schema_version', '8')")
    con.execute(
        "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, updated_at) "
        "VALUES ('old', 'demo', '/x', 'finished', '{}', 0, 0)"
    )
    con.execute(
        "INSERT INTO candidates (id, run_id, number, island, generation, operator, mutator, source_hash, "
        "descriptor_json, cell, status, created_at) VALUES (41, 'old', 0, 0, 0, 'seed', 'seed', 'h', '{}', "
        "'c', 'done', 0)"
    )
    con.commit()
    con.close()
    store = await Store(home).open()
    try:
        assert (await store.fetchone("SELECT value FROM meta WHERE key='schema_version'"))["value"] == str(
            SCHEMA_VERSION
        )
        await store.reserve_candidate_ids()
        assert store.next_candidate_id() == 42
        other = await Store(home).open()  # a second writer's block starts after the first's
        try:
            await other.reserve_candidate_ids()
            assert other.next_candidate_id() > 42
        finally:
            await other.close()
    finally:
        await store.close()


def _store_at_version(home: Path, version: int) -> None:
    """A store as a cuco of schema `version` left it: one finished run with a done candidate."""
    from engine.store.schema import MIGRATIONS

    home.mkdir()
    con = raw(home / DB_NAME)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for v in sorted(m for m in MIGRATIONS if m <= version):
        con.executescript(MIGRATIONS[v])
    con.execute(f"INSERT INTO meta VALUES ('schema_version', '{version}')")
    con.execute(
        "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, updated_at) "
        "VALUES ('old', 'demo', '/x', 'finished', '{}', 0, 0)"
    )
    con.execute(
        "INSERT INTO candidates (id, run_id, number, island, generation, operator, mutator, source_hash, "
        "descriptor_json, cell, status, speedup, fitness, created_at) VALUES (7, 'old', 0, 0, 0, 'seed', 'seed', "
        "'h', '{}', 'c', 'done', 1.25, 1.25, 0)"
    )
    con.commit()
    con.close()


def test_a_store_an_earlier_cuco_wrote_is_read_by_today_s_readers(tmp_path: Path):
    """`cuco ls` and `cuco report` on a home from before the intervals: migrated when first read, its run
    listed, not refused as if the disk had failed."""
    home = tmp_path / "home"
    _store_at_version(home, 10)
    cli = [sys.executable, "-m", "cuco_tui.cli", "--home", str(home)]
    ls = subprocess.run([*cli, "ls"], capture_output=True, text=True, timeout=120)
    assert ls.returncode == 0, ls.stderr
    assert "old" in ls.stdout
    report = subprocess.run([*cli, "report", "old", "--json"], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["evaluated"] == 1
    con = raw(home / DB_NAME)
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    con.close()
