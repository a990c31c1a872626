#!/usr/bin/env bash
# Harness binaries for tests/gpu/integrity_ab.py: every given candidate source linked against the CUDA
# harness before (NAME.before) and after (NAME.after) a change, from the same candidate objects. Run it
# where the binaries will run (the GPU node: the harness refuses an NCCL other than the one it was built
# with), from the repository root, with the earlier harness made beforehand on the development machine and
# carried, e.g.
#   mkdir -p .whl/ab && git show f75addc^:workloads/_harness/cuda/harness.cu > .whl/ab/harness_before.cu
# then on the node:
#   bash tests/gpu/build_harness_ab.sh kv_transfer .whl/ab/harness_before.cu /tmp/ab \
#       workloads/kv_transfer/candidate.cu workloads/kv_transfer/variants/*.cu
#   python3 tests/gpu/integrity_ab.py /tmp/ab/bin $OUT/ab --workload kv_transfer --ranks 2 \
#       --configs l32_t2k_d1k,small_l16_t1k --sources seed,lsa_fused,copy_engine,ce_counters --adversarial ''
# A source named candidate.cu is called `seed`; the others keep their file's name. PROBLEM_BEFORE=FILE.cu
# links the "before" binaries against that problem.cu instead of the workload's own (a change to both).
set -u -o pipefail
[ $# -ge 4 ] || { echo "usage: $0 WORKLOAD HARNESS_BEFORE.cu OUT_DIR SOURCE.cu..." >&2; exit 2; }
W=workloads/$1 BEFORE=$(realpath "$2") OUT=$3
shift 3
H=$PWD/workloads/_harness
NCCL_HOME=${NCCL_HOME:-$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")}
CUPTI=${CUDA_HOME:-/usr/local/cuda}/extras/CUPTI/include
FLAGS="-std=c++17 -arch=sm_90 -O3 -I$NCCL_HOME/include -I$CUPTI -I$H/cuda -I$H -I$PWD/$W"
LINK="-L$NCCL_HOME/lib -l:libnccl.so.2 -Xlinker -rpath,$NCCL_HOME/lib"
mkdir -p "$OUT/obj" "$OUT/bin" "$OUT/before"
cp "$BEFORE" "$OUT/before/harness.cu"   # compiled where it sits, beside nothing of the new harness
obj() { nvcc $FLAGS -c "$1" -o "$2" || { echo "FAILED $1" >&2; return 1; }; }
obj "$H/cuda/harness.cu" "$OUT/obj/harness_after.o" &
(cd "$OUT/before" && obj harness.cu ../obj/harness_before.o) &
obj "$W/problem.cu" "$OUT/obj/problem.o" &
if [ -n "${PROBLEM_BEFORE:-}" ]; then
    cp "$PROBLEM_BEFORE" "$OUT/before/problem.cu"
    (cd "$OUT/before" && nvcc $FLAGS -c problem.cu -o ../obj/problem_before.o || echo "FAILED problem before" >&2) &
fi
obj "$W/baseline.cu" "$OUT/obj/baseline.o" &
names=()
for s in "$@"; do
    n=$(basename "$s" .cu); [ "$n" = candidate ] && n=seed
    names+=("$n")
    obj "$s" "$OUT/obj/cand_$n.o" &
done
wait
for n in "${names[@]}"; do
    for v in before after; do
        prob="$OUT/obj/problem.o"
        [ "$v" = before ] && [ -n "${PROBLEM_BEFORE:-}" ] && prob="$OUT/obj/problem_before.o"
        nvcc $FLAGS "$OUT/obj/harness_$v.o" "$prob" "$OUT/obj/baseline.o" "$OUT/obj/cand_$n.o" \
            -o "$OUT/bin/$n.$v" $LINK || echo "LINK FAILED $n $v" >&2
    done
done
ls "$OUT/bin"
