#!/usr/bin/env bash
# The harness's host collectives (cuco_abi.h: cuco_host_allreduce, ...) on ONE GPU node, and NVIDIA's Jacobi
# made a workload by `cuco init --ranks 1` with them in place of the NCCL stand-in its norm all-reduce was:
#   1. `--self-test-host-comm R` of the Jacobi workload's own harness binary at 1, 2 and 4 rank processes (the
#      host collectives need no GPU, so more processes than GPUs): every collective's result on every rank,
#      a late rank's timeout, and the cost of one call (an all-reduce of two doubles, a broadcast of one) in
#      microseconds;
#   2. the init-made workload (its Makefile's flags) calls cuco_host_allreduce, not an NCCL all-reduce;
#   3. its seed verifies on every config and measures 1.00x against its frozen baseline within the spread at
#      nx = ny = 4096, 8192 and 16384, one rank; the baseline's ms per iteration beside NVIDIA's own `nccl`
#      binary at one rank (mpirun -np 1, its -csv timer over NITER iterations), where mpirun is installed.
# From the repository root on a device machine of one GPU (nvidia-h200), carrying .whl/ and the corpus
# (.gpu-tree-corpus, as for tests/gpu/corpus_one_rank.sh):
#   CORPUS=$PWD/.gpu-tree-corpus OUT=$OUT timeout 280 bash tests/gpu/host_comm_one_gpu.sh
# Output: $OUT/log, $OUT/summary.txt (PASS/FAIL/SKIP per claim), $OUT/host_comm.txt (the self-tests),
# $OUT/jacobi.md (the table for docs/bring-your-own-program.md), $OUT/*.json (result.json of each run).
# Exit 0 only when every claim holds. Budget: under 4 minutes on one H200 with 16 cores.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/cuco-host-comm}
mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
stamp() { echo "== $(date -u +%H:%M:%S) (${SECONDS}s) $*" | tee -a "$SUMMARY"; }
claim() { echo "$1 $2" | tee -a "$SUMMARY"; }
SIZES=${SIZES:-4096 8192 16384}; NITER=${NITER:-1000}

CORPUS=${CORPUS:-$ROOT/../shared/corpus}
[ -d "$CORPUS" ] || CORPUS=$ROOT/shared/corpus
[ -d "$CORPUS" ] || CORPUS=$ROOT/.gpu-tree-corpus
[ -d "$CORPUS" ] || { echo "no corpus: pass CORPUS=DIR"; exit 3; }
if [ -d .whl ]; then
    stamp "install wheels"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        $(ls .whl/*.whl | grep -v '/pytest-[0-9]') .whl/onboard/tree_sitter*.whl || exit 3
    export PYTHONPATH=/tmp/site:$ROOT
else
    export PYTHONPATH=$ROOT
fi
python3 -c 'import tree_sitter_cuda, yaml, rich, nvidia.nccl; print("python ok")' || exit 3
NCCL=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')
export LD_LIBRARY_PATH=$NCCL/lib:${LD_LIBRARY_PATH:-}
nvidia-smi -L
git log -1 --format='commit %h %s' 2>/dev/null

W=/tmp/host-comm-ws
rm -rf "$W" && mkdir -p "$W"
export CUCO_BUILD_DIR=$W/build

stamp "cuco init nvidia_jacobi_nccl --ranks 1 (its Makefile's flags)"
(cd "$CORPUS/nvidia_jacobi_nccl" && python3 -m cuco_tui.cli init jacobi.cpp jacobi_kernels.cu --makefile Makefile \
    --ranks 1 -o "$W/jacobi") > "$W/init.log" 2>&1 || { claim FAIL "init refused: $(tail -2 "$W/init.log")"; exit 1; }
grep -E 'MPI_Allreduce' "$W/init.log"
if grep -q 'cuco_host_allreduce(l2_norm_h, &l2_norm, 1, MPI_REAL_TYPE, MPI_SUM, cuco_c->host_comm)' "$W/jacobi/candidate.cu" \
    && ! grep -q 'ncclAllReduce' "$W/jacobi/candidate.cu"; then
    claim PASS "the workload's norm all-reduce is the harness's host collective (no NCCL stand-in)"
else
    claim FAIL "the workload's candidate does not call cuco_host_allreduce for the norm"
fi
python3 - "$W/jacobi/workload.yaml" "$SIZES" <<'PY'
import sys, yaml
path, sizes = sys.argv[1], sys.argv[2].split()
spec = yaml.safe_load(open(path))
base = spec["configs"][0]
params = base.get("params", {})
spec["configs"] = [dict(base, name=f"n{n}", params=dict(params, nx=int(n), ny=int(n)), public=True, bench=True)
                   for n in sizes]
open(path, "w").write(yaml.safe_dump(spec, sort_keys=False, width=120))
print("configs: nx = ny =", " ".join(sizes))
PY

stamp "build the seed (and NVIDIA's nccl where mpirun is installed) in parallel"
timeout 200 python3 workloads/_harness/cuda/run_local.py "$W/jacobi" --ranks 1 --build-only > "$W/build.log" 2>&1 &
BUILD=$!
HAVE_MPI=""
if command -v mpirun >/dev/null && command -v mpicxx >/dev/null; then
    . tests/gpu/jacobi_common.sh
    jacobi_nccl_home "$W" "$NCCL"
    cp -r "$CORPUS/nvidia_jacobi_nccl" "$W/nccl_as_is"
    jacobi_build "$W/nccl_as_is" "$W/nccl"
    HAVE_MPI=1
else
    claim SKIP "NVIDIA's nccl at one rank: no mpirun/mpicxx on this node"
fi
wait $BUILD || { claim FAIL "the seed did not build: $(grep -iE 'error' "$W/build.log" | head -3)"; }
BIN=$(find "$CUCO_BUILD_DIR" -type f -name bench | head -1)

stamp "host collectives: --self-test-host-comm 1, 2, 4"
: > "$OUT/host_comm.txt"
if [ -n "$BIN" ]; then
    for r in 1 2 4; do
        if timeout 60 "$BIN" --self-test-host-comm "$r" >> "$OUT/host_comm.txt" 2>&1; then
            claim PASS "host collectives at $r rank process(es): $(grep "ranks=$r allreduce_us" "$OUT/host_comm.txt")"
        else
            claim FAIL "host collectives at $r rank process(es): $(tail -3 "$OUT/host_comm.txt" | tr '\n' ' ')"
        fi
    done
    # the cost spread: 5 more runs of two processes
    for i in 1 2 3 4 5; do timeout 60 "$BIN" --self-test-host-comm 2 | grep allreduce_us >> "$OUT/host_comm.txt"; done
    cat "$OUT/host_comm.txt"
fi

stamp "the seed: verify on every config, then benchmark"
timeout 90 python3 workloads/_harness/cuda/run_local.py "$W/jacobi" --ranks 1 --mode verify --timeout 70 \
    --result "$OUT/seed.verify.json" > "$W/verify.log" 2>&1
timeout 150 python3 workloads/_harness/cuda/run_local.py "$W/jacobi" --ranks 1 --mode benchmark --timeout 130 \
    --result "$OUT/seed.benchmark.json" > "$W/benchmark.log" 2>&1

NVIDIA=$OUT/nvidia_nccl_one_rank.csv
echo "nx,seconds" > "$NVIDIA"
if [ -n "$HAVE_MPI" ]; then
    wait
    stamp "NVIDIA's nccl at one rank, $NITER iterations per size"
    if [ -x "$W/nccl_as_is/jacobi" ]; then
        for n in $SIZES; do
            s=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
                -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x LD_LIBRARY_PATH "$W/nccl_as_is/jacobi" -csv -niter "$NITER" \
                -nx "$n" -ny "$n" 2>>"$W/nccl.err" | grep -E '^[a-z_]+, ' | tail -1 | cut -d, -f8 | tr -d ' ')
            echo "$n,$s" >> "$NVIDIA"
        done
    else
        claim SKIP "NVIDIA's nccl did not build: $(tail -2 "$W/nccl_as_is.build.log" | tr '\n' ' ')"
    fi
fi

python3 - "$OUT" "$NITER" "$SUMMARY" <<'PY'
import csv, json, os, sys
out, niter, summary = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = []
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        return {"error": f"no result: {e}"}
v, b = load("seed.verify.json"), load("seed.benchmark.json")
names = ", ".join(c["name"] for c in v.get("configs", []))
lines.append(f"{'PASS' if v.get('correct') is True else 'FAIL'} the seed verifies on every config ({names}): error={v.get('error')}")
nvidia = {}
for r in csv.DictReader(open(os.path.join(out, "nvidia_nccl_one_rank.csv"))):
    if r["seconds"]:
        nvidia[int(r["nx"])] = float(r["seconds"]) * 1000 / niter
rows = ["| nx = ny | harness baseline ms/iter (IQR) | seed ms/iter | seed speedup (95 % interval) | NVIDIA nccl ms/iter, 1 rank | harness / NVIDIA |",
        "| --- | --- | --- | --- | --- | --- |"]
for c in b.get("configs", []):
    if not c.get("speedup"):
        lines.append(f"FAIL {c['name']}: not timed: {c.get('error')}")
        continue
    spread = sum((c.get(f"{s}_spread") or 0) / c[f"{s}_ms"] for s in ("baseline", "candidate"))
    lo, hi = c.get("speedup_interval") or [None, None]
    ok = c["correct"] and abs(c["speedup"] - 1) <= max(0.03, spread)
    lines.append(f"{'PASS' if ok else 'FAIL'} {c['name']}: seed {c['speedup']:.3f}x [{lo}, {hi}] "
                 f"(baseline {c['baseline_ms']:.4f} ms, seed {c['candidate_ms']:.4f} ms)")
    n = int(c["name"].lstrip("n"))
    nv = nvidia.get(n)
    mine, theirs = (f"{nv:.4f}", f"{c['baseline_ms'] / nv:.3f}") if nv else ("-", "-")
    rows.append(f"| {n} | {c['baseline_ms']:.4f} ({c.get('baseline_spread') or 0:.4f}) | {c['candidate_ms']:.4f} | "
                f"{c['speedup']:.3f} [{lo}, {hi}] | {mine} | {theirs} |")
if not b.get("configs"):
    lines.append(f"FAIL the seed's benchmark: {b.get('error')}")
open(os.path.join(out, "jacobi.md"), "w").write("\n".join(rows) + "\n")
with open(summary, "a") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines)); print("\n".join(rows))
PY
stamp "done"
echo "---- summary"
cat "$SUMMARY"
grep -qE '^FAIL' "$SUMMARY" && exit 1
exit 0
