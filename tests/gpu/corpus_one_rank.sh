#!/usr/bin/env bash
# Every public corpus program with a kernel, made a workload by `cuco init --ranks 1` (NVIDIA's Jacobi
# with its own Makefile's flags, through --makefile), on ONE GPU: the seed verifies on every config and
# measures 1.00x against its own frozen baseline within the spread, and the do-nothing check
# (checks/do_nothing.cu) verifies INCORRECT. The test programs of tests/onboard/programs whose styles init
# learned last (own check functions, a table of implementations across files, a class hierarchy whose
# virtual run() the factory picks, a loop index feeding the
# kernels, Makefile and compile_commands flags) go through the same steps after the corpus.
# From the repository root, on a device machine of one GPU (nvidia-h200), carrying .whl/ (as for
# tests/onboard/gpu_onboard_2gpu.sh) and the corpus (CORPUS=DIR, default ../shared/corpus, else
# shared/corpus, else .gpu-tree-corpus under the root):
#   CORPUS=$PWD/.gpu-tree-corpus OUT=$OUT timeout 330 bash tests/gpu/corpus_one_rank.sh
# Output: $OUT/log, $OUT/summary.txt (one PASS/FAIL/SKIP line per claim, "==" per step, as they happen),
# $OUT/table.md (the table for docs/bring-your-own-program.md) and $OUT/results.json. Exit 0 only when
# every claim holds. Budget: under 5 minutes on one H200 with 16 cores (DEADLINE_S, default 270: no run
# starts after it; its claim is a SKIP). ONLY="name ...": those programs alone.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/cuco-corpus-one-rank}
mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
stamp() { echo "== $(date -u +%H:%M:%S) (${SECONDS}s) $*" | tee -a "$SUMMARY"; }
claim() { echo "$1 $2" | tee -a "$SUMMARY"; }

CORPUS=${CORPUS:-$ROOT/../shared/corpus}
[ -d "$CORPUS" ] || CORPUS=$ROOT/shared/corpus
[ -d "$CORPUS" ] || CORPUS=$ROOT/.gpu-tree-corpus
[ -d "$CORPUS" ] || { echo "no corpus: pass CORPUS=DIR"; exit 3; }

if [ -d .whl ]; then
    stamp "install wheels"
    pip_t() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$@"; }
    pip_t $(ls .whl/*.whl | grep -v '/pytest-[0-9]') .whl/onboard/tree_sitter*.whl || exit 3
    export PYTHONPATH=/tmp/site:$ROOT
else
    export PYTHONPATH=$ROOT
fi
python3 -c 'import tree_sitter_cuda, yaml, rich, nvidia.nccl; print("python ok")' || exit 3
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')/lib:${LD_LIBRARY_PATH:-}
nvidia-smi -L
git log -1 --format='commit %h %s' 2>/dev/null

W=/tmp/corpus-one-rank-ws
rm -rf "$W" && mkdir -p "$W"
export CUCO_BUILD_DIR=$W/build
P=tests/onboard/programs
# name|folder to run init from|init arguments
PROGRAMS="nvidia_jacobi_nccl|$CORPUS/nvidia_jacobi_nccl|jacobi.cpp jacobi_kernels.cu --makefile Makefile
nvidia_jacobi_nccl_overlap|$CORPUS/nvidia_jacobi_nccl_overlap|jacobi.cpp jacobi_kernels.cu --makefile Makefile
nvidia_jacobi_nccl_graphs|$CORPUS/nvidia_jacobi_nccl_graphs|jacobi.cpp jacobi_kernels.cu --makefile Makefile
cuco_moe_seed|$CORPUS/cuco_moe_seed|ds_v3_moe.cu
async_ring_allreduce_single|$CORPUS/async_ring_allreduce_single|ring_allreduce.cu
check_helper|$ROOT/$P|check_helper.cu
table|$ROOT/$P/table|main.cu impls.cu comm.cu
virtual|$ROOT/$P/virtual|main.cu impls.cu comm.cu reducer.h
loop_index|$ROOT/$P|loop_index.cu
makefile_flags|$ROOT/$P/makefile_flags|halo.cu --makefile Makefile
compile_db|$ROOT/$P/compile_db|reduce.cu --compile-commands compile_commands.json"
if [ -n "${ONLY:-}" ]; then
    PROGRAMS=$(echo "$PROGRAMS" | while IFS='|' read -r name rest; do
        case " $ONLY " in *" $name "*) echo "$name|$rest";; esac; done)
fi
MADE=""
while IFS='|' read -r name dir args; do
    stamp "cuco init $name"
    (cd "$dir" && python3 -m cuco_tui.cli init $args --ranks 1 -o "$W/$name") > "$W/$name.init.log" 2>&1
    rc=$?
    grep -E '^(cuco:|  flags |  TODO )' "$W/$name.init.log" | head -6
    if [ $rc -ne 0 ]; then claim FAIL "$name: init refused: $(grep '^cuco: ' "$W/$name.init.log" | head -1)"; continue; fi
    if grep -q '^  TODO ' "$W/$name.init.log"; then claim FAIL "$name: init left CUCO-TODOs"; continue; fi
    MADE="$MADE $name"
done <<< "$PROGRAMS"

JOBS=${JOBS:-$(nproc)}
stamp "build seeds and do-nothing checks ($JOBS at a time)"
for n in $MADE; do
    for src in candidate.cu checks/do_nothing.cu; do echo "$n $src $W/$n.$(basename $src .cu).build.log"; done
done | xargs -P "$JOBS" -L 1 sh -c 'timeout ${BUILD_LIMIT:-200} python3 workloads/_harness/cuda/run_local.py \
    "$0/$1" --source "$0/$1/$2" --ranks 1 --build-only > "$3" 2>&1; echo "exit $?" >> "$3"' "$W"
for n in $MADE; do
    for b in candidate do_nothing; do
        grep -qx "exit 0" "$W/$n.$b.build.log" || claim FAIL "$n $b: build failed: $(grep -iE 'error' "$W/$n.$b.build.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
    done
done
stamp "builds done"

echo "[" > "$OUT/results.json"
run() {   # name source mode tag [args] -> $W/name.tag.json
    if [ $SECONDS -gt ${DEADLINE_S:-270} ]; then claim SKIP "$1 $4: not run, past ${DEADLINE_S:-270} s"; return 1; fi
    grep -qx "exit 0" "$W/$1.$(basename "$2" .cu).build.log" || return 1
    timeout $((${RUN_LIMIT:-60} + 20)) python3 workloads/_harness/cuda/run_local.py "$W/$1" --source "$W/$1/$2" \
        --ranks 1 --mode "$3" --timeout ${RUN_LIMIT:-60} --result "$W/$1.$4.json" "${@:5}" > "$W/$1.$4.log" 2>&1
    [ -f "$W/$1.$4.json" ] && { cat "$W/$1.$4.json"; echo ","; } >> "$OUT/results.json"
}
judge() {   # name tag want(incorrect|speedup) -> PASS/FAIL line, and a table row for the seed
    python3 - "$W/$1.$2.json" "$1" "$2" "$3" "$OUT/rows.txt" <<'PY' | tee -a "$SUMMARY"
import json, sys
path, name, tag, want, rows = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as e:
    try:
        tail = " | ".join(open(path[:-len(".json")] + ".log").read().strip().splitlines()[-3:])
    except OSError:
        tail = "no log"
    print(f"FAIL {name} {tag}: no result ({e}): {tail[:400]}"); sys.exit(0)
cfgs = r.get("configs", [])
if want == "correct":
    ok = r.get("correct") is True
    names = ", ".join(c["name"] for c in cfgs)
    print(f"{'PASS' if ok else 'FAIL'} {name} seed verifies on every config ({names}): error={r.get('error')}")
    with open(rows, "a") as f:
        f.write(f"{name}\tverify\t{'PASS' if ok else 'FAIL'} ({names})\n")
    sys.exit(0)
if want == "incorrect":   # by the comparison (a mismatch), not by a crash or a timeout
    ok = r.get("correct") is False and bool(cfgs) and all(not c["correct"] and c.get("mismatch") for c in cfgs)
    what = "; ".join(f"{c['name']}: {(c.get('mismatch') or {}).get('buffer') or (c.get('mismatch') or {}).get('what', '?')}"
                     for c in cfgs)
    print(f"{'PASS' if ok else 'FAIL'} {name} do_nothing caught (incorrect): {what} error={r.get('error')}")
    with open(rows, "a") as f:
        f.write(f"{name}\tdo_nothing\t{'PASS: incorrect (' + what + ')' if ok else 'FAIL'}\n")
    sys.exit(0)
def rel(c):   # each interquartile range relative to its median
    return sum((c.get(f"{s}_spread") or 0) / c[f"{s}_ms"] for s in ("baseline", "candidate") if c.get(f"{s}_ms"))
bench = [c for c in cfgs if c.get("speedup")]
ok = r.get("correct") is True and bool(bench) and all(abs(c["speedup"] - 1.0) <= max(0.03, rel(c)) for c in bench)
detail = "; ".join(f"{c['name']}: {c['speedup']:.3f}x ({c['baseline_ms']:.4f} / {c['candidate_ms']:.4f} ms, IQR "
                   f"{c.get('baseline_spread') or 0:.4f} / {c.get('candidate_spread') or 0:.4f})" for c in bench)
print(f"{'PASS' if ok else 'FAIL'} {name} seed verifies and measures 1.00x within its spread: correct={r.get('correct')} {detail} error={r.get('error')} gpu={r.get('env', {}).get('gpu')}")
with open(rows, "a") as f:
    f.write(f"{name}\tseed\t{'PASS' if ok else 'FAIL'}: correct={r.get('correct')} {detail}\n")
PY
}
for n in $MADE; do
    stamp "$n: seed (verify on every config, then benchmark), do_nothing"
    run "$n" candidate.cu verify seed.verify && judge "$n" seed.verify correct
    run "$n" candidate.cu benchmark seed && judge "$n" seed speedup
    run "$n" checks/do_nothing.cu verify do_nothing --configs program && judge "$n" do_nothing incorrect
done
echo "{}]" >> "$OUT/results.json"
python3 - "$OUT/rows.txt" "$OUT/table.md" <<'PY'
import sys
rows = {}
try:
    for line in open(sys.argv[1]):
        name, what, text = line.rstrip("\n").split("\t", 2)
        rows.setdefault(name, {})[what] = text
except OSError:
    pass
with open(sys.argv[2], "w") as f:
    f.write("| program | seed verifies | seed speedup (baseline / seed ms, IQR) | do_nothing |\n| --- | --- | --- | --- |\n")
    for name, r in rows.items():
        f.write(f"| {name} | {r.get('verify', 'not run')} | {r.get('seed', 'not run')} | {r.get('do_nothing', 'not run')} |\n")
print(open(sys.argv[2]).read())
PY
stamp "done"
echo "---- summary"
cat "$SUMMARY"
grep -qE '^(FAIL|SKIP)' "$SUMMARY" && exit 1
exit 0
