#!/usr/bin/env bash
# NVIDIA's Jacobi made faster end to end, in one device call on a 2-GPU machine (nvidia-h100-x2 or
# nvidia-h200-x2; OpenMPI, nvcc and NCCL's wheel are in its image), from the repository root, carrying
# .whl/ (tests/gpu/fetch_wheels.sh, plus tree-sitter==0.25.2 and tree-sitter-cuda==0.21.2 in .whl/onboard)
# and .gpu-tree-corpus/ (a copy of the corpus: cp -r ../shared/corpus .gpu-tree-corpus; git-ignored):
#   bash tests/gpu/jacobi_end_to_end.sh
# 1. cuco init on the unmodified jacobi.cpp + jacobi_kernels.cu with its Makefile's flags; configs at
#    nx = ny = 4096, 8192, 16384 where the workload has those parameters;
# 2. cuco run --ranks 2 with the design-space mutator, no LLM, at most 30 evaluations (and SEARCH_MIN
#    minutes), then cuco export --patch of the best candidate;
# 3. if the harness search gives no patch (its log says why), the same rewrites are searched on the
#    program itself: each point of tests/gpu/jacobi_prepare.py, patched, built by the Makefile, timed once
#    per size by its own -csv line;
# 4. the patch applied with patch -p1 to a copy of NVIDIA's nccl/ folder, built by its own Makefile,
#    checked by its own comparison with a single-GPU run and timed by its -csv output beside NVIDIA's
#    nccl, nccl_overlap and nccl_graphs, three runs each (the corpus's run_nvidia_jacobi.sh).
# Output under $OUT: init.log, run.log, report.json, best.patch, search.csv (step 3), final.csv, table.md.
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD; OUT=${OUT:-/tmp/jacobi-e2e}; CORPUS=$(realpath "${CORPUS:-.gpu-tree-corpus}")
SIZES=${SIZES:-4096 8192 16384}; NITER=${NITER:-1000}; SEARCH_MIN=${SEARCH_MIN:-2}; MAX_EVALS=${MAX_EVALS:-30}
# SEED_ONLY=1: step 1 and the seed's evaluation only (MAX_EVALS=1), with its profiled call's timeline, then stop
# Budget (one device call, 10 min at most): the harness search ~3 min, the fallback search ~2.5 min, the
# final timing ~3 min. SKIP_HARNESS=1 goes straight to the search on the program.
mkdir -p "$OUT"; mkdir -p .gpu-homes; W=$(mktemp -d "$PWD/.gpu-homes/jacobi-e2e-XXXX")   # not under /tmp: a job's /tmp is its own
stamp() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }
[ -d "$CORPUS/nvidia_jacobi_nccl" ] || { echo "no corpus at $CORPUS (copy ../shared/corpus there)"; exit 2; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
nvidia-smi -L | tee "$OUT/machine.txt"
. tests/gpu/node_setup.sh
. tests/gpu/jacobi_common.sh
cuco() { python3 -m cuco_tui.cli "$@"; }
N=${NCCL_HOME:-$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")}
export NCCL_HOME=$N
# lsa_sendrecv puts its kernel in jacobi_kernels.cu, which then includes NCCL's headers; the Makefile gives
# their path to mpicxx only (nvcc finds them where NCCL_HOME is its default /usr): CPATH gives it to nvcc
export CPATH="$N/include${CPATH:+:$CPATH}"
CUDA=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}

# 1-2: the search in the harness
cp -r "$CORPUS/nvidia_jacobi_nccl" "$W/user"
stamp "cuco init (the Makefile's flags, NVTX left out for the workload: docs/bring-your-own-program.md)"
(cd "$W/user" && cuco init jacobi.cpp jacobi_kernels.cu --ranks 2 -UUSE_NVTX -DHAVE_CUB -I"$CUDA/include" \
    -I"$N/include" -o "$W/workload") > "$OUT/init.log" 2>&1 && tail -n 8 "$OUT/init.log"
PATCH=""
if [ -f "$W/workload/workload.yaml" ] && [ -z "${SKIP_HARNESS:-}" ]; then
  python3 - "$W/workload/workload.yaml" "$SIZES" <<'PY' | tee -a "$OUT/steps.log"
import sys, yaml
path, sizes = sys.argv[1], sys.argv[2].split()
spec = yaml.safe_load(open(path))
params = spec["configs"][0].get("params", {})
if {"nx", "ny"} <= set(params):
    base = spec["configs"][0]
    spec["configs"] = [dict(base, name=f"n{n}", params=dict(params, nx=int(n), ny=int(n)), public=True, bench=True)
                       for n in sizes]
    open(path, "w").write(yaml.safe_dump(spec, sort_keys=False, width=120))
    print("configs: nx = ny =", " ".join(sizes))
else:
    print(f"the workload has no nx/ny parameters ({sorted(params)}): its own config only")
PY
  stamp "cuco run --ranks 2 (design-space mutator, no LLM, at most $MAX_EVALS evaluations, $SEARCH_MIN min)"
  timeout -s TERM -k 20 $(( SEARCH_MIN * 60 + 45 )) python3 -m cuco_tui.cli run "$W/workload" --headless \
      --ranks 2 --max-evals "$MAX_EVALS" --max-minutes "$SEARCH_MIN" --name jac --home "$W/home" > "$OUT/run.log" 2>&1
  tail -n 15 "$OUT/run.log"
  cuco report jac --json --home "$W/home" > "$OUT/report.json" 2>>"$OUT/run.log"
  if [ -n "${SEED_ONLY:-}" ]; then   # the seed is the run's first candidate
    cuco report 1 --timeline --home "$W/home" > "$OUT/seed_timeline.txt" 2>&1
    cuco report 1 --timeline --json --home "$W/home" > "$OUT/seed_timeline.json" 2>>"$OUT/run.log"
    stamp "seed evaluated, its timeline in seed_timeline.txt"; exit 0
  fi
  if cuco export jac --patch --home "$W/home" -o "$OUT/best.patch" 2>>"$OUT/run.log"; then
    PATCH="$OUT/best.patch"; stamp "best candidate exported as a patch"
  else
    stamp "no patch from the harness search: $(tail -n 1 "$OUT/run.log")"
  fi
fi

# 3: the same rewrites searched on the program itself
if [ -z "$PATCH" ]; then
  stamp "searching the rewrites on the program itself"
  python3 tests/gpu/jacobi_prepare.py "$CORPUS" "$W/points" | tee -a "$OUT/steps.log"
  cp "$W/points/points.json" "$OUT/" 2>/dev/null
  jacobi_nccl_home "$W" "$N"
  points=()
  for p in "$W"/points/p*.patch; do
    name=$(basename "$p" .patch); points+=("$name")
    cp -r "$CORPUS/nvidia_jacobi_nccl" "$W/$name"
    (cd "$W/$name" && patch -p1 -s < "$p") || { echo "$name: the patch does not apply"; continue; }
    jacobi_build "$W/$name" "$W/nccl"
  done
  wait
  echo "point,nx,seconds" > "$OUT/search.csv"
  for name in "${points[@]}"; do
    [ -x "$W/$name/jacobi" ] || continue
    for n in $SIZES; do
      seconds=$(jacobi_seconds "$W/$name" "$n" "$NITER")
      if [ -n "$seconds" ]; then echo "$name,$n,$seconds" >> "$OUT/search.csv"
      else echo "$name,$n,failed" >> "$OUT/search.csv"; echo "$name at $n: no result line: $(tail -2 "$W/$name.err" | tr '\n' ' ')"; fi
    done
  done
  best=$(python3 - "$OUT/search.csv" "$SIZES" <<'PY'
import csv, sys
sizes = sys.argv[2].split(); tot = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["seconds"] != "failed": tot.setdefault(r["point"], {})[r["nx"]] = float(r["seconds"])
ok = {p: sum(v.values()) for p, v in tot.items() if len(v) == len(sizes)}
print(min(ok, key=ok.get) if ok else "")
PY
)
  [ -n "$best" ] || { stamp "no design point built and passed its own check"; exit 1; }
  stamp "best point on the program: $best"; cp "$W/points/$best.patch" "$OUT/best.patch"; PATCH="$OUT/best.patch"
fi

# 4: NVIDIA's folder, patched, beside NVIDIA's three versions
rm -rf "$W/final"; mkdir -p "$W/final"; cp -r "$CORPUS/nvidia_jacobi_nccl" "$W/final/cuco_patched"
(cd "$W/final/cuco_patched" && patch -p1 < "$PATCH") | tee -a "$OUT/steps.log"
stamp "timing nccl, nccl_overlap, nccl_graphs and the patched copy, three runs per size"
SIZES="$SIZES" NITER="$NITER" bash "$CORPUS/run_nvidia_jacobi.sh" "$W/final/cuco_patched" | tee "$OUT/final.csv"
python3 - "$OUT/final.csv" "$OUT/report.json" "$NITER" > "$OUT/table.md" <<'PY'
import json, os, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    if len(f) >= 8 and f[1].isdigit():
        rows.setdefault(int(f[1]), {}).setdefault(f[0], []).append(float(f[7]))
labels = ["nvidia_jacobi_nccl", "nvidia_jacobi_nccl_overlap", "nvidia_jacobi_nccl_graphs", "cuco_patched"]
print("| nx = ny | nccl | nccl_overlap | nccl_graphs | cuco patched |\n| --- | --- | --- | --- | --- |")
for n in sorted(rows, reverse=True):
    cells = [f"{min(rows[n][l]):.3f}-{max(rows[n][l]):.3f}" if l in rows[n] else "-" for l in labels]
    print(f"| {n} | " + " | ".join(cells) + " |")
# the harness's baseline per call (one iteration) against NVIDIA's nccl per iteration (-csv seconds / -niter)
best = json.load(open(sys.argv[2])).get("best") if os.path.exists(sys.argv[2]) else None
if best and best.get("configs"):
    print("\n| nx = ny | harness baseline ms per iteration | NVIDIA nccl ms per iteration (median of 3) | ratio |")
    print("| --- | --- | --- | --- |")
    for c in best["configs"]:
        n = int(c["name"].lstrip("n")) if c["name"].lstrip("n").isdigit() else None
        runs = rows.get(n, {}).get("nvidia_jacobi_nccl")
        if n and runs and c.get("baseline_ms"):
            ref = statistics.median(runs) * 1000 / int(sys.argv[3])
            print(f"| {n} | {c['baseline_ms']:.4f} | {ref:.4f} | {c['baseline_ms'] / ref:.3f} |")
PY
cat "$OUT/table.md"; stamp "done"
