#!/usr/bin/env bash
# attention_allgather's per-call check, full against sampled, on a 2-GPU kind (nvidia-h100-x2), from the
# repository root, carrying .whl/ (one `run` call: it ends within 9 minutes). Beforehand, on the development
# machine, the harness that checked every benchmark call with the full fp32 reference:
#   mkdir -p .whl/ab && git show 1d66ea2:workloads/_harness/cuda/harness.cu > .whl/ab/harness_full_check.cu
# then: bash tests/gpu/attn_check_ab.sh
#   1. the seed and the shipped variants linked against that harness ("before": every benchmark call checked
#      in full) and against this one ("after": the sampled check), from the same objects (build_harness_ab.sh);
#   2. A B at 2 ranks on the bench configs, one round (integrity_ab.py: speedup, timed_ms, check_ms and the
#      job's wall time per job; check / wall is the per-call check's share);
#   3. attention_allgather's GPU tests at 2 ranks (tests/gpu/test_moe_attention_gpu.py -k attention), the
#      candidate that skips rows after verification included.
# Output: $OUT/*.log, $OUT/ab_attention/integrity_ab.json.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuco-gpu-out}
BEFORE=${BEFORE:-.whl/ab/harness_full_check.cu}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
start=$(date +%s)
left() { [ $(( $(date +%s) - start )) -lt "$1" ]; }   # seconds gone so far < $1
nvidia-smi -L
. tests/gpu/node_setup.sh
export CUCO_BUILD_DIR=$PWD/.cuda-build NCCL_HOME=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
W=attention_allgather rl=workloads/_harness/cuda/run_local.py
[ -f "$BEFORE" ] || { echo "missing $BEFORE (see the header)"; exit 2; }
bash tests/gpu/build_harness_ab.sh $W "$BEFORE" "$PWD/.ab/$W" workloads/$W/candidate.cu workloads/$W/variants/*.cu \
    > "$OUT/build_ab.log" 2>&1 &
{   # the GPU tests' binaries, built as run_local.py builds them
    echo "workloads/$W -"
    for f in workloads/$W/variants/*.cu tests/gpu/bad_candidates/attn_*.cu; do echo "workloads/$W $f"; done
} | timeout -k 5 300 xargs -P 8 -L 1 sh -c \
    'if [ "$1" = - ]; then python3 '"$rl"' "$0" --build-only; else python3 '"$rl"' "$0" --source "$1" --build-only; fi' \
    > "$OUT/build_tests.log" 2>&1
wait
echo "built in $(( $(date +%s) - start )) s"; grep -h "FAILED" "$OUT"/build_ab.log
srcs=$(ls .ab/$W/bin/*.after | xargs -n1 basename | sed 's/\.after$//' | paste -sd,)
timeout 300 python3 tests/gpu/integrity_ab.py ".ab/$W/bin" "$OUT/ab_attention" --workload $W --ranks 2 \
    --configs s1k,s1k_causal,s16k_causal --sources "$srcs" --adversarial '' --rounds 1 2>&1 | tee "$OUT/ab.log"
left 400 && CUCO_TEST_RANKS=2 timeout -k 10 $(( 530 - ($(date +%s) - start) )) python3 -m pytest -p no:cacheprovider \
    -m gpu -rA -v -s -k attention tests/gpu/test_moe_attention_gpu.py 2>&1 | tee "$OUT/pytest.log" \
    | grep -v '^{"source"' | tail -n 30
echo "total $(( $(date +%s) - start )) s"
