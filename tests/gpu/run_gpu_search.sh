#!/usr/bin/env bash
# The multi-GPU runs of the CUDA workloads, on the device machine (kind nvidia-h200-x4, 4 GPUs, or nvidia-h200-x2 for
# the 2-rank phases), from the repository
# root, in phases given as arguments (run in the order given):
#
#   ga2    `cuco run gemm_allgather --headless --ranks 2` on GPUs 0,1, while the GPU tests run on GPUs 2,3
#          (tests/gpu/test_ssh_gpu_e2e.py, then tests/gpu/test_cuda_harness_gpu.py with its binaries
#          built in parallel first); on a machine of fewer than 4 GPUs the search alone (add `tests`)
#   ga4    `cuco run gemm_allgather --headless --ranks 4` on GPUs 0-3
#   kv2    `cuco run kv_transfer --headless --ranks 2` on GPUs 0,1
#   moe2 / attn2   `cuco run moe_dispatch_combine` / `attention_allgather --headless --ranks 2` on GPUs 0,1,
#          then that workload's GPU tests (tests/gpu/test_moe_attention_gpu.py) at 2 ranks
#   moe4 / attn4   the same at 4 ranks on GPUs 0-3
#   ma1    one GPU (kind nvidia-h200 or nvidia-h100-x1): the kernel TFLOP/s benchmark
#          (tests/bench/bench_moe_attn_kernels.py), then both workloads' GPU tests at 1 rank
#   tests  the GPU tests alone, on GPUs 0,1
#   ssh    tests/gpu/test_ssh_gpu_e2e.py alone
#   tl2    the per-rank timelines (CUPTI: kernels, peer copies, NCCL's kernels) of the seeds and shipped
#          variants of gemm_allgather, kv_transfer, moe_dispatch_combine and attention_allgather at 2 ranks on
#          GPUs 0,1, where overlap is real, and the A B A B of timelines off/on (tests/gpu/timeline_gpu.py;
#          docs/timeline.md)
#   tl4    the same at 4 ranks on GPUs 0-3 (kv_transfer aside: it runs on exactly 2)
#   kvab   kv_transfer's seed and variants at 2 ranks against the CUDA harness before the symbol policy and
#          clock change and after it, A B A B (tests/gpu/build_harness_ab.sh, integrity_ab.py); carry
#          .whl/ab/harness_before.cu (`git show f75addc^:workloads/_harness/cuda/harness.cu`)
#
#   tests/gpu/run_gpu_search.sh ga2 ga4      # e.g. one call of the `run` tool
#
# The machine has no cuco dependencies beyond its image: the wheels in .whl/ (made here by
# tests/gpu/fetch_wheels.sh; carry them with the `run` call) (aiosqlite, asyncssh,
# cryptography, cffi, pycparser, pytest-asyncio; pytest only if the image's is older than 8.4) are
# installed into .site (tests/gpu/node_setup.sh, with bubblewrap from .whl/bwrap). Each search is bounded by --max-minutes/--max-evals and by `timeout` (SIGTERM:
# the engine stops and cancels what is in flight). A GPU subset is given to the local executor by an
# `nvidia-smi` shim earlier on PATH that answers the index query with the subset (CUDA_DEVICE_ORDER is
# PCI_BUS_ID, as nvidia-smi's order). Everything comes back under $OUT: log (this output),
# bundle.tar.xz (each run's cuco.db and report JSON, the engine's output, the test logs) and
# summary.json (the reports); after each search, tests/gpu/efficiency_table.py prints every candidate's
# per-config overlap efficiency from the run's store and tests/bench/bench_eval_rate.py its evaluations per
# minute and where the time went (a search of under 4 per minute is reported, not stopped). NVLink multicast stays off in every process (exported here, and in each
# workload's launch.env).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/cuco-gpu-out}
SEARCH_MIN=${SEARCH_MIN:-3}           # --max-minutes of each search
SEARCH_LIMIT_S=${SEARCH_LIMIT_S:-225}  # hard wall limit of each search (timeout, then SIGTERM)
MAX_EVALS=${MAX_EVALS:-12}
CONCURRENCY=${CONCURRENCY:-4}
TESTS_LIMIT_S=${TESTS_LIMIT_S:-240}    # wall limit of tests/gpu/test_cuda_harness_gpu.py
SEARCH_ONLY=${SEARCH_ONLY:-}           # non-empty: moe2 / attn2 run the search without the workload's GPU tests
DEADLINE_S=${DEADLINE_S:-555}          # the whole script ends by then (the `run` tool's limit is 600 s)
PAIR=${PAIR:-}                           # "2,3": the 2-rank phases run on these GPUs (two scripts side by side on 4 GPUs)
P=${PAIR:-0,1}
BUNDLE=/tmp/cuco-gpu-bundle${PAIR:+-${PAIR//,/_}}
mkdir -p "$OUT" "$BUNDLE"
T0=$SECONDS
left() { echo $((DEADLINE_S - (SECONDS - T0))); }

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

stamp() { echo "== $(date -u +%H:%M:%S) $*"; }

gpu_shim() {   # gpu_shim 0,1 -> a folder whose nvidia-smi lists only GPUs 0 and 1 to the index query
    local d=/tmp/cuco-shim-${1//,/_} real
    real=$(command -v nvidia-smi)
    mkdir -p "$d"
    cat > "$d/nvidia-smi" <<EOF
#!/bin/sh
case " \$* " in *" --query-gpu=index "*) echo "$1" | tr , '\\n'; exit 0;; esac
exec "$real" "\$@"
EOF
    chmod +x "$d/nvidia-smi"
    echo "$d"
}

cuco() { python3 -m cuco_tui.cli "$@"; }

search() {   # search NAME WORKLOAD RANKS GPUS(comma list, or "all")
    local name=$1 workload=$2 ranks=$3 gpus=$4 home=$ROOT/.gpu-homes/$1 path=$PATH rc limit
    limit=$(( $(left) - 55 )); [ "$limit" -gt "$SEARCH_LIMIT_S" ] && limit=$SEARCH_LIMIT_S
    if [ "$limit" -lt 100 ]; then stamp "search $name: skipped, only $(left) s left"; return 0; fi
    [ "$gpus" != all ] && path=$(gpu_shim "$gpus"):$PATH
    rm -rf "$home"
    stamp "search $name: cuco run $workload --headless --ranks $ranks --max-minutes $SEARCH_MIN" \
        "--max-evals $MAX_EVALS --concurrency $CONCURRENCY (GPUs $gpus; limit ${limit}s)"
    PATH=$path timeout -s TERM -k 40 "$limit" python3 -m cuco_tui.cli run "$workload" --headless \
        --ranks "$ranks" --max-minutes "$SEARCH_MIN" --max-evals "$MAX_EVALS" --concurrency "$CONCURRENCY" \
        --name "$name" --home "$home" > "$BUNDLE/$name.engine.log" 2>&1
    rc=$?
    stamp "search $name: exit $rc"
    tail -n 25 "$BUNDLE/$name.engine.log"
    cuco report "$name" --json --home "$home" > "$BUNDLE/$name.report.json"
    echo "report $name (exit $?):"
    python3 - "$BUNDLE/$name.report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({k: r.get(k) for k in ("run", "state", "stop_reason", "evaluated", "correct", "failed",
                                        "baseline_time_ms", "elapsed_s")}))
print(json.dumps(r.get("best")))
EOF
    python3 - "$home/cuco.db" "$BUNDLE/$name.db" <<'EOF'
import sqlite3, sys
src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2])
src.backup(dst); dst.close(); src.close()
EOF
    du -sh "$home" | sed 's/^/home size: /'
    python3 tests/gpu/efficiency_table.py "$BUNDLE/$name.db"
    python3 tests/bench/bench_eval_rate.py "$BUNDLE/$name.db" --min-rate 4 --json "$BUNDLE/$name.rate.json"
}

ssh_test() {
    stamp "pytest -m gpu tests/gpu/test_ssh_gpu_e2e.py"
    timeout -k 10 90 python3 -m pytest -p no:cacheprovider -m gpu -rA -v tests/gpu/test_ssh_gpu_e2e.py \
        2>&1 | tee "$BUNDLE/test_ssh_gpu_e2e.log" | tail -n 30
}

gpu_tests() {   # gpu_tests GPUS(comma list)
    local gpus=$1 b=/tmp/cuco-cuda-build${PAIR:+-${PAIR//,/_}} rl=workloads/_harness/cuda/run_local.py
    stamp "gpu tests: building the test binaries in parallel"
    {
        echo "workloads/gemm_allgather -"
        for f in workloads/gemm_allgather/variants/*.cu tests/gpu/bad_candidates/*.cu; do
            echo "workloads/gemm_allgather $f"
        done
        for f in workloads/kv_transfer/candidate.cu workloads/kv_transfer/variants/*.cu; do
            echo "workloads/kv_transfer $f"
        done
    } | CUCO_BUILD_DIR=$b timeout -k 5 150 xargs -P 12 -L 1 sh -c \
        'if [ "$1" = - ]; then python3 '"$rl"' "$0" --build-only; else python3 '"$rl"' "$0" --source "$1" --build-only; fi' \
        > "$BUNDLE/tests.build.log" 2>&1
    stamp "gpu tests: builds done (exit $?)"
    ssh_test
    stamp "pytest -m gpu tests/gpu/test_cuda_harness_gpu.py (CUDA_VISIBLE_DEVICES=$gpus)"
    CUDA_VISIBLE_DEVICES=$gpus CUCO_BUILD_DIR=$b timeout -k 10 "$TESTS_LIMIT_S" python3 -m pytest -p no:cacheprovider -m gpu \
        -rA -v tests/gpu/test_cuda_harness_gpu.py 2>&1 | tee "$BUNDLE/test_cuda_harness_gpu.log" | tail -n 40
    stamp "gpu tests done"
}

ma_tests() {   # ma_tests RANKS GPUS WORKLOAD... : build seed, variants, bad candidates in parallel; run the tests
    local ranks=$1 gpus=$2 b=/tmp/cuco-cuda-build${PAIR:+-${PAIR//,/_}} rl=workloads/_harness/cuda/run_local.py k=""
    shift 2
    stamp "moe/attention tests ($*, $ranks ranks): building in parallel"
    {
        for w in "$@"; do
            echo "workloads/$w -"
            for f in workloads/$w/variants/*.cu; do echo "workloads/$w $f"; done
        done
        case " $* " in *" moe_dispatch_combine "*)
            echo "workloads/moe_dispatch_combine tests/gpu/bad_candidates/moe_drop_tokens.cu"
            echo "workloads/moe_dispatch_combine tests/gpu/bad_candidates/moe_double_count.cu";; esac
        case " $* " in *" attention_allgather "*)
            echo "workloads/attention_allgather tests/gpu/bad_candidates/attn_lse_skip.cu";; esac
    } | CUCO_BUILD_DIR=$b timeout -k 5 300 xargs -P 12 -L 1 sh -c \
        'if [ "$1" = - ]; then python3 '"$rl"' "$0" --build-only; else python3 '"$rl"' "$0" --source "$1" --build-only; fi' \
        > "$BUNDLE/ma-tests-$ranks.build.log" 2>&1
    stamp "moe/attention tests: builds done (exit $?)"
    [ $# -eq 1 ] && k="-k $1"
    CUDA_VISIBLE_DEVICES=$gpus CUCO_TEST_RANKS=$ranks CUCO_BUILD_DIR=$b timeout -k 10 "$TESTS_LIMIT_S" \
        python3 -m pytest -p no:cacheprovider -m gpu -rA -v -s $k tests/gpu/test_moe_attention_gpu.py 2>&1 \
        | tee "$BUNDLE/test_moe_attention_gpu-$ranks.log" | grep -v '^{"source"' | tail -n 40
    grep '^{"source"' "$BUNDLE/test_moe_attention_gpu-$ranks.log"
    stamp "moe/attention tests done"
}

kernel_bench() {
    stamp "kernel TFLOP/s: tests/bench/bench_moe_attn_kernels.py"
    timeout -k 5 240 python3 tests/bench/bench_moe_attn_kernels.py --json "$BUNDLE/moe_attn_kernels.json" 2>&1 \
        | tee "$BUNDLE/moe_attn_kernels.log"
}

timelines() {   # timelines RANKS GPUS WORKLOAD... : every shipped source's timeline at RANKS ranks
    local ranks=$1 gpus=$2 d=/tmp/cuco-tl-bin-$1${PAIR:+-${PAIR//,/_}}
    shift 2
    stamp "timelines ($*, $ranks ranks, GPUs $gpus): building"
    timeout -k 5 300 python3 tests/gpu/timeline_gpu.py build "$d" "$@" > "$BUNDLE/tl-$ranks.build.log" 2>&1
    stamp "timelines: builds done (exit $?)"
    CUDA_VISIBLE_DEVICES=$gpus timeout -k 10 300 python3 tests/gpu/timeline_gpu.py run "$d" "$BUNDLE/tl-$ranks" \
        --ranks "$ranks" 2>&1 | tee "$BUNDLE/tl-$ranks.log" | cut -c1-600
    CUDA_VISIBLE_DEVICES=$gpus timeout -k 10 200 python3 tests/gpu/timeline_gpu.py abab "$d" "$BUNDLE/tl-$ranks-abab" \
        gemm_allgather/bench.lsa_fused 2 "$ranks" 2>&1 | tail -n 3
    stamp "timelines done"
}

harness_ab() {   # harness_ab WORKLOAD RANKS GPUS CONFIGS SOURCES: the harness before/after a change, A B A B
    local w=$1 ranks=$2 gpus=$3 configs=$4 sources=$5
    stamp "harness before/after ($w, $ranks ranks): building (needs .whl/ab/harness_before.cu, see build_harness_ab.sh)"
    timeout -k 5 300 bash tests/gpu/build_harness_ab.sh "$w" .whl/ab/harness_before.cu "/tmp/ab-$w" \
        "workloads/$w/candidate.cu" "workloads/$w"/variants/*.cu > "$BUNDLE/ab-$w.build.log" 2>&1
    CUDA_VISIBLE_DEVICES=$gpus timeout -k 10 300 python3 tests/gpu/integrity_ab.py "/tmp/ab-$w/bin" "$BUNDLE/ab-$w" \
        --workload "$w" --ranks "$ranks" --configs "$configs" --sources "$sources" --adversarial '' 2>&1 | tail -n 20
    stamp "harness before/after done"
}

pack() {
    python3 - "$BUNDLE" "$OUT/summary.json" <<'EOF'
import glob, json, os, sys
out = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.report.json"))):
    try:
        out[os.path.basename(p)[:-12]] = json.load(open(p))
    except Exception as exc:
        out[os.path.basename(p)] = repr(exc)
json.dump(out, open(sys.argv[2], "w"), indent=1)
EOF
    tar -cJf "$OUT/bundle.tar.xz" -C "$BUNDLE" .
}
finish() {
    pack; ls -la "$OUT"
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv
}
trap finish EXIT

stamp "start: phases $*"
. tests/gpu/node_setup.sh
python3 -c 'import aiosqlite, asyncssh, yaml, rich, pytest, pytest_asyncio, nvidia.nccl as n; print("python ok; nccl wheel", list(n.__path__)[0], "pytest", pytest.__version__)' || exit 3
nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8
env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort
git log -1 --format='commit %h %s' 2>/dev/null

for phase in "$@"; do
    case $phase in
        ga2)
            if [ -z "$PAIR" ] && [ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 4 ]; then
                search ga-r2 gemm_allgather 2 0,1 > "$BUNDLE/ga-r2.out" 2>&1 &
                pid=$!
                gpu_tests 2,3
                wait "$pid"
                cat "$BUNDLE/ga-r2.out"
            else   # a 2-GPU machine (nvidia-h200-x2): the search alone; run the `tests` phase after it
                search ga-r2 gemm_allgather 2 "$P"
            fi
            ;;
        ga4) search ga-r4 gemm_allgather 4 all ;;
        kv2) search kv-r2 kv_transfer 2 "$P" ;;
        moe2) search moe-r2 moe_dispatch_combine 2 "$P"; [ -n "$SEARCH_ONLY" ] || ma_tests 2 "$P" moe_dispatch_combine ;;
        attn2) search attn-r2 attention_allgather 2 "$P"; [ -n "$SEARCH_ONLY" ] || ma_tests 2 "$P" attention_allgather ;;
        moe4) search moe-r4 moe_dispatch_combine 4 all; ma_tests 4 0,1,2,3 moe_dispatch_combine ;;
        attn4) search attn-r4 attention_allgather 4 all; ma_tests 4 0,1,2,3 attention_allgather ;;
        ma1) kernel_bench; ma_tests 1 0 moe_dispatch_combine attention_allgather ;;
        ssh) ssh_test ;;
        kvab) harness_ab kv_transfer 2 "$P" l32_t2k_d1k,small_l16_t1k seed,lsa_fused,copy_engine,ce_counters ;;
        tl2) timelines 2 "$P" gemm_allgather kv_transfer moe_dispatch_combine attention_allgather ;;
        tl4) timelines 4 0,1,2,3 gemm_allgather moe_dispatch_combine attention_allgather ;;
        tests) gpu_tests "$P" ;;
        *) echo "unknown phase $phase" ;;
    esac
    pack
done
stamp "all phases done"
