"""One-GPU benchmark: gemm_allgather's GEMM kernels alone, the shipped hybrid's against the baseline's.

Builds tests/bench/gemm_codegen/bench_gemm_codegen.cu (it includes workloads/gemm_allgather/variants/hybrid.cu,
so it measures the shipped kernels) with the workload's build flags, runs it, prints a table and, with
--check, exits 1 when a kernel is not bit-exact against the baseline's GEMM, a bounded wait expired, or the
shipped hybrid's GEMM is slower than --max-ratio times the baseline's on any shape. Why it exists:
docs/measurements/gpu-workloads.md, "The hybrid's GEMM schedule, on one GPU" (with cuco_gemm.cuh's first mainloop the
epilogue's code moved the loop's schedule by 2-5 %; a compiler or mainloop change could bring that back,
and this shows it on one GPU).

    python tests/bench/bench_gemm_codegen.py [--iters 41] [--json out.json] [--check --max-ratio R]
    python tests/bench/bench_gemm_codegen.py --build-only      # compiles only (no GPU needed)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(__file__).resolve().parent / "gemm_codegen" / "bench_gemm_codegen.cu"
HARNESS = ROOT / "workloads" / "_harness" / "cuda"
VARIANTS = ROOT / "workloads" / "gemm_allgather" / "variants"
KERNELS = ("plain", "hybrid", "hybrid_old", "plain_trace")


def nccl_home() -> str:
    sys.path.insert(0, str(HARNESS))
    try:
        from run_local import nccl_home as find
    finally:
        sys.path.pop(0)
    try:
        return find()
    except ImportError:
        raise SystemExit(
            "bench_gemm_codegen: NCCL headers not found: pip install nvidia-nccl-cu13==2.28.9 or set NCCL_HOME"
        ) from None


def build(binary: Path, nvcc: str, src: Path = SRC) -> float:
    """Compiles `src` (a benchmark that includes a shipped variant) with the workload's flags; seconds taken."""
    home = nccl_home()
    cmd = [
        nvcc,
        "-std=c++17",
        "-arch=sm_90",
        "-O3",
        f"-I{HARNESS}",
        f"-I{VARIANTS}",
        f"-I{home}/include",
        str(src),
        "-o",
        str(binary),
        f"-L{home}/lib",
        "-l:libnccl.so.2",
        "-Xlinker",
        f"-rpath,{home}/lib",
    ]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"{src.stem}: build failed ({r.returncode}):\n{' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return time.monotonic() - t0


def nvcc_version(nvcc: str) -> str:
    r = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown"


def problems(result: dict, max_ratio: float) -> list[str]:
    """What --check fails on, one line each (empty: the check holds)."""
    out = []
    for s in result["shapes"]:
        shape = f"{s['M']}x{s['N']}x{s['K']}"
        if s["timeout_flag"]:
            out.append(f"{shape}: a bounded wait in the epilogue expired")
        for name, k in s["kernels"].items():
            if k["mismatches"]:
                out.append(f"{shape}: {name} differs from plain in {k['mismatches']} elements")
        ratio = s["kernels"]["hybrid"]["vs_plain"]
        if ratio > max_ratio:
            out.append(
                f"{shape}: the shipped hybrid's GEMM takes {ratio:.3f}x the baseline GEMM's time (limit {max_ratio})"
            )
    return out


def table(result: dict) -> str:
    rows = [
        f"{result['device']}, {result['sm_count']} SMs, {result['iters']} iterations, medians (ms; x baseline GEMM)"
    ]
    rows.append(f"{'M x N x K':>18} " + " ".join(f"{k:>22}" for k in KERNELS))
    for s in result["shapes"]:
        cells = [f"{s['kernels'][k]['median_ms']:.4f} ({s['kernels'][k]['vs_plain']:.3f}x)" for k in KERNELS]
        rows.append(f"{s['M']:>6}x{s['N']}x{s['K']:<5} " + " ".join(f"{c:>22}" for c in cells))
    return "\n".join(rows)


def add_common_arguments(ap: argparse.ArgumentParser, binary: Path) -> None:
    """The command line the GEMM benches share: compiler, binary, iterations, shapes, JSON output."""
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    ap.add_argument("--binary", type=Path, default=binary)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--iters", type=int, default=41)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument(
        "--shapes",
        default="8192:4096:4096,8192:4096:8192,4096:4096:8192",
        help="per-rank GEMM shapes M:N:K (default: m8k_k4096, m8k_k8192, r4_m4k_k8192)",
    )
    ap.add_argument("--json", type=Path, help="write the result (with the nvcc version) here")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(ap, Path("/tmp/cuco-bench-gemm-codegen"))
    ap.add_argument(
        "--check", action="store_true", help="exit 1 on a mismatch, an expired wait or a ratio over --max-ratio"
    )
    ap.add_argument(
        "--max-ratio",
        type=float,
        default=1.02,
        help="H200, 2026-11-24: 1.001-1.005x with the current mainloop; 1.021x (and 1.054x for the "
        "form before 353b09f) with the first one",
    )
    args = ap.parse_args()

    seconds = build(args.binary, args.nvcc)
    print(f"built {args.binary} in {seconds:.0f} s ({nvcc_version(args.nvcc)})", file=sys.stderr)
    if args.build_only:
        return 0
    r = subprocess.run(
        [str(args.binary), "--iters", str(args.iters), "--warmup", str(args.warmup), "--shapes", args.shapes],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise SystemExit(f"bench_gemm_codegen: the benchmark failed ({r.returncode}):\n{r.stderr}")
    result = json.loads(r.stdout)
    result["nvcc"] = nvcc_version(args.nvcc)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.check:
        found = problems(result, args.max_ratio)
        for line in found:
            print(f"CHECK FAILED: {line}")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
