#!/usr/bin/env bash
# NVIDIA's nccl_graphs Jacobi, init'd at one rank: its seed verified (as is, without NCCL's graph
# registration, with NCCL's INIT log) and benchmarked, counting the ranks whose NCCL teardown had to be cut
# short, then the corpus script's claims for this program alone. One H200, under 4 minutes:
#   CORPUS=$PWD/.gpu-tree-corpus OUT=$OUT timeout 280 bash tests/gpu/graphs_one_rank_diag.sh
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/cuco-graphs-diag}
mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
CORPUS=${CORPUS:-$ROOT/.gpu-tree-corpus}
stamp() { echo "== $(date -u +%H:%M:%S) (${SECONDS}s) $*"; }
if [ -d .whl ]; then
    pip_t() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$@"; }
    pip_t $(ls .whl/*.whl | grep -v '/pytest-[0-9]') .whl/onboard/tree_sitter*.whl || exit 3
    export PYTHONPATH=/tmp/site:$ROOT
else
    export PYTHONPATH=$ROOT
fi
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib:${LD_LIBRARY_PATH:-}
which gdb cuda-gdb 2>&1 | head -2
W=/tmp/graphs-diag-ws
rm -rf "$W" && mkdir -p "$W"
export CUCO_BUILD_DIR=$W/build
stamp init
(cd "$CORPUS/nvidia_jacobi_nccl_graphs" && python3 -m cuco_tui.cli init jacobi.cpp jacobi_kernels.cu --makefile Makefile --ranks 1 -o "$W/g") > "$W/init.log" 2>&1 || { tail -5 "$W/init.log"; exit 3; }
cp "$W/g/candidate.cu" "$OUT/candidate.cu"
stamp build
timeout 200 python3 workloads/_harness/cuda/run_local.py "$W/g" --ranks 1 --build-only > "$W/build.log" 2>&1 || { tail -20 "$W/build.log"; exit 3; }
run() {  # tag limit [args]
    local tag=$1 lim=$2; shift 2
    stamp "run $tag"
    timeout $((lim + 15)) python3 workloads/_harness/cuda/run_local.py "$W/g" --ranks 1 --timeout "$lim" \
        --result "$OUT/$tag.json" "$@" > "$OUT/$tag.out" 2>&1
    echo "exit $?"; tail -c 1500 "$OUT/$tag.out"; echo
}
run verify 40 --mode verify
NCCL_GRAPH_REGISTER=0 run verify_no_graph_register 40 --mode verify
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT run verify_nccl_info 40 --mode verify
grep -iE "destroy|finaliz|persist|teardown" "$OUT/verify_nccl_info.out" | tail -20
run bench 40 --mode benchmark
grep -h "teardown did not return" "$OUT"/*.out | sort | uniq -c
stamp "the corpus script's claims for this program"
ONLY=nvidia_jacobi_nccl_graphs CORPUS=$CORPUS OUT=$OUT/corpus RUN_LIMIT=40 timeout 150 bash tests/gpu/corpus_one_rank.sh > /dev/null 2>&1
cat "$OUT/corpus/summary.txt"; cat "$OUT/corpus/table.md" 2>/dev/null | tail -3
stamp done
