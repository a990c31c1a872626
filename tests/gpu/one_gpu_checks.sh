#!/usr/bin/env bash
# The GPU tests that need one GPU and no search, in one `run` call (device kind nvidia-h100-x1 or
# nvidia-h200, from the repository root, carrying .whl/):
#   bash tests/gpu/fetch_wheels.sh
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl/onboard tree-sitter==0.25.2 tree-sitter-cuda==0.21.2 openai anthropic
# then: bash tests/gpu/one_gpu_checks.sh
#   - tests/gpu/test_integrity_gpu.py: the adversarial CUDA candidates that pass the symbol policy;
#   - cuco init -> cuco transform -> cuco validate, every answer verified on the GPU;
#   - cuco init --llm end to end.
# The binaries are built here (in parallel): the harness refuses an NCCL other than the one it was built with.
# Output: $OUT/pytest.log
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuco-gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
nvidia-smi -L
[ -d /tmp/site/aiosqlite ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site $(ls .whl/*.whl | grep -v '/pytest-[0-9]') .whl/onboard/*.whl 2>&1 | grep -v '^WARNING' | tail -3
export PYTHONPATH=/tmp/site:$PWD CUCO_BUILD_DIR=/tmp/cuco-cuda-build
# the shipped bad candidates built side by side first (the test builds its call-counting edit itself)
for s in tests/gpu/bad_candidates/escape.cu tests/gpu/bad_candidates/slow.cu; do
    timeout 300 python3 workloads/_harness/cuda/run_local.py workloads/gemm_allgather --source "$s" --build-only \
        > "/tmp/build.$(basename "$s").log" 2>&1 &
done
wait
tail -qn 2 /tmp/build.*.log
timeout -k 10 480 python3 -m pytest -p no:cacheprovider -rA -v -s tests/gpu/test_integrity_gpu.py \
    tests/onboard/test_transform_e2e.py::test_init_then_transform_then_validate \
    tests/onboard/test_init_llm.py::test_init_llm_end_to_end_on_a_gpu 2>&1 | tee "$OUT/pytest.log" | tail -n 60
