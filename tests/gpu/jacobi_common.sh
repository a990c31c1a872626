# Sourced by the Jacobi GPU scripts (tests/gpu/jacobi_end_to_end.sh, tests/gpu/jacobi_baseline_gap.sh): NVIDIA's
# Makefile pointed at NCCL's wheel, a folder built the way its authors build it, and one timed run of two ranks.

# jacobi_nccl_home W N: an NCCL_HOME at W/nccl laid out as the Makefile expects, from the wheel at N
jacobi_nccl_home() {
  mkdir -p "$1/nccl/lib"; ln -sfn "$2/include" "$1/nccl/include"; ln -sf "$2/lib/libnccl.so.2" "$1/nccl/lib/libnccl.so"
  export LD_LIBRARY_PATH="$1/nccl/lib:$2/lib:${LD_LIBRARY_PATH:-}"
}

# jacobi_build DIR NCCL_HOME: NVIDIA's Makefile in DIR, in the background (wait for it); its log in DIR.build.log
jacobi_build() {
  sed -i 's/-std=c++14/-std=c++17/g' "$1/Makefile"    # CUDA 13's CUB needs C++17
  (make -C "$1" BUILD_SM_ARCH=90 NCCL_HOME="$2" jacobi > "$1.build.log" 2>&1 \
     || { echo "$(basename "$1"): build failed"; tail -5 "$1.build.log"; }) &
}

# jacobi_seconds DIR N NITER: the seconds of DIR/jacobi's -csv line at nx = ny = N on two ranks; nothing when
# the run printed none (its own check failed, or it crashed: DIR.err says why)
jacobi_seconds() {
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS \
      -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x LD_LIBRARY_PATH -x CUDA_DEVICE_ORDER \
      "$1/jacobi" -csv -niter "$3" -nx "$2" -ny "$2" 2>"$1.err" | grep -E '^[a-z_]+, ' | tail -1 | cut -d, -f8 | tr -d ' '
}
