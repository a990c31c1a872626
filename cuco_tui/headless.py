"""`cuco run --headless`: a rich progress display while the engine runs, and a summary at the end, on
stdout (what goes wrong, on stderr)."""

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

from engine.contract import Best, BestRef, Log, Result, RunState, decode, format_speedup
from engine.evaluation.fault_report import fault_line
from engine.glossary import legend
from engine.store.store import ReadStore
from engine.views.best import top_candidates
from engine.views.read_model import first_candidate
from engine.views.report import build_report

RECENT = 6


class HeadlessDisplay:
    """On a terminal: a live progress bar and the newest results. Redirected to a file or a pipe: one line
    per finished candidate, per new best and per state change, written and flushed as it happens (a
    redraw-in-place display would write nothing until the end)."""

    def __init__(self, engine, console: Console | None = None):
        self.engine = engine
        self.console = console or Console()  # stdout: `> run.log` and `| tee` keep it; errors go to stderr
        self.lines = not self.console.is_terminal
        total = engine.config.max_evals
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            console=self.console,
        )
        self.task = self.progress.add_task(engine.run_id, total=total, completed=engine.evaluated, info="")
        self.recent: list[str] = []
        self.live = (
            None
            if self.lines
            else Live(
                self._render(),
                console=self.console,
                refresh_per_second=4,
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
        )
        self._last = 0.0

    def __enter__(self):
        if self.live is not None:
            self.live.__enter__()
        else:
            self._line(f"run {self.engine.run_id} ({self.engine.config.max_evals} evaluations at most)")
        return self

    def __exit__(self, *exc):
        if self.live is None:
            return None
        self.live.update(self._render())
        return self.live.__exit__(*exc)

    def _line(self, text: str) -> None:
        stream = self.console.file
        stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        stream.flush()

    def on_event(self, message: dict[str, Any]) -> None:
        envelope = decode(message)
        event = envelope.event if envelope is not None else None
        line = None
        if isinstance(event, Result):
            sp = f"{event.speedup:.3f}x" if event.speedup else ""
            line = f"#{event.id:<5} {event.status:<9} {sp:>8}  {str(event.reason or '')[:70]}".rstrip()
        elif isinstance(event, Log) and event.level in ("warning", "error"):
            line = f"[{event.level}] {event.message[:200]}"
        elif isinstance(event, Best) and self.lines:
            line = f"new best #{event.id} {format_speedup(event.speedup or 0, event.speedup_interval)}"
            line += " (re-measured side by side)" if event.remeasured else ""
        elif isinstance(event, RunState) and self.lines:
            line = f"run {event.state}" + (f" ({event.reason})" if event.reason else "")
        if self.lines:
            if line is not None:
                st = self.engine.status()
                self._line(
                    f"{line}  [{st['evaluated']}/{self.engine.config.max_evals} evaluated]"
                    if isinstance(event, Result)
                    else line
                )
            return
        if line is not None:
            self.recent = (self.recent + [line])[-RECENT:]
        now = time.monotonic()
        if self.live is not None and (isinstance(event, (Result, RunState, Best)) or now - self._last > 0.25):
            self._last = now
            self.live.update(self._render())

    def _render(self):
        e = self.engine
        st = e.status()
        best = BestRef.from_dict(st["best"])
        left = ""
        if e.config.max_minutes:
            left = f"  time left {max(0.0, e.config.max_minutes * 60 - e.elapsed_s()) / 60:.1f} min"
        info = (
            (f"best {best.shown} (#{best.candidate})" if best and best.speedup else "best -")
            + f"  correct {st['correct']}  failed {st['failed']}  in flight {st['in_flight']}"
            + (f"  LLM ${st['llm_cost_usd']:.4f}" if st["llm_cost_usd"] else "")
            + left
        )
        self.progress.update(self.task, completed=st["evaluated"], info=info)
        return Group(self.progress, Text("\n".join(self.recent), style="dim"))

    def print_summary(self, home: Path, run_id: str) -> None:
        store = ReadStore(home)
        try:
            print_report(build_report(store, run_id), home, store, console=self.console)
        finally:
            store.close()


def _ms(value: float | None) -> str:
    return f"{value:.3f} ms" if isinstance(value, (int, float)) else "-"


def best_line(best: dict) -> str:
    """The best with its ratio and its times from the same job, so the numbers agree on sight."""
    if not best:
        return "-"
    line = f"#{best['candidate']} {format_speedup(best.get('speedup') or 0, best.get('speedup_interval'))} speedup"
    if best.get("remeasured"):
        line += " (re-measured side by side with the other finalists and the seed)"
    if best.get("time_ms") is not None:
        line += f", {_ms(best['time_ms'])} vs baseline {_ms(best.get('baseline_ms'))} in its job"
        if best.get("sum_ratio"):
            line += f" (sum ratio {best['sum_ratio']:.3f}x)"
    return line


def _two_lines(shown: str) -> str:
    """A speedup over its interval, one above the other: a narrow column keeps both whole at 80 columns."""
    return shown.replace(" ", "\n", 1)


def _measuring_line(report: dict) -> str:
    """Which numbers are re-measured ones, and how many benchmarks the node's load made us take again."""
    again = report.get("remeasured") or []
    ids = ", ".join(f"#{i}" for i in again) or "none"
    return f"re-measured side by side: {ids}; taken again under interference: {report.get('interference_repeats') or 0}"


def print_report(report: dict, home: Path, store=None, console: Console | None = None) -> None:
    """The run's summary; every table fits 80 columns and every number's meaning is in the legend below."""
    console = console or Console()
    own = store is None
    store = store or ReadStore(home)
    try:
        best = report["best"] or {}
        head = Table.grid(padding=(0, 2))
        head.add_column(style="bold", no_wrap=True)
        head.add_column(overflow="fold")
        head.add_row("run", f"{report['run']}  (workload {report['workload']}, parent {report['parent_run'] or '-'})")
        head.add_row("state", report["state"] + (f" ({report['stop_reason']})" if report["stop_reason"] else ""))
        head.add_row("evaluated", f"{report['evaluated']}: {report['correct']} correct, {report['failed']} failed")
        if report.get("faults"):
            head.add_row("failures", fault_line(report["faults"]))
        head.add_row("baseline", f"{_ms(report['baseline_time_ms'])} (sum over configs, in the seed's job)")
        head.add_row("best", best_line(best))
        head.add_row("accepted", ", ".join(map(str, report["accepted"])) or "-")
        head.add_row("measuring", _measuring_line(report))
        head.add_row("LLM cost", f"${report['llm_cost_usd']:.4f}")
        console.print(head)
        first = first_candidate(store.fetchall, report["run"])
        reference = json.loads(first["descriptor_json"]) if first else {}
        table = Table(
            title="top candidates (not rejected, not held for review), by speedup",
            caption=f"design point: what differs from #{first['id']}, the run's first candidate" if first else None,
        )
        table.add_column("id", no_wrap=True)
        table.add_column("isl", no_wrap=True)
        table.add_column("gen", no_wrap=True)
        table.add_column("op", overflow="fold")
        table.add_column("design point", overflow="fold", ratio=1)
        for col in ("speedup", "time ms", "base ms"):
            table.add_column(col, justify="right", no_wrap=True)
        marks = {m: "+" for m in report["accepted"]}
        for r in top_candidates(store.fetchall, report["run"], 8):
            point = _point_change(json.loads(r["descriptor_json"]), reference)
            table.add_row(
                f"{r['id']}{marks.get(r['id'], '')}",
                str(r["island"]),
                str(r["generation"]),
                r["operator"],
                point,
                _two_lines(format_speedup(r["speedup"] or 0, [r["speedup_low"], r["speedup_high"]])),
                _num(r["time_ms"]),
                _num(r["baseline_ms"]),
            )
        console.print(table)
        if best.get("configs"):
            console.print(_config_table(f"best candidate #{best['candidate']} per config", best["configs"]))
        others = [c for c in report.get("best_per_config") or [] if c["candidate"] != best.get("candidate")]
        if others:
            console.print(_config_table("configs where another candidate is faster", others, with_candidate=True))
            for cid, descriptor in {c["candidate"]: c.get("descriptor") or {} for c in others}.items():
                console.print(f"  #{cid}: {_point_change(descriptor, reference)}", style="dim")
        _print_waiting(report, console)
        for flag in best.get("flags") or []:
            console.print(
                f"[yellow]⚑ the best beat the overlap bound on {flag['config']} ({flag['candidate_ms']:.4g} ms < "
                f"{flag['bound_ms']:.4g} ms): a faster computation or a gamed measurement; read its diff "
                "before trusting it[/]"
            )
        console.print(
            Text(
                legend("speedup", "time", "baseline", "sum ratio", "bound", "eff", "comp / comm")
                + "\n+: accepted by a person",
                style="dim",
            )
        )
    finally:
        if own:
            store.close()


def _num(value: float | None) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


def _print_waiting(report: dict, console: Console) -> None:
    """The results that wait for a person (they do not count until accepted), and the refused candidates."""
    for c in report.get("needs_review") or []:
        why = (
            "; ".join(
                f"beat the overlap bound on {f['config']} ({f['candidate_ms']:.4g} ms < {f['bound_ms']:.4g} ms)"
                for f in c["flags"]
                if "bound_ms" in f
            )
            or "flagged"
        )
        console.print(
            f"[yellow]needs review: #{c['candidate']} {c['speedup'] or 0:.3f}x: {why}. It is not the best, "
            f"a parent or an inspiration until accepted (`cuco accept {report['run']} {c['candidate']}`, or `a` in the "
            "TUI's review queue)[/]"
        )
    for r in report.get("refused") or []:
        console.print(f"[magenta]refused: #{r['candidate']}: {r['reason']}[/]")
    for r in report.get("rejected") or []:  # by a person: never the best, a parent or an inspiration
        console.print(f"[red]rejected: #{r['candidate']}: {r['reason'] or '(no reason)'}[/]")
    if report.get("strategies"):
        console.print(strategy_table(report["strategies"]))


def strategy_table(rows: list[dict]) -> Table:
    """The run's mutation strategies (engine/llm/strategies.py), active and best first."""
    t = Table(title="strategies")
    for label, justify in (
        ("id", "left"),
        ("strategy", "left"),
        ("status", "left"),
        ("prompts", "right"),
        ("share", "right"),
        ("children", "right"),
        ("faster", "right"),
        ("failed", "right"),
        ("mean gain", "right"),
    ):
        t.add_column(label, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        status = "pinned" if r["pinned"] else r["status"]
        t.add_row(
            r["id"],
            r["text"],
            status + (f" ({r['why']})" if r.get("why") else ""),
            str(r["pulls"]),
            f"{r['share']:.0%}",
            str(r["children"]),
            str(r["successes"]),
            str(r["failures"]),
            "-" if r["mean_gain"] is None else f"{r['mean_gain']:+.1%}",
        )
    return t


_CONFIG_COLUMNS = (
    ("base ms", "baseline_ms", "{:.3f}"),
    ("cand ms", "candidate_ms", "{:.3f}"),
    ("ratio", "speedup", "{:.3f}x"),
    ("comp", "comp_ms", "{:.3f}"),
    ("comm", "comm_ms", "{:.3f}"),
    ("bound", "bound", "{:.2f}x"),
    ("eff", "efficiency_label", "{}"),
)


def _config_table(title: str, configs: list[dict], with_candidate: bool = False) -> Table:
    """Per-config numbers; overlap eff = (base - best) / (base - max(comp, comm)): 1 is a perfect overlap, and a
    candidate that beat that bound changed the compute itself ("compute changed", engine/evaluation/efficiency.py)."""
    t = Table(title=title)
    t.add_column("config" + ("\ncand" if with_candidate else ""), overflow="fold", min_width=6)
    for label, _, _ in _CONFIG_COLUMNS:
        t.add_column(label, justify="right", no_wrap=True)
    for c in configs:
        cells = [fmt.format(c[k]) if isinstance(c.get(k), (int, float, str)) else "-" for _, k, fmt in _CONFIG_COLUMNS]
        cells[2] = _two_lines(format_speedup(c.get("speedup"), c.get("speedup_interval")))  # with its spread
        lead = str(c["name"]) + (f"\n#{c['candidate']}" if with_candidate else "")  # one column: 80 fit
        t.add_row(lead, *cells)
    return t


def _point_change(point: dict, reference: dict) -> str:
    """The dimensions and knobs where `point` differs from the reference (the whole point, 10 of them on a
    CUDA workload, wrapped into a tall unreadable cell at 80 columns)."""
    changed = [f"{k}={v}" for k, v in point.items() if reference.get(k) != v]
    return ", ".join(changed) if changed else "(same)"
