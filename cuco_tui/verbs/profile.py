"""`cuco profile CANDIDATE [--config NAME] [--cluster FILE] [-o DIR]`: the candidate's benchmark job once
under Nsight Compute, where ncu is installed; brings back its report and a per-kernel summary."""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import secrets
import shutil
from pathlib import Path
from typing import Any

from engine.evaluation.evaluation import build_stage, fresh_seed, run_job
from engine.evaluation.executors import close_executor, open_executor
from engine.stages import BENCHMARK, VERIFY
from engine.workload import Workload, load_workload
from remote.errors import InputError

from .common import EXIT_FAILED, EXIT_OK, home_from
from .timeline import candidate_id, open_candidate

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


def register(subparsers: Any) -> None:
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
    cid = candidate_id(args.candidate, "CANDIDATE")
    store, row = open_candidate(args, cid, "CANDIDATE")
    try:
        run = store.run(row["run_id"])
        source = store.source(cid)
    finally:
        store.close()
    if run is None:  # a candidate outlives its run only in a damaged store
        raise InputError("CANDIDATE", str(cid), f"its run {row['run_id']} is not in the store")
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
    return run_profile(home_from(args), workload, source, cid, config, args.cluster, out)


def run_profile(
    home: Path, workload: Workload, source: str, cid: int, config: str, cluster: str | None, out: Path
) -> int:
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
