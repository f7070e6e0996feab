// 03/t08_persistent: t07 as a persistent kernel: one block per SM walks the output tiles.
// Status: verified: the GPU tests pass (RaggedShapes, Long4096Cubed, LongRaggedManyTiles; H100 80GB
// HBM3, CUDA 13.0, 2026-11-26).
// Speed: measured in chapters/03_tiled_matmul/tuning/README.md: bf16 4096^3 718.6 TFLOP/s (t07
// 701.6, cuBLAS 754.8: 95.2%); 8192^3 754.2 (t07 752.5, cuBLAS 778.5: 96.9%).
//
// What changed vs t07: t07 launches one block per 128 x 256 tile of C (512 blocks at 4096^3 on 132
// SMs). Each block fills its 4-stage ring from empty, multiplies, and then its two consumer
// warpgroups spend the epilogue storing 128 KiB of fp32 C while the producer idles and the tensor
// cores of that SM wait for the next block to be scheduled, set up its barriers and refill the
// ring. t08 launches min(tiles, SMs) blocks and each loops over tiles b, b + G, b + 2G, ... (G =
// gridDim.x) of the grouped order. The one idea is that the ring outlives the tile: the producer
// keeps running ahead by up to 4 stages, so the first stages of tile t + 1 load while the consumers
// store tile t, and the next tile's first wgmma finds its data already there. Three consequences,
// each marked in the code:
//   * one counter, `fill`, numbers the stage fills of the block across all its tiles; stage and
//     phase come from it (stage fill % 4, parity (fill / 4) & 1) on both sides, instead of from kt;
//   * the consumers release a tile's last stage after their final wgmma_wait<0>, before the
//     epilogue (in v6/t07 it was never released: the block ended), so each fill gets exactly one
//     arrival per consumer thread and the producer can refill it during the stores;
//   * the accumulators are zeroed at the start of every tile.
//
//   grid        min(ceil(M/128) x ceil(N/256), number of SMs) blocks, one per SM (192 KiB smem)
//   tile order  v6's grouped order (8 block rows per group, column by column inside a group) as a
//               function of a tile number; block b takes numbers b, b + G, ...; so the G tiles in
//               flight at any time are G consecutive numbers, the same L2-friendly window as one
//               wave of v6/t07 (tile_coords below explains it)
//   block       as t07: producer warpgroup (setmaxnreg 40, one thread issues TMA), two consumer
//               warpgroups (setmaxnreg 232) of 64 x 256 each, 128 x 256 x 64 tiles, 4 stages,
//               full/empty mbarriers
//   ragged      as v6: TMA zero-fills boxes past M, N and K; C is stored with predicates; shapes
//               TMA cannot describe (K % 8, N % 8, alignment, sizes >= 2^31) run v5's code
//
// Prediction: +3-8% over t07 at 4096^3. v6/t07 leave an SM's tensor cores idle during each block's
// epilogue and ring fill. At ~700 TFLOP/s a 128 x 256 tile with K = 4096 takes ~50 us of
// mainloop (64 k-steps of ~0.8 us); its epilogue writes 128 KiB of fp32 through predicated 8-byte
// stores, a few us when many SMs store at once, plus ~1-2 us for the next block to start and
// refill its ring. Public measurements (CUTLASS's persistent against non-persistent kernels of the
// same tile) put the gain at 5-10%. What it does not fix: the tail. Tiles are dealt out
// statically, so 512 tiles on 132 SMs is still 3.88 waves, and shapes just past a wave boundary
// (the chapter's "mystery" sweep) still fall off the cliff; only smaller or stream-K tiles change
// that. Nor is the epilogue overlapped with this block's own wgmmas: both consumers store at the
// same time (a ping-pong of the two consumers on different tiles, or C staged through shared
// memory and stored by TMA, would hide it: the next steps).
// Measured (H100, 2026-11-26, one run): +2.4% over t07 at 4096^3 (701.6 -> 718.6), below the
// predicted 3-8%; +0.2% at 8192^3 (752.5 -> 754.2), where a block's 128 k-steps make the per-tile
// fill and epilogue half as large a share as at 4096^3, and v6 was already at 97% of cuBLAS.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "ch03_gemm.h"
#include "ch03_mma_gemm.cuh"
#include "gpu.h"
#include "hopper.cuh"
#include "tensor_map.h"
#include "registry.h"

namespace fa::ch03 {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;
constexpr int kStages = 4;
constexpr int kConsumers = 2;                     // warpgroups that multiply
constexpr int kThreads = 128 * (1 + kConsumers);  // + the producer warpgroup
// Registers per thread after the split. Launched at 168 (65536 / 384): 40 + 2 x 232 = 3 x 168.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (1 + kConsumers) * 168,
              "setmaxnreg: the consumers cannot take more than the block was launched with");
constexpr int kRowsPerConsumer = kBM / kConsumers;    // 64: one wgmma M
constexpr int kSwizzleCols = 64;                      // 128 bytes of 16-bit elements
constexpr int kABytes = kBM * kBK * 2;                // 16 KiB
constexpr int kBStripBytes = kBK * kSwizzleCols * 2;  // 8 KiB: 64 k-rows of one 64-column strip
constexpr int kBBytes = kBK * kBN * 2;                // 32 KiB = 4 strips
constexpr int kStageBytes = kABytes + kBBytes;        // what TMA delivers per stage
constexpr int kAtomBytes = 1024;                      // 8 rows x 128 bytes: one swizzle atom
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + kAtomBytes;  // + barriers,
                                                                                  // + alignment
// Shapes TMA cannot load run this registered kernel. Called through the registry, not by
// instantiating its template here: a kernel template instantiated in two translation units shares
// its host-side "attribute already set" flag but not its device code (each file is its own CUDA
// module), so the second copy would launch without its shared-memory opt-in.
constexpr const char* kFallback = "03/v5_tensor_core";
static_assert(kStageBytes % kAtomBytes == 0 && kABytes % kAtomBytes == 0, "atoms stay aligned");

// The grouped order of v5 and v6, now a function of a tile index rather than of blockIdx.x: tiles
// are numbered in groups of kGroupM (8) block rows; inside a group, column by column, each column
// top to bottom. The persistent grid walks this numbering with a stride of gridDim.x (block b takes
// tiles b, b + G, b + 2G, ...), so at any moment the G tiles in flight are G consecutive numbers:
// the same window of the order that one wave of v6's blocks covers, and the same L2 reuse (at
// 4096^3 a group is 8 x 16 = 128 tiles, so the 132 in flight are one group and 4 tiles of the
// next: at each k-step, 64-column slices of about 1150 rows of A and of all of B are live in L2).
struct TileCoords {
  int row0, col0;  // the first row and column of the tile in C (< 2^31: the launcher checks)
};

__device__ __forceinline__ TileCoords tile_coords(int64_t tile, int64_t tiles_m, int64_t tiles_n) {
  const int64_t group_size = int64_t(mma_gemm::kGroupM) * tiles_n;
  const int64_t first_m = (tile / group_size) * mma_gemm::kGroupM;
  const int64_t group_rows =
      (tiles_m - first_m < mma_gemm::kGroupM) ? tiles_m - first_m : mma_gemm::kGroupM;
  const int64_t tile_m = first_m + (tile % group_size) % group_rows;
  const int64_t tile_n = (tile % group_size) / group_rows;
  return {int(tile_m * kBM), int(tile_n * kBN)};
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_t08_kernel(const __grid_constant__ CUtensorMap tmap_a,
                    const __grid_constant__ CUtensorMap tmap_b, float* __restrict__ C, int64_t M,
                    int64_t N, int64_t K, bool pair_ok) {
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and wgmma assumes atoms start at multiples of
  // 1024: align the stage buffers by hand (dynamic shared memory only promises 16 bytes).
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);  // TMA -> MMA
  uint64_t* empty = full + kStages;                                            // MMA -> TMA
  auto a_tile = [&](int s) { return smem + s * kStageBytes; };
  auto b_tile = [&](int s) { return smem + s * kStageBytes + kABytes; };

  const int64_t tiles_m = ceil_div(M, kBM), tiles_n = ceil_div(N, kBN);
  const int64_t tiles = tiles_m * tiles_n;
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;
  const int k_tiles = int(ceil_div(K, kBK));

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&full[s], 1);                  // the producer's expect_tx arrival
      hopper::mbar_init(&empty[s], 128 * kConsumers);  // every consumer thread, once per use
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();

  // The ring does not restart at a tile boundary: `fill` counts the stage fills of this block over
  // all its tiles (tile after tile, k-step after k-step), and both sides derive the stage and the
  // phase from it, stage = fill % kStages and use = fill / kStages, exactly as t07 did from kt.
  // Producer and consumers walk the same tiles in the same order with the same k_tiles per tile,
  // so their counts agree at every step. 64 bits, so it never wraps.

  if (warpgroup == 0) {
    // ---- producer: gives its registers back, then one thread fills the ring for every tile of
    // this block. It runs up to kStages fills ahead of the consumers, across tile boundaries: while
    // they store one tile's C, the first stages of their next tile are already loading.
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      uint64_t fill = 0;
      for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const TileCoords tc = tile_coords(tile, tiles_m, tiles_n);
        for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
          const int s = int(fill % kStages);
          const uint64_t use = fill / kStages;
          if (use > 0) hopper::mbar_wait(&empty[s], uint32_t((use - 1) & 1));  // consumers freed it
          hopper::mbar_arrive_expect_tx(&full[s], kStageBytes);
          hopper::tma_load_2d(a_tile(s), &tmap_a, &full[s], kt * kBK, tc.row0);
          for (int j = 0; j < kBN / kSwizzleCols; ++j)
            hopper::tma_load_2d(b_tile(s) + j * kBStripBytes, &tmap_b, &full[s],
                                tc.col0 + j * kSwizzleCols, kt * kBK);
        }
      }
    }
    return;  // the producer's other threads have nothing to do
  }

  // ---- consumers: take the producer's registers (waits until the dec has released them) ----
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;  // the accumulator layout (hopper.cuh)
  float acc[128];
  uint64_t fill = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const TileCoords tc = tile_coords(tile, tiles_m, tiles_n);
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;

    for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
      const int s = int(fill % kStages);
      hopper::mbar_wait(&full[s], uint32_t((fill / kStages) & 1));
      hopper::fence_registers(acc);
      hopper::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        // A: this consumer's 64 rows (64 x 128 bytes further), 16 k = 32 bytes further per step.
        const uint64_t da = hopper::smem_desc_sw128(
            a_tile(s) + consumer * kRowsPerConsumer * 128 + kk * 32, 16, kAtomBytes);
        // B: 16 k-rows = two 8-row groups = 2048 bytes further per step; strips 8 KiB apart.
        const uint64_t db =
            hopper::smem_desc_sw128(b_tile(s) + kk * 2 * kAtomBytes, kBStripBytes, kAtomBytes);
        if constexpr (std::is_same_v<T, __nv_bfloat16>)
          hopper::wgmma_m64n256k16_bf16(acc, da, db, 1);
        else
          hopper::wgmma_m64n256k16_f16(acc, da, db, 1);
      }
      hopper::wgmma_commit();
      hopper::wgmma_wait<1>();  // the batch of the previous fill is done reading its stage
      hopper::fence_registers(acc);
      if (kt > 0) hopper::mbar_arrive(&empty[(fill - 1) % kStages]);
    }
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc);
    // The tile's last stage is free as soon as its wgmmas are done: release it *before* the
    // epilogue (v6 and t07 never released it, the block ended), so the producer can refill it
    // with the next tile's data while these threads store C. Every fill thus gets exactly one
    // arrival from each consumer thread: at the next k-step for all but a tile's last, here for it.
    if (k_tiles > 0) hopper::mbar_arrive(&empty[(fill - 1) % kStages]);

    // Epilogue, as in v6: thread t holds rows 16w + g and 16w + g + 8 of this consumer's 64,
    // columns 8j + 2q and 8j + 2q + 1 for j = 0..31, stored with predicates against M and N.
    const int64_t r = int64_t(tc.row0) + consumer * kRowsPerConsumer + 16 * w + g;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int64_t c = int64_t(tc.col0) + 8 * j + 2 * q;
      mma_gemm::store_pair(C, r, c, M, N, acc[4 * j], acc[4 * j + 1], pair_ok);
      mma_gemm::store_pair(C, r + 8, c, M, N, acc[4 * j + 2], acc[4 * j + 3], pair_ok);
    }
  }
}

// ---- host side -------------------------------------------------------------------------------------

// A row-major [rows, cols] 16-bit matrix, read in boxes of box_rows x 64 columns (128 bytes, the
// widest box the 128-byte swizzle allows), swizzled in shared memory, zeros outside the matrix.
CUtensorMap make_tmap(const void* base, int64_t rows, int64_t cols, int box_rows, DType dtype) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};  // bytes between rows
  const cuuint32_t box[2] = {cuuint32_t(kSwizzleCols), cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult rc = tensor_map_encode_fn()(
      &map,
      dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FA_REQUIRE(rc == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " +
                                     std::to_string(int(rc)) + " (rows " + std::to_string(rows) +
                                     ", cols " + std::to_string(cols) + ")");
  return map;
}

template <class T>
void set_smem_limit() {
  static const bool done = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(gemm_t08_kernel<T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)done;
}

template <class T>
void launch(const void* A, const void* B, float* C, GemmShape s, DType dtype, int sm_count,
            cudaStream_t stream) {
  // TMA's rules: 16-byte aligned base and row strides, sizes below 2^31 (coordinates are int32).
  const bool tma_ok = s.K % 8 == 0 && s.N % 8 == 0 && mma_gemm::aligned16(A) &&
                      mma_gemm::aligned16(B) && s.M < (int64_t(1) << 31) &&
                      s.N < (int64_t(1) << 31) && s.K < (int64_t(1) << 31);
  if (!tma_ok) {  // ragged strides: v5's mma.sync code, which assembles odd chunks by hand
    const GemmKernel* v5 = find_entry<GemmKernel>(kFallback);
    FA_REQUIRE(v5 != nullptr, std::string(kFallback) + " is not linked in");
    v5->run(A, B, C, s, dtype, stream);
    return;
  }
  if (s.M == 0 || s.N == 0) return;
  set_smem_limit<T>();
  const CUtensorMap tmap_a = make_tmap(A, s.M, s.K, kBM, dtype);
  const CUtensorMap tmap_b = make_tmap(B, s.K, s.N, kBK, dtype);
  // The persistent grid: one block per SM (192 KiB of shared memory allow no second), never more
  // blocks than tiles. Each block walks tiles blockIdx.x, + gridDim.x, ... (the kernel's loop).
  const int64_t tiles = ceil_div(s.M, kBM) * ceil_div(s.N, kBN);
  const int64_t blocks = tiles < int64_t(sm_count) ? tiles : int64_t(sm_count);
  const bool pair_ok = reinterpret_cast<uintptr_t>(C) % 8 == 0;  // N is even here
  gemm_t08_kernel<T><<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(tmap_a, tmap_b, C, s.M,
                                                                         s.N, s.K, pair_ok);
  FA_CHECK_LAUNCH();
}

void gemm_t08(const void* A, const void* B, float* C, GemmShape s, DType dtype,
              cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype == DType::F32, "03/t08_persistent takes bf16 and fp16 only");
  const GpuInfo& gpu = gpu_info();
  FA_UNSUPPORTED_IF(gpu.sm != 90,
                    "03/t08_persistent uses sm_90a instructions (wgmma, TMA): it runs on compute "
                    "capability 9.0 (H100, H200) only");
  FA_REQUIRE(gpu.sm_count > 0, "03/t08_persistent: the GPU reports no SMs");
  if (dtype == DType::BF16)
    launch<__nv_bfloat16>(A, B, C, s, dtype, gpu.sm_count, stream);
  else
    launch<__half>(A, B, C, s, dtype, gpu.sm_count, stream);
}

}  // namespace

FA_REGISTER(GemmKernel, {"03/t08_persistent",
                         gemm_t08,
                         "t07 + persistent: one block per SM walks 128x256 tiles in grouped order, "
                         "the mbarrier ring continuing across tiles",
                         {DType::BF16, DType::F16},
                         90});

}  // namespace fa::ch03
