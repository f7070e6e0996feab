// ch03_mma_gemm.cuh: the mma.sync tensor-core GEMM of chapter 03 (03/v5_tensor_core), written once
// for any tile configuration (`Tiles`). v5 instantiates one; the tuning run in
// notes/03_tiled_matmul.md instantiated eight, from 128x128 to 256x128 blocks and 64x32 to 64x64
// warp tiles, and all of them measured 240-280 TFLOP/s on an H100: the instruction, not the tiles,
// is the limit there (v6 replaces it with wgmma).
//
// The pieces, in the order a block meets them (bf16 / fp16 in, fp32 accumulate, C in fp32):
//   block order      tiles are visited in groups of kGroupM block rows (as Triton does), so
//                    blocks that run together share A and B tiles in L2; the grid is 1-D
//   global->shared   cp.async, 16 bytes per copy, Tiles::kStages stages in flight: while the
//                    warps multiply stage s, the copies of the next kStages-1 stages are on
//                    their way (no registers used)
//   shared->registers  ldmatrix.x4 for A fragments, ldmatrix.x4.trans for B (B is stored [k][n]
//                    as in global memory; .trans hands out the k-pairs the MMA wants)
//   bank conflicts   every shared row is padded by 16 bytes; with an odd number of 16-byte
//                    chunks per row, the 8 row addresses of one 8x8 ldmatrix fall in 8 different
//                    bank groups (Tiles checks it at compile time)
//   registers->tensor cores  mma.sync m16n8k16: each warp owns a kWarpM x kWarpN tile of C,
//                    (kWarpM/16) x (kWarpN/8) MMA tiles of 4 fp32 accumulators per thread
//   ragged edges     a 16-byte chunk goes through cp.async only when it lies entirely inside the
//                    matrix and its row stride keeps it aligned (K % 8 == 0 for A, N % 8 == 0 for
//                    B); other chunks are assembled element by element with zeros outside. C is
//                    stored from the accumulators with predicates.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ch03_common.cuh"
#include "check.h"
#include "mma.cuh"

namespace fa::ch03::mma_gemm {

// A tile configuration. Block tile kBM x kBN of C, kBK of the inner dimension per stage, warps
// arranged kWarpsM x kWarpsN, each owning (kBM / kWarpsM) x (kBN / kWarpsN) of C.
template <int BM, int BN, int BK, int WarpsM, int WarpsN, int Stages, int MinBlocksPerSm>
struct Tiles {
  static constexpr int kBM = BM, kBN = BN, kBK = BK;
  static constexpr int kWarpsM = WarpsM, kWarpsN = WarpsN;
  static constexpr int kStages = Stages, kMinBlocksPerSm = MinBlocksPerSm;
  static constexpr int kThreads = 32 * WarpsM * WarpsN;
  static constexpr int kWarpM = BM / WarpsM, kWarpN = BN / WarpsN;
  static constexpr int kMTiles = kWarpM / 16, kNTiles = kWarpN / 8;  // m16n8k16 tiles per warp
  static constexpr int kChunk = 8;  // 16-bit elements per 16-byte copy
  static constexpr int kPad = 8;    // row padding in elements (16 bytes)
  static constexpr int kAStride = BK + kPad, kBStride = BN + kPad;        // shared row lengths
  static constexpr int kAStage = BM * kAStride, kBStage = BK * kBStride;  // elements per stage
  static constexpr int kSmemBytes = Stages * (kAStage + kBStage) * 2;
  static constexpr int kAChunks = BM * BK / kChunk, kBChunks = BK * BN / kChunk;  // per stage

  static_assert(BM % WarpsM == 0 && BN % WarpsN == 0, "warps must tile the block");
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "a warp tile is whole 16x16 MMA pairs");
  static_assert(BK % 16 == 0, "BK is a whole number of k16 MMA steps");
  static_assert(kAChunks % kThreads == 0 && kBChunks % kThreads == 0,
                "every thread copies the same number of chunks");
  static_assert((kAStride / kChunk) % 2 == 1 && (kBStride / kChunk) % 2 == 1,
                "odd 16-byte chunks per shared row: conflict-free ldmatrix");
  static_assert(Stages >= 2, "at least double buffering");
};

constexpr int kGroupM = 8;  // block rows per L2 group

// One 16-byte chunk (8 elements) of a row of `src` [rows, cols] starting at (row, col) into `dst`
// (shared). Full, aligned chunks go through cp.async; the rest are built element by element.
__device__ __forceinline__ void load_chunk(uint16_t* dst, const uint16_t* __restrict__ src,
                                           int64_t row, int64_t col, int64_t rows, int64_t cols,
                                           bool vec_ok) {
  constexpr int kChunk = 8;
  if (vec_ok && row < rows && col + kChunk <= cols) {
    mma::cp_async_16(dst, src + row * cols + col, true);
    return;
  }
  uint32_t packed[4] = {0, 0, 0, 0};  // bit pattern 0 is +0.0 in bf16 and fp16
  if (row < rows) {
#pragma unroll
    for (int e = 0; e < kChunk; ++e)
      if (col + e < cols) packed[e / 2] |= uint32_t(src[row * cols + col + e]) << (16 * (e % 2));
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// Issue the copies of one BK slice: A[row0 ..][k0 .. k0+BK) and B[k0 .. k0+BK)[col0 ..].
template <class Cfg>
__device__ __forceinline__ void load_stage(uint16_t* As, uint16_t* Bs, const uint16_t* A,
                                           const uint16_t* B, int64_t M, int64_t N, int64_t K,
                                           int64_t row0, int64_t col0, int64_t k0, bool a_vec,
                                           bool b_vec, int tid) {
  constexpr int kAPerRow = Cfg::kBK / Cfg::kChunk, kBPerRow = Cfg::kBN / Cfg::kChunk;
#pragma unroll
  for (int l = 0; l < Cfg::kAChunks / Cfg::kThreads; ++l) {
    const int idx = tid + l * Cfg::kThreads;
    const int r = idx / kAPerRow, c = (idx % kAPerRow) * Cfg::kChunk;
    load_chunk(As + r * Cfg::kAStride + c, A, row0 + r, k0 + c, M, K, a_vec);
  }
#pragma unroll
  for (int l = 0; l < Cfg::kBChunks / Cfg::kThreads; ++l) {
    const int idx = tid + l * Cfg::kThreads;
    const int r = idx / kBPerRow, c = (idx % kBPerRow) * Cfg::kChunk;
    load_chunk(Bs + r * Cfg::kBStride + c, B, k0 + r, col0 + c, K, N, b_vec);
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

template <class Cfg, class T>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm)
    gemm_mma_kernel(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B,
                    float* __restrict__ C, int64_t M, int64_t N, int64_t K, bool a_vec, bool b_vec,
                    bool pair_ok) {
  constexpr int kBK = Cfg::kBK, kStages = Cfg::kStages;
  constexpr int kMTiles = Cfg::kMTiles, kNTiles = Cfg::kNTiles;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* As = reinterpret_cast<uint16_t*>(smem_raw);  // [kStages][kBM][kAStride]
  uint16_t* Bs = As + kStages * Cfg::kAStage;            // [kStages][kBK][kBStride]

  // Grouped block order: consecutive blocks walk down kGroupM block rows, then move right.
  const int64_t tiles_m = ceil_div(M, Cfg::kBM), tiles_n = ceil_div(N, Cfg::kBN);
  const int64_t bid = blockIdx.x;
  const int64_t group_size = int64_t(kGroupM) * tiles_n;
  const int64_t first_m = (bid / group_size) * kGroupM;
  const int64_t group_rows = (tiles_m - first_m < kGroupM) ? tiles_m - first_m : kGroupM;
  const int64_t tile_m = first_m + (bid % group_size) % group_rows;
  const int64_t tile_n = (bid % group_size) / group_rows;
  const int64_t row0 = tile_m * Cfg::kBM, col0 = tile_n * Cfg::kBN;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;

  float acc[kMTiles][kNTiles][4] = {};
  const int64_t k_tiles = ceil_div(K, kBK);

  // Prologue: stages 0 .. kStages-2 in flight. One commit per stage, even an empty one, so that
  // "wait until at most kStages-2 groups are pending" always means "stage kt has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles)
      load_stage<Cfg>(As + s * Cfg::kAStage, Bs + s * Cfg::kBStage, A, B, M, N, K, row0, col0,
                      int64_t(s) * kBK, a_vec, b_vec, tid);
    mma::cp_async_commit();
  }

  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    mma::cp_async_wait<kStages - 2>();  // this thread's copies of stage kt are done
    __syncthreads();  // everyone's copies are visible; everyone has finished stage kt-1
    {
      const int64_t next = kt + kStages - 1;  // refill the buffer stage kt-1 used
      if (next < k_tiles) {
        const int s = int(next % kStages);
        load_stage<Cfg>(As + s * Cfg::kAStage, Bs + s * Cfg::kBStage, A, B, M, N, K, row0, col0,
                        next * kBK, a_vec, b_vec, tid);
      }
      mma::cp_async_commit();
    }
    const uint16_t* a_st = As + (kt % kStages) * Cfg::kAStage;
    const uint16_t* b_st = Bs + (kt % kStages) * Cfg::kBStage;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t a_frag[kMTiles][4];
      uint32_t b_frag[kNTiles][2];
      // A: lanes 0-15 give rows 0-15 at k 0..7, lanes 16-31 the same rows at k 8..15; the four
      // 8x8 matrices arrive as a[0..3] in the order the m16n8k16 A fragment wants.
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        const int r = warp_m * Cfg::kWarpM + mi * 16 + lane % 16;
        const int c = ks * 16 + (lane / 16) * 8;
        mma::ldmatrix_x4(a_frag[mi], a_st + r * Cfg::kAStride + c);
      }
      // B: one ldmatrix.x4.trans covers two 8-column MMA tiles: matrices (k 0-7, n 0-7),
      // (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15); lane l addresses row k = l % 16 at
      // column offset (l / 16) * 8.
#pragma unroll
      for (int nj = 0; nj < kNTiles / 2; ++nj) {
        const int r = ks * 16 + lane % 16;
        const int c = warp_n * Cfg::kWarpN + nj * 16 + (lane / 16) * 8;
        uint32_t t4[4];
        mma::ldmatrix_x4_trans(t4, b_st + r * Cfg::kBStride + c);
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
      const int64_t r = row0 + warp_m * Cfg::kWarpM + mi * 16 + g;
      const int64_t c = col0 + warp_n * Cfg::kWarpN + ni * 8 + 2 * t;
      store_pair(C, r, c, M, N, acc[mi][ni][0], acc[mi][ni][1], pair_ok);
      store_pair(C, r + 8, c, M, N, acc[mi][ni][2], acc[mi][ni][3], pair_ok);
    }
}

template <class Cfg, class T>
void set_smem_limit() {
  static const bool done = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(
        gemm_mma_kernel<Cfg, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)done;
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Launch C = A*B with tile configuration Cfg; T is __nv_bfloat16 or __half.
template <class Cfg, class T>
void launch(const void* A, const void* B, float* C, GemmShape s, cudaStream_t stream) {
  if (s.M == 0 || s.N == 0) return;
  set_smem_limit<Cfg, T>();
  const int64_t blocks = ceil_div(s.M, Cfg::kBM) * ceil_div(s.N, Cfg::kBN);
  FA_REQUIRE(blocks <= 0x7fffffff, "too many tiles for gridDim.x");
  const bool a_vec = s.K % Cfg::kChunk == 0 && aligned16(A);
  const bool b_vec = s.N % Cfg::kChunk == 0 && aligned16(B);
  const bool pair_ok = s.N % 2 == 0 && reinterpret_cast<uintptr_t>(C) % 8 == 0;
  gemm_mma_kernel<Cfg, T><<<unsigned(blocks), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
      static_cast<const uint16_t*>(A), static_cast<const uint16_t*>(B), C, s.M, s.N, s.K, a_vec,
      b_vec, pair_ok);
  FA_CHECK_LAUNCH();
}

// Resident blocks per SM for configuration Cfg on the GPU at hand (the occupancy calculator).
template <class Cfg, class T>
int blocks_per_sm() {
  set_smem_limit<Cfg, T>();
  int blocks = 0;
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemm_mma_kernel<Cfg, T>,
                                                              Cfg::kThreads, Cfg::kSmemBytes));
  return blocks;
}

}  // namespace fa::ch03::mma_gemm
