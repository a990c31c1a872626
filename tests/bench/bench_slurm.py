"""The Slurm executor's own overhead on a real single-node Slurm (a script, not a unit test).

    python tests/bench/bench_slurm.py [--seq 20] [--many 200]

Needs root and Debian's slurmctld, slurmd, slurm-client and munge (as tests/slurm). Starts the test cluster
(tests/slurm/slurm_cluster.py) and measures, with the login node local:
1. sequential jobs `true`, one at a time: end to end per job (JobSpec in, JobResult out), and cuco's own
   time in it (its submit, poll and collect commands on the login node, timed around each call); the rest
   is Slurm's (scheduling, launch, the poll interval). A B A B: Slurm's default batch_sched_delay (3 s)
   against batch_sched_delay=0, switched with `scontrol reconfigure` between rounds;
2. N short jobs in flight at once: wall time, failures (must be 0), and how many squeue polls served them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "slurm"))

import slurm_cluster  # noqa: E402  (tests/slurm/slurm_cluster.py: the real Slurm)

from remote.jobs import JobSpec  # noqa: E402
from remote.slurm_config import load_slurm_cluster  # noqa: E402
from remote.slurm_executor import SlurmExecutor  # noqa: E402


class TimedShell:
    """The executor's login shell, with the time of each command added up by what the command is."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    async def run(self, command: str, **kw):
        kind = (
            "submit"
            if "sbatch --parsable" in command
            else "poll"
            if "squeue -h -t all" in command
            else "collect"
            if "tar -cf" in command
            else "other"
        )
        t = time.perf_counter()
        try:
            return await self.inner.run(command, **kw)
        finally:
            self.seconds[kind] += time.perf_counter() - t
            self.calls[kind] += 1

    async def close(self) -> None:
        await self.inner.close()


def set_sched_delay(cluster, seconds: int) -> None:
    text = cluster.conf.read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("SchedulerParameters=")]
    lines.append(f"SchedulerParameters=batch_sched_delay={seconds}")
    cluster.conf.write_text("\n".join(lines) + "\n")
    cluster.cmd("scontrol", "reconfigure")
    time.sleep(1.0)


async def sequential(ex: SlurmExecutor, shell: TimedShell, n: int, tag: str) -> dict:
    shell.seconds.clear()
    shell.calls.clear()
    times = []
    for i in range(n):
        t = time.perf_counter()
        res = await ex.run(JobSpec(f"b{tag}-{i}-run", ["true"], timeout_s=60))
        assert res.ok, res
        times.append(time.perf_counter() - t)
    own = sum(v for k, v in shell.seconds.items() if k != "poll")
    # A poll serves every job in flight; here one job is in flight, so each poll is this job's.
    own += shell.seconds["poll"]
    return {
        "jobs": n,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "cuco_own_s_per_job": own / n,
        "polls_per_job": shell.calls["poll"] / n,
        "command_s": {k: round(v / max(shell.calls[k], 1), 4) for k, v in shell.seconds.items()},
    }


async def many(ex: SlurmExecutor, shell: TimedShell, n: int) -> dict:
    shell.seconds.clear()
    shell.calls.clear()
    t = time.perf_counter()
    results = await asyncio.gather(*(ex.run(JobSpec(f"m-{i}-run", ["true"], timeout_s=120)) for i in range(n)))
    wall = time.perf_counter() - t
    return {
        "jobs": n,
        "wall_s": wall,
        "failures": sum(not r.ok for r in results),
        "squeue_polls": shell.calls["poll"],
        "sbatch_calls": shell.calls["submit"],
        "cuco_own_s_per_job": (shell.seconds["submit"] + shell.seconds["collect"] + shell.seconds["poll"]) / n,
    }


async def bench(cluster, n_seq: int, n_many: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="cuco-slurm-bench-"))
    (work / "slurm.yaml").write_text(
        json.dumps(
            {
                "kind": "slurm",
                "login": "local",
                "work_dir": str(work / "shared"),
                "partition": "cpu",
                "max_jobs": max(n_many, 1),
                "poll": {"min_s": 0.1, "max_s": 1.0},
                "kill_grace_s": 0.5,
            }
        )
    )
    ex = SlurmExecutor(load_slurm_cluster(work / "slurm.yaml"), work / ".cuco")
    shell = ex.shell = TimedShell(ex.shell)
    await ex.start()
    out: dict = {"rounds": []}
    try:
        await sequential(ex, shell, 3, "warm")
        for rnd, delay in enumerate((3, 0, 3, 0)):  # A B A B
            set_sched_delay(cluster, delay)
            r = await sequential(ex, shell, n_seq, f"{rnd}")
            r["batch_sched_delay"] = delay
            out["rounds"].append(r)
        set_sched_delay(cluster, 0)
        out["many"] = await many(ex, shell, n_many)
    finally:
        await ex.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=20)
    ap.add_argument("--many", type=int, default=200)
    args = ap.parse_args()
    reason = slurm_cluster.skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    cluster = slurm_cluster.start_cluster()
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        result = asyncio.run(bench(cluster, args.seq, args.many))
    finally:
        slurm_cluster.remove(cluster)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
