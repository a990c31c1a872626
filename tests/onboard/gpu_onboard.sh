#!/usr/bin/env bash
# The one-GPU run of `cuco init` (device machine kind nvidia-h100-x1 or nvidia-h200, from the repository
# root, carrying .whl/: bash tests/gpu/fetch_wheels.sh, plus the parser and SDK wheels in .whl/onboard/:
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl/onboard tree-sitter==0.25.2 tree-sitter-cuda==0.21.2 openai):
#   1. `cuco init --ranks 1` on each test program of tests/onboard/programs;
#   2. each workload built (in parallel), then verified and benchmarked at one rank by the harness's own
#      runner (workloads/_harness/cuda/run_local.py): the seed against its own frozen baseline (~1.0x);
#   3. the end-to-end test: init -> cuco transform (the project's test LLM server) -> cuco validate;
#   4. a short `cuco run --headless` of one of them (the engine on the init-made workload), in the time left.
# With PREBUILT=DIR (e.g. .whl, carried) steps 1-2 use workloads made and built here beforehand
# (`cuco init ... -o DIR/onboard-ws/NAME`, then run_local.py --build-only with CUCO_BUILD_DIR=DIR/onboard-build:
# the build cache is keyed by the sources' hash), and steps 3-4 are left out: the device time is the GPU's.
# Output: $OUT/log and $OUT/results.json (every result.json).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/cuco-onboard-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
stamp() { echo "== $(date -u +%H:%M:%S) $*"; }

NAMES="mpi_allreduce env_ring moe_alltoall gemm_allgather"
if [ -n "${PREBUILT:-}" ]; then
    W=$ROOT/$PREBUILT/onboard-ws
    export CUCO_BUILD_DIR=$ROOT/$PREBUILT/onboard-build PYTHONPATH=$ROOT
    export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib:${LD_LIBRARY_PATH:-}
    nvidia-smi -L
else
stamp "install wheels"
pip_t() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$@"; }
pip_t $(ls .whl/*.whl | grep -v '/pytest-[0-9]') .whl/onboard/tree_sitter*.whl || exit 3
if ! PYTHONPATH=/tmp/site python3 -c 'import openai' 2>/dev/null; then pip_t .whl/onboard/*.whl || exit 3; fi
export PYTHONPATH=/tmp/site:$ROOT
python3 -c 'import tree_sitter_cuda, openai, aiosqlite, yaml, rich, nvidia.nccl; print("python ok")' || exit 3
nvidia-smi -L
git log -1 --format='commit %h %s' 2>/dev/null

W=/tmp/onboard-ws
rm -rf "$W" && mkdir -p "$W"
for n in $NAMES; do
    stamp "cuco init $n"
    python3 -m cuco_tui.cli init "tests/onboard/programs/$n.cu" --ranks 1 -o "$W/$n" || exit 4
done
stamp "build (parallel)"
# through xargs, not `&` jobs and a bare `wait`: bash's bare `wait` also waits for the tee above (for ever)
for n in $NAMES; do echo "$n"; done | xargs -P "$(nproc)" -I{} sh -c \
    'timeout 300 python3 workloads/_harness/cuda/run_local.py "$0/{}" --ranks 1 --build-only > "$0/{}.build.log" 2>&1' "$W"
for n in $NAMES; do tail -2 "$W/$n.build.log"; done
fi
echo "[" > "$OUT/results.json"
for n in $NAMES; do
    for mode in verify benchmark; do
        stamp "$n $mode"
        timeout ${RUN_LIMIT:-200} python3 workloads/_harness/cuda/run_local.py "$W/$n" --ranks 1 --mode $mode \
            --result "$W/$n.$mode.json" > "$W/$n.$mode.log" 2>&1
        echo "exit $?"
        python3 - "$W/$n.$mode.json" "$n" "$mode" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"  no result: {e}"); sys.exit(0)
print(f"  {sys.argv[2]} {sys.argv[3]}: correct={r['correct']} error={r.get('error')} gpu={r.get('env', {}).get('gpu')}")
for c in r["configs"]:
    print(f"    {c['name']}: correct={c['correct']} baseline_ms={c.get('baseline_ms')} candidate_ms={c.get('candidate_ms')} "
          f"speedup={c.get('speedup')} spread={c.get('baseline_spread')}/{c.get('candidate_spread')} "
          f"comp_ms={c.get('comp_ms')} comm_ms={c.get('comm_ms')} mismatch={c.get('mismatch')}")
PY
        [ -f "$W/$n.$mode.json" ] && { cat "$W/$n.$mode.json"; echo ","; } >> "$OUT/results.json"
        grep -iE "error|mismatch|fail" "$W/$n.$mode.log" | head -5
    done
done
echo "{}]" >> "$OUT/results.json"
[ -n "${PREBUILT:-}" ] && { stamp "done"; exit 0; }

stamp "e2e: init -> transform -> validate"
timeout 240 python3 -m pytest -p no:cacheprovider -q -rA -s tests/onboard/test_transform_e2e.py 2>&1 | tail -40
LEFT_S=$(( ${DEADLINE_S:-400} - SECONDS ))
stamp "cuco run mpi_allreduce (engine, headless)"
timeout $(( LEFT_S > 30 ? LEFT_S - 20 : 10 )) python3 -m cuco_tui.cli run "$W/mpi_allreduce" --headless --max-evals 4 --max-minutes 2 \
    --home /tmp/onboard-home > "$W/run.log" 2>&1; echo "exit $?"
tail -15 "$W/run.log"
python3 -m cuco_tui.cli report --json --home /tmp/onboard-home 2>&1 | head -40

stamp "done"
