#!/usr/bin/env python3
"""A CUDA workload's seed evaluated exactly as the engine does (build, verify, benchmark through the local
executor), so every job runs in the sandbox with the GPUs (remote/sandbox.py: bwrap, the host's /dev,
its own network namespace, a private /tmp and /dev/shm). Prints one JSON line: status, speedup, the
benchmark job's timed_ms, check_ms and wall time, and the sandbox notice if the log has one.

    python3 tests/gpu/sandbox_gpu_eval.py WORKLOAD RANKS [CONFIG,...]
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine.evaluation.evaluation import evaluate_source  # noqa: E402
from engine.workload import load_workload  # noqa: E402
from remote.local import LocalExecutor  # noqa: E402


async def main(name: str, ranks: int, configs: list[str]) -> dict:
    w = load_workload(name).with_ranks(ranks)
    if configs:
        w = dataclasses.replace(w, configs=[c for c in w.configs if c.name in configs or not c.bench])
    jobs = Path.cwd() / ".cuco-gpu-jobs"  # not under /tmp: a job's /tmp is its own
    jobs.mkdir(exist_ok=True)
    ex = LocalExecutor(work_dir=Path(tempfile.mkdtemp(dir=jobs)))
    try:
        out = await asyncio.wait_for(evaluate_source(w, w.seed_source, ex, job_prefix=f"sbx-{name}", seed=4321), 400)
    finally:
        await ex.close()
    bench = (out.metrics or {}).get("benchmark", {})
    walls = [s.duration_s for s in out.stages if s.stage == "benchmark"]
    logs = "".join(s.log for s in out.stages)
    return {
        "workload": name,
        "status": out.status,
        "reason": out.reason,
        "speedup": out.speedup,
        "timed_ms": bench.get("timed_ms"),
        "check_ms": bench.get("check_ms"),
        "wall_ms": round(walls[-1] * 1000) if walls else None,
        "sandbox_notice": [line for line in logs.splitlines() if line.startswith("cuco: ") and "sandbox" in line][:1],
    }


if __name__ == "__main__":
    print(
        json.dumps(
            asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",") if len(sys.argv) > 3 else []))
        ),
        flush=True,
    )
