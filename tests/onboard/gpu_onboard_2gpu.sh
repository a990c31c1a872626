#!/usr/bin/env bash
# The 2-GPU acceptance of `cuco init` (device machine kind nvidia-h100-x2 or nvidia-h200-x2), from the
# repository root, carrying .whl/ (bash tests/gpu/fetch_wheels.sh, plus the parser wheels in .whl/onboard/,
# as for tests/onboard/gpu_onboard.sh) and the corpus (CORPUS=DIR, default ../shared/corpus, else
# shared/corpus under the root):
#   1. `cuco init --ranks 2` on every corpus program and every test program of tests/onboard/programs;
#      a refusal is recorded with its one-line reason (the kernel-less NCCL examples must be refused);
#   2. every written workload's seed and its two checks (checks/do_nothing.cu, checks/skip_comm.cu) built
#      in parallel by the harness's own runner;
#   3. at 2 ranks: the seed verifies and measures ~1.00x against its own frozen baseline (within the
#      spread), and both checks verify INCORRECT (the workload's verification proves something).
# Output: $OUT/log, $OUT/summary.txt (one PASS/FAIL/SKIP line per claim and one "==" line per step,
# written as they happen) and $OUT/results.json. Exit 0 only when every claim holds.
# INIT_ONLY=1: step 1 only; BUILD_ONLY=1: steps 1-2 (both run on any machine with nvcc, no GPU);
# ONLY="name ...": those programs alone; JOBS: parallel builds (default: the cores); BUILD_LIMIT and
# RUN_LIMIT cap each build and each harness run (300 s, 120 s); DEADLINE_S (450): no harness run starts
# after it, its claim is a SKIP. Budget: under 8 minutes on 2 H100s with 16 cores.
# A device call (its copy of the repository has no ../shared: the corpus travels as .gpu-tree-corpus/,
# a copy of ../shared/corpus made by hand, git-ignored), carrying .whl and .gpu-tree-corpus:
#   CORPUS=$PWD/.gpu-tree-corpus OUT=$OUT timeout 590 bash tests/onboard/gpu_onboard_2gpu.sh
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/cuco-onboard-2gpu}
mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
# every step's start goes to the summary too: a run cut off at the call's limit still says how far it got
stamp() { echo "== $(date -u +%H:%M:%S) (${SECONDS}s) $*" | tee -a "$SUMMARY"; }
claim() { echo "$1 $2" | tee -a "$SUMMARY"; }

CORPUS=${CORPUS:-$ROOT/../shared/corpus}
[ -d "$CORPUS" ] || CORPUS=$ROOT/shared/corpus
[ -d "$CORPUS" ] || { echo "no corpus at $CORPUS: pass CORPUS=DIR"; exit 3; }

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

W=/tmp/onboard-2gpu-ws
rm -rf "$W" && mkdir -p "$W"
export CUCO_BUILD_DIR=$W/build
# name|files (relative to $CORPUS, or to the root for test programs)|flags|expect (workload or refused)
PROGRAMS=$(python3 - "$CORPUS" <<'PY'
import sys
sys.path.insert(0, ".")
from tests.onboard.corpus import INIT_FLAGS, PROGRAMS
for name, (files, flags, has_kernel) in PROGRAMS.items():
    flags = INIT_FLAGS.get(name, flags)
    print(f"{name}|{' '.join(sys.argv[1] + '/' + f for f in files)}|{' '.join(flags)}|{'workload' if has_kernel else 'refused'}")
for name in ["mpi_allreduce", "env_ring", "moe_alltoall", "gemm_allgather", "moe_padded_alltoall"]:
    print(f"{name}|tests/onboard/programs/{name}.cu||workload")
PY
)
if [ -n "${ONLY:-}" ]; then   # ONLY="name ...": just these programs (a short call)
    PROGRAMS=$(echo "$PROGRAMS" | while IFS='|' read -r name rest; do
        case " $ONLY " in *" $name "*) echo "$name|$rest";; esac; done)
fi
MADE=""
while IFS='|' read -r name files flags expect; do
    stamp "cuco init $name"
    python3 -m cuco_tui.cli init $files $flags --ranks 2 -o "$W/$name" > "$W/$name.init.log" 2>&1
    rc=$?
    cat "$W/$name.init.log" | grep -vE '^  note ' | head -8
    if [ "$expect" = refused ]; then
        [ $rc -eq 2 ] && [ "$(grep -c '^cuco: ' "$W/$name.init.log")" -eq 1 ] \
            && claim PASS "$name: init refuses in one line (exit 2)" || claim FAIL "$name: init should refuse (exit $rc)"
        continue
    fi
    if [ $rc -ne 0 ]; then claim FAIL "$name: init refused: $(grep '^cuco: ' "$W/$name.init.log" | head -1)"; continue; fi
    if grep -q '^  TODO ' "$W/$name.init.log"; then claim FAIL "$name: init left CUCO-TODOs (a hand edit needed)"; continue; fi
    claim PASS "$name: init wrote a workload with no CUCO-TODO"
    MADE="$MADE $name"
done <<< "$PROGRAMS"

[ -n "${INIT_ONLY:-}" ] && { stamp "init only: made$MADE"; cat "$SUMMARY"; exit 0; }
# The builds run through xargs, never as `&` jobs and a bare `wait`: this script's output goes through a
# process substitution (tee), and bash's bare `wait` waits for that too, i.e. for ever. xargs also caps
# the parallel builds at the cores (one nvcc each). run_local.py compiles the frozen harness sources once
# per content (harness.cu once for all, problem.cu and baseline.cu once per workload) and each candidate
# alone, as the engine does; the first builds compile their candidates while the harness's object is made.
JOBS=${JOBS:-$(nproc)}
stamp "build seeds and checks ($JOBS at a time)"
for n in $MADE; do
    for src in candidate.cu checks/do_nothing.cu checks/skip_comm.cu; do
        echo "$n $src $W/$n.$(basename $src .cu).build.log"
    done
done | xargs -P "$JOBS" -L 1 sh -c 'timeout ${BUILD_LIMIT:-300} python3 workloads/_harness/cuda/run_local.py \
    "$0/$1" --source "$0/$1/$2" --ranks 2 --build-only > "$3" 2>&1; echo "exit $?" >> "$3"' "$W"
for n in $MADE; do
    for b in candidate do_nothing skip_comm; do
        if grep -qx "exit 0" "$W/$n.$b.build.log"; then
            echo "  $(grep '^built ' "$W/$n.$b.build.log" | sed "s|$W/||")"
        else
            claim FAIL "$n $b: build failed: $(grep -v '^\s*$' "$W/$n.$b.build.log" | head -3 | tr '\n' ' ' | cut -c1-300)"
        fi
    done
done
stamp "builds done"
[ -n "${BUILD_ONLY:-}" ] && { cat "$SUMMARY"; exit 0; }

echo "[" > "$OUT/results.json"
run() {   # name source mode tag [--configs NAME] -> $W/name.tag.json
    if [ $SECONDS -gt ${DEADLINE_S:-450} ]; then
        claim SKIP "$1 $4: not run, past ${DEADLINE_S:-450} s (DEADLINE_S)"; return 1
    fi
    grep -qx "exit 0" "$W/$1.$(basename "$2" .cu).build.log" || return 1   # its build failed: claimed above
    # run_local.py's own stage timeout kills the harness's ranks (an outer kill would leave them on the GPUs)
    timeout $((${RUN_LIMIT:-120} + 20)) python3 workloads/_harness/cuda/run_local.py "$W/$1" --source "$W/$1/$2" \
        --ranks 2 --mode "$3" --timeout ${RUN_LIMIT:-120} --result "$W/$1.$4.json" "${@:5}" > "$W/$1.$4.log" 2>&1
    [ -f "$W/$1.$4.json" ] && { cat "$W/$1.$4.json"; echo ","; } >> "$OUT/results.json"
}
judge() {   # name tag expectation(correct|incorrect|speedup) -> PASS/FAIL line
    python3 - "$W/$1.$2.json" "$1" "$2" "$3" <<'PY' | tee -a "$SUMMARY"
import json, sys
path, name, tag, want = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as e:
    try:
        tail = " | ".join(open(path[:-len(".json")] + ".log").read().strip().splitlines()[-3:])
    except OSError:
        tail = "no log"
    print(f"FAIL {name} {tag}: no result ({e}): {tail[:400]}"); sys.exit(0)
cfgs = r.get("configs", [])
detail = "; ".join(f"{c['name']}: correct={c['correct']} speedup={c.get('speedup')} "
                   f"spread (IQR, ms)={c.get('baseline_spread')}/{c.get('candidate_spread')} of "
                   f"{c.get('baseline_ms')}/{c.get('candidate_ms')} mismatch={c.get('mismatch')}"
                   for c in cfgs)
if want == "correct":
    ok = r.get("correct") is True
elif want == "incorrect":
    # incorrect by the comparison (a mismatch on every config), not by a crash or a timeout
    ok = r.get("correct") is False and bool(cfgs) and all(not c["correct"] and c.get("mismatch") for c in cfgs)
else:       # the seed against its own baseline: 1.00x within the measured spread
    def rel_spread(c):   # the spreads are interquartile ranges in ms: relative to their medians
        return sum((c.get(f"{s}_spread") or 0) / c[f"{s}_ms"] for s in ("baseline", "candidate") if c.get(f"{s}_ms"))
    ok = r.get("correct") is True and all(
        c.get("speedup") and abs(c["speedup"] - 1.0) <= max(0.03, rel_spread(c)) for c in cfgs)
print(f"{'PASS' if ok else 'FAIL'} {name} {tag} (want {want}): error={r.get('error')} {detail} gpu={r.get('env', {}).get('gpu')}")
PY
}
# the verdicts first (seed correct, both checks incorrect), for every workload; the seeds' benchmarks,
# the longest runs, after them: a run cut off at the call's limit loses the fewest claims
for n in $MADE; do
    stamp "$n: seed verify, do_nothing, skip_comm"
    run "$n" candidate.cu verify seed.verify && judge "$n" seed.verify correct
    # one config is enough to catch a check (the program's own sizes)
    run "$n" checks/do_nothing.cu verify do_nothing --configs program && judge "$n" do_nothing incorrect
    run "$n" checks/skip_comm.cu verify skip_comm --configs program && judge "$n" skip_comm incorrect
done
for n in $MADE; do
    stamp "$n: seed benchmark"
    run "$n" candidate.cu benchmark seed.bench && judge "$n" seed.bench speedup
done
echo "{}]" >> "$OUT/results.json"
stamp "done"
echo "---- summary"
cat "$SUMMARY"
grep -qE '^(FAIL|SKIP)' "$SUMMARY" && exit 1
exit 0
