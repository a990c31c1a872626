// Where the hybrid GEMM's 2 % over the baseline GEMM went under cuco_gemm.cuh's first mainloop (one GPU, no
// peers): the shipped epilogue taken apart (no counting, no LSA-tail stores, release atomics, no fence,
// another counting warp, parts behind __noinline__ calls, the whole epilogue behind a call), each kernel
// timed in turn per iteration after a 256 MiB L2 flush (101 timed of 106), medians as x the baseline GEMM.
// The table in docs/measurements/gpu-workloads.md ("The hybrid's GEMM schedule, on one GPU") comes from it. It measures
// the first mainloop, so build it against commit 931b2d1's tree:
//   git worktree add /tmp/t931 931b2d1
//   nvcc -std=c++17 -arch=sm_90 -O3 -I/tmp/t931/workloads/_harness/cuda -I/tmp/t931/workloads/gemm_allgather/variants \
//     -I$NCCL_HOME/include tests/bench/gemm_codegen/epilogue_parts.cu -o /tmp/epilogue_parts -L$NCCL_HOME/lib \
//     -l:libnccl.so.2 -Xlinker -rpath,$NCCL_HOME/lib
#include "hybrid.cu"
#include <algorithm>
#include <vector>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%d %s\n", __LINE__, cudaGetErrorString(e_)); exit(2); } } while (0)
__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16(((h & 0xFFFF) / 32768.0f) - 1.0f);
  }
}
__device__ __forceinline__ void red_release_gpu(unsigned* p, unsigned v) { asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ unsigned atom_acqrel_gpu(unsigned* p, unsigned v) { unsigned o; asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(o) : "l"(p), "r"(v) : "memory"); return o; }
// no counting at all
struct NoCount : ChunkCountEpi { __device__ __forceinline__ void tile_done(int, int) const { __syncthreads(); } };
// local stores only, no LSA-tail wait; counting as shipped
struct LocalOnly : ChunkCountEpi {
  __device__ __forceinline__ void begin_epilogue(int, int) const {}
  __device__ __forceinline__ void store(int row, int col, int4 v) const { *reinterpret_cast<int4*>(local + (long long)row * ldc + col) = v; }
};
// release atomics instead of fence + relaxed atomics
struct RelAtom : ChunkCountEpi {
  __device__ __forceinline__ void tile_done(int tm, int) const {
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (tm < tail_mtile0) red_release_gpu(chunk_count + tm / mtiles_per_chunk, 1u);
    else __threadfence_system();
    if (atom_acqrel_gpu(tiles_done, 1u) + 1u != epoch * total_tiles) return;
    for (int k = 0; k < copy_streams; k++) cuco_wait_geq(copies_done + k, epoch, tmo, tflag);
    ga_flag_exchange(P, P.end_slot, my_flags, 1, epoch, tmo, tflag);
  }
};
// counting as shipped but no fence at all (not correct for the copies; a cost probe)
struct NoFence : ChunkCountEpi {
  __device__ __forceinline__ void tile_done(int tm, int) const {
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (tm < tail_mtile0) atomicAdd(chunk_count + tm / mtiles_per_chunk, 1u);
    if (atomicAdd(tiles_done, 1u) + 1u != epoch * total_tiles) return;
    for (int k = 0; k < copy_streams; k++) cuco_wait_geq(copies_done + k, epoch, tmo, tflag);
    ga_flag_exchange(P, P.end_slot, my_flags, 1, epoch, tmo, tflag);
  }
};
// the counting thread is thread 0 of the last warp
struct LastWarp : ChunkCountEpi {
  __device__ __forceinline__ void tile_done(int tm, int) const {
    __syncthreads();
    if (threadIdx.x != cuco_gemm::THREADS - 32) return;
    if (tm < tail_mtile0) { __threadfence(); atomicAdd(chunk_count + tm / mtiles_per_chunk, 1u); }
    else __threadfence_system();
    if (atomicAdd(tiles_done, 1u) + 1u != epoch * total_tiles) return;
    for (int k = 0; k < copy_streams; k++) cuco_wait_geq(copies_done + k, epoch, tmo, tflag);
    ga_flag_exchange(P, P.end_slot, my_flags, 1, epoch, tmo, tflag);
  }
};
// thread 0's counting (and the last tile's waits and flag exchange) behind a call
__device__ __noinline__ void count_tile_call(const ChunkCountEpi& e, int tm) {
  if (tm < e.tail_mtile0) { __threadfence(); atomicAdd(e.chunk_count + tm / e.mtiles_per_chunk, 1u); }
  else __threadfence_system();
  if (atomicAdd(e.tiles_done, 1u) + 1u != e.epoch * e.total_tiles) return;
  for (int k = 0; k < e.copy_streams; k++) cuco_wait_geq(e.copies_done + k, e.epoch, e.tmo, e.tflag);
  ga_flag_exchange(e.P, e.P.end_slot, e.my_flags, 1, e.epoch, e.tmo, e.tflag);
}
struct CountCall : ChunkCountEpi {
  __device__ __forceinline__ void tile_done(int tm, int) const {
    __syncthreads();
    if (threadIdx.x == 0) count_tile_call(*this, tm);
  }
};
// the LSA tail behind a call: stores go local only; a tail tile's peer copies are made from the smem tile
// (still there after the stores) by every thread in a __noinline__ function, after the "ready" wait
__device__ __noinline__ void push_tail_call(const ChunkCountEpi& e, int tm, int tn) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const __nv_bfloat16* sC = reinterpret_cast<const __nv_bfloat16*>(smem_raw);
  if (threadIdx.x == 0) cuco_wait_geq(e.peers_ready, e.epoch, e.tmo, e.tflag);
  __syncthreads();
  for (int i = 0; i < (cuco_gemm::BM * cuco_gemm::BN / 8) / cuco_gemm::THREADS; i++) {
    int c = threadIdx.x + i * cuco_gemm::THREADS, r = c >> 4, ch = c & 15;
    int4 v = *reinterpret_cast<const int4*>(sC + r * cuco_gemm::EPI_LD + ch * 8);
    long long off = (long long)(tm * cuco_gemm::BM + r) * e.ldc + tn * cuco_gemm::BN + ch * 8;
    for (int k = 0; k < e.P.n; k++) *reinterpret_cast<int4*>(e.P.c_blk[k] + off) = v;
  }
}
struct TailCall : ChunkCountEpi {
  __device__ __forceinline__ void begin_epilogue(int, int) const {}
  __device__ __forceinline__ void store(int row, int col, int4 v) const { *reinterpret_cast<int4*>(local + (long long)row * ldc + col) = v; }
  __device__ __forceinline__ void tile_done(int tm, int tn) const {
    if (tm >= tail_mtile0) push_tail_call(*this, tm, tn);
    ChunkCountEpi::tile_done(tm, tn);
  }
};
struct BothCall : TailCall {
  __device__ __forceinline__ void tile_done(int tm, int tn) const {
    if (tm >= tail_mtile0) push_tail_call(*this, tm, tn);
    __syncthreads();
    if (threadIdx.x == 0) count_tile_call(*this, tm);
  }
};
// the epilogue behind a call: the accumulators go to smem inline, the rest (begin, stores, tile_done) is a
// __noinline__ function, so the mainloop is scheduled without seeing the epilogue's code
template <class Epi>
__device__ __noinline__ void epi_from_smem(int tm, int tn, const Epi& epi) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const __nv_bfloat16* sC = reinterpret_cast<const __nv_bfloat16*>(smem_raw);
  const int tid = threadIdx.x;
  epi.begin_epilogue(tm, tn);
#pragma unroll
  for (int i = 0; i < (cuco_gemm::BM * cuco_gemm::BN / 8) / cuco_gemm::THREADS; i++) {
    int c = tid + i * cuco_gemm::THREADS, r = c >> 4, ch = c & 15;
    int4 v = *reinterpret_cast<const int4*>(sC + r * cuco_gemm::EPI_LD + ch * 8);
    epi.store(tm * cuco_gemm::BM + r, tn * cuco_gemm::BN + ch * 8, v);
  }
  epi.tile_done(tm, tn);
}
template <class Epi>
__global__ void __launch_bounds__(cuco_gemm::THREADS, 2)
nk_kernel(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, int K, long long lda, long long ldb,
          int m_tile0, const __grid_constant__ Epi epi) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tn = blockIdx.x, tm = m_tile0 + blockIdx.y;
  float acc[4][4][4];
  cuco_gemm::zero_acc(acc);
  cuco_gemm::tile_mainloop(smem_raw, A + (long long)tm * cuco_gemm::BM * lda, B + (long long)tn * cuco_gemm::BN * ldb, lda, ldb, K / cuco_gemm::BK, acc);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wm = warp >> 2, wn = warp & 3;
  __nv_bfloat16* sC = reinterpret_cast<__nv_bfloat16*>(smem_raw);
#pragma unroll
  for (int mi = 0; mi < 4; mi++)
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
      int row = wm * 64 + mi * 16 + (lane >> 2), col = wn * 32 + ni * 8 + (lane & 3) * 2;
      *reinterpret_cast<__nv_bfloat162*>(sC + row * cuco_gemm::EPI_LD + col) = __floats2bfloat162_rn(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<__nv_bfloat162*>(sC + (row + 8) * cuco_gemm::EPI_LD + col) = __floats2bfloat162_rn(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  epi_from_smem(tm, tn, epi);
}
struct Shape { long long M, N, K; };
struct Buf { __nv_bfloat16 *A, *B, *C; unsigned* cnt; unsigned epoch = 0; };
template <class E> E mk(const Shape& s, Buf& b) {
  const int mt = (int)(s.M / 128), nt = (int)(s.N / 128);
  int chunks = std::min(kChunks, mt); while (mt % chunks) chunks--;
  const int mpc = mt / chunks, tail = std::min(std::max(kLsaTail, 0), chunks);
  E e{}; e.local = b.C; e.ldc = s.N; e.chunk_count = b.cnt; e.mtiles_per_chunk = mpc; e.tail_mtile0 = (chunks - tail) * mpc;
  e.P.n = 0; e.my_flags = b.cnt + 80; e.peers_ready = b.cnt + 66; e.tiles_done = b.cnt + 64; e.copies_done = b.cnt + 72;
  e.copy_streams = 0; e.epoch = ++b.epoch; e.total_tiles = (unsigned)(mt * nt); e.tmo = 2000000000ull; e.tflag = b.cnt + 96;
  return e;
}
template <class E> void lga(const Shape& s, Buf& b, E e, cudaStream_t st) {
  static bool once = [] { CK(cudaFuncSetAttribute(ga_gemm_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES)); return true; }();
  (void)once;
  ga_gemm_kernel<E><<<dim3((unsigned)(s.N / 128), (unsigned)(s.M / 128)), 256, cuco_gemm::SMEM_BYTES, st>>>(b.A, b.B, (int)s.K, s.K, s.K, 0, e, nullptr);
}
template <class E> void lnk(const Shape& s, Buf& b, E e, cudaStream_t st) {
  static bool once = [] { CK(cudaFuncSetAttribute(nk_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES)); return true; }();
  (void)once;
  nk_kernel<E><<<dim3((unsigned)(s.N / 128), (unsigned)(s.M / 128)), 256, cuco_gemm::SMEM_BYTES, st>>>(b.A, b.B, (int)s.K, s.K, s.K, 0, e);
}
template <class E> void lpl(const Shape& s, Buf& b, E e, cudaStream_t st) {
  static bool once = [] { CK(cudaFuncSetAttribute(cuco_gemm::gemm_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES)); return true; }();
  (void)once;
  cuco_gemm::gemm_kernel<E><<<dim3((unsigned)(s.N / 128), (unsigned)(s.M / 128)), 256, cuco_gemm::SMEM_BYTES, st>>>(b.A, b.B, (int)s.K, s.K, s.K, 0, e);
}
const char* names[] = {"plain", "shipped", "nocount", "localonly", "relatom", "nofence", "lastwarp", "plain_trace", "old_nocount", "nk_chunk", "nk_store", "nk_nocount", "nk_local", "countcall", "tailcall", "bothcall"};
constexpr int NK = 16;
void launch(int k, const Shape& s, Buf& b, cudaStream_t st) {
  switch (k) {
    case 0: lpl(s, b, cuco_gemm::StoreEpi{b.C, s.N}, st); break;
    case 1: lga(s, b, mk<ChunkCountEpi>(s, b), st); break;
    case 2: lga(s, b, mk<NoCount>(s, b), st); break;
    case 3: lga(s, b, mk<LocalOnly>(s, b), st); break;
    case 4: lga(s, b, mk<RelAtom>(s, b), st); break;
    case 5: lga(s, b, mk<NoFence>(s, b), st); break;
    case 6: lga(s, b, mk<LastWarp>(s, b), st); break;
    case 7: lga(s, b, cuco_gemm::StoreEpi{b.C, s.N}, st); break;
    case 8: lpl(s, b, mk<NoCount>(s, b), st); break;
    case 9: lnk(s, b, mk<ChunkCountEpi>(s, b), st); break;
    case 10: lnk(s, b, cuco_gemm::StoreEpi{b.C, s.N}, st); break;
    case 11: lnk(s, b, mk<NoCount>(s, b), st); break;
    case 12: lnk(s, b, mk<LocalOnly>(s, b), st); break;
    case 13: lga(s, b, mk<CountCall>(s, b), st); break;
    case 14: lga(s, b, mk<TailCall>(s, b), st); break;
    case 15: lga(s, b, mk<BothCall>(s, b), st); break;
  }
  CK(cudaGetLastError());
}
int main() {
  Shape shapes[] = {{8192, 4096, 4096}, {8192, 4096, 8192}, {4096, 4096, 8192}};
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  void* fl; const size_t FB = 256ull << 20; CK(cudaMalloc(&fl, FB));
  for (auto& s : shapes) {
    Buf b; CK(cudaMalloc(&b.A, s.M * s.K * 2)); CK(cudaMalloc(&b.B, s.N * s.K * 2)); CK(cudaMalloc(&b.C, s.M * s.N * 2));
    CK(cudaMalloc(&b.cnt, 512)); CK(cudaMemset(b.cnt, 0, 512)); unsigned r = 0x40000000u; CK(cudaMemcpy(b.cnt + 66, &r, 4, cudaMemcpyHostToDevice));
    fill<<<1024, 256, 0, st>>>(b.A, s.M * s.K, 1); fill<<<1024, 256, 0, st>>>(b.B, s.N * s.K, 2);
    { const size_t n = s.M * s.N; std::vector<unsigned short> ref(n), got(n);
      for (int k = 0; k < NK; k++) { CK(cudaMemset(b.C, 0xFF, n * 2)); launch(k, s, b, st); CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(k ? got.data() : ref.data(), b.C, n * 2, cudaMemcpyDeviceToHost)); long long bad = 0;
        if (k) for (size_t i = 0; i < n; i++) bad += ref[i] != got[i];
        if (bad) printf("MISMATCH %s %lld\n", names[k], bad); } }
    std::vector<double> t[NK];
    for (int it = 0; it < 106; it++) for (int k = 0; k < NK; k++) {
      CK(cudaMemsetAsync(fl, it, FB, st)); CK(cudaEventRecord(e0, st)); launch(k, s, b, st); CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (it >= 5) t[k].push_back(ms);
    }
    double base = 0;
    printf("%lldx%lldx%lld:", s.M, s.N, s.K);
    for (int k = 0; k < NK; k++) { std::sort(t[k].begin(), t[k].end()); double m = t[k][t[k].size() / 2]; if (!k) base = m; printf("  %s %.4f (%.3f)", names[k], m, m / base); }
    printf("\n");
    cudaFree(b.A); cudaFree(b.B); cudaFree(b.C); cudaFree(b.cnt);
  }
}
