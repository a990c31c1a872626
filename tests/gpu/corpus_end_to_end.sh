#!/usr/bin/env bash
# CUCo's MoE seed and the scheduler-launched ring all-reduce, end to end, in one device call on a 2-GPU
# machine (nvidia-h100-x2 or nvidia-h200-x2; OpenMPI, nvcc and NCCL's wheel are in its image), from the
# repository root, carrying .whl/ (tests/gpu/fetch_wheels.sh, plus tree-sitter and tree-sitter-cuda in
# .whl/onboard) and .gpu-tree-corpus/ (a copy of the corpus: cp -r ../shared/corpus .gpu-tree-corpus):
#   bash tests/gpu/corpus_end_to_end.sh
# For each program, in turn (the two searches would share the GPUs otherwise):
# 1. cuco init on the unmodified source (the flags tests/onboard/corpus.py's INIT_FLAGS gives: none), which
#    attaches the schedule rewrites whose preconditions hold on the program and on the workload's candidate;
# 2. cuco run --ranks 2 with the design-space mutator and no LLM (the SDKs are made unimportable: a run
#    that imported one fails here as it would on a machine without them), at most 30 evaluations and
#    SEARCH_MIN minutes; the best speedup from cuco report --json;
# 3. cuco export --patch of the best candidate; where the best is the seed, or no rewrite is searched in the
#    harness, the rewrites offered on the program (workload.yaml's program.rewrites) are applied with
#    cuco rewrite --apply instead, and the log says so;
# 4. the patch applied with patch -p1 to a copy of the original folder, built as its author builds it (an
#    nvcc line with MPI's compiler driver for the MoE seed; plain nvcc for the ring) and run once at 2 ranks
#    (mpirun; the ring's SLURM_PROCID / SLURM_NTASKS from OpenMPI's rank variables), beside the unpatched
#    program built and run the same way.
# Budget (one device call, at most 9 minutes): each search SEARCH_MIN (default 2) minutes plus 45 s to stop,
# init, four builds and four runs about 1.5 minutes.
# Output under $OUT: NAME.init.log, NAME.run.log, NAME.report.json, NAME.patch, NAME.{orig,patched}.{build,run}.log,
# summary.md.
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD; OUT=${OUT:-/tmp/corpus-e2e}; CORPUS=$(realpath "${CORPUS:-.gpu-tree-corpus}")
SEARCH_MIN=${SEARCH_MIN:-2}; ONLY=${ONLY:-moe ring}
mkdir -p "$OUT" .gpu-homes; W=$(mktemp -d "$PWD/.gpu-homes/corpus-e2e-XXXX")   # not under /tmp: a job's /tmp is its own
stamp() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }
[ -d "$CORPUS/cuco_moe_seed" ] || { echo "no corpus at $CORPUS (copy ../shared/corpus there)"; exit 2; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
nvidia-smi -L 2>/dev/null | tee "$OUT/machine.txt"
if [ -d .whl ]; then . tests/gpu/node_setup.sh; else export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}; fi
# The engine without the LLM SDKs: importing either fails, as on a machine where they are not installed.
cuco() { python3 -c 'import sys
for m in ("anthropic", "openai"): sys.modules[m] = None
from cuco_tui.cli import main
sys.exit(main(sys.argv[1:]))' "$@"; }
N=${NCCL_HOME:-$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")}
export NCCL_HOME=$N LD_LIBRARY_PATH="$N/lib:${LD_LIBRARY_PATH:-}"
CUDA=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
M=(mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
   -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x LD_LIBRARY_PATH -x CUDA_DEVICE_ORDER)
NVCC=(nvcc -std=c++17 -arch=sm_90 -O3 -I"$N/include" -L"$N/lib" -l:libnccl.so.2 -Xlinker -rpath,"$N/lib")
echo "| program | rewrites searched | evaluated | best | speedup | patch from | patched build | patched run at 2 ranks | own timing, original | own timing, patched |" > "$OUT/summary.md"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |" >> "$OUT/summary.md"

build() {   # build NAME DIR: the program's own build line
  case $1 in
    moe)  (cd "$2" && "${NVCC[@]}" -ccbin mpicxx ds_v3_moe.cu -o prog) ;;
    ring) (cd "$2" && "${NVCC[@]}" ring_allreduce.cu -o prog) ;;
  esac
}
own_timing() {   # own_timing NAME LOG: what the program prints about its own time (rank 0's)
  case $1 in
    moe)  grep -m1 -E '^Time: ' "$2" | sed 's/^Time: //' ;;
    ring) awk '$1 == 16777216 { print $2 " GB/s bus bandwidth at 16 MiB" }' "$2" | head -1 ;;
  esac
}
run_once() {   # run_once NAME DIR: one run at 2 ranks, as the program expects to be launched
  case $1 in
    moe)  (cd "$2" && timeout 120 "${M[@]}" ./prog) ;;
    ring) (cd "$2" && rm -f nccl_unique_id.bin && timeout 180 "${M[@]}" sh -c \
             'SLURM_PROCID=$OMPI_COMM_WORLD_RANK SLURM_NTASKS=$OMPI_COMM_WORLD_SIZE exec ./prog') ;;
  esac
}

for name in $ONLY; do
  case $name in
    moe)  dir=cuco_moe_seed; files=(ds_v3_moe.cu) ;;
    ring) dir=async_ring_allreduce_single; files=(ring_allreduce.cu) ;;
    *) echo "unknown program $name (moe, ring)"; continue ;;
  esac
  cp -r "$CORPUS/$dir" "$W/$name.user"; chmod -R u+w "$W/$name.user"
  stamp "$name: cuco init ${files[*]} --ranks 2"
  (cd "$W/$name.user" && cuco init "${files[@]}" --ranks 2 -I"$CUDA/include" -I"$N/include" -o "$W/$name.workload") \
      > "$OUT/$name.init.log" 2>&1
  grep -E "rewrite|^wrote|cuco:" "$OUT/$name.init.log" | tee -a "$OUT/steps.log"
  [ -f "$W/$name.workload/workload.yaml" ] || { stamp "$name: init wrote no workload"; continue; }
  searched=$(python3 -c 'import sys, yaml
s = yaml.safe_load(open(sys.argv[1]))
print(" ".join(v for v in s.get("design_space", {}).get("dimensions", {}).get("rewrites", {}).get("values", []) if v != "none") or "-")' \
      "$W/$name.workload/workload.yaml")
  stamp "$name: rewrite points searched in the harness: $searched"
  stamp "$name: cuco run --ranks 2 (design-space mutator, no LLM, at most 30 evaluations, $SEARCH_MIN min)"
  timeout -s TERM -k 20 "$(python3 -c "print(int($SEARCH_MIN * 60 + 45))")" \
      bash -c "$(declare -f cuco); cuco run '$W/$name.workload' --headless --ranks 2 --max-evals 30 \
               --max-minutes $SEARCH_MIN --name $name --home '$W/home'" > "$OUT/$name.run.log" 2>&1
  echo "  run exit $?"; tail -n 8 "$OUT/$name.run.log"
  grep -il "No module named 'anthropic'\|No module named 'openai'\|import of anthropic\|import of openai" \
      "$OUT/$name.run.log" && stamp "$name: the run imported an LLM SDK"
  cuco report "$name" --json --home "$W/home" > "$OUT/$name.report.json" 2>>"$OUT/$name.run.log"
  read -r evaluated best speedup < <(python3 -c 'import json, sys
try: r = json.load(open(sys.argv[1]))
except Exception: print("- - -"); sys.exit()
b = r.get("best") or {}
print(r.get("evaluated", "-"), b.get("candidate", "-"), "%.3f" % b["speedup"] if b.get("speedup") else "-")' "$OUT/$name.report.json")
  stamp "$name: evaluated $evaluated, best candidate $best, speedup $speedup"
  from="export"
  if ! cuco export "$name" --patch --home "$W/home" -o "$OUT/$name.patch" > "$OUT/$name.export.log" 2>&1; then
    stamp "$name: no patch from the search: $(grep cuco: "$OUT/$name.export.log" | tail -1)"
    offered=$(python3 -c 'import sys, yaml
print(",".join(yaml.safe_load(open(sys.argv[1])).get("program", {}).get("rewrites", [])))' "$W/$name.workload/workload.yaml")
    if [ -n "$offered" ]; then
      from="rewrite --apply $offered"
      stamp "$name: cuco rewrite --apply $offered on the program instead"
      (cd "$W/$name.user" && cuco rewrite "${files[@]}" --apply "$offered" -I"$CUDA/include" -I"$N/include" \
          -o "$OUT/$name.patch") >> "$OUT/$name.export.log" 2>&1 || from="none"
    else
      from="none"
    fi
  fi
  cat "$OUT/$name.export.log"
  to="-"; tp="-"
  for variant in orig patched; do
    d="$W/$name.$variant"; cp -r "$CORPUS/$dir" "$d"; chmod -R u+w "$d"; rm -f "$d/nccl_unique_id.bin"
    if [ $variant = patched ]; then
      [ "$from" != none ] && [ -s "$OUT/$name.patch" ] || { echo "$name: no patch to apply"; pb="-"; pr="-"; tp="-"; continue; }
      (cd "$d" && patch -p1 < "$OUT/$name.patch") | tee -a "$OUT/steps.log" || { pb="patch failed"; pr="-"; tp="-"; continue; }
    fi
    if build $name "$d" > "$OUT/$name.$variant.build.log" 2>&1; then b=built; else b="build failed"; tail -5 "$OUT/$name.$variant.build.log"; fi
    stamp "$name ($variant): $b"
    r="-"; t="-"
    if [ "$b" = built ]; then
      run_once $name "$d" > "$OUT/$name.$variant.run.log" 2>&1; rc=$?
      r="exit $rc"; tail -n 12 "$OUT/$name.$variant.run.log"
      t=$(own_timing $name "$OUT/$name.$variant.run.log"); t=${t:--}
      stamp "$name ($variant): run at 2 ranks, exit $rc, its own timing: $t"
    fi
    if [ $variant = patched ]; then pb=$b; pr=$r; tp=$t; else to=$t; fi
  done
  echo "| $name | $searched | $evaluated | $best | $speedup | $from | $pb | $pr | $to | ${tp:--} |" >> "$OUT/summary.md"
done
cat "$OUT/summary.md"; stamp "done"
