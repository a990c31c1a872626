"""Evaluations per minute of a finished run, and where its wall time went, read from the run's store only.

    python tests/bench/bench_eval_rate.py RUN.db [RUN2.db ...] [--min-rate 4] [--json OUT.json]

For each run in the store: evaluations (candidates that reached a final status, the seed included, as
`cuco report` counts them) over the run's elapsed minutes; then the stages: builds (CPU), and the GPU jobs
(verify, benchmark, and the re-measures `benchmark2` of would-be bests), each with its count, total and mean
seconds. A stage's start is its `candidate_status` event (engine/run/engine.py writes one as each stage starts),
its duration the executor's (from the moment the job held its GPUs). A stage's start event is written when
the job is submitted, before it waits for GPUs, so where every GPU job takes all of the node's GPUs (ranks =
GPUs) they are laid out one after another in submission order, each starting when it was submitted or when
the one before it ended, whichever is later. From those intervals:

  - GPU busy: the GPU jobs' time, and the idle gaps between them, each put down to what the run was doing
    then (a build in flight, or nothing: the engine between proposals);
  - inside the benchmark jobs: the harness's timed calls (`timed_ms` of the result) against the job's wall
    time; the rest is process start, NCCL set-up, verification, the profiled call and teardown.

Exit 0 when every run reaches --min-rate evaluations per minute (default 4), 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from the tree, not installed
from engine.store.schema import FINAL_STATUSES as FINAL  # noqa: E402
from engine.timeline.timeline import union  # noqa: E402

GPU_STAGES = ("verify", "benchmark", "benchmark2")
MIN_GAP_S = 0.5  # shorter idle stretches are the hand-over between two jobs, not a wait worth naming


def _serial(jobs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Jobs (submitted, submitted + duration) that each held every GPU, run one after another in order."""
    out: list[tuple[float, float]] = []
    for submitted, end in sorted(jobs):
        start = max(submitted, out[-1][1]) if out else submitted
        out.append((start, start + (end - submitted)))
    return out


def _stage_starts(con: sqlite3.Connection, run: str) -> dict[tuple[int, str], list[float]]:
    starts: dict[tuple[int, str], list[float]] = defaultdict(list)
    for ts, data in con.execute(
        "SELECT ts, data_json FROM events WHERE run_id=? AND kind='candidate_status' ORDER BY seq", (run,)
    ):
        d = json.loads(data)
        if d.get("status") == "running" and d.get("stage"):
            starts[(int(d["id"]), str(d["stage"]))].append(float(ts))
    return starts


def analyse(con: sqlite3.Connection, run: str) -> dict[str, Any]:
    row = con.execute(
        "SELECT workload, created_at, finished_at, elapsed_s, config_json FROM runs WHERE id=?", (run,)
    ).fetchone()
    workload, created, finished, elapsed, config = row
    evaluated = con.execute(
        f"SELECT COUNT(*) FROM candidates WHERE run_id=? AND origin_id IS NULL AND status IN ({','.join('?' * len(FINAL))})",
        (run, *FINAL),
    ).fetchone()[0]
    starts = _stage_starts(con, run)
    stages: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "total_s": 0.0})
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    timed_s = bench_wall_s = 0.0
    seen: dict[tuple[int, str], int] = defaultdict(int)
    for cid, stage, dur, result in con.execute(
        "SELECT candidate_id, stage, duration_s, result_json FROM evaluations WHERE run_id=? ORDER BY id", (run,)
    ):
        dur = float(dur or 0.0)
        stages[stage]["n"] += 1
        stages[stage]["total_s"] += dur
        key = (cid, stage)
        k = seen[key]
        seen[key] += 1
        if k < len(starts.get(key, [])):
            t0 = starts[key][k]
            spans["gpu" if stage in GPU_STAGES else stage].append((t0, t0 + dur))
        if stage.startswith("benchmark") and result:
            timed = json.loads(result).get("timed_ms")
            if isinstance(timed, (int, float)):
                timed_s += timed / 1e3
                bench_wall_s += dur
    for s in stages.values():
        s["mean_s"] = s["total_s"] / s["n"] if s["n"] else 0.0
    gpu = _serial(spans["gpu"])
    builds = union(spans["build"])
    gaps = [(a[1], b[0]) for a, b in zip(gpu, gpu[1:]) if b[0] - a[1] >= MIN_GAP_S]
    if gpu and finished and (finished - gpu[-1][1]) >= MIN_GAP_S:
        gaps.append((gpu[-1][1], finished))  # the tail: builds of candidates the stop left unmeasured
    waiting_on_build = sum(sum(max(0.0, min(g[1], b[1]) - max(g[0], b[0])) for b in builds) for g in gaps)
    idle_gaps = sum(g[1] - g[0] for g in gaps)
    minutes = float(elapsed or ((finished or created) - created)) / 60.0
    return {
        "run": run,
        "workload": workload,
        "ranks": json.loads(config).get("ranks"),
        "evaluated": evaluated,
        "elapsed_s": round(minutes * 60.0, 1),
        "evals_per_min": round(evaluated / minutes, 2) if minutes > 0 else None,
        "stages": {
            k: {"n": v["n"], "total_s": round(v["total_s"], 1), "mean_s": round(v["mean_s"], 2)}
            for k, v in sorted(stages.items())
        },
        "gpu_busy_s": round(sum(b - a for a, b in gpu), 1),
        "gpu_first_start_s": round(gpu[0][0] - created, 1) if gpu else None,
        "gpu_idle_gaps": len(gaps),
        "gpu_idle_between_jobs_s": round(idle_gaps, 1),
        "gpu_idle_while_building_s": round(waiting_on_build, 1),
        "benchmark_timed_s": round(timed_s, 1),
        "benchmark_wall_s": round(bench_wall_s, 1),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--min-rate", type=float, default=4.0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    out, ok = [], True
    for path in args.stores:
        if not Path(path).is_file():
            print(f"{path}: no such store (give a run's cuco.db)", file=sys.stderr)
            return 2
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            runs = [r[0] for r in con.execute("SELECT id FROM runs ORDER BY created_at")]
            for run in runs:
                a = analyse(con, run)
                out.append(a)
                rate = a["evals_per_min"]
                ok = ok and rate is not None and rate >= args.min_rate
                print(
                    f"{a['workload']} ({a['run']}, {a['ranks']} ranks): {a['evaluated']} evaluations in "
                    f"{a['elapsed_s']} s = {rate} per minute (target {args.min_rate})"
                )
                for name, s in a["stages"].items():
                    print(f"  {name:<11} {s['n']:>3} jobs  {s['total_s']:>7.1f} s  mean {s['mean_s']:.2f} s")
                print(
                    f"  GPU busy {a['gpu_busy_s']} s of {a['elapsed_s']} s (first GPU job at {a['gpu_first_start_s']} s); "
                    f"idle between jobs {a['gpu_idle_between_jobs_s']} s in {a['gpu_idle_gaps']} gaps, "
                    f"{a['gpu_idle_while_building_s']} s of it while a build ran"
                )
                print(
                    f"  benchmark jobs: {a['benchmark_timed_s']} s of timed calls in {a['benchmark_wall_s']} s of wall"
                )
        except sqlite3.DatabaseError as exc:
            print(f"{path}: not a cuco store ({exc})", file=sys.stderr)
            return 2
        finally:
            con.close()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
