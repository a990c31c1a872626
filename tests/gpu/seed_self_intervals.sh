#!/usr/bin/env bash
# attention_allgather's seed against itself on ONE GPU (nvidia-h200), its 1-rank configs, from the repository
# root, carrying .whl/ (one `run` call, within 4 minutes): the seed built once as the engine builds it, then 10
# benchmark jobs at the adaptive protocol and 5 at fixed rounds (the workload's 21 iterations), in turns.
# Every adaptive job's per-config interval should hold 1.00; the median job wall time of each protocol is the
# protocol's cost on a GPU. Output: $OUT/seed_self_intervals.json and .log; the summary is the last line.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuco-gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
start=$(date +%s)
nvidia-smi -L
. tests/gpu/node_setup.sh
export NCCL_HOME=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
timeout -k 10 225 python3 tests/gpu/seed_self_intervals.py attention_allgather 1 "$OUT/seed_self_intervals.json" \
    --jobs 10 --fixed 5 --budget-s $(( 200 - ($(date +%s) - start) )) 2>&1 | tee "$OUT/seed_self_intervals.log"
echo "total $(( $(date +%s) - start )) s"
