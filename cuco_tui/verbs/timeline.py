"""Where a candidate's time goes, as `cuco report` and `cuco export` show it (docs/timeline.md):

    cuco report CANDIDATE --timeline [--json]    the figures of its profiled call, per config and rank
    cuco export --trace CANDIDATE -o FILE.json   Chrome trace-event JSON (Perfetto, chrome://tracing)
    cuco export --trace CANDIDATE --html -o F.html   the same trace as one self-contained page, viewed offline

Everything is read from the store (the timelines table); nothing is measured again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from engine.contract import format_speedup
from engine.store.store import ReadStore
from engine.timeline import timeline
from engine.views import timelines
from remote.errors import InputError

from ..trace_html import render
from .common import EXIT_FAILED, EXIT_OK, home_from


def candidate_id(text: str | None, field: str) -> int:
    try:
        return int(str(text))
    except ValueError:
        raise InputError(field, str(text), "must be a candidate id (a number, as `cuco report RUN` lists)") from None


def open_candidate(args: argparse.Namespace, cid: int, field: str) -> tuple[ReadStore, dict[str, Any]]:
    """The store and candidate `cid`'s row (bad input naming `field` when the store has no such candidate);
    the caller closes the store."""
    store = ReadStore(home_from(args))
    row = store.candidate(cid)
    if row is None:
        store.close()
        raise InputError(field, str(cid), f"no candidate {cid} in {store.db_path}")
    return store, row


def _ms(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "-"


def print_figures(cid: int, figs: dict[str, dict[str, Any]]) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped: one line per rank, not a wrapped table
    for config, f in figs.items():
        if f.get("error"):
            console.print(f"[bold]{config}[/]: {f['error']}")
            continue
        frac = f.get("overlap_fraction")
        title = (
            f"candidate {cid}, config {config} ({f.get('source')}): overlap fraction "
            f"{'-' if frac is None else f'{frac:.2f}'}, critical rank {f.get('critical_rank')}"
        )
        table = Table(title=title, title_justify="left")
        for col in (
            "rank",
            "span ms",
            "compute ms",
            "comm ms",
            "overlapped ms",
            "exposed ms",
            "exposed %",
            "idle ms",
            "largest gap ms",
            "after",
            "dominant",
        ):
            table.add_column(col, justify="right" if "ms" in col or col in ("rank", "exposed %") else "left")
        for r in f.get("ranks") or []:
            table.add_row(
                str(r["rank"]),
                _ms(r["span_ms"]),
                _ms(r["compute_ms"]),
                _ms(r["comm_ms"]),
                _ms(r["overlapped_ms"]),
                _ms(r["exposed_comm_ms"]),
                f"{100 * r['exposed_share']:.0f}",
                _ms(r["idle_ms"]),
                _ms(r["largest_gap_ms"]),
                (r.get("largest_gap_after") or "")
                + (f" (in {r['largest_gap_in']})" if r.get("largest_gap_in") else ""),
                f"{r.get('dominant') or ''} ({_ms(r.get('dominant_ms'))} ms)",
            )
        console.print(table)
        if f.get("dropped"):
            console.print(f"  ({f['dropped']} records beyond the harness's cap were left out)")


def report_timeline(args: argparse.Namespace) -> int:
    cid = candidate_id(args.run, "CANDIDATE")
    store, _ = open_candidate(args, cid, "CANDIDATE")
    try:
        figs = {config: f for config, (f, _) in timelines.load(store, cid).items()}
    finally:
        store.close()
    if not figs:
        print(
            f"candidate {cid} has no timeline (it was not benchmarked, or was measured before timelines were recorded)"
        )
        return EXIT_FAILED
    if args.json:
        print(json.dumps({"candidate": cid, "configs": figs}, indent=2))
    else:
        print_figures(cid, figs)
    return EXIT_OK


def export_trace(args: argparse.Namespace) -> int:
    cid = candidate_id(args.trace, "--trace")
    if not args.output or args.output == "-":
        raise InputError(
            "-o",
            str(args.output),
            "give the trace file to write, e.g. -o trace.json (or -o trace.html for a page to open in a browser)",
        )
    store, row = open_candidate(args, cid, "--trace")
    try:
        parsed = timelines.load_parsed(store, cid)
        run_id = row["run_id"]
        # the page's title carries the candidate's number with its spread, as every view shows it
        shown = format_speedup(row.get("speedup"), [row.get("speedup_low"), row.get("speedup_high")])
    finally:
        store.close()
    usable = {c: t for c, t in parsed.items() if isinstance(t, timeline.ConfigTimeline)}
    if not usable:
        reasons = "; ".join(f"{c}: {t}" for c, t in parsed.items()) or "it was not benchmarked"
        print(f"candidate {cid} has no timeline to export ({reasons})")
        return EXIT_FAILED
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    trace = timeline.chrome_trace(usable, title=f"cuco {run_id} candidate {cid}: {shown}")
    as_html = getattr(args, "html", False) or out.suffix.lower() in (".html", ".htm")
    if as_html:
        out.write_text(render(trace), encoding="utf-8")
        where = "open it in any browser, offline"
    else:
        out.write_text(json.dumps(trace))
        where = "open it in https://ui.perfetto.dev or chrome://tracing"
    ranks = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    print(f"candidate {cid}: {len(usable)} config(s), {len(ranks)} rank(s) -> {out} ({where})")
    return EXIT_OK
