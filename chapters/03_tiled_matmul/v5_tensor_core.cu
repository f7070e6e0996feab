// 03/v5_tensor_core: bf16 / fp16 inputs on the tensor cores (mma.sync m16n8k16), fp32 accumulate.
// What changed vs v4: the FMA units are replaced by tensor-core MMAs, which is where an H100's
// 16-bit throughput lives (about 15x its fp32 FMA rate). Everything else exists to feed them:
//
//   block tile  128 x 128 of C, BK = 32 of the inner dimension per stage, 256 threads = 8 warps
//   warp tile   the 8 warps form 2 x 4; each warp owns 64 x 32 of C = 4 x 4 MMA tiles of 16 x 8,
//               64 fp32 accumulators per thread
//   global->shared  cp.async, 16 bytes per copy, 3 stages in flight: while the warps multiply
//               stage s, the copies of stages s+1 and s+2 are on their way (no registers used)
//   shared->registers  ldmatrix.x4 for A fragments, ldmatrix.x4.trans for B (B is stored
//               [k][n] as in global memory; .trans hands out the k-pairs the MMA wants)
//   bank conflicts  rows padded by 8 elements (16 bytes): A rows are 80 bytes apart, B rows 272,
//               so the 8 row addresses of one 8x8 ldmatrix fall in 8 different 16-byte bank
//               groups (80 / 16 = 5 and 272 / 16 = 17 are odd)
//   block order  tiles are visited in groups of 8 block rows (as Triton does), so blocks that run
//               together share A and B tiles in L2; the grid is 1-D (no 65535 limit)
//
// Shared memory per stage: 128 x 40 + 32 x 136 elements = 18.5 KiB; 3 stages = 55.5 KiB (opt-in
// above 48 KiB). Ragged edges: a 16-byte chunk is copied with cp.async only when it lies entirely
// inside the matrix and its row stride keeps it aligned (K % 8 == 0 for A, N % 8 == 0 for B);
// other chunks are assembled element by element with zeros outside (K = 1, 65, 255 take this
// path). C is stored from the accumulators with predicates.
// Measured: see notes/03_tiled_matmul.md (target: >= 50% of cuBLAS bf16 at 4096^3).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ch03_common.cuh"
#include "ch03_gemm.h"
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace fa::ch03 {
namespace {

constexpr int kBM = kV5BlockM, kBN = kV5BlockN, kBK = 32;
constexpr int kStages = 3;
constexpr int kThreads = 256;
constexpr int kWarpsN = 4;                   // warps arranged 2 (rows) x 4 (columns)
constexpr int kWarpM = 64, kWarpN = 32;      // each warp's tile of C
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;
constexpr int kMTiles = kWarpM / kMmaM;      // 4
constexpr int kNTiles = kWarpN / kMmaN;      // 4
constexpr int kChunk = 8;                    // 16-bit elements per 16-byte copy
constexpr int kPad = 8;                      // row padding in elements (16 bytes)
constexpr int kAStride = kBK + kPad;         // 40 elements = 80 bytes
constexpr int kBStride = kBN + kPad;         // 136 elements = 272 bytes
constexpr int kAStage = kBM * kAStride;      // elements per stage
constexpr int kBStage = kBK * kBStride;
constexpr int kSmemBytes = kStages * (kAStage + kBStage) * 2;
constexpr int kGroupM = 8;                   // block rows per L2 group
constexpr int kAChunksPerThread = kBM * kBK / kChunk / kThreads;  // 2
constexpr int kBChunksPerThread = kBK * kBN / kChunk / kThreads;  // 2
static_assert(kAChunksPerThread * kThreads * kChunk == kBM * kBK, "A tile split");
static_assert(kBChunksPerThread * kThreads * kChunk == kBK * kBN, "B tile split");

// One 16-byte chunk (8 elements) of a row of `src` [rows, cols] starting at (row, col) into `dst`
// (shared). Full, aligned chunks go through cp.async; the rest are built element by element.
__device__ __forceinline__ void load_chunk(uint16_t* dst, const uint16_t* __restrict__ src,
                                           int64_t row, int64_t col, int64_t rows, int64_t cols,
                                           bool vec_ok) {
  if (vec_ok && row < rows && col + kChunk <= cols) {
    mma::cp_async_16(dst, src + row * cols + col, true);
    return;
  }
  uint32_t packed[4] = {0, 0, 0, 0};  // bit pattern 0 is +0.0 in bf16 and fp16
  if (row < rows) {
#pragma unroll
    for (int e = 0; e < kChunk; ++e)
      if (col + e < cols)
        packed[e / 2] |= uint32_t(src[row * cols + col + e]) << (16 * (e % 2));
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// Issue the copies of one BK slice: A[row0 .. row0+127][k0 .. k0+31] and B[k0 .. k0+31][col0 ..].
__device__ __forceinline__ void load_stage(uint16_t* As, uint16_t* Bs, const uint16_t* A,
                                           const uint16_t* B, int64_t M, int64_t N, int64_t K,
                                           int64_t row0, int64_t col0, int64_t k0, bool a_vec,
                                           bool b_vec, int tid) {
#pragma unroll
  for (int l = 0; l < kAChunksPerThread; ++l) {
    const int idx = tid + l * kThreads;
    const int r = idx / (kBK / kChunk), c = (idx % (kBK / kChunk)) * kChunk;
    load_chunk(As + r * kAStride + c, A, row0 + r, k0 + c, M, K, a_vec);
  }
#pragma unroll
  for (int l = 0; l < kBChunksPerThread; ++l) {
    const int idx = tid + l * kThreads;
    const int r = idx / (kBN / kChunk), c = (idx % (kBN / kChunk)) * kChunk;
    load_chunk(Bs + r * kBStride + c, B, k0 + r, col0 + c, K, N, b_vec);
  }
}

__device__ __forceinline__ void store_pair(float* C, int64_t r, int64_t c, int64_t M, int64_t N,
                                           float x, float y, bool pair_ok) {
  if (r >= M) return;
  float* p = C + r * N + c;
  if (pair_ok && c + 1 < N) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
  } else {
    if (c < N) p[0] = x;
    if (c + 1 < N) p[1] = y;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads, 2)
gemm_mma_kernel(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B,
                float* __restrict__ C, int64_t M, int64_t N, int64_t K, bool a_vec, bool b_vec,
                bool pair_ok) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* As = reinterpret_cast<uint16_t*>(smem_raw);  // [kStages][kBM][kAStride]
  uint16_t* Bs = As + kStages * kAStage;                  // [kStages][kBK][kBStride]

  // Grouped block order: consecutive blocks walk down kGroupM block rows, then move right.
  const int64_t tiles_m = ceil_div(M, kBM), tiles_n = ceil_div(N, kBN);
  const int64_t bid = blockIdx.x;
  const int64_t group_size = int64_t(kGroupM) * tiles_n;
  const int64_t first_m = (bid / group_size) * kGroupM;
  const int64_t group_rows = (tiles_m - first_m < kGroupM) ? tiles_m - first_m : kGroupM;
  const int64_t tile_m = first_m + (bid % group_size) % group_rows;
  const int64_t tile_n = (bid % group_size) / group_rows;
  const int64_t row0 = tile_m * kBM, col0 = tile_n * kBN;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp / kWarpsN, warp_n = warp % kWarpsN;

  float acc[kMTiles][kNTiles][4] = {};
  const int64_t k_tiles = ceil_div(K, kBK);

  // Prologue: stages 0 .. kStages-2 in flight. One commit per stage, even an empty one, so that
  // "wait until at most kStages-2 groups are pending" always means "stage kt has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles)
      load_stage(As + s * kAStage, Bs + s * kBStage, A, B, M, N, K, row0, col0, int64_t(s) * kBK,
                 a_vec, b_vec, tid);
    mma::cp_async_commit();
  }

  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    mma::cp_async_wait<kStages - 2>();  // this thread's copies of stage kt are done
    __syncthreads();  // everyone's copies are visible; everyone has finished stage kt-1
    {
      const int64_t next = kt + kStages - 1;  // refill the buffer stage kt-1 used
      if (next < k_tiles) {
        const int s = int(next % kStages);
        load_stage(As + s * kAStage, Bs + s * kBStage, A, B, M, N, K, row0, col0, next * kBK,
                   a_vec, b_vec, tid);
      }
      mma::cp_async_commit();
    }
    const uint16_t* a_st = As + (kt % kStages) * kAStage;
    const uint16_t* b_st = Bs + (kt % kStages) * kBStage;
#pragma unroll
    for (int ks = 0; ks < kBK / kMmaK; ++ks) {
      uint32_t a_frag[kMTiles][4];
      uint32_t b_frag[kNTiles][2];
      // A: lanes 0-15 give rows 0-15 at k 0..7, lanes 16-31 the same rows at k 8..15; the four
      // 8x8 matrices arrive as a[0..3] in the order the m16n8k16 A fragment wants.
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        const int r = warp_m * kWarpM + mi * kMmaM + lane % 16;
        const int c = ks * kMmaK + (lane / 16) * 8;
        mma::ldmatrix_x4(a_frag[mi], a_st + r * kAStride + c);
      }
      // B: one ldmatrix.x4.trans covers two 8-column MMA tiles: matrices (k 0-7, n 0-7),
      // (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15); lane l addresses row k = l % 16 at
      // column offset (l / 16) * 8.
#pragma unroll
      for (int nj = 0; nj < kNTiles / 2; ++nj) {
        const int r = ks * kMmaK + lane % 16;
        const int c = warp_n * kWarpN + nj * 2 * kMmaN + (lane / 16) * 8;
        uint32_t t4[4];
        mma::ldmatrix_x4_trans(t4, b_st + r * kBStride + c);
        b_frag[2 * nj][0] = t4[0];
        b_frag[2 * nj][1] = t4[1];
        b_frag[2 * nj + 1][0] = t4[2];
        b_frag[2 * nj + 1][1] = t4[3];
      }
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni) mma::mma_16816<T>(acc[mi][ni], a_frag[mi], b_frag[ni]);
    }
  }
  mma::cp_async_wait<0>();  // no copy may outlive the block (they are all empty groups by now)

  // Epilogue: c[0], c[1] = C[g][2t, 2t+1] and c[2], c[3] = C[g+8][2t, 2t+1] of each 16x8 tile.
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni) {
      const int64_t r = row0 + warp_m * kWarpM + mi * kMmaM + g;
      const int64_t c = col0 + warp_n * kWarpN + ni * kMmaN + 2 * t;
      store_pair(C, r, c, M, N, acc[mi][ni][0], acc[mi][ni][1], pair_ok);
      store_pair(C, r + 8, c, M, N, acc[mi][ni][2], acc[mi][ni][3], pair_ok);
    }
}

template <class T> void set_smem_limit() {
  static const bool done = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(gemm_mma_kernel<T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)done;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class T>
void launch(const void* A, const void* B, float* C, GemmShape s, cudaStream_t stream) {
  set_smem_limit<T>();
  const int64_t blocks = ceil_div(s.M, kBM) * ceil_div(s.N, kBN);
  FA_REQUIRE(blocks <= 0x7fffffff, "too many tiles for gridDim.x");
  const bool a_vec = s.K % kChunk == 0 && aligned16(A);
  const bool b_vec = s.N % kChunk == 0 && aligned16(B);
  const bool pair_ok = s.N % 2 == 0 && reinterpret_cast<uintptr_t>(C) % 8 == 0;
  gemm_mma_kernel<T><<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(
      static_cast<const uint16_t*>(A), static_cast<const uint16_t*>(B), C, s.M, s.N, s.K, a_vec,
      b_vec, pair_ok);
  FA_CHECK_LAUNCH();
}

void gemm_v5(const void* A, const void* B, float* C, GemmShape s, DType dtype,
             cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype == DType::F32, "03/v5_tensor_core takes bf16 and fp16 only");
  if (s.M == 0 || s.N == 0) return;
  if (dtype == DType::BF16) launch<__nv_bfloat16>(A, B, C, s, stream);
  else launch<__half>(A, B, C, s, stream);
}

}  // namespace

int v5_blocks_per_sm(DType dtype) {
  int blocks = 0;
  if (dtype == DType::F16) {
    set_smem_limit<__half>();
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemm_mma_kernel<__half>,
                                                                kThreads, kSmemBytes));
  } else {
    set_smem_limit<__nv_bfloat16>();
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, gemm_mma_kernel<__nv_bfloat16>, kThreads, kSmemBytes));
  }
  return blocks;
}

FA_REGISTER(GemmKernel, {"03/v5_tensor_core", gemm_v5,
                         "mma.sync m16n8k16, ldmatrix, 3-stage cp.async, padded smem, 128x128x32",
                         {DType::BF16, DType::F16}, 80});

}  // namespace fa::ch03
