#!/usr/bin/env bash
# kv_transfer's and moe_dispatch_combine's per-call verification, before and after it was made cheaper:
#   kv_transfer: the benchmark loop's calls checked against the harness's tensor-core reference compared in
#     its epilogue (cuco_problem_verify_call) instead of a plain-FMA fp32 GEMM of every layer per call, the
#     decode cache received into a buffer kept between calls;
#   moe_dispatch_combine: verify's buffers kept between calls, one upload of every expert's token rows and
#     no synchronisation between experts (the same kernels in the same order);
#   both: the harness compares inputs and moved data 16 bytes a load.
# On a 2-GPU kind (nvidia-h100-x2), from the repository root, carrying .whl/, in two `run` calls (each
# ends within 9 minutes; the second reuses the first's builds on the same warm machine):
#   bash tests/gpu/kv_moe_check_cost.sh ab      1. the seed and every shipped variant of both workloads linked
#        against the harness and problem.cu before and after, from the same objects (build_harness_ab.sh);
#        2. A B at 2 ranks on the bench configs of 2 ranks, one round (integrity_ab.py: each job's speedup,
#        timed_ms, check_ms and wall_s; check_ms / wall_s is the per-call check's share of the job)
#   bash tests/gpu/kv_moe_check_cost.sh tests   3. the GPU tests at 2 ranks: kv_transfer's sources verified
#        and benchmarked through the new check, its two cheats (a layer's GEMM, or its transfer, left out after
#        the verification stage) caught on a warm-up call; moe_dispatch_combine's seed, variants and
#        incorrect candidates
# Beforehand, on the development machine (BASE: the commit before the change, e.g. main's):
#   bash tests/gpu/fetch_wheels.sh
#   mkdir -p .whl/ab && git show BASE:workloads/_harness/cuda/harness.cu > .whl/ab/harness_before.cu \
#       && git show BASE:workloads/kv_transfer/problem.cu > .whl/ab/kv_problem_before.cu \
#       && git show BASE:workloads/moe_dispatch_combine/problem.cu > .whl/ab/moe_problem_before.cu
# Output: $OUT/*.log, $OUT/ab_kv_transfer/integrity_ab.json, $OUT/ab_moe_dispatch_combine/integrity_ab.json.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuco-gpu-out}
PHASE=${1:-ab}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
start=$(date +%s)
left() { [ $(( $(date +%s) - start )) -lt "$1" ]; }   # seconds gone so far < $1
nvidia-smi -L
. tests/gpu/node_setup.sh
export CUCO_BUILD_DIR=$PWD/.cuda-build NCCL_HOME=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
rl=workloads/_harness/cuda/run_local.py

if [ "$PHASE" = ab ]; then
    for f in harness_before kv_problem_before moe_problem_before; do
        [ -f .whl/ab/$f.cu ] || { echo "missing .whl/ab/$f.cu (see the header)"; exit 2; }
    done
    PROBLEM_BEFORE=.whl/ab/kv_problem_before.cu bash tests/gpu/build_harness_ab.sh kv_transfer .whl/ab/harness_before.cu \
        "$PWD/.ab/kv_transfer" workloads/kv_transfer/candidate.cu workloads/kv_transfer/variants/*.cu \
        > "$OUT/build_kv_transfer.log" 2>&1 &
    PROBLEM_BEFORE=.whl/ab/moe_problem_before.cu bash tests/gpu/build_harness_ab.sh moe_dispatch_combine \
        .whl/ab/harness_before.cu "$PWD/.ab/moe_dispatch_combine" workloads/moe_dispatch_combine/candidate.cu \
        workloads/moe_dispatch_combine/variants/*.cu > "$OUT/build_moe_dispatch_combine.log" 2>&1 &
    wait
    echo "built in $(( $(date +%s) - start )) s"; grep -h "FAILED" "$OUT"/build_*.log
    ab() {   # workload, its bench configs of 2 ranks
        local srcs; srcs=$(ls .ab/$1/bin/*.after | xargs -n1 basename | sed 's/\.after$//' | paste -sd,)
        timeout 240 python3 tests/gpu/integrity_ab.py ".ab/$1/bin" "$OUT/ab_$1" --workload "$1" --ranks 2 \
            --configs "$2" --sources "$srcs" --adversarial '' --rounds 1 2>&1 | tee "$OUT/ab_$1.log"
    }
    ab kv_transfer l32_t4k,l32_t2k_d1k,small_l16_t1k
    left 420 && ab moe_dispatch_combine t4k_balanced,t4k_skewed,t1k_short
elif [ "$PHASE" = tests ]; then
    {   # the GPU tests' binaries, built as run_local.py builds them, in parallel (the two cheats are built by the tests)
        for W in kv_transfer moe_dispatch_combine; do
            echo "workloads/$W -"
            for f in workloads/$W/variants/*.cu; do echo "workloads/$W $f"; done
        done
        for f in tests/gpu/bad_candidates/moe_*.cu; do echo "workloads/moe_dispatch_combine $f"; done
    } | timeout -k 5 300 xargs -P 8 -L 1 sh -c \
        'if [ "$1" = - ]; then python3 '"$rl"' "$0" --build-only; else python3 '"$rl"' "$0" --source "$1" --build-only; fi' \
        > "$OUT/build_tests.log" 2>&1
    echo "built in $(( $(date +%s) - start )) s"
    timeout -k 10 280 python3 -m pytest -p no:cacheprovider -m gpu -rA -v -s -k kv_transfer \
        tests/gpu/test_cuda_harness_gpu.py 2>&1 | tee "$OUT/pytest_kv.log" | tail -n 20
    left 300 && CUCO_TEST_RANKS=2 timeout -k 10 $(( 530 - ($(date +%s) - start) )) python3 -m pytest -p no:cacheprovider \
        -m gpu -rA -v -s -k moe tests/gpu/test_moe_attention_gpu.py 2>&1 | tee "$OUT/pytest_moe.log" \
        | grep -v '^{"source"' | tail -n 20
else
    echo "usage: $0 ab|tests"; exit 2
fi
echo "total $(( $(date +%s) - start )) s"
