#!/usr/bin/env bash
# Two 2-GPU jobs side by side on a 4-GPU machine (nvidia-h100-x4 / nvidia-h200-x4), one per GPU pair, so that
# one device call does the work of two calls on a 2-GPU kind:
#   bash tests/gpu/run_pairs.sh "PHASES ON GPUS 0,1" "PHASES ON GPUS 2,3"
# Each side is tests/gpu/run_gpu_search.sh with PAIR set (its searches see only their pair: nvidia-smi shim and
# CUDA_VISIBLE_DEVICES), its own bundle and build folders, and its output under $OUT/pair01 and $OUT/pair23.
# A side may instead be "cmd: COMMAND" (any command, run with CUDA_VISIBLE_DEVICES set to its pair and OUT to
# its folder). The pairs are independent: on these machines every GPU has its own NVLink ports into the
# NVSwitch fabric, and each side's jobs use only its two GPUs (docs/gpu-runs.md compares a baseline measured
# this way with one measured on a 2-GPU kind).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuco-pairs-out}
[ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 4 ] || { echo "run_pairs.sh needs 4 GPUs"; exit 2; }
bash tests/gpu/run_gpu_search.sh > /dev/null 2>&1   # installs the wheels once, before both sides start
side() {   # side PAIR DIR SPEC
    local pair=$1 dir=$OUT/$2 spec=$3
    mkdir -p "$dir"
    case $spec in
        "cmd: "*)   # cuco's local executor reads the GPUs from nvidia-smi and sets CUDA_VISIBLE_DEVICES itself:
                    # a shim lists only this pair, so both agree with what mpirun-launched programs see
            local shim=/tmp/cuco-pair-shim-${pair//,/_} real
            real=$(command -v nvidia-smi); mkdir -p "$shim"
            printf '#!/bin/sh\ncase " $* " in *" --query-gpu=index "*) echo "%s" | tr , "\\n"; exit 0;; esac\nexec "%s" "$@"\n' \
                "$pair" "$real" > "$shim/nvidia-smi"; chmod +x "$shim/nvidia-smi"
            PATH=$shim:$PATH CUDA_VISIBLE_DEVICES=$pair OUT=$dir PAIR=$pair bash -c "${spec#cmd: }" > "$dir/log" 2>&1 ;;
        *) PAIR=$pair OUT=$dir bash tests/gpu/run_gpu_search.sh $spec > "$dir/log" 2>&1 ;;
    esac
    echo "== side $pair ($spec): exit $?"
}
side 0,1 pair01 "$1" &
a=$!
side 2,3 pair23 "$2" &
b=$!
wait "$a" "$b"
for d in pair01 pair23; do echo "==== $d"; tail -n 60 "$OUT/$d/log" | cut -c1-300; done
# What comes back from the device machine is a few files per folder: each side's files travel as one archive
for d in pair01 pair23; do
    (cd "$OUT/$d" && tar -cJf ../$d.tar.xz . && cd .. && rm -rf "$d")
done
