"""Where a candidate's time goes, from the command line (docs/timeline.md):

    cuco report CANDIDATE --timeline [--json]    the figures of its profiled call, per config and rank
    cuco export --trace CANDIDATE -o FILE.json   Chrome trace-event JSON (Perfetto, chrome://tracing)
    cuco export --trace CANDIDATE --html -o F.html   the same trace as one self-contained page, viewed offline
    cuco profile CANDIDATE [--config NAME]       its benchmark once under Nsight Compute, where ncu is

Everything is read from the store (the timelines table); nothing is measured again but by `profile`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from engine.contract import format_speedup
from remote.errors import InputError

EXIT_OK, EXIT_FAILED = 0, 1


def candidate_id(text: str | None, field: str) -> int:
    try:
        return int(str(text))
    except ValueError:
        raise InputError(field, str(text), "must be a candidate id (a number, as `cuco report RUN` lists)") from None


def _open(args: argparse.Namespace, cid: int, field: str):
    from engine.store.store import ReadStore

    from .cli import home_from

    store = ReadStore(home_from(args))
    if store.candidate(cid) is None:
        store.close()
        raise InputError(field, str(cid), f"no candidate {cid} in {store.db_path}")
    return store


def _ms(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "-"


def print_figures(cid: int, figs: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

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
    from engine.timeline import timeline

    cid = candidate_id(args.run, "CANDIDATE")
    store = _open(args, cid, "CANDIDATE")
    try:
        figs = {config: f for config, (f, _) in timeline.load(store, cid).items()}
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
    from engine.timeline import timeline

    cid = candidate_id(args.trace, "--trace")
    if not args.output or args.output == "-":
        raise InputError(
            "-o",
            str(args.output),
            "give the trace file to write, e.g. -o trace.json (or -o trace.html for a page to open in a browser)",
        )
    store = _open(args, cid, "--trace")
    try:
        parsed = timeline.load_parsed(store, cid)
        row = store.candidate(cid)
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
        from cuco_tui.trace_html import render

        out.write_text(render(trace), encoding="utf-8")
        where = "open it in any browser, offline"
    else:
        out.write_text(json.dumps(trace))
        where = "open it in https://ui.perfetto.dev or chrome://tracing"
    ranks = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    print(f"candidate {cid}: {len(usable)} config(s), {len(ranks)} rank(s) -> {out} ({where})")
    return EXIT_OK


# ----- cuco profile: kernel counters with Nsight Compute ----------------------------------------------

# The documented metric set (docs/timeline.md): each kernel's duration, achieved SM throughput, and memory
# throughput (the busiest of DRAM / L2 / L1), each as a share of the GPU's sustained peak.
NCU_METRICS = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)
NCU_MISSING = 96  # the job's exit code when the node has no ncu
NCU_LAUNCH_COUNT = 400  # kernels profiled at most (each is replayed once per metric pass)
PROFILE_FILES = ("profile.ncu-rep", "summary.csv")  # beside the harness's result


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile",
        help="run a candidate's benchmark job once under Nsight Compute (ncu), where it is installed",
        description="Builds the candidate and runs its harness once under ncu (verify mode, one config) with a "
        "small metric set; brings back the ncu report and a per-kernel summary (duration, achieved "
        "SM and memory throughput). A job like any other: local, or --cluster FILE (SSH or Slurm).",
    )
    p.add_argument("candidate", metavar="CANDIDATE", help="a candidate id")
    p.add_argument("--config", metavar="NAME", help="the problem config to profile (default: the first benchmarked)")
    p.add_argument(
        "--cluster", metavar="FILE", help="cluster.yaml: profile on one of its nodes (over SSH or through Slurm)"
    )
    p.add_argument("-o", "--output", metavar="DIR", help="where the report goes (default ./cuco-profile-CANDIDATE)")
    p.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_profile)


def ncu_script(metrics: tuple[str, ...] = NCU_METRICS) -> str:
    """An sh script that runs the harness's launch command ("$@") under ncu, then exports its raw page."""
    m = ",".join(metrics)
    return (
        f'command -v ncu >/dev/null 2>&1 || {{ echo "cuco: ncu (Nsight Compute) is not installed on this node" >&2; '
        f"exit {NCU_MISSING}; }}; "
        f'ncu --target-processes all --launch-count {NCU_LAUNCH_COUNT} --metrics {m} -f -o profile "$@"; rc=$?; '
        f"ncu --import profile.ncu-rep --csv --page raw --metrics {m} > summary.csv || true; exit $rc"
    )


def summarize_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Per kernel name: launches, total duration (ms) and the mean of each throughput (% of peak)."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 3:
        return []
    head = rows[0]
    col = {name: head.index(name) for name in ("Kernel Name", *NCU_METRICS) if name in head}
    if "Kernel Name" not in col:
        return []
    units = rows[1]
    per: dict[str, dict[str, Any]] = {}
    for row in rows[2:]:
        if len(row) < len(head):
            continue
        k = per.setdefault(
            row[col["Kernel Name"]],
            {"kernel": row[col["Kernel Name"]], "launches": 0, "duration_ms": 0.0, "_sm": [], "_mem": [], "_dram": []},
        )
        k["launches"] += 1

        def value(metric: str, row=row) -> float | None:
            try:
                return float(row[col[metric]].replace(",", ""))
            except (KeyError, ValueError):
                return None

        dur = value(NCU_METRICS[0])
        if dur is not None:
            unit = units[col[NCU_METRICS[0]]]
            scale = {
                "ns": 1e-6,
                "nsecond": 1e-6,
                "us": 1e-3,
                "usecond": 1e-3,
                "ms": 1.0,
                "msecond": 1.0,
                "s": 1e3,
                "second": 1e3,
            }.get(unit, 1e-6)
            k["duration_ms"] += dur * scale
        for key, metric in (("_sm", NCU_METRICS[1]), ("_mem", NCU_METRICS[2]), ("_dram", NCU_METRICS[3])):
            v = value(metric)
            if v is not None:
                k[key].append(v)
    out = []
    for k in sorted(per.values(), key=lambda k: -k["duration_ms"]):
        mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
        out.append(
            {
                "kernel": k["kernel"],
                "launches": k["launches"],
                "duration_ms": k["duration_ms"],
                "sm_throughput_pct": mean(k["_sm"]),
                "memory_throughput_pct": mean(k["_mem"]),
                "dram_throughput_pct": mean(k["_dram"]),
            }
        )
    return out


def cmd_profile(args: argparse.Namespace) -> int:
    import shutil

    from engine.workload import load_workload

    cid = candidate_id(args.candidate, "CANDIDATE")
    store = _open(args, cid, "CANDIDATE")
    try:
        row = store.candidate(cid)
        run = store.run(row["run_id"])
        source = store.source(cid)
    finally:
        store.close()
    workload = load_workload(run["workload_path"])
    if workload.language != "cuda":
        raise InputError(
            "CANDIDATE",
            str(cid),
            f"belongs to workload {workload.name}, which is {workload.language} "
            "(no GPU kernels): `cuco profile` needs a CUDA workload; `cuco report "
            f"{cid} --timeline` shows where its time goes",
        )
    names = [c.name for c in workload.bench_configs] or [c.name for c in workload.configs]
    config = args.config or names[0]
    if config not in [c.name for c in workload.configs]:
        raise InputError("--config", config, f"is not a config of {workload.name} (it has {', '.join(names)})")
    if not args.cluster and shutil.which("ncu") is None:
        print(
            "cuco: ncu (Nsight Compute) is not installed on this machine: install Nsight Compute (it comes with "
            "the CUDA toolkit), put it on PATH, or pass --cluster FILE to profile on a node that has it"
        )
        return EXIT_FAILED
    out = Path(args.output or f"cuco-profile-{cid}")
    from .cli import home_from

    return asyncio_run_profile(home_from(args), workload, source, cid, config, args.cluster, out)


def asyncio_run_profile(home: Path, workload, source: str, cid: int, config: str, cluster, out: Path) -> int:
    import asyncio
    import secrets

    from engine.evaluation.evaluation import build_stage, fresh_seed, run_job
    from engine.evaluation.executors import close_executor, open_executor
    from engine.stages import BENCHMARK, VERIFY

    async def main() -> int:
        executor = await open_executor(home, cluster, gpus_per_job=workload.launch_gpus, workload_name=workload.name)
        try:
            tag = f"profile-{cid}-{secrets.token_hex(4)}"
            built = await build_stage(workload, source, executor, job_prefix=tag)
            if built.binary is None:
                log = built.stages[-1].log[-2000:] if built.stages else ""
                print(f"cuco: candidate {cid} did not build: {built.outcome.reason if built.outcome else ''}\n{log}")
                return EXIT_FAILED
            # verify mode on one config, the harness's own profiled call off: ncu counts the candidate's kernels
            cfg = next(c for c in workload.configs if c.name == config)
            job = run_job(
                workload,
                built.binary,
                VERIFY,
                fresh_seed(),
                f"{tag}-ncu",
                configs=[cfg],
                timeline=False,
                wrapper=ncu_script(),
                outputs=PROFILE_FILES,
                timeout_s=4 * workload.timeouts[BENCHMARK],
            )
            res = await executor.run(job)
        finally:
            await close_executor(executor)
        if res.rc == NCU_MISSING:
            print(
                f"cuco: ncu (Nsight Compute) is not installed on node {res.node}: install it there, or profile "
                "on another node"
            )
            return EXIT_FAILED
        out.mkdir(parents=True, exist_ok=True)
        for name, data in res.outputs.items():
            (out / name).write_bytes(data)
        kernels = summarize_ncu_csv(res.outputs.get("summary.csv", b"").decode("utf-8", "replace"))
        (out / "summary.json").write_text(
            json.dumps(
                {
                    "candidate": cid,
                    "config": config,
                    "node": res.node,
                    "metrics": list(NCU_METRICS),
                    "kernels": kernels,
                },
                indent=1,
            )
        )
        if not kernels:
            print(f"cuco: ncu recorded no kernel (exit {res.rc}); its log:\n{res.log[-2000:]}")
            return EXIT_FAILED
        print(f"candidate {cid}, config {config}, on {res.node}: {len(kernels)} kernel(s) -> {out}/profile.ncu-rep")
        print(f"{'ms':>9} {'SM %':>6} {'mem %':>6} {'n':>4}  kernel")
        for k in kernels[:15]:
            fmt = lambda v: f"{v:6.1f}" if isinstance(v, float) else f"{'-':>6}"  # noqa: E731
            print(
                f"{k['duration_ms']:9.3f} {fmt(k['sm_throughput_pct'])} {fmt(k['memory_throughput_pct'])} "
                f"{k['launches']:4d}  {k['kernel'][:90]}"
            )
        return EXIT_OK

    return asyncio.run(main())
