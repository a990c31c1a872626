#!/usr/bin/env python3
"""How long a run's first GPU job waits for the frozen harness: its sources compiled one after another (as the
frozen-objects job did) against the job as the engine now writes it (all at once), in one run, on this machine.

    python3 tests/bench/bench_frozen_build.py [WORKLOAD ...] [--rounds N]   # default: moe_dispatch_combine

Needs nvcc (and NCCL's headers: the nvidia-nccl wheel, or NCCL_HOME) for the CUDA workloads, g++ for the demo.
Prints, per workload and round, the wall time of each form and their ratio; the rounds alternate which form
runs first.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.evaluation.evaluation import NCCL_PRELUDE, _object_name, frozen_objects_job  # noqa: E402
from engine.workload import load_workload  # noqa: E402


def _timed(script: str, cwd: Path) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(["sh", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"the build failed in {cwd}:\n{proc.stderr[-2000:]}")
    return time.monotonic() - t0


def one_after_another(workload) -> str:
    lines = [
        workload.build_command.replace("{sources}", "-c " + shlex.quote(n)).replace(
            "{binary}", shlex.quote(_object_name(n))
        )
        for n in workload.harness_sources
    ]
    return "set -e; " + (NCCL_PRELUDE if workload.build_nccl else "") + "; ".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", default=["moe_dispatch_combine"])
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}")
    for name in args.workloads:
        workload = load_workload(name)
        forms = {
            "one after another": one_after_another(workload),
            "all at once": frozen_objects_job(workload, "bench").argv[2],
        }
        for r in range(args.rounds):
            order = list(forms) if r % 2 == 0 else list(reversed(forms))
            took = {}
            for form in order:
                with tempfile.TemporaryDirectory() as tmp:
                    for rel, data in workload.harness_files.items():
                        dest = Path(tmp) / rel
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(data)
                    took[form] = _timed(forms[form], Path(tmp))
            a, b = took["one after another"], took["all at once"]
            print(
                f"{name} ({len(workload.harness_sources)} sources), round {r + 1}: one after another {a:.1f} s, "
                f"all at once {b:.1f} s, ratio {a / b:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
