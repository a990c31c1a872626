#!/usr/bin/env python3
"""The seed against itself on one GPU: a workload's seed built once (as the engine builds it), then benchmark
jobs of it against the frozen baseline (its own copy), each job's per-config speedup interval checked for
1.00. Jobs at the adaptive protocol (rounds until the interval is narrower than the target, or the cap) and,
for its cost, at fixed rounds (the workload's `iters`, no adaptation), taken in turns: A B A B.

    python3 tests/gpu/seed_self_intervals.py WORKLOAD RANKS OUT.json [--jobs 10] [--fixed 5] [--budget-s 200]

Writes OUT.json (every job: protocol, wall seconds, rounds, per-config speedup and interval) and prints a
summary line: intervals holding 1.00 out of all, and the median job wall time of each protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine.evaluation import protocol  # noqa: E402
from engine.evaluation.evaluation import build_stage, mode_configs, read_result, run_job  # noqa: E402
from engine.stages import BENCHMARK  # noqa: E402
from engine.workload import load_workload  # noqa: E402
from remote.local import LocalExecutor  # noqa: E402


async def main(args: argparse.Namespace) -> dict:
    w = load_workload(args.workload).with_ranks(args.ranks)
    jobs_dir = Path.cwd() / ".cuco-gpu-jobs"  # not under /tmp: a sandboxed job's /tmp is its own
    jobs_dir.mkdir(exist_ok=True)
    ex = LocalExecutor(work_dir=Path(tempfile.mkdtemp(dir=jobs_dir)))
    started = time.monotonic()
    rows: list[dict] = []
    try:
        built = await build_stage(w, w.seed_source, ex, job_prefix="self")
        if built.binary is None:
            return {"error": built.outcome.reason if built.outcome else "build failed"}
        expected = [c.name for c in mode_configs(w, BENCHMARK)]
        plan = []
        for i in range(max(args.jobs, args.fixed)):
            if i < args.jobs:
                plan.append("adaptive")
            if i < args.fixed:
                plan.append("fixed")
        for n, kind in enumerate(plan):
            if time.monotonic() - started > args.budget_s:
                break
            # fixed rounds: the cap at `iters` (protocol.rounds_spec reads the factor when the spec is written)
            protocol.MAX_ROUNDS_FACTOR = 4 if kind == "adaptive" else 1
            nonce = secrets.token_hex(16) if w.harness_nonce else None
            job = await ex.run(run_job(w, built.binary, BENCHMARK, 9000 + n, f"self-{n}", nonce, timeline=False))
            result = read_result(job, BENCHMARK, expected, nonce)
            configs = [
                {
                    "name": c["name"],
                    "speedup": c.get("speedup"),
                    "interval": c.get("speedup_interval"),
                    "rounds": len(c.get("rounds") or []),
                    "holds_1": bool(c.get("speedup_interval"))
                    and c["speedup_interval"][0] <= 1.0 <= c["speedup_interval"][1],
                }
                for c in result.configs
            ]
            rows.append({"job": n, "protocol": kind, "wall_s": round(job.duration_s, 2), "configs": configs})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        await ex.close()
    adaptive = [r for r in rows if r["protocol"] == "adaptive"]
    fixed = [r for r in rows if r["protocol"] == "fixed"]
    held = [c["holds_1"] for r in adaptive for c in r["configs"]]
    return {
        "workload": args.workload,
        "ranks": args.ranks,
        "adaptive_jobs": len(adaptive),
        "intervals_holding_1": f"{sum(held)}/{len(held)}",
        "jobs_all_holding_1": sum(all(c["holds_1"] for c in r["configs"]) for r in adaptive),
        "wall_s_median": {
            "adaptive": statistics.median([r["wall_s"] for r in adaptive]) if adaptive else None,
            "fixed": statistics.median([r["wall_s"] for r in fixed]) if fixed else None,
        },
        "rounds_median": {
            "adaptive": statistics.median([c["rounds"] for r in adaptive for c in r["configs"]]) if adaptive else None,
            "fixed": statistics.median([c["rounds"] for r in fixed for c in r["configs"]]) if fixed else None,
        },
        "jobs": rows,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("ranks", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--fixed", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=200)
    a = ap.parse_args()
    summary = asyncio.run(main(a))
    a.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "jobs"}), flush=True)
