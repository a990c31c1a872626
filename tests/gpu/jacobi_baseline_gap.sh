#!/usr/bin/env bash
# What the harness's Jacobi baseline (one call = one iteration) measures that NVIDIA's `nccl` binary does not,
# measured on a 2-GPU machine in one device call, from the repository root, carrying .whl/ and
# .gpu-tree-corpus/ as for tests/gpu/jacobi_end_to_end.sh:
#   bash tests/gpu/jacobi_baseline_gap.sh
# 1. the harness: cuco init on the unmodified files and the seed's evaluation only, its baseline per size and
#    its profiled call's per-rank timeline (tests/gpu/jacobi_end_to_end.sh with SEED_ONLY=1);
# 2. NVIDIA's `nccl` beside a copy whose norm all-reduce is the region's stand-in (an 8-byte ncclAllReduce on
#    the compute stream and a second stream synchronisation, in place of the host MPI_Allreduce, warmed up
#    before the timer), three runs each per size, timed by the program's own -csv line;
# 3. one rank's iteration after the harness's 256 MiB memset flush, after a flush by reading, and warm
#    (tests/bench/l2_flush/stencil_after_flush.cu, on the first GPU).
# Output under $OUT: harness/ (report.json, seed_timeline.txt), gap.csv, gap.md, l2_flush.json.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/jacobi-gap}; CORPUS=$(realpath "${CORPUS:-.gpu-tree-corpus}")
SIZES=${SIZES:-4096 8192 16384}; NITER=${NITER:-1000}
mkdir -p "$OUT" .gpu-homes; W=$(mktemp -d "$PWD/.gpu-homes/jacobi-gap-XXXX")
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID

SIZES="$SIZES" MAX_EVALS=1 SEARCH_MIN=3 SEED_ONLY=1 OUT="$OUT/harness" CORPUS="$CORPUS" bash tests/gpu/jacobi_end_to_end.sh

N=${NCCL_HOME:-$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")}
. tests/gpu/jacobi_common.sh
jacobi_nccl_home "$W" "$N"
cp -r "$CORPUS/nvidia_jacobi_nccl" "$W/nccl_as_is"; cp -r "$CORPUS/nvidia_jacobi_nccl" "$W/nccl_standin"
python3 - "$W/nccl_standin/jacobi.cpp" <<'PY'
import sys
path = sys.argv[1]; text = open(path).read()
host = "MPI_CALL(MPI_Allreduce(l2_norm_h, &l2_norm, 1, MPI_REAL_TYPE, MPI_SUM, MPI_COMM_WORLD));"
standin = ("NCCL_CALL(ncclAllReduce(standin_d, standin_d, 8, ncclChar, ncclSum, nccl_comm, compute_stream)); "
           "CUDA_RT_CALL(cudaStreamSynchronize(compute_stream)); l2_norm = *l2_norm_h;")
timer = "    double start = MPI_Wtime();"
warm = ("    char* standin_d = nullptr; CUDA_RT_CALL(cudaMalloc(&standin_d, 4096));\n"
        "    NCCL_CALL(ncclAllReduce(standin_d, standin_d, 8, ncclChar, ncclSum, nccl_comm, compute_stream));\n"
        "    CUDA_RT_CALL(cudaStreamSynchronize(compute_stream)); MPI_CALL(MPI_Barrier(MPI_COMM_WORLD));\n")
assert text.count(host) == 1 and text.count(timer) >= 1, "jacobi.cpp is not the one this edit was written for"
text = text.replace(host, standin).replace(timer, warm + timer, 1)
open(path, "w").write(text)
PY
for l in nccl_as_is nccl_standin; do jacobi_build "$W/$l" "$W/nccl"; done
wait
echo "label,nx,seconds" > "$OUT/gap.csv"
for n in $SIZES; do for r in 1 2 3; do for l in nccl_as_is nccl_standin; do
  echo "$l,$n,$(jacobi_seconds "$W/$l" "$n" "$NITER")" >> "$OUT/gap.csv"
done; done; done

nvcc -O3 -std=c++17 -arch=sm_90 tests/bench/l2_flush/stencil_after_flush.cu -o "$W/stencil_after_flush" \
  && CUDA_VISIBLE_DEVICES=0 "$W/stencil_after_flush" --iters 61 $SIZES > "$OUT/l2_flush.json"

python3 - "$OUT" "$NITER" > "$OUT/gap.md" <<'PY'
import csv, json, os, statistics, sys
out, niter = sys.argv[1], int(sys.argv[2])
runs = {}
for r in csv.DictReader(open(os.path.join(out, "gap.csv"))):
    if r["seconds"]:
        runs.setdefault(int(r["nx"]), {}).setdefault(r["label"], []).append(float(r["seconds"]) * 1000 / niter)
report = os.path.join(out, "harness", "report.json")
best = json.load(open(report)).get("best") or {} if os.path.exists(report) else {}
harness = {int(c["name"].lstrip("n")): c.get("baseline_ms") for c in best.get("configs", []) if c["name"].lstrip("n").isdigit()}
print("| nx = ny | NVIDIA nccl ms/iter | with the region's stand-in ms/iter | stand-in costs | harness baseline ms | harness - nccl |")
print("| --- | --- | --- | --- | --- | --- |")
for n in sorted(runs):
    a, b = (statistics.median(runs[n].get(k, [float("nan")])) for k in ("nccl_as_is", "nccl_standin"))
    h = harness.get(n)
    hcell = f"{h:.4f} | {1000 * (h - a):.0f} us" if h else "- | -"
    print(f"| {n} | {a:.4f} | {b:.4f} | {1000 * (b - a):.0f} us | {hcell} |")
PY
cat "$OUT/gap.md"; cat "$OUT/harness/seed_timeline.txt" 2>/dev/null | head -40; cat "$OUT/l2_flush.json"
