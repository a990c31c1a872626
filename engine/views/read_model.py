"""The read model: every query a viewer runs (runs list, a run's summary, islands, the candidates page, a
candidate's detail rows, lineage, per-config results, insight), over a read-only store. The only SQL
outside the engine's writers: the TUI, `cuco serve` and headless mode call these and draw what they return.

`ReadModel` is shared by thread workers: one connection per thread, so the initial queries (candidates
window, header counts, islands) run in parallel (sqlite releases the GIL while it steps).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ..contract import ConfigResult, RunSummary, config_results
from ..store.counting import COUNTS_SQL, NEEDS_REVIEW
from ..store.store import ReadStore
from ..timeline.timeline import ConfigTimeline
from .best import RANK_ORDER_SQL, island_bests
from .filters import SORT_COLUMNS, FilterError, parse_filter
from .insight import ConfigWinners, LlmPanel, config_winners, llm_panel
from .lineage import (
    ANCESTORS_SHOWN,
    BestPaths,
    Lineage,
    LineageNode,
    best_id,
    children,
    decorate,
    lineage,
    mark_best_path,
)
from .liveness import shown_state
from .summary import nodes, run_summary
from .timelines import load_parsed

CANDIDATE_WINDOW = 1000  # rows kept in the candidates table (newest); SQL pages the rest


class ReadModel:
    """A read-only store shared by thread workers: one connection per thread, so the initial queries
    (candidates window, header counts, islands) run in parallel (sqlite releases the GIL while it steps).

    Every query here uses an index of the schema or a bounded scan: candidates_run_status,
    candidates_run_fitness, UNIQUE(run_id, number), or the rowid span of one run.
    """

    def __init__(self, home: Path):
        self.home = Path(home)
        self._store = ReadStore(self.home)  # the opening thread's connection (and the blob store)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._closed = False
        self._conns: list[tuple[ReadStore, threading.Lock]] = [(self._store, threading.Lock())]
        self._local.conn = self._conns[0]
        self.best_paths = BestPaths()  # the path to each run's best, walked once per best
        self.fetch = self._all  # for the query modules (lineage, insight)

    def _conn(self) -> tuple[ReadStore, threading.Lock]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the store view is closed")
                conn = (ReadStore(self.home), threading.Lock())
                self._conns.append(conn)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close every connection; a query still running in a worker thread is interrupted first (closing
        a connection under a running statement would crash the process)."""
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for store, lock in conns:
            try:
                store._conn.interrupt()
            except Exception:  # noqa: BLE001
                pass
            if lock.acquire(timeout=5.0):
                try:
                    store.close()
                finally:
                    lock.release()

    def _all(self, sql: str, params: tuple | list = ()) -> list[dict[str, Any]]:
        store, lock = self._conn()
        with lock:
            if self._closed:
                raise RuntimeError("the store view is closed")
            return store.fetchall(sql, params)

    def _one(self, sql: str, params: tuple | list = ()) -> dict[str, Any] | None:
        rows = self._all(sql, params)
        return rows[0] if rows else None

    def events_since(self, since: int, run_id: str, limit: int) -> list[dict[str, Any]]:
        store, lock = self._conn()
        with lock:
            if self._closed:
                raise RuntimeError("the store view is closed")
            return store.events_since(since, run_id, limit=limit)

    # ---- runs

    def runs(self) -> list[dict[str, Any]]:
        # best: the top of candidates_run_fitness (fitness is the speedup of a correct candidate);
        # count: a covering scan of candidates_run_status.
        rows = self._all(
            f"SELECT r.*, (SELECT c.speedup FROM candidates c WHERE c.run_id=r.id AND {COUNTS_SQL} "
            f"ORDER BY {RANK_ORDER_SQL} LIMIT 1) AS best, "
            "(SELECT COUNT(*) FROM candidates c WHERE c.run_id=r.id) AS candidates "
            "FROM runs r ORDER BY created_at"
        )
        return [{**r, "state": shown_state(self.home, r)} for r in rows]  # `died`, never a dead `running`

    def run_ids(self) -> list[str]:
        return [r["id"] for r in self._all("SELECT id FROM runs ORDER BY created_at")]

    def run(self, run_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM runs WHERE id=?", (run_id,))

    def recommendations(self, run_id: str) -> list[str]:
        """The meta-summarizer's current advice for the run (LLM runs), newest set only."""
        row = self._one("SELECT value_json FROM run_state WHERE run_id=? AND key='recommendations'", (run_id,))
        try:
            items = json.loads(row["value_json"]) if row else []
        except ValueError:
            return []
        return [str(i) for i in items] if isinstance(items, list) else []

    def last_seq(self, run_id: str) -> int:
        row = self._one("SELECT COALESCE(MAX(seq), 0) AS s FROM events WHERE run_id=?", (run_id,))
        return int(row["s"]) if row else 0

    # ---- header

    def summary(self, run_id: str) -> RunSummary:
        return run_summary(self._all, self.home, run_id) or RunSummary(run=run_id, workload="?", state="?")

    def review_queue(self, run_id: str) -> list[dict[str, Any]]:
        """The verified results that wait for a person (engine/store/counting.py), oldest first."""
        rows = self._all(
            "SELECT id, speedup, time_ms, metrics_json FROM candidates WHERE run_id=? AND review=? ORDER BY id",
            (run_id, NEEDS_REVIEW),
        )
        out = []
        for r in rows:
            try:
                metrics = json.loads(r["metrics_json"]) if r["metrics_json"] else {}
            except ValueError:
                metrics = {}
            out.append(
                {
                    "candidate": r["id"],
                    "speedup": r["speedup"],
                    "time_ms": r["time_ms"],
                    "flags": metrics.get("flags") or [] if isinstance(metrics, dict) else [],
                }
            )
        return out

    def nodes(self) -> list[dict[str, Any]]:
        return nodes(self._all)

    def jobs(self, run_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM jobs WHERE run_id=? AND state='running' ORDER BY created_at", (run_id,))

    # ---- islands

    def islands(self, run_id: str) -> list[dict[str, Any]]:
        # No index leads with (run_id, island): scan the run's rowid span once (its rows are mostly
        # contiguous), not once per island through an index.
        span = self._one("SELECT MIN(id) AS lo, MAX(id) AS hi FROM candidates WHERE run_id=?", (run_id,))
        if not span or span["lo"] is None:
            return []
        rows = self._all(
            "SELECT island, COUNT(*) AS size FROM candidates WHERE id BETWEEN ? AND ? AND +run_id=? "
            "GROUP BY island ORDER BY island",
            (span["lo"], span["hi"], run_id),
        )
        bests = island_bests(self._all, run_id, [r["island"] for r in rows])  # that count: not rejected, not held
        migrations = {
            r["dst_island"]: r
            for r in self._all(
                "SELECT dst_island, src_island, candidate_id, MAX(at_evaluation) AS at_evaluation "
                "FROM migrations_log WHERE run_id=? GROUP BY dst_island",
                (run_id,),
            )
        }
        for row in rows:
            row["best"] = bests.get(row["island"])
            # candidates_run_status (run_id, status, rowid) read backwards: stops after 16 of this island.
            recent = self._all(
                "SELECT speedup FROM candidates WHERE run_id=? AND status='done' AND island=? "
                "AND speedup IS NOT NULL ORDER BY id DESC LIMIT 16",
                (run_id, row["island"]),
            )
            row["trend"] = [r["speedup"] for r in reversed(recent)]
            mig = migrations.get(row["island"])
            row["migration"] = f"#{mig['candidate_id']} from {mig['src_island']} @{mig['at_evaluation']}" if mig else ""
        return rows

    # ---- candidates

    def candidates(
        self, run_id: str, filter_text: str = "", limit: int = CANDIDATE_WINDOW, sort: tuple[str, bool] | None = None
    ) -> list[dict[str, Any]]:
        """The newest `limit` candidates (proposal order: UNIQUE(run_id, number) read backwards, no sort),
        oldest first; or, with `sort` = (column, descending), the first `limit` of the whole run in that
        order (a top-N sort in SQL: the best of the run, not of the newest window), NULLs last."""
        where, params = parse_filter(filter_text)
        columns = (
            "c.id, c.island, c.generation, c.operator, c.status, c.speedup, c.correct, c.reason, c.review, "
            "m.verdict AS mark, m.text AS mark_text"
        )
        last_mark = "LEFT JOIN marks m ON m.id = (SELECT MAX(id) FROM marks WHERE candidate_id=c.id)"
        if sort is None:
            order = "c.number DESC"
        else:
            column, descending = sort
            expr = SORT_COLUMNS.get(column)
            if expr is None:
                raise FilterError(f"cannot sort by {column!r} (columns: {', '.join(SORT_COLUMNS)})")
            # NULL sorts lowest: last when descending as it is; ascending needs the IS NULL term. Speedup
            # descending walks candidates_run_speedup backwards and stops at `limit`: no sort at all.
            order = f"{expr} DESC, c.id DESC" if descending else f"{expr} IS NULL, {expr} ASC, c.id ASC"
        if sort is not None and "m." not in where + order:
            # The top `limit` ids first (an index scan where one fits), their marks only after.
            rows = self._all(
                f"SELECT {columns} FROM (SELECT c.id FROM candidates c WHERE c.run_id=? AND {where} "
                f"ORDER BY {order} LIMIT ?) top JOIN candidates c ON c.id = top.id {last_mark} "
                f"ORDER BY {order}",
                [run_id, *params, limit],
            )
        else:
            rows = self._all(
                f"SELECT {columns} FROM candidates c {last_mark} WHERE c.run_id=? AND {where} ORDER BY {order} LIMIT ?",
                [run_id, *params, limit],
            )
        if sort is None:
            rows.reverse()
        return rows

    def scores(self, run_id: str, limit: int = 5000) -> list[tuple[int, float]]:
        rows = self._all(
            "SELECT number, speedup FROM candidates WHERE run_id=? AND status='done' AND speedup IS NOT "
            "NULL ORDER BY number DESC LIMIT ?",
            (run_id, limit),
        )
        return [(r["number"], r["speedup"]) for r in reversed(rows)]

    # ---- one candidate

    def candidate(self, candidate_id: int) -> dict[str, Any] | None:
        return self._one("SELECT * FROM candidates WHERE id=?", (candidate_id,))

    def blob(self, digest: str | None) -> str | None:
        """A stored text (a source, a log, a prompt); None when absent."""
        if not digest:
            return None
        try:
            return self._store.blobs.get_text(digest)  # files: no connection needed
        except OSError:
            return None

    def parent_source(self, row: dict[str, Any]) -> tuple[int, str] | None:
        """The id and source the candidate's diff is against: its parent, or a fork's copy's original."""
        parent_id = row["parent_id"] if row["parent_id"] is not None else row.get("origin_id")
        if parent_id is None:
            return None
        parent = self._one("SELECT id, source_hash FROM candidates WHERE id=?", (parent_id,))
        return (parent["id"], self.blob(parent["source_hash"]) or "") if parent else None

    def evaluations(self, candidate_id: int) -> list[dict[str, Any]]:
        """Its build, verify and benchmark attempts, oldest first."""
        return self._all("SELECT * FROM evaluations WHERE candidate_id=? ORDER BY id", (candidate_id,))

    def llm_calls(self, candidate_id: int) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM llm_calls WHERE candidate_id=? ORDER BY id", (candidate_id,))

    def config_results(self, candidate_id: int) -> list[ConfigResult]:
        row = self._one("SELECT metrics_json FROM candidates WHERE id=?", (candidate_id,))
        try:
            return config_results(json.loads(row["metrics_json"])) if row and row["metrics_json"] else []
        except ValueError:
            return []

    def timelines(self, candidate_id: int) -> dict[str, ConfigTimeline | str]:
        """{config: the candidate's parsed timeline, or why there is none} (the detail's Timeline tab)."""
        store, lock = self._conn()
        with lock:
            if self._closed:
                raise RuntimeError("the store view is closed")
            return load_parsed(store, candidate_id)

    def lineage(
        self, run_id: str, candidate_id: int, limit: int = ANCESTORS_SHOWN, with_best_path: bool = True
    ) -> Lineage:
        """The candidate's lineage; without `with_best_path` the path to the best is left for
        `mark_best_path` (its first walk may take a while: the screen shows the tree before it)."""
        return lineage(self._all, run_id, candidate_id, self.best_paths if with_best_path else None, limit)

    def mark_best_path(self, run_id: str, data: Lineage) -> None:
        mark_best_path(self._all, run_id, data, self.best_paths)

    def best_id(self, run_id: str) -> int | None:
        return best_id(self._all, run_id)

    def lineage_children(self, run_id: str, parent: LineageNode) -> list[LineageNode]:
        """The children of a lineage node opened on screen, decorated like the rest of the tree."""
        kids = children(self._all, parent)
        _, best_path = self.best_paths.get(self._all, run_id)
        decorate(self._all, run_id, kids, best_path)
        return kids

    def config_winners(self, run_id: str) -> ConfigWinners:
        return config_winners(self._all, run_id)

    def llm_panel(self, run_id: str) -> LlmPanel:
        return llm_panel(self._all, run_id)


def first_candidate(fetch, run_id: str) -> dict[str, Any] | None:
    """The run's first candidate (id, descriptor): the reference a design point's changes are told against."""
    rows = fetch("SELECT id, descriptor_json FROM candidates WHERE run_id=? ORDER BY id LIMIT 1", (run_id,))
    return rows[0] if rows else None
