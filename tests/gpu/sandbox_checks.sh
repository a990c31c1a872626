#!/usr/bin/env bash
# Per-call verification and the job sandbox on GPUs, in one `run` call on a 2-GPU kind (nvidia-h100-x2),
# from the repository root, carrying .whl/. Beforehand, on the development machine:
#   bash tests/gpu/fetch_wheels.sh
#   mkdir -p .whl/ab && git show d7e8194:workloads/_harness/cuda/harness.cu > .whl/ab/harness_before.cu
#   mkdir -p .whl/bwrap/lib && cp /usr/bin/bwrap .whl/bwrap/bwrap.bin && \
#       cp /lib/x86_64-linux-gnu/{libselinux.so.1,libcap.so.2,libpcre2-8.so.0} .whl/bwrap/lib/
#   (bubblewrap for a node that lacks it; used only where `bwrap` is not on PATH)
# then: bash tests/gpu/sandbox_checks.sh
#   1. gemm_allgather's seed through the engine's own path (build, verify, benchmark jobs in the bwrap
#      sandbox with the GPUs: NCCL over loopback in its own network namespace);
#   2. every CUDA workload's seed and shipped variants, linked against the harness before (d7e8194) and
#      after, from the same objects (build_harness_ab.sh), A B at 2 ranks on one bench config each
#      (integrity_ab.py: speedup, timed_ms, check_ms, wall_s per job);
#   3. the adversarial CUDA candidates (tests/gpu/test_integrity_gpu.py).
# Each step starts only while there is time for it (the whole fits the 10-minute limit of one call). Output: $OUT/*.log, $OUT/ab_*/integrity_ab.json.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuco-gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
start=$(date +%s)
left() { [ $(( $(date +%s) - start )) -lt "$1" ]; }   # seconds gone so far < $1
nvidia-smi -L
. tests/gpu/node_setup.sh   # the carried bubblewrap; wheels under the tree
export CUCO_BUILD_DIR=$PWD/.cuda-build
export NCCL_HOME=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
declare -A CFG=([gemm_allgather]=m8k_k4096 [kv_transfer]=l32_t2k_d1k [moe_dispatch_combine]=t1k_short
                [attention_allgather]=s1k_causal)
for w in "${!CFG[@]}"; do
    bash tests/gpu/build_harness_ab.sh "$w" .whl/ab/harness_before.cu "$PWD/.ab/$w" \
        "workloads/$w/candidate.cu" workloads/$w/variants/*.cu > "$OUT/build_$w.log" 2>&1 &
done
wait
echo "built in $(( $(date +%s) - start )) s"; grep -h "FAILED" "$OUT"/build_*.log
timeout 200 python3 tests/gpu/sandbox_gpu_eval.py gemm_allgather 2 m8k_k4096 2>&1 | tee "$OUT/sandbox_eval.log"
for w in gemm_allgather kv_transfer moe_dispatch_combine attention_allgather; do
    left 380 || { echo "SKIPPED A B $w (time)"; continue; }
    srcs=$(ls .ab/$w/bin/*.after | xargs -n1 basename | sed 's/\.after$//' | paste -sd,)
    timeout 150 python3 tests/gpu/integrity_ab.py ".ab/$w/bin" "$OUT/ab_$w" --workload "$w" --ranks 2 \
        --configs "${CFG[$w]}" --sources "$srcs" --adversarial '' --rounds 1 2>&1 | tee "$OUT/ab_$w.log"
done
left 450 && timeout -k 10 130 python3 -m pytest -p no:cacheprovider -rA -v -s tests/gpu/test_integrity_gpu.py 2>&1 \
    | tee "$OUT/pytest.log" | tail -n 30
echo "total $(( $(date +%s) - start )) s"
