"""Engine throughput against a synthetic executor with fixed job durations and 64 slots.

    python tests/bench/bench_engine.py [--slots 64] [--evals 1500] [--job-ms 40]

Reports candidates per second, slot utilization in steady state (slot-seconds spent in jobs / (slots x
time), from the moment the pipeline first holds `slots` jobs until the last candidate is proposed: the
seed's lone evaluation at the start and the drain at the end are not the engine's doing) and engine CPU
time per candidate (the process's CPU time, less what the synthetic executor spends making results:
the jobs only sleep, so the rest is the engine's: loop, mutator, SQLite, events).
Targets: utilization >= 95 %, engine time < 5 ms per candidate.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.config import RunConfig  # noqa: E402
from engine.run.engine import Engine  # noqa: E402
from engine.workload import load_workload  # noqa: E402
from tests.engine.synthetic import SyntheticExecutor  # noqa: E402


def wide_workload(root: Path):
    """The demo plus a 1000-value knob: a space large enough that the search never runs dry."""
    import shutil

    src = Path(__file__).resolve().parents[2] / "workloads"
    shutil.copytree(src / "demo", root / "demo")
    shutil.copytree(src / "_harness", root / "_harness")
    cand = root / "demo" / "candidate.cpp"
    cand.write_text(
        cand.read_text().replace(
            "// cuco:knob stagger\n", "// cuco:knob stagger\nstatic const int kPad = 0;  // cuco:knob pad\n", 1
        )
    )
    spec = root / "demo" / "workload.yaml"
    spec.write_text(
        spec.read_text().replace(
            "  archive:",
            "    pad: {values: [" + ", ".join(map(str, range(1000))) + "], default: 0, knob: true}\n  archive:",
            1,
        )
    )
    return load_workload(str(root / "demo"))


async def bench(slots: int, evals: int, job_ms: float) -> dict:
    workload = wide_workload(Path(tempfile.mkdtemp()))
    # enough distinct points: every knob value and variant combination of the demo, plus islands
    config = RunConfig(max_evals=evals, concurrency=slots, islands=4, reverify_best=False)
    d = job_ms / 1000.0
    ex = SyntheticExecutor(slots=slots, durations={"build": d, "verify": d, "benchmark": d})
    with tempfile.TemporaryDirectory() as home:
        engine = await Engine.create(Path(home), workload, config, run_id="bench", executor=ex)
        cpu0, wall0 = time.process_time(), time.monotonic()
        state = await engine.run()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        evaluated = engine.evaluated
        reason = engine.stop_reason
        await engine.close()
    return {
        "state": state,
        "reason": reason,
        "evaluated": evaluated,
        "wall_s": wall,
        "candidates_per_s": evaluated / wall,
        "utilization": steady_utilization(ex.timeline, slots),
        "utilization_whole": ex.busy_s / (slots * wall),
        "engine_ms_per_candidate": 1000 * (cpu - ex.own_cpu_s) / max(1, evaluated),
        "max_running": ex.max_running,
    }


def steady_utilization(timeline: list[tuple[float, int]], slots: int) -> float:
    """Busy slot-time over available slot-time between the first full pipeline and the last job start
    that found the pipeline full."""
    full = [t for t, n in timeline if n >= slots]
    if len(full) < 2:
        return 0.0
    t0, t1 = full[0], full[-1]
    busy, last_t, last_n = 0.0, t0, slots
    for t, n in timeline:
        if t <= t0:
            continue
        if t > t1:
            break
        busy += last_n * (t - last_t)
        last_t, last_n = t, n
    return busy / (slots * (t1 - t0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--evals", type=int, default=1500)
    ap.add_argument("--job-ms", type=float, default=40.0)
    args = ap.parse_args()
    r = asyncio.run(bench(args.slots, args.evals, args.job_ms))
    print(
        f"slots {args.slots}, job {args.job_ms:g} ms x 3 stages, {r['evaluated']} candidates ({r['state']}: {r['reason']})"
    )
    print(f"  wall {r['wall_s']:.2f} s, {r['candidates_per_s']:.1f} candidates/s, max running {r['max_running']}")
    print(
        f"  slot utilization {100 * r['utilization']:.1f} % in steady state (target >= 95 %); "
        f"{100 * r['utilization_whole']:.1f} % over the whole run including warm-up and drain"
    )
    print(f"  engine CPU per candidate {r['engine_ms_per_candidate']:.2f} ms   (target < 5 ms)")


if __name__ == "__main__":
    main()
