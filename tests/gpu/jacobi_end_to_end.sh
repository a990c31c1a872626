#!/bin/bash
# NVIDIA's Jacobi made faster end to end, on a 2-GPU machine with OpenMPI and nvcc, in one call (~8 min):
# every design point that tests/gpu/jacobi_prepare.py wrote (the schedule rewrites cuco offers for the
# unmodified nvidia_jacobi_nccl/, as patches) is applied to a copy of NVIDIA's nccl/ folder with patch -p1,
# built by its own Makefile and timed by its own -csv line (printed only when its own check against a
# single-GPU run passes), once per size; the best point by total time is then timed three runs per size
# beside NVIDIA's nccl, nccl_overlap and nccl_graphs by the corpus's run_nvidia_jacobi.sh. Writes
# $OUT/search.csv, $OUT/final.csv, $OUT/table.md, $OUT/best.patch and the points' notes.
#
#   CORPUS=.gpu-tree-corpus PATCHES=.gpu-tree-corpus/patches bash tests/gpu/jacobi_end_to_end.sh
set -u
CORPUS=${CORPUS:-.gpu-tree-corpus}; PATCHES=${PATCHES:-$CORPUS/patches}; OUT=${OUT:-/tmp/jacobi-e2e}
SIZES=${SIZES:-4096 8192 16384}; NITER=${NITER:-1000}
mkdir -p "$OUT"; W=$(mktemp -d /tmp/jacobi-search-XXXX)
[ -f "$PATCHES/points.json" ] || { echo "no $PATCHES/points.json: run tests/gpu/jacobi_prepare.py first"; exit 2; }
cp "$PATCHES/points.json" "$OUT/"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
N=${NCCL_HOME:-$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")}
mkdir -p "$W/nccl/lib"; ln -sfn "$N/include" "$W/nccl/include"; ln -sf "$N/lib/libnccl.so.2" "$W/nccl/lib/libnccl.so"
export LD_LIBRARY_PATH="$W/nccl/lib:$N/lib:${LD_LIBRARY_PATH:-}"
points=()
for p in "$PATCHES"/p*.patch; do
  name=$(basename "$p" .patch); points+=("$name")
  cp -r "$CORPUS/nvidia_jacobi_nccl" "$W/$name"
  (cd "$W/$name" && patch -p1 -s < "$(realpath "$OLDPWD/$p")") || { echo "$name: the patch does not apply"; continue; }
  sed -i 's/-std=c++14/-std=c++17/g' "$W/$name/Makefile"    # CUDA 13's CUB needs C++17
  (make -C "$W/$name" BUILD_SM_ARCH=90 NCCL_HOME="$W/nccl" jacobi > "$W/$name.build.log" 2>&1 \
     || { echo "$name: build failed"; tail -5 "$W/$name.build.log"; }) &
done
wait
M=(mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
   -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x LD_LIBRARY_PATH -x CUDA_DEVICE_ORDER)
echo "point,nx,seconds" > "$OUT/search.csv"
for name in "${points[@]}"; do
  [ -x "$W/$name/jacobi" ] || continue
  for n in $SIZES; do
    line=$(timeout 120 "${M[@]}" "$W/$name/jacobi" -csv -niter "$NITER" -nx "$n" -ny "$n" 2>"$W/$name.err" | grep -E '^[a-z_]+, ' | tail -1)
    if [ -n "$line" ]; then echo "$name,$n,$(echo "$line" | cut -d, -f8 | tr -d ' ')" >> "$OUT/search.csv"
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
[ -n "$best" ] || { echo "no design point built and passed its own check"; exit 1; }
echo "best point: $best"; cp "$PATCHES/$best.patch" "$OUT/best.patch"
mkdir -p "$W/final"; rm -rf "$W/final/cuco_patched"; cp -r "$CORPUS/nvidia_jacobi_nccl" "$W/final/cuco_patched"
(cd "$W/final/cuco_patched" && patch -p1 -s < "$OUT/best.patch")
SIZES="$SIZES" NITER="$NITER" bash "$CORPUS/run_nvidia_jacobi.sh" "$W/final/cuco_patched" | tee "$OUT/final.csv"
python3 - "$OUT/final.csv" "$best" > "$OUT/table.md" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    if len(f) >= 8 and f[1].isdigit():
        rows.setdefault(int(f[1]), {}).setdefault(f[0], []).append(float(f[7]))
labels = ["nvidia_jacobi_nccl", "nvidia_jacobi_nccl_overlap", "nvidia_jacobi_nccl_graphs", "cuco_patched"]
print(f"best point: {sys.argv[2]}\n\n| nx = ny | nccl | nccl_overlap | nccl_graphs | cuco patched |\n| --- | --- | --- | --- | --- |")
for n in sorted(rows, reverse=True):
    cells = [f"{min(rows[n][l]):.3f}-{max(rows[n][l]):.3f}" if l in rows[n] else "-" for l in labels]
    print(f"| {n} | " + " | ".join(cells) + " |")
PY
cat "$OUT/table.md"
