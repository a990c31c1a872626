#!/usr/bin/env bash
# gemm_allgather's per-call verification, before and after its benchmark-loop calls were checked against the
# harness's tensor-core reference (problem.cu, cuco_problem_verify_call) instead of the plain-FMA fp32 one:
# the seed and every shipped variant, linked from the same objects against the harness and problem.cu
# before and after, A B at 2 ranks on the bench configs of 2 ranks; integrity_ab.py prints each job's
# speedup, timed_ms, check_ms and wall_s. Then gemm_allgather's seed through the engine's own path in the
# bwrap sandbox, which now drops every capability (a GPU job run by root had kept root's), and the
# adversarial CUDA candidates (tests/gpu/test_integrity_gpu.py), which must still be caught on their timed
# calls. One `run` call on a 2-GPU kind (nvidia-h100-x2), from the repository root, carrying .whl/.
# Beforehand, on the development machine:
#   bash tests/gpu/fetch_wheels.sh
#   mkdir -p .whl/bwrap/lib && cp /usr/bin/bwrap .whl/bwrap/bwrap.bin && \
#       cp /lib/x86_64-linux-gnu/{libselinux.so.1,libcap.so.2,libpcre2-8.so.0} .whl/bwrap/lib/
#   mkdir -p .whl/ab && git show d45382e:workloads/_harness/cuda/harness.cu > .whl/ab/harness_before.cu \
#       && git show d45382e:workloads/gemm_allgather/problem.cu > .whl/ab/problem_before.cu
# then: bash tests/gpu/verify_cost_checks.sh     (output: $OUT/*.log, $OUT/ab_gemm_allgather/integrity_ab.json)
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
PROBLEM_BEFORE=.whl/ab/problem_before.cu bash tests/gpu/build_harness_ab.sh gemm_allgather \
    .whl/ab/harness_before.cu "$PWD/.ab/gemm_allgather" workloads/gemm_allgather/candidate.cu \
    workloads/gemm_allgather/variants/*.cu > "$OUT/build_gemm_allgather.log" 2>&1
echo "built in $(( $(date +%s) - start )) s"; grep -h "FAILED" "$OUT/build_gemm_allgather.log"
srcs=$(ls .ab/gemm_allgather/bin/*.after | xargs -n1 basename | sed 's/\.after$//' | paste -sd,)
timeout 330 python3 tests/gpu/integrity_ab.py .ab/gemm_allgather/bin "$OUT/ab_gemm_allgather" --workload gemm_allgather \
    --ranks 2 --configs m8k_k4096,m8k_k8192,small_m1k --sources "$srcs" --adversarial '' --rounds 1 2>&1 \
    | tee "$OUT/ab_gemm_allgather.log"
left 400 && timeout 150 python3 tests/gpu/sandbox_gpu_eval.py gemm_allgather 2 m8k_k4096 2>&1 | tee "$OUT/sandbox_eval.log"
left 450 && timeout -k 10 130 python3 -m pytest -p no:cacheprovider -rA -v -s tests/gpu/test_integrity_gpu.py 2>&1 \
    | tee "$OUT/pytest.log" | tail -n 30
echo "total $(( $(date +%s) - start )) s"
