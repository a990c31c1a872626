#!/usr/bin/env bash
# On ONE GPU (device kind nvidia-h200), from the repository root, carrying .whl/ (tests/gpu/fetch_wheels.sh):
#   bash tests/gpu/integrity_one_gpu.sh
# in about 4 minutes:
#   1. the helper-thread and the entry-point candidates (tests/gpu/bad_candidates/) through
#      `cuco run gemm_allgather --headless --ranks 1` (tests/gpu/integrity_one_gpu.py): each must end refused
#      or incorrect with its reason, and no node user's file nor key in the store or a prompt;
#   2. the wall time per GPU job of gemm_allgather's seed at 1 rank (run_local.py, the engine's build and
#      launch) with this tree's harness and with the harness of BEFORE (the commit the defences were built on),
#      2 of each, alternating, built side by side while (1) runs (run_local.py finds the engine on PYTHONPATH);
#   3. the demo's jobs the same way (tests/gpu/defence_cost.py, on the CPU of the GPU node).
# Output under $OUT: integrity.json, run.log, home/ (the run's store), gpu_jobs.json, demo_jobs.json, log.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuco-gpu-out}
BEFORE=${BEFORE:-3174119}
mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
nvidia-smi -L
. tests/gpu/node_setup.sh
T0=$SECONDS
stamp() { echo "[$((SECONDS - T0)) s] $*"; }

# the two harnesses' binaries of the seed, built while the search runs (run_local.py caches per content)
BUILD=/tmp/cuco-integrity-build
OLD=/tmp/cuco-integrity-before
have_before=0
if git rev-parse -q --verify "$BEFORE^{commit}" >/dev/null 2>&1; then
    rm -rf "$OLD"; mkdir -p "$OLD/workloads"
    cp -r workloads/gemm_allgather "$OLD/workloads/"
    git archive "$BEFORE" workloads/_harness | tar -x -C "$OLD"
    cp workloads/_harness/cuda/run_local.py "$OLD/workloads/_harness/cuda/run_local.py"   # the same launcher
    have_before=1
elif [ -d .whl/before/workloads/_harness ]; then  # carried: `git archive BEFORE workloads/_harness | tar -x -C .whl/before`
    rm -rf "$OLD"; mkdir -p "$OLD/workloads"
    cp -r workloads/gemm_allgather "$OLD/workloads/"
    cp -r .whl/before/workloads/_harness "$OLD/workloads/"
    cp workloads/_harness/cuda/run_local.py "$OLD/workloads/_harness/cuda/run_local.py"
    have_before=1
else
    echo "no commit $BEFORE here (no git history) and no .whl/before: the 'before' side is skipped"
fi
seedrun() {  # $1: repository root to run from, $2: label; prints the job's wall seconds
    python3 "$1/workloads/_harness/cuda/run_local.py" "$1/workloads/gemm_allgather" --mode benchmark --ranks 1 \
        --configs hidden_odd,hidden_tall --build-dir "$BUILD-$2" "${@:3}"
}
stamp "building the seed with both harnesses"
builds=()
(seedrun "$PWD" after --build-only > "$OUT/build-after.log" 2>&1) & builds+=($!)
if [ $have_before = 1 ]; then (seedrun "$OLD" before --build-only > "$OUT/build-before.log" 2>&1) & builds+=($!); fi
# gemm_allgather's bench configs are all of 2 or more ranks: a copy with one 1-rank bench config for `cuco run --ranks 1`
rm -rf workloads/ga_r1 && cp -r workloads/gemm_allgather workloads/ga_r1
sed -i 's/^  - {name: small_m1k, .*$/&\n  - {name: r1_m4k, public: true, bench: true, params: {M: 4096, N: 4096, K: 4096, ranks: 1}}/' workloads/ga_r1/workload.yaml
grep -n r1_m4k workloads/ga_r1/workload.yaml

stamp "cuco run gemm_allgather --ranks 1 with the two bad candidates"
WORKLOAD=ga_r1 timeout -k 10 180 python3 tests/gpu/integrity_one_gpu.py; echo "integrity: exit $?"
wait "${builds[@]}"   # not a bare wait: it would also wait for the tee of this script's own output
stamp "built: $(tail -qn 1 "$OUT"/build-*.log | tr '\n' ' ')"

# demo's jobs on the CPU, while the GPU jobs are timed (a different resource; 2 pairs)
(timeout 150 python3 tests/gpu/defence_cost.py demo --before "$BEFORE" --pairs 2 --out "$OUT/demo_jobs.json" \
    > "$OUT/demo_jobs.log" 2>&1; echo "demo: exit $?" >> "$OUT/demo_jobs.log") & demo=$!

stamp "the seed's GPU jobs, after / before, alternating"
python3 - "$have_before" "$OLD" "$BUILD" "$OUT/gpu_jobs.json" <<'EOF'
import json, statistics, subprocess, sys, time
have_before, old, build, out = sys.argv[1] == "1", sys.argv[2], sys.argv[3], sys.argv[4]
sides = {"after": "."} | ({"before": old} if have_before else {})
jobs = {s: [] for s in sides}
for i in range(2):
    for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
        root = sides[side]
        t = time.monotonic()
        r = subprocess.run([sys.executable, f"{root}/workloads/_harness/cuda/run_local.py", f"{root}/workloads/gemm_allgather",
                            "--mode", "benchmark", "--ranks", "1", "--configs", "hidden_odd,hidden_tall",
                            "--build-dir", f"{build}-{side}"], capture_output=True, text=True, timeout=120)
        wall = time.monotonic() - t
        ok = r.returncode == 0
        jobs[side].append({"wall_s": round(wall, 2), "correct": ok})
        print(side, i, f"{wall:.2f} s", "correct" if ok else r.stdout[-300:] + r.stderr[-300:], flush=True)
report = {"jobs": jobs, "median_wall_s": {s: statistics.median(j["wall_s"] for j in v) for s, v in jobs.items()}}
open(out, "w").write(json.dumps(report, indent=1))
print(json.dumps(report["median_wall_s"]))
EOF
wait "$demo"
stamp "demo: $(tail -n 30 "$OUT/demo_jobs.log" | tr -s ' \n' ' ' | tail -c 600)"
stamp "done"
