"""`cuco ls`, `cuco report [RUN]` and `cuco export [RUN]`: what a project home's runs found, read from the
store; `report --timeline` and `export --trace` show where a candidate's time goes (verbs/timeline.py),
`export --patch` writes a candidate back into the user's files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from rich import box
from rich.console import Console
from rich.table import Table

from engine.onboard.export_patch import patch_for
from engine.onboard.rewrites import RewriteError
from engine.store.store import DB_NAME, ReadStore
from engine.views.report import build_report
from remote.errors import InputError

from ..headless import print_report
from .common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, add_verb, home_from, named_run
from .rewrite import print_patch
from .timeline import export_trace, report_timeline


def cmd_ls(args: argparse.Namespace) -> int:
    home = home_from(args)
    if not (home / DB_NAME).exists():
        print(f"no runs in {home}")
        return EXIT_OK
    store = ReadStore(home)
    try:
        reports = [build_report(store, r["id"]) for r in store.runs()]
    finally:
        store.close()
    if args.json:
        print(json.dumps(reports, indent=2, default=str))
        return EXIT_OK
    # Fits 80 columns (a pipe): a fork names its parent on a second line of its run cell, long names fold,
    # the short numbers never shrink.
    table = Table(
        title=f"runs in {home}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption="best: the best candidate (not rejected, not held for review); speedup: its geometric "
        "mean of per-config A B ratios; evals: candidates evaluated, ok: those correct",
    )
    table.add_column("run", overflow="fold", ratio=3)
    table.add_column("workload", overflow="fold", ratio=1, min_width=8)
    for col in ("state", "evals", "ok", "best", "speedup", "LLM $"):
        table.add_column(col, no_wrap=True, justify="left" if col == "state" else "right", min_width=len(col))
    for r in reports:
        best = r["best"] or {}
        run = r["run"] + (f"\n↳ fork of {r['parent_run']}" if r["parent_run"] else "")
        table.add_row(
            run,
            r["workload"],
            r["state"],
            str(r["evaluated"]),
            str(r["correct"]),
            str(best.get("candidate", "")),
            f"{best['speedup']:.3f}x" if best.get("speedup") else "",
            f"${r['llm_cost_usd']:.2f}",
        )
    Console().print(table)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    if args.timeline:
        return report_timeline(args)
    home = home_from(args)
    run_id = named_run(home, args.run)
    store = ReadStore(home)
    try:
        report = build_report(store, run_id)
    finally:
        store.close()
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print_report(report, home)
    return EXIT_FAILED if report["state"] == "failed" else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    if getattr(args, "patch", False):
        return export_patch(args)
    if args.trace is not None:
        return export_trace(args)
    if getattr(args, "html", False):
        raise InputError("--html", "", "goes with --trace CANDIDATE (a timeline as a page); a source has no HTML form")
    home = home_from(args)
    run_id = named_run(home, args.run)
    store = ReadStore(home)
    try:
        if args.candidate is not None:
            ids = [args.candidate]
        else:
            report = build_report(store, run_id)
            ids = report["accepted"] or ([report["best"]["candidate"]] if report["best"] else [])
            if not ids:
                raise InputError("RUN", run_id, "has no accepted or correct candidate to export; pass --candidate")
        run = store.run(run_id)
        if run is None:  # resolved above: gone only if the store changed meanwhile
            raise InputError("RUN", run_id, f"no such run in {home}")
        workload = run["workload"]
        for cid in ids:
            row = store.candidate(cid)
            if row is None or row["run_id"] != run_id:
                raise InputError("--candidate", str(cid), f"no candidate {cid} in run {run_id}")
            source = store.source(cid)
            if args.output and len(ids) == 1:
                out = Path(args.output)
            else:
                suffix = Path(candidate_name(run["workload_path"])).suffix or ".cpp"
                out = Path(args.output or ".") / f"{workload}-{run_id}-c{cid}{suffix}"
            if str(out) == "-":
                sys.stdout.write(source)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(source)
            print(f"candidate {cid} (speedup {row['speedup'] or 0:.3f}x, {row['status']}) -> {out}")
    finally:
        store.close()
    return EXIT_OK


def candidate_name(workload_path: str) -> str:
    """The candidate file's name the workload declares (its suffix names what is exported)."""
    try:
        return str(yaml.safe_load((Path(workload_path) / "workload.yaml").read_text())["candidate"])
    except (OSError, KeyError, TypeError, ValueError):
        return "candidate.cpp"


def export_patch(args: argparse.Namespace) -> int:
    """`cuco export RUN --patch [--candidate ID] [-o FILE]`: the accepted (or best, or named) candidate as
    a patch against the user's files."""
    home = home_from(args)
    try:
        run_id = named_run(home, args.run)
        store = ReadStore(home)
        try:
            if args.candidate is not None:
                cid = args.candidate
            else:
                report = build_report(store, run_id)
                ids = report["accepted"] or ([report["best"]["candidate"]] if report["best"] else [])
                if not ids:
                    raise InputError("RUN", run_id, "has no accepted or correct candidate to export; pass --candidate")
                cid = ids[0]
            row = store.candidate(cid)
            if row is None or row["run_id"] != run_id:
                raise InputError("--candidate", str(cid), f"no candidate {cid} in run {run_id}")
            source = store.source(cid)
            run = store.run(run_id)
            if run is None:  # resolved above: gone only if the store changed meanwhile
                raise InputError("RUN", run_id, f"no such run in {home}")
            root = Path(run["workload_path"])
        finally:
            store.close()
        diff, notes = patch_for(source, root, f"candidate {cid}")
    except (InputError, RewriteError) as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return print_patch(
        diff,
        notes,
        args.output if args.output != "-" else None,
        f"candidate {cid} (speedup {row['speedup'] or 0:.3f}x) -> {args.output} (patch -p1 in your program's folder)",
    )


def register(subparsers: Any) -> None:
    p = add_verb(subparsers, "ls", cmd_ls, "list the runs of this project home")
    p.add_argument("--json", action="store_true")

    p = add_verb(subparsers, "report", cmd_report, "a run's summary")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--json", action="store_true", help="one JSON object (its fields: docs/contract.md)")
    p.add_argument(
        "--timeline",
        action="store_true",
        help="RUN is a CANDIDATE id: where its time goes, per config and rank (docs/timeline.md)",
    )

    p = add_verb(subparsers, "export", cmd_export, "write accepted (or the best, or one) candidate's source")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--candidate", type=int)
    p.add_argument("-o", "--output", help="a file (one candidate), a folder, or - for stdout")
    p.add_argument(
        "--trace",
        metavar="CANDIDATE",
        help="write that candidate's timeline as Chrome trace-event JSON to -o FILE.json",
    )
    p.add_argument(
        "--html",
        action="store_true",
        help="with --trace: write the trace as one self-contained HTML page that any browser opens "
        "offline (the default for -o FILE.html)",
    )
    p.add_argument(
        "--patch",
        action="store_true",
        help="the candidate's schedule rewrites written back into your program's files, as a unified "
        "diff (patch -p1 in their folder); for workloads made by cuco init",
    )
