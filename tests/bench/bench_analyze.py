"""`cuco analyze` speed (a script, not a unit test): a host-driven program of about 2,000 lines (130
kernels, a main() with an MPI unique-id exchange, 66 buffers and a timed loop of 130 kernel launches and
161 NCCL calls, grouped send/recv among them) analysed end to end: tree-sitter parse, the analysis, the
JSON. Target < 1 s. Prints the median and the worst of the runs.

With --corpus, each program of ../shared/corpus/ instead, analysed as `cuco analyze` runs it (the real
preprocessor included, with the flags its build passes). Target < 2 s each.

    python tests/bench/bench_analyze.py [--kernels 130] [--runs 7]
    python tests/bench/bench_analyze.py --corpus [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.onboard.analyze import analyze_files  # noqa: E402
from engine.onboard.report import to_json  # noqa: E402

KERNEL = """
// stage {i}: a scaled residual with a bounded loop
__global__ void stage_{i}(const float* in, float* out, size_t n, float w) {{
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.f;
  for (int k = 0; k < 4; ++k) {{
    acc += in[(i + k) % n] * w;
  }}
  out[i] = acc + in[i];
}}
"""


def program(kernels: int) -> str:
    parts = ["#include <cstdio>", "#include <mpi.h>", "#include <nccl.h>", "#include <cuda_runtime.h>"]
    parts += [KERNEL.format(i=i) for i in range(kernels)]
    buffers = kernels // 2
    body = [
        "int main(int argc, char** argv) {",
        "  MPI_Init(&argc, &argv);",
        "  int rank, nranks;",
        "  MPI_Comm_rank(MPI_COMM_WORLD, &rank);",
        "  MPI_Comm_size(MPI_COMM_WORLD, &nranks);",
        "  ncclUniqueId id;",
        "  if (rank == 0) ncclGetUniqueId(&id);",
        "  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);",
        "  ncclComm_t comm;",
        "  ncclCommInitRank(&comm, nranks, id, rank);",
        "  const size_t n = 1 << 20;",
        "  cudaStream_t s;",
        "  cudaStreamCreate(&s);",
    ]
    for b in range(buffers + 1):
        body += [f"  float* b{b};", f"  cudaMalloc(&b{b}, n * sizeof(float));"]
    body += [
        "  cudaEvent_t t0, t1;",
        "  cudaEventCreate(&t0);",
        "  cudaEventCreate(&t1);",
        "  cudaEventRecord(t0, s);",
        "  for (int it = 0; it < 100; ++it) {",
    ]
    for i in range(kernels):
        src, dst = i % buffers, (i + 1) % buffers + 1 if i % 2 else (i % buffers) + 1
        body.append(f"    stage_{i}<<<(n + 255) / 256, 256, 0, s>>>(b{src}, b{dst}, n, 0.5f);")
        if i % 4 == 1:
            body.append(f"    ncclAllReduce(b{dst}, b{dst}, n, ncclFloat, ncclSum, comm, s);")
        elif i % 4 == 3:
            body += [
                "    ncclGroupStart();",
                f"    ncclSend(b{dst}, n, ncclFloat, (rank + 1) % nranks, comm, s);",
                f"    ncclRecv(b{src}, n, ncclFloat, (rank + nranks - 1) % nranks, comm, s);",
                "    ncclGroupEnd();",
            ]
    body += ["  }", "  cudaEventRecord(t1, s);", "  cudaEventSynchronize(t1);", "  MPI_Finalize();", "  return 0;", "}"]
    return "\n".join(parts + body) + "\n"


def corpus(runs: int) -> int:
    import os

    from engine.onboard.preprocess import Flags
    from tests.onboard.corpus import CORPUS, PROGRAMS

    os.chdir(CORPUS)
    worst_median = 0.0
    for name, (files, flags, _) in PROGRAMS.items():
        f = Flags(defines=tuple(x[2:] for x in flags if x.startswith("-D")))
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            to_json(analyze_files(files, f))
            times.append(time.perf_counter() - t0)
        lines = sum(Path(p).read_text().count("\n") for p in files)
        med = statistics.median(times)
        worst_median = max(worst_median, med)
        print(
            f"{name}: {lines} lines, median {med * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms "
            f"over {runs} runs (target < 2000 ms)"
        )
    return 0 if worst_median < 2.0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=130)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--corpus", action="store_true", help="the corpus programs, each against 2 s")
    args = ap.parse_args()
    if args.corpus:
        return corpus(args.runs)
    text = program(args.kernels)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.cu"
        path.write_text(text)
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            data = to_json(analyze_files([str(path)]))
            times.append(time.perf_counter() - t0)
    lines = text.count("\n")
    print(
        f"program: {lines} lines, {len(data['kernel_launches'])} kernel launches, "
        f"{len(data['nccl_calls'])} NCCL calls, {len(data['buffers'])} buffers, "
        f"{len(data['opportunities'])} opportunities"
    )
    print(
        f"analyze: median {statistics.median(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms "
        f"over {args.runs} runs (target < 1000 ms)"
    )
    return 0 if statistics.median(times) < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
