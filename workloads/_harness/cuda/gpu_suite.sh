#!/bin/bash
# Runs every shipped CUDA workload source (seed and variants) through the harness on this node:
# verify (all configs for the rank count) then benchmark (the bench configs), and prints a summary.
#   workloads/_harness/cuda/gpu_suite.sh RANKS OUTDIR [WORKLOAD...]
# Uses run_local.py (builds cached in $CUCO_BUILD_DIR). NVLink multicast stays off.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
RANKS=${1:-2}; OUTDIR=${2:-/tmp/cuco-gpu-suite}; shift 2 || true
WLS=${*:-gemm_allgather kv_transfer}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../.." && pwd)
mkdir -p "$OUTDIR"
for w in $WLS; do
  [ "$w" = kv_transfer ] && [ "$RANKS" != 2 ] && continue
  for src in "$ROOT/workloads/$w/candidate.cu" "$ROOT/workloads/$w"/variants/*.cu; do
    n=$(basename "$src" .cu)
    for mode in verify benchmark; do
      python3 "$HERE/run_local.py" "$ROOT/workloads/$w" --source "$src" --mode $mode --ranks "$RANKS" \
        --result "$OUTDIR/${w}.${n}.${mode}.r${RANKS}.json" > /dev/null 2> "$OUTDIR/${w}.${n}.${mode}.r${RANKS}.log"
      echo "$w $n $mode rc=$? $(tail -1 "$OUTDIR/${w}.${n}.${mode}.r${RANKS}.log")"
    done
  done
done
python3 - "$OUTDIR" "$RANKS" <<'PY'
import json, glob, sys, os
out, ranks = sys.argv[1], sys.argv[2]
print(f"{'workload':15} {'source':12} {'config':14} {'ok':3} {'base_ms':>8} {'cand_ms':>8} {'speedup':>7} {'comp':>7} {'comm':>7} {'bound':>6} {'eff':>5}")
for f in sorted(glob.glob(f"{out}/*.benchmark.r{ranks}.json")):
    w, n = os.path.basename(f).split(".")[:2]
    r = json.load(open(f))
    for c in r["configs"]:
        if c["baseline_ms"] is None:
            print(f"{w:15} {n:12} {c['name']:14} {str(c['correct'])[0]:3} error={c['error']}"); continue
        tb, tc, bnd = c["baseline_ms"], c["candidate_ms"], max(c["comp_ms"], c["comm_ms"])
        eff = (tb - tc) / (tb - bnd) if tb > bnd else float('nan')
        print(f"{w:15} {n:12} {c['name']:14} {str(c['correct'])[0]:3} {tb:8.4f} {tc:8.4f} {c['speedup']:7.3f} {c['comp_ms']:7.4f} {c['comm_ms']:7.4f} {c['bound']:6.3f} {eff:5.2f}")
PY
