"""What the harness's defences cost a job: the wall time of each verify and benchmark job of a workload's seed,
through the real evaluation cascade on a local executor, with this tree's harness ("after") and with the
harness of an earlier commit ("before", from `git show COMMIT:PATH`), alternating after, before, after, ...

    python3 tests/gpu/defence_cost.py demo --before 3174119 --pairs 3 [--ranks R] [--out FILE]

Only the harness's files differ between the two (workloads/_harness/**); the engine, the sandbox and the
build are this tree's for both. Prints one JSON object: per side, each job's wall time as the executor
measured it (duration_s of the stage), and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.evaluation.evaluation import EvalOutcome, evaluate_source  # noqa: E402
from engine.workload import Workload, load_workload  # noqa: E402
from remote.local import LocalExecutor  # noqa: E402


def harness_at(commit: str, dest: Path) -> None:
    """workloads/_harness as it was at `commit`, written under dest."""
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", commit, "workloads/_harness"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in names:
        data = subprocess.run(["git", "show", f"{commit}:{name}"], cwd=ROOT, capture_output=True, check=True).stdout
        path = dest / Path(name).relative_to("workloads")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def workload_copy(name: str, dest: Path, commit: str | None, ranks: int | None) -> Workload:
    base = load_workload(name)
    shutil.copytree(base.root, dest / base.root.name)
    if commit is None:
        shutil.copytree(ROOT / "workloads" / "_harness", dest / "_harness")
    else:
        harness_at(commit, dest)
    w = load_workload(str(dest / base.root.name))
    return dataclasses.replace(w, ranks=ranks) if ranks else w


async def one(workload: Workload, executor: LocalExecutor, tag: str, seed: int) -> EvalOutcome:
    return await asyncio.wait_for(
        evaluate_source(workload, workload.seed_source, executor, job_prefix=tag, seed=seed), 600
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--before", required=True, help="the commit whose harness is the 'before'")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {
            "after": workload_copy(args.workload, Path(tmp) / "after", None, args.ranks),
            "before": workload_copy(args.workload, Path(tmp) / "before", args.before, args.ranks),
        }

        async def run() -> dict:
            executor = LocalExecutor(work_dir=Path(tmp) / "jobs")
            jobs: dict[str, dict[str, list[float]]] = {s: {"verify": [], "benchmark": []} for s in sides}
            speedups: dict[str, list[float | None]] = {s: [] for s in sides}
            try:
                for i in range(args.pairs):
                    for side in ("after", "before") if i % 2 == 0 else ("before", "after"):
                        out = await one(sides[side], executor, f"{side}{i}", seed=11 + i)
                        if out.status != "done":
                            raise SystemExit(f"{side} {i}: {out.status}: {out.reason}")
                        for st in out.stages:
                            if st.stage in jobs[side]:
                                jobs[side][st.stage].append(round(st.duration_s, 3))
                        speedups[side].append(out.speedup)
            finally:
                await executor.close()
            return {
                "workload": args.workload,
                "before": args.before,
                "pairs": args.pairs,
                "jobs_s": jobs,
                "median_s": {s: {k: statistics.median(v) for k, v in jobs[s].items() if v} for s in jobs},
                "speedups": speedups,
            }

        report = asyncio.run(run())
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
