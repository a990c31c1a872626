"""Read-only queries the TUI runs off the UI loop (in thread workers): a thin layer over `ReadStore`.

Everything here returns plain data (dicts, lists, Rich `Text`), computed in the calling thread, so the
UI only has to place it. Filtering, sorting and paging happen in SQL.
"""

from __future__ import annotations

import difflib
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.syntax import Syntax
from rich.text import Text

from engine.best import RANK_ORDER_SQL, best_candidate, island_bests
from engine.counting import COUNTS_SQL, NEEDS_REVIEW
from engine.glossary import legend
from engine.liveness import shown_state
from engine.efficiency import OVERLAP, judge
from engine.store import ReadStore

from .lineage_data import BestPaths, lineage_text

CANDIDATE_WINDOW = 1000          # rows kept in the candidates table (newest); SQL pages the rest
SPARK = "▁▂▃▄▅▆▇█"
MAX_SOURCE_CHARS = 400_000


def _fault_note(ev: dict[str, Any]) -> str:
    try:
        data = json.loads(ev.get("result_json") or "{}")
    except ValueError:
        data = {}
    return f"{data.get('fault', '?')} ({data.get('action', 'retry')}): {data.get('reason', '')}"[:300]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _timeline_of(metrics: dict, config: Any) -> dict | None:
    """The timeline figures of one config's profiled call, kept in the candidate's metrics."""
    figs = metrics.get("timeline")
    return figs.get(config) if isinstance(figs, dict) else None


class FilterError(ValueError):
    pass


_FIELDS = {
    "id": "c.id", "island": "c.island", "isl": "c.island", "gen": "c.generation", "generation": "c.generation",
    "op": "c.operator", "operator": "c.operator", "status": "c.status", "speedup": "c.speedup",
    "mutator": "c.mutator", "cell": "c.cell", "parent": "c.parent_id", "time": "c.time_ms",
    "mark": "m.verdict", "verdict": "m.verdict",
}
# The candidates table's columns (widgets/candidates.py COLUMNS keys) as SQL sort expressions.
SORT_COLUMNS = {"id": "c.id", "island": "c.island", "generation": "c.generation", "operator": "c.operator",
                "status": "c.status", "speedup": "c.speedup", "verdict": "(c.status || COALESCE(c.reason, ''))",
                "mark": "m.verdict"}
_TERM = re.compile(r"^(?P<field>[a-z]+)(?P<op>>=|<=|!=|=|>|<|~)(?P<value>.+)$")


def parse_filter(text: str) -> tuple[str, list[Any]]:
    """`status=done island=1 speedup>1.2 op~llm mark=accept` (terms ANDed) -> SQL and parameters.

    A bare word matches operator, mutator, status or reason. Values are always bound parameters.
    """
    clauses: list[str] = []
    params: list[Any] = []
    for term in text.split():
        match = _TERM.match(term)
        if match is None:
            clauses.append("(c.operator LIKE ? OR c.mutator LIKE ? OR c.status LIKE ? OR c.reason LIKE ?)")
            params += [f"%{term}%"] * 4
            continue
        name, op, value = match["field"], match["op"], match["value"]
        column = _FIELDS.get(name)
        if column is None:
            raise FilterError(f"unknown field {name!r} (known: {', '.join(sorted(_FIELDS))})")
        if op == "~":
            clauses.append(f"{column} LIKE ?")
            params.append(f"%{value}%")
            continue
        if value.lower() in ("none", "null"):
            clauses.append(f"{column} IS {'NOT ' if op == '!=' else ''}NULL")
            continue
        try:
            bound: Any = float(value) if column in ("c.speedup", "c.time_ms") else (
                int(value) if column in ("c.id", "c.island", "c.generation", "c.parent_id") else value)
        except ValueError:
            raise FilterError(f"{name}: {value!r} is not a number") from None
        clauses.append(f"{column} {op} ?")
        params.append(bound)
    return (" AND ".join(clauses) or "1=1"), params


@dataclass
class CandidateDetail:
    id: int
    title: str
    diff: Text
    source: Text
    source_text: str
    metrics: Text
    logs: Text
    llm: Text
    row: dict[str, Any] = field(default_factory=dict)
    lineage: Text = field(default_factory=Text)


class StoreView:
    """A read-only store shared by thread workers: one connection per thread, so the initial queries
    (candidates window, header counts, islands) run in parallel (sqlite releases the GIL while it steps).

    Every query here uses an index of the schema or a bounded scan: candidates_run_status,
    candidates_run_fitness, UNIQUE(run_id, number), or the rowid span of one run.
    """

    def __init__(self, home: Path):
        self.home = Path(home)
        self._store = ReadStore(self.home)          # the opening thread's connection (and the blob store)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._closed = False
        self._conns: list[tuple[ReadStore, threading.Lock]] = [(self._store, threading.Lock())]
        self._local.conn = self._conns[0]
        self.best_paths = BestPaths()               # the path to each run's best, walked once per best

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
        rows = self._all(f"SELECT r.*, (SELECT c.speedup FROM candidates c WHERE c.run_id=r.id AND {COUNTS_SQL} "
                         f"ORDER BY {RANK_ORDER_SQL} LIMIT 1) AS best, "
                         "(SELECT COUNT(*) FROM candidates c WHERE c.run_id=r.id) AS candidates "
                         "FROM runs r ORDER BY created_at")
        return [{**r, "state": shown_state(self.home, r)} for r in rows]   # `died`, never a dead `running`

    def run_ids(self) -> list[str]:
        return [r["id"] for r in self._all("SELECT id FROM runs ORDER BY created_at")]

    def run(self, run_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM runs WHERE id=?", (run_id,))

    def newest_run(self) -> str | None:
        row = self._one("SELECT id FROM runs ORDER BY created_at DESC LIMIT 1")
        return row["id"] if row else None

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

    def summary(self, run_id: str) -> dict[str, Any]:
        run = self.run(run_id) or {}
        by_status = {r["status"]: r["n"] for r in self._all(
            "SELECT status, COUNT(*) AS n FROM candidates WHERE run_id=? GROUP BY status", (run_id,))}
        done = by_status.get("done", 0)
        bad = by_status.get("incorrect", 0) + by_status.get("failed", 0)
        # The best correct candidate: the top of candidates_run_fitness (the engine's fitness is the speedup).
        best = best_candidate(self._all, run_id, "c.id, c.speedup, c.time_ms, c.baseline_ms")
        cost = self._one("SELECT COALESCE(SUM(cost_usd), 0) AS c FROM llm_calls WHERE run_id=?", (run_id,)) or {}
        # Held for a person (a flagged result): few, so the newest 50 are enough for the toasts.
        review = self._all("SELECT id FROM candidates WHERE run_id=? AND status='done' AND review='needs_review' "
                           "ORDER BY id DESC LIMIT 50", (run_id,))
        state = shown_state(self.home, run) if run else "?"
        return {"run": run_id, "workload": run.get("workload", "?"), "state": state,
                "parent_run": run.get("parent_run"), "evaluated": done + bad, "correct": done, "failed": bad,
                "in_flight": by_status.get("pending", 0) + by_status.get("running", 0),
                "best": best, "llm_cost_usd": float(cost.get("c") or 0.0), "nodes": self.nodes(),
                "needs_review": [r["id"] for r in review]}

    def review_queue(self, run_id: str) -> list[dict[str, Any]]:
        """The verified results that wait for a person (engine/counting.py), oldest first."""
        rows = self._all("SELECT id, speedup, time_ms, metrics_json FROM candidates WHERE run_id=? AND review=? "
                         "ORDER BY id", (run_id, NEEDS_REVIEW))
        out = []
        for r in rows:
            try:
                metrics = json.loads(r["metrics_json"]) if r["metrics_json"] else {}
            except ValueError:
                metrics = {}
            out.append({"candidate": r["id"], "speedup": r["speedup"], "time_ms": r["time_ms"],
                        "flags": metrics.get("flags") or [] if isinstance(metrics, dict) else []})
        return out

    def nodes(self) -> list[dict[str, Any]]:
        out = []
        for row in self._all("SELECT name, state_json, updated_at FROM nodes ORDER BY name"):
            try:
                state = json.loads(row["state_json"])
            except ValueError:
                state = {}
            state.setdefault("name", row["name"])
            state["updated_at"] = row["updated_at"]
            out.append(state)
        return out

    def jobs(self, run_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM jobs WHERE run_id=? AND state='running' ORDER BY created_at", (run_id,))

    # ---- islands

    def islands(self, run_id: str) -> list[dict[str, Any]]:
        # No index leads with (run_id, island): scan the run's rowid span once (its rows are mostly
        # contiguous), not once per island through an index.
        span = self._one("SELECT MIN(id) AS lo, MAX(id) AS hi FROM candidates WHERE run_id=?", (run_id,))
        if not span or span["lo"] is None:
            return []
        rows = self._all("SELECT island, COUNT(*) AS size FROM candidates WHERE id BETWEEN ? AND ? AND +run_id=? "
                         "GROUP BY island ORDER BY island", (span["lo"], span["hi"], run_id))
        bests = island_bests(self._all, run_id, [r["island"] for r in rows])   # that count: not rejected, not held
        migrations = {r["dst_island"]: r for r in self._all(
            "SELECT dst_island, src_island, candidate_id, MAX(at_evaluation) AS at_evaluation "
            "FROM migrations_log WHERE run_id=? GROUP BY dst_island", (run_id,))}
        for row in rows:
            row["best"] = bests.get(row["island"])
            # candidates_run_status (run_id, status, rowid) read backwards: stops after 16 of this island.
            recent = self._all("SELECT speedup FROM candidates WHERE run_id=? AND status='done' AND island=? "
                               "AND speedup IS NOT NULL ORDER BY id DESC LIMIT 16", (run_id, row["island"]))
            row["trend"] = [r["speedup"] for r in reversed(recent)]
            mig = migrations.get(row["island"])
            row["migration"] = (f"#{mig['candidate_id']} from {mig['src_island']} @{mig['at_evaluation']}"
                                if mig else "")
        return rows

    # ---- candidates

    def candidates(self, run_id: str, filter_text: str = "", limit: int = CANDIDATE_WINDOW,
                   sort: tuple[str, bool] | None = None) -> list[dict[str, Any]]:
        """The newest `limit` candidates (proposal order: UNIQUE(run_id, number) read backwards, no sort),
        oldest first; or, with `sort` = (column, descending), the first `limit` of the whole run in that
        order (a top-N sort in SQL: the best of the run, not of the newest window), NULLs last."""
        where, params = parse_filter(filter_text)
        columns = ("c.id, c.island, c.generation, c.operator, c.status, c.speedup, c.correct, c.reason, c.review, "
                   "m.verdict AS mark, m.text AS mark_text")
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
            rows = self._all(f"SELECT {columns} FROM (SELECT c.id FROM candidates c WHERE c.run_id=? AND {where} "
                             f"ORDER BY {order} LIMIT ?) top JOIN candidates c ON c.id = top.id {last_mark} "
                             f"ORDER BY {order}", [run_id, *params, limit])
        else:
            rows = self._all(f"SELECT {columns} FROM candidates c {last_mark} "
                             f"WHERE c.run_id=? AND {where} ORDER BY {order} LIMIT ?", [run_id, *params, limit])
        if sort is None:
            rows.reverse()
        return rows

    def scores(self, run_id: str, limit: int = 5000) -> list[tuple[int, float]]:
        rows = self._all("SELECT number, speedup FROM candidates WHERE run_id=? AND status='done' AND speedup IS NOT "
                         "NULL ORDER BY number DESC LIMIT ?", (run_id, limit))
        return [(r["number"], r["speedup"]) for r in reversed(rows)]

    # ---- one candidate (diff, source, metrics, logs, prompts)

    def _blob(self, digest: str | None) -> str | None:
        if not digest:
            return None
        try:
            return self._store.blobs.get_text(digest)   # files: no connection needed
        except OSError:
            return None

    def detail(self, candidate_id: int, dark: bool = True) -> CandidateDetail | None:
        row = self._one("SELECT * FROM candidates WHERE id=?", (candidate_id,))
        if row is None:
            return None
        theme = "monokai" if dark else "default"
        source = self._blob(row["source_hash"])
        source_text = source if source is not None else ""
        if source is None:
            source_view = Text("(source blob missing from the store)", style="italic")
        else:
            source_view = Syntax(source[:MAX_SOURCE_CHARS], "cuda", theme=theme,
                                 line_numbers=False).highlight(source[:MAX_SOURCE_CHARS])
        diff_view = self._parent_diff(row, source_text, theme)
        title = (f"#{row['id']} island {row['island']} gen {row['generation']} {row['operator']} "
                 f"({row['mutator']}) {row['status']}")
        return CandidateDetail(id=row["id"], title=title, diff=diff_view, source=source_view,
                               source_text=source_text, metrics=self._metrics(row),
                               logs=self._logs(candidate_id), llm=self._llm(candidate_id), row=row,
                               lineage=lineage_text(self._all, row["run_id"], candidate_id, self.best_paths))

    def parent_diff(self, candidate_id: int, dark: bool = True) -> Text:
        """The candidate's diff against its parent (a fork's copy: against its original), highlighted."""
        row = self._one("SELECT * FROM candidates WHERE id=?", (candidate_id,))
        if row is None:
            return Text(f"(no candidate #{candidate_id})", style="italic")
        return self._parent_diff(row, self._blob(row["source_hash"]) or "", "monokai" if dark else "default")

    def _parent_diff(self, row: dict[str, Any], source_text: str, theme: str) -> Text:
        parent_id = row["parent_id"] if row["parent_id"] is not None else row.get("origin_id")
        parent = self._one("SELECT id, source_hash FROM candidates WHERE id=?", (parent_id,)) \
            if parent_id is not None else None
        if parent is None:
            return Text("(no parent: this is a seed)", style="italic")
        parent_src = self._blob(parent["source_hash"]) or ""
        lines = list(difflib.unified_diff(parent_src.splitlines(), source_text.splitlines(),
                                          f"#{parent['id']}", f"#{row['id']}", lineterm="", n=3))
        diff_text = "\n".join(lines) or "(identical to its parent)"
        text = Syntax(diff_text, "diff", theme=theme).highlight(diff_text)
        mark_changed_spans(text, lines)
        text.no_wrap, text.overflow = False, "fold"   # wrapped: a long changed line shows its change
        return text

    def _metrics(self, row: dict[str, Any]) -> Text:
        out = Text()
        for key, label in (("status", "status"), ("correct", "correct"), ("speedup", "speedup"),
                           ("time_ms", "time"), ("baseline_ms", "baseline"), ("cell", "cell"), ("reason", "reason"), ("fault", "fault")):
            if row.get(key) is not None:
                out.append(f"{label:>9}: ", style="bold")
                out.append(f"{format_value(key, row[key])}\n")
        if _is_number(row.get("time_ms")) and _is_number(row.get("baseline_ms")) and row["time_ms"]:
            out.append(f"{'sum ratio':>9}: {row['baseline_ms'] / row['time_ms']:.3f}x (baseline / time, this job)\n")
        try:
            desc = json.loads(row.get("descriptor_json") or "{}")
        except ValueError:
            desc = {}
        if desc:
            out.append("\ndesign point\n", style="bold underline")
            for k, v in desc.items():
                out.append(f"  {k}: {v}\n")
        metrics = None
        try:
            metrics = json.loads(row["metrics_json"]) if row.get("metrics_json") else None
        except ValueError:
            out.append("\n(metrics are not valid JSON)\n")
        if not isinstance(metrics, dict):
            out.append("\n" + legend("speedup", "time", "baseline") + "\n", style="dim")
            return out
        for flag in metrics.get("flags") or []:
            out.append(f"\n⚑ beyond the overlap bound on {flag.get('config')}: {flag.get('candidate_ms'):.4g} ms < "
                       f"{flag.get('bound_ms'):.4g} ms (the baseline's compute or communication alone). A faster "
                       "computation or a gamed measurement: read the diff before trusting it.\n", style="bold yellow")
        stage = metrics.get("benchmark") if isinstance(metrics.get("benchmark"), dict) else None
        configs = (stage or metrics).get("configs")
        if configs:
            # two short lines per config: the detail pane is narrow (about 40 columns at 100x30)
            out.append("\nper config" + (" (benchmark)" if stage else "") + "\n", style="bold underline")
            out.append("  name  baseline -> candidate ms  ratio\n", style="dim")
            for cfg in configs:
                out.append(f"  {str(cfg.get('name', '?'))}", style="bold")
                base, cand, ratio = cfg.get("baseline_ms"), cfg.get("candidate_ms"), cfg.get("speedup")
                if _is_number(base) and _is_number(cand):
                    out.append(f"  {base:.4g} -> {cand:.4g} ms")
                if _is_number(ratio):
                    out.append(f"  {ratio:.3f}x", style="bold")
                out.append("\n")
                parts = [f"{label} {cfg[k]:.4g} ms" for k, label in (("comp_ms", "comp"), ("comm_ms", "comm"))
                         if _is_number(cfg.get(k))]
                if _is_number(cfg.get("bound")):
                    parts.append(f"bound {cfg['bound']:.3f}x")
                if parts:
                    out.append("    " + "  ".join(parts) + "\n", style="dim")
                verdict = judge(cfg, _timeline_of(metrics, cfg.get("name")))
                if verdict.kind is not None:   # 1: a perfect overlap of the baseline's own compute and communication
                    out.append(f"    {'overlap efficiency ' if verdict.kind == OVERLAP else ''}{verdict.label()}\n",
                               style="dim")
        rest = {k: v for k, v in metrics.items() if k not in ("configs", "flags")}
        if stage is not None:
            rest["benchmark"] = {k: v for k, v in stage.items() if k != "configs"}
        harness = harness_lines(rest)
        if harness:
            out.append("\nharness\n", style="bold underline")
            out.append(harness[:20000] + "\n")
        out.append("\n" + legend("speedup", "time", "baseline", "sum ratio", "bound", "eff", "comp / comm") + "\n",
                   style="dim")
        return out

    def _logs(self, candidate_id: int) -> Text:
        out = Text()
        rows = self._all("SELECT * FROM evaluations WHERE candidate_id=? ORDER BY id", (candidate_id,))
        if not rows:
            return Text("(no build or run logs yet)", style="italic")
        for ev in rows:
            out.append(f"── {ev['stage']} [{ev['status']}] rc={ev['rc']} node={ev['node']} "
                       f"{(ev['duration_s'] or 0):.1f}s attempt {ev['attempt']}\n", style="bold")
            if ev.get("fault") == "environment":   # not held against the candidate (engine/faults.py)
                out.append(f"   the environment's fault, not the candidate's: {_fault_note(ev)}\n", style="yellow")
            text = self._blob(ev["log_hash"])
            out.append((text[-20000:] if text else "(no log)") + "\n")
        return out

    def _llm(self, candidate_id: int) -> Text:
        rows = self._all("SELECT * FROM llm_calls WHERE candidate_id=? ORDER BY id", (candidate_id,))
        if not rows:
            return Text("(no LLM calls for this candidate)", style="italic")
        out = Text()
        for call in rows:
            out.append(f"── {call['model']} {call['purpose']} [{call['status']}] in {call['input_tokens']} "
                       f"out {call['output_tokens']} ${call['cost_usd']:.4f}\n", style="bold")
            for label, digest in (("prompt", call["prompt_hash"]), ("response", call["response_hash"])):
                text = self._blob(digest)
                if text:
                    out.append(f"{label}:\n", style="underline")
                    out.append(text[-20000:] + "\n")
            if call.get("error"):
                out.append(f"error: {call['error']}\n")
        return out


_UNITS = {"speedup": "x", "time_ms": " ms", "baseline_ms": " ms", "candidate_ms": " ms", "comp_ms": " ms",
          "comm_ms": " ms", "bound": "x", "duration_s": " s", "measurements": "x"}


def format_value(key: str, value: Any) -> str:
    """A number with 4 significant digits (3 decimals for a ratio) and its unit; anything else as text."""
    unit = _UNITS.get(key, "")
    if isinstance(value, bool) or not _is_number(value):
        return str(value)
    if unit == "x":
        return f"{value:.3f}x"
    return f"{value:.4g}{unit}"


def harness_lines(data: dict[str, Any], indent: int = 0) -> str:
    """The rest of the harness's result, one `key: value` line each, numbers formatted (not a JSON dump)."""
    pad = "  " * indent
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            if value:
                lines.append(f"{pad}{key}:")
                lines.append(harness_lines(value, indent + 1))
        elif isinstance(value, list) and all(_is_number(v) for v in value):
            lines.append(f"{pad}{key}: " + " ".join(format_value(key, v) for v in value))
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: {len(value)} item(s)")
        elif isinstance(value, str) and "\n" in value:
            lines.append(f"{pad}{key}:")
            lines.extend(f"{pad}  {line}" for line in value.splitlines())
        else:
            lines.append(f"{pad}{key}: {format_value(key, value)}")
    return "\n".join(line for line in lines if line)


def mark_changed_spans(text: Text, lines: list[str]) -> None:
    """Underline the characters that changed inside a `-` line and the `+` line that replaced it, so two
    long lines that differ only in their middle look different."""
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("-") and not lines[i].startswith("---")):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("-") and not lines[j].startswith("---"):
            j += 1
        k = j
        while k < len(lines) and lines[k].startswith("+") and not lines[k].startswith("+++"):
            k += 1
        for old, new in zip(range(i, j), range(j, k)):
            matcher = difflib.SequenceMatcher(None, lines[old][1:], lines[new][1:], autojunk=False)
            for tag, a0, a1, b0, b1 in matcher.get_opcodes():
                if tag == "equal":
                    continue
                if a1 > a0:
                    text.stylize("bold reverse", offsets[old] + 1 + a0, offsets[old] + 1 + a1)
                if b1 > b0:
                    text.stylize("bold reverse", offsets[new] + 1 + b0, offsets[new] + 1 + b1)
        i = max(k, i + 1)


def sparkline(values: list[float], width: int = 12) -> str:
    values = values[-width:]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in values)
