"""One-GPU benchmark: the compute kernels of moe_dispatch_combine (the expert GEMMs on the shared
tensor-core GEMM, and the whole expert MLP) and attention_allgather (the flash kernel), in TFLOP/s and as
a fraction of the H200's bf16 dense peak (989 TFLOP/s nominal; about 790 measured for a bf16 GEMM,
/work/shared/reference/nccl-device-api.md). Results: docs/PERFORMANCE.md.

    python tests/bench/bench_moe_attn_kernels.py [--iters 21] [--json out.json]
    python tests/bench/bench_moe_attn_kernels.py --build-only      # compiles only (no GPU needed)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(__file__).resolve().parent / "moe_attn_kernels" / "bench_moe_attn_kernels.cu"
INCLUDES = [
    ROOT / "workloads" / "_harness" / "cuda",
    ROOT / "workloads" / "moe_dispatch_combine",
    ROOT / "workloads" / "attention_allgather",
]
PEAK_NOMINAL, PEAK_MEASURED = 989.0, 790.0


def build(binary: Path) -> None:
    cmd = ["nvcc", "-std=c++17", "-arch=sm_90", "-O3", *[f"-I{p}" for p in INCLUDES], str(SRC), "-o", str(binary)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"bench_moe_attn_kernels: build failed:\n{r.stderr[-4000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=21)
    ap.add_argument("--binary", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "bench_moe_attn_kernels")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--build-only", action="store_true")
    a = ap.parse_args()
    build(a.binary)
    if a.build_only:
        print(a.binary)
        return 0
    r = subprocess.run([str(a.binary), "--iters", str(a.iters)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"bench_moe_attn_kernels: run failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    gpu = rows[0]
    print(
        f"{gpu['gpu']} ({gpu['sm_count']} SMs); peak bf16 dense {PEAK_NOMINAL:.0f} TFLOP/s nominal, "
        f"{PEAK_MEASURED:.0f} measured"
    )
    print(f"{'kernel':18} {'shape':36} {'ms':>8} {'TFLOP/s':>8} {'of 989':>7} {'of 790':>7}")
    for row in rows[1:]:
        row["of_nominal"] = round(row["tflops"] / PEAK_NOMINAL, 3)
        row["of_measured"] = round(row["tflops"] / PEAK_MEASURED, 3)
        print(
            f"{row['kernel']:18} {row['shape']:36} {row['ms']:8.3f} {row['tflops']:8.1f} "
            f"{row['of_nominal']:7.1%} {row['of_measured']:7.1%}"
        )
    if a.json:
        a.json.write_text(json.dumps({"gpu": gpu, "results": rows[1:]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
