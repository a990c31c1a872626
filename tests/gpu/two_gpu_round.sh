#!/usr/bin/env bash
# The two-GPU round on the device machine (kind nvidia-h200-x2), from the repository root, with `.whl/` carried
# (tests/gpu/fetch_wheels.sh): the four LLM-free searches (design-space mutator, 24 evaluations each) and
# gemm_allgather's best candidate against PyTorch, each call of the `run` tool within 9.5 minutes:
#
#   bash tests/gpu/two_gpu_round.sh 1    # ga2 and kv2 searches                                   (~8.5 min)
#   bash tests/gpu/two_gpu_round.sh 2    # vs_torch, then the attn2 search                        (~8.5 min)
#   bash tests/gpu/two_gpu_round.sh 3    # moe2 search (the slowest: ~4 evaluations a minute)     (~7.5 min)
#
# or steps by name, run in the order given: ga2 kv2 moe2 attn2 (tests/gpu/run_gpu_search.sh's phases, run
# by it with that search's time limits; SEARCH_ONLY: no GPU tests after them) and vs_torch
# (tests/bench/torch_gemm_allgather.py: cuco's shipped split_tail through the frozen harness, then
# torch.matmul + all_gather_into_tensor and the chunked NCCL and symmetric-memory versions on the same two
# GPUs, and the ratios table; CUCO_SOURCE=FILE compares a candidate exported from a search instead).
# The four searches do not fit one call: at 4-7 evaluations a minute they take 220-350 s each.
#
# Everything comes back under $OUT: searches/ (run_gpu_search.sh's log, bundle.tar.xz and summary.json: every
# search of the call), vs_torch/ (torch_gemm_allgather.json, the harness's result JSONs, logs) and log.
# BUDGET_S (default 560) bounds the whole call; each step gets what is left, at most its own cap.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/cuco-two-gpu-out}
BUDGET_S=${BUDGET_S:-560}
CUCO_SOURCE=${CUCO_SOURCE:-workloads/gemm_allgather/variants/split_tail.cu}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log") 2>&1
T0=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - T0))); }
stamp() { echo "== $(date -u +%H:%M:%S) (+$((SECONDS - T0)) s) $*"; }

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

search() {   # search "PHASE..." MINUTES CAP_S: run_gpu_search.sh phases (it keeps 55 s after a search for its tables)
    local phases=$1 minutes=$2 cap=$3 budget
    budget=$(( $(left) - 5 ))
    stamp "search $phases: --max-minutes $minutes, at most ${cap} s each, ${budget} s left for them and their tables"
    # shellcheck disable=SC2086  # one argument per phase
    OUT=$OUT/searches SEARCH_ONLY=1 MAX_EVALS=24 CONCURRENCY=${CONCURRENCY:-6} SEARCH_MIN=$minutes \
        SEARCH_LIMIT_S=$cap DEADLINE_S=$budget bash tests/gpu/run_gpu_search.sh $phases
    stamp "search $phases: exit $?"
}

vs_torch() {   # at most 250 s: the harness's build, verify and benchmark, then the PyTorch methods
    local limit=250
    [ "$(left)" -lt "$limit" ] && limit=$(( $(left) - 5 ))
    stamp "vs_torch: $CUCO_SOURCE against PyTorch, at most ${limit} s"
    timeout -k 10 "$limit" python3 tests/bench/torch_gemm_allgather.py --out "$OUT/vs_torch" --ranks 2 \
        --cuco-source "$CUCO_SOURCE" --cuco-limit 170 --torch-limit $((limit > 120 ? limit - 60 : 60))
    stamp "vs_torch: exit $?"
}

stamp "start: steps $*"
nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -4
python3 -c 'import torch; print("torch", torch.__version__, "GPUs", torch.cuda.device_count())'
env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort
git log -1 --format='commit %h %s' 2>/dev/null

for step in "$@"; do
    case $step in
        1) search "ga2 kv2" 4 235 ;;   # one run_gpu_search.sh call: both searches share its limits
        2) vs_torch; search attn2 5 290 ;;
        3) search moe2 7 430 ;;
        ga2 | kv2) search "$step" 4 235 ;;
        attn2) search attn2 5 290 ;;
        moe2) search moe2 7 430 ;;
        vs_torch) vs_torch ;;
        *) echo "unknown step $step (1, 2, 3, ga2, kv2, moe2, attn2, vs_torch)" ;;
    esac
done
stamp "all steps done"
ls -la "$OUT" "$OUT"/* 2>/dev/null | head -40
