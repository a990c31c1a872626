"""One-GPU benchmark: the split_tail variant's GEMM alone, against the baseline's, for every tail_split.

Builds tests/bench/gemm_codegen/bench_split_tail.cu (it includes workloads/gemm_allgather/variants/split_tail.cu,
so it measures the shipped kernel) with the workload's build flags, runs it and prints a table. split_tail
splits the GEMM's last partial wave so that less data is left to cross NVLink after it; that only pays if
the GEMM itself ends no later than the baseline's, which this shows on one GPU (docs/measurements/gpu-workloads.md,
"split_tail"). --check exits 1 when a kernel's result is wrong: tail_split 0 and -2 not bit-exact against
the baseline's GEMM, a k split outside problem.cu's bf16 tolerance or different before the tail, or an
expired bounded wait. Times are reported, not checked.

    python tests/bench/bench_split_tail.py [--iters 41] [--json out.json] [--check]
    python tests/bench/bench_split_tail.py --build-only      # compiles only (no GPU needed)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "gemm_codegen" / "bench_split_tail.cu"
KERNELS = ("plain", "whole", "k2", "k3", "k4", "halves")
BIT_EXACT = ("whole", "halves")  # the same mma.sync sequence per output element as the baseline's


def _codegen_bench():
    spec = importlib.util.spec_from_file_location("bench_gemm_codegen", HERE / "bench_gemm_codegen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def problems(result: dict) -> list[str]:
    """What --check fails on, one line each (empty: every kernel's result is right)."""
    out = []
    for s in result["shapes"]:
        shape = f"{s['M']}x{s['N']}x{s['K']}"
        if s["timeout_flag"]:
            out.append(f"{shape}: a bounded wait in the epilogue expired")
        for name, k in s["kernels"].items():
            if name in BIT_EXACT and k["mismatches"]:
                out.append(f"{shape}: {name} differs from the baseline GEMM in {k['mismatches']} elements")
            if k["out_of_tolerance"]:
                out.append(f"{shape}: {name} is outside the bf16 tolerance in {k['out_of_tolerance']} elements")
            if k["mismatches_before_tail"]:
                out.append(f"{shape}: {name} differs in {k['mismatches_before_tail']} elements of full tiles")
    return out


def table(result: dict) -> str:
    rows = [
        f"{result['device']}, {result['sm_count']} SMs ({result['slots']} CTA slots), {result['iters']} "
        "iterations, medians (ms; x baseline GEMM)"
    ]
    rows.append(f"{'M x N x K':>18} {'tail':>5} " + " ".join(f"{k:>19}" for k in KERNELS))
    for s in result["shapes"]:
        cells = [f"{s['kernels'][k]['median_ms']:.4f} ({s['kernels'][k]['vs_plain']:.3f}x)" for k in KERNELS]
        rows.append(f"{s['M']:>6}x{s['N']}x{s['K']:<5} {s['tail']:>5} " + " ".join(f"{c:>19}" for c in cells))
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    codegen = _codegen_bench()
    codegen.add_common_arguments(ap, Path("/tmp/cuco-bench-split-tail"))
    ap.add_argument("--check", action="store_true", help="exit 1 when a kernel's result is wrong")
    args = ap.parse_args()

    seconds = codegen.build(args.binary, args.nvcc, SRC)
    print(f"built {args.binary} in {seconds:.0f} s ({codegen.nvcc_version(args.nvcc)})", file=sys.stderr)
    if args.build_only:
        return 0
    r = subprocess.run(
        [str(args.binary), "--iters", str(args.iters), "--warmup", str(args.warmup), "--shapes", args.shapes],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise SystemExit(f"bench_split_tail: the benchmark failed ({r.returncode}):\n{r.stderr}")
    result = json.loads(r.stdout)
    result["nvcc"] = codegen.nvcc_version(args.nvcc)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.check:
        found = problems(result)
        for line in found:
            print(f"CHECK FAILED: {line}")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
