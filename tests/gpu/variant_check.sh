#!/usr/bin/env bash
# Shipped variants of one CUDA workload, each verified on every config and then benchmarked at RANKS ranks
# outside any search, with the per-config verdict `cuco report` would give (engine/evaluation/efficiency.py): overlap
# efficiency, or "compute changed". On the device machine, from the repository root (after
# tests/gpu/run_gpu_search.sh's wheel install, or with PYTHONPATH set to the tree):
#
#   bash tests/gpu/variant_check.sh WORKLOAD RANKS VARIANT_FILE...   # e.g. moe_dispatch_combine 2 lsa_pipelined.cu
#
# Builds run in parallel first (CUCO_BUILD_DIR, default /tmp/cuco-cuda-build); each job's wall time is
# printed, so the harness's fixed cost (start, NCCL, verification) can be read beside the timed calls.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
w=$1 ranks=$2
shift 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
rl=workloads/_harness/cuda/run_local.py
out=${OUT:-/tmp}/variant-check-$w
mkdir -p "$out"
for v in "$@"; do echo "workloads/$w/variants/$v"; done | timeout -k 5 240 xargs -P 8 -I{} \
    python3 "$rl" "workloads/$w" --source {} --build-only > "$out/build.log" 2>&1
echo "builds: exit $? ($(grep -c '^built' "$out/build.log") built)"
for v in "$@"; do
    for mode in verify benchmark; do
        python3 "$rl" "workloads/$w" --source "workloads/$w/variants/$v" --mode "$mode" --ranks "$ranks" \
            --result "$out/${v%.cu}.$mode.json" > "$out/${v%.cu}.$mode.log" 2>&1
        tail -n 1 "$out/${v%.cu}.$mode.log"
    done
    python3 - "$out/${v%.cu}.benchmark.json" "$v" <<'EOF'
import json, sys
from engine.evaluation.efficiency import judge
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(f"{sys.argv[2]}: no benchmark result ({exc})")
print(f"{sys.argv[2]}: correct={r.get('correct')} timed_ms={r.get('timed_ms')} error={r.get('error')}")
for c in r.get("configs") or []:
    if c.get("baseline_ms") is None:
        print(f"  {c.get('name')}: {c.get('error')}")
        continue
    print(f"  {c['name']}: base {c['baseline_ms']:.4f} cand {c['candidate_ms']:.4f} comp {c['comp_ms']:.4f} "
          f"comm {c['comm_ms']:.4f} speedup {c['speedup']:.3f} eff {judge(c).label()}")
EOF
done
