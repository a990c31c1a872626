"""`cuco run --headless`: a rich progress display while the engine runs, and a summary at the end."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

RECENT = 6


class HeadlessDisplay:
    def __init__(self, engine):
        self.engine = engine
        self.console = Console(stderr=True)
        total = engine.config.max_evals
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=self.console)
        self.task = self.progress.add_task(engine.run_id, total=total, completed=engine.evaluated, info="")
        self.recent: list[str] = []
        self.live = Live(self._render(), console=self.console, refresh_per_second=4,
                         transient=False, redirect_stdout=False, redirect_stderr=False)
        self._last = 0.0

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.update(self._render())
        try:
            return self.live.__exit__(*exc)
        finally:
            if not self.console.is_terminal:
                self.console.line()   # rich leaves a non-terminal's last line open: the summary would run on

    def on_event(self, event: dict[str, Any]) -> None:
        kind, data = event["kind"], event["data"]
        if kind == "result":
            sp = f"{data['speedup']:.3f}x" if data.get("speedup") else ""
            self.recent.append(f"#{data['id']:<5} {data['status']:<9} {sp:>8}  {str(data.get('reason') or '')[:70]}")
            self.recent = self.recent[-RECENT:]
        elif kind == "log" and data.get("level") in ("warning", "error"):
            self.recent.append(f"[{data['level']}] {data['message'][:90]}")
            self.recent = self.recent[-RECENT:]
        now = time.monotonic()
        if kind in ("result", "run", "best") or now - self._last > 0.25:
            self._last = now
            self.live.update(self._render())

    def _render(self):
        e = self.engine
        st = e.status()
        best = st["best"]
        left = ""
        if e.config.max_minutes:
            left = f"  time left {max(0.0, e.config.max_minutes * 60 - e.elapsed_s()) / 60:.1f} min"
        info = (f"best {best['speedup']:.3f}x (#{best['candidate']})" if best and best["speedup"] else "best -") + \
               f"  correct {st['correct']}  failed {st['failed']}  in flight {st['in_flight']}" + \
               (f"  LLM ${st['llm_cost_usd']:.4f}" if st["llm_cost_usd"] else "") + left
        self.progress.update(self.task, completed=st["evaluated"], info=info)
        return Group(self.progress, Text("\n".join(self.recent), style="dim"))

    def print_summary(self, home: Path, run_id: str) -> None:
        from engine.report import build_report
        from engine.store import ReadStore
        store = ReadStore(home)
        try:
            print_report(build_report(store, run_id), home, store, console=self.console)
        finally:
            store.close()


def print_report(report: dict, home: Path, store=None, console: Console | None = None) -> None:
    from engine.store import ReadStore
    console = console or Console()
    own = store is None
    store = store or ReadStore(home)
    try:
        best = report["best"] or {}
        head = Table.grid(padding=(0, 2))
        head.add_row("run", report["run"], "workload", report["workload"])
        head.add_row("state", f"{report['state']} ({report['stop_reason'] or ''})", "parent", report["parent_run"] or "-")
        head.add_row("evaluated", str(report["evaluated"]), "correct / failed", f"{report['correct']} / {report['failed']}")
        if report.get("faults"):
            from engine.fault_report import fault_line
            head.add_row("failures", fault_line(report["faults"]), "", "")
        head.add_row("baseline", f"{report['baseline_time_ms'] or 0:.3f} ms", "best",
                     f"#{best.get('candidate')} {best.get('speedup') or 0:.3f}x ({best.get('time_ms') or 0:.3f} ms)"
                     if best else "-")
        head.add_row("accepted", ", ".join(map(str, report["accepted"])) or "-", "LLM cost", f"${report['llm_cost_usd']:.4f}")
        console.print(head)
        first = store.fetchone("SELECT id, descriptor_json FROM candidates WHERE run_id=? ORDER BY id LIMIT 1",
                               (report["run"],))
        reference = json.loads(first["descriptor_json"]) if first else {}
        table = Table(title="top candidates (speedup = harness A B A B ratio)",
                      caption=f"design point: what differs from #{first['id']}, the run's first candidate" if first else None)
        for col in ("id", "island", "gen", "operator", "design point", "speedup", "time ms"):
            table.add_column(col)
        rows = store.fetchall("SELECT * FROM candidates WHERE run_id=? AND status='done' ORDER BY fitness DESC LIMIT 8",
                              (report["run"],))
        for r in rows:
            point = _point_change(json.loads(r["descriptor_json"]), reference)
            table.add_row(str(r["id"]), str(r["island"]), str(r["generation"]), r["operator"], point,
                          f"{r['speedup'] or 0:.3f}x", f"{r['time_ms'] or 0:.3f}")
        console.print(table)
        if best.get("configs"):
            console.print(_config_table(f"best candidate #{best['candidate']} per config", best["configs"]))
        others = [c for c in report.get("best_per_config") or [] if c["candidate"] != best["candidate"]]
        if others:
            console.print(_config_table("configs where another candidate is faster", others, with_candidate=True))
            for cid, point in {c["candidate"]: c.get("descriptor") or {} for c in others}.items():
                console.print(f"  #{cid}: {_point_change(point, reference)}", style="dim")
        _print_waiting(report, console)
        for flag in best.get("flags") or []:
            console.print(f"[yellow]⚑ the best beat the overlap bound on {flag['config']} ({flag['candidate_ms']:.4g} ms < "
                          f"{flag['bound_ms']:.4g} ms): a faster computation or a gamed measurement; read its diff "
                          "before trusting it[/]")
    finally:
        if own:
            store.close()


def _print_waiting(report: dict, console: Console) -> None:
    """The results that wait for a person (they do not count until accepted), and the refused candidates."""
    for c in report.get("needs_review") or []:
        why = "; ".join(f"beat the overlap bound on {f['config']} ({f['candidate_ms']:.4g} ms < {f['bound_ms']:.4g} ms)"
                        for f in c["flags"] if "bound_ms" in f) or "flagged"
        console.print(f"[yellow]needs review: #{c['candidate']} {c['speedup'] or 0:.3f}x: {why}. It is not the best, "
                      f"a parent or an inspiration until accepted (`cuco accept {report['run']} {c['candidate']}`, or `a` in the "
                      "TUI's review queue)[/]")
    for r in report.get("refused") or []:
        console.print(f"[magenta]refused: #{r['candidate']}: {r['reason']}[/]")


_CONFIG_COLUMNS = (("baseline ms", "baseline_ms", "{:.3f}"), ("best ms", "candidate_ms", "{:.3f}"),
                   ("speedup", "speedup", "{:.3f}"), ("comp ms", "comp_ms", "{:.3f}"),
                   ("comm ms", "comm_ms", "{:.3f}"), ("bound", "bound", "{:.3f}"),
                   ("eff", "efficiency_label", "{}"))


def _config_table(title: str, configs: list[dict], with_candidate: bool = False) -> Table:
    """Per-config numbers; overlap eff = (base - best) / (base - max(comp, comm)): 1 is a perfect overlap, and a
    candidate that beat that bound changed the compute itself ("compute changed", engine/efficiency.py)."""
    t = Table(title=title)
    t.add_column("config")
    if with_candidate:
        t.add_column("candidate")
    for label, _, _ in _CONFIG_COLUMNS:
        t.add_column(label, justify="right")
    for c in configs:
        cells = [fmt.format(c[k]) if isinstance(c.get(k), (int, float, str)) else "-" for _, k, fmt in _CONFIG_COLUMNS]
        lead = [str(c["name"])] + ([f"#{c['candidate']}"] if with_candidate else [])
        t.add_row(*lead, *cells)
    return t


def _point_change(point: dict, reference: dict) -> str:
    """The dimensions and knobs where `point` differs from the reference (the whole point, 10 of them on a
    CUDA workload, wrapped into a tall unreadable cell at 80 columns)."""
    changed = [f"{k}={v}" for k, v in point.items() if reference.get(k) != v]
    return ", ".join(changed) if changed else "(same)"
