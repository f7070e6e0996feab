// 03/t17_conflict_free_staging: t15 with C written to its staging buffers without bank conflicts.
// Status: verified on an H100 (GPU tests, the long ones included, and the four sanitizers pass).
// Speed: measured in chapters/03_tiled_matmul/tuning/README.md (H100, 2026-11-26, bf16, cuBLAS
// and t15 in the same run): 99.8-100.4% of cuBLAS at 4096^3, 99.5-99.7% at 8192^3: the same as t15.
// The wavefronts fell from 4.8 to 2.7 a store at 4096^3 (Nsight Compute), the time did not.
//
// What changed vs t15: which of a thread's four 8-column groups each of its epilogue's stores
// writes. Since t10 every consumer warp stages its C in 16 x 32 fp32 boxes with the 128-byte
// swizzle, thread (g, q) writing columns 8jj + 2q, +1 of rows g and g + 8 with one 8-byte
// st.shared.v2 for each jj in turn, and t10's header counted 2 wavefronts for each: the 32 lanes
// cover the 32 banks exactly twice. Nsight Compute says otherwise: at 8192^3 t15's 1,048,576
// shared stores (2048 tiles x 8 warps x 64) took 5,228,021 wavefronts, 5.0 each, and it reports
// them as bank conflicts (notes/measured/h100-2026-11-26e/ncu_t15_8192.txt). The count of 2
// assumed the warp's 32 stores are served together. An 8-byte access is served a half-warp at a
// time: lanes 0-15 (g = 0..3) and 16-31 (g = 4..7) separately, and each half must cover the 32
// banks once to take one wavefront. A row is 128 bytes, so a store's bank is set by its 16-byte
// chunk alone: (2jj + q / 2) ^ g, and its half (q odd). For jj = 0 the half-warp g = 0..3 writes
// chunks g (q = 0, 1) and 1 ^ g (q = 2, 3): chunks 0..3 twice, 4..7 never, 2 wavefronts where 1
// would do, 4 a store instead of 2 (measured 5: the TMA engine reads the same buffers meanwhile).
//
// The fix changes no layout (the tensor map's swizzle fixes where every element must go), only
// the order: a thread with odd g writes its groups in the order 2, 3, 0, 1 (jj ^ 2) where even g
// writes 0, 1, 2, 3. Then the chunks of one store are (2jj + q / 2) ^ g ^ 4 for odd g and
// (2jj + q / 2) ^ g for even g: over g = 0..3 and q / 2 = 0, 1 all 8 chunks, each in both halves,
// every bank once a half-warp (enumerated over the 4 stores and 2 halves: each of the 32 banks is
// touched once per half). The price: which accumulator a store writes now differs between threads, and
// registers cannot be indexed by such a value, so each value is chosen by a select (16 a box).
//
// Prediction: the epilogue's 512 shared stores a tile took ~2,560 wavefronts (5 each) and should
// take ~1,024 (2 each); at one wavefront a clock, ~0.75 us less per tile of ~46 us at 4096^3:
// +1-1.5% over t15 there, +0.5-0.8% at 8192^3 (a tile of ~88 us).
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
// C's staging: each consumer warp stores its 16-row slab in boxes of 16 rows x 32 fp32 columns
// (128 bytes a row: the widest box the 128-byte swizzle allows), through two buffers of its own.
constexpr int kCRows = 16, kCCols = 32;
constexpr int kCBoxBytes = kCRows * kCCols * 4;  // 2 KiB = 2 swizzle atoms
constexpr int kCBuffers = 2;
constexpr int kConsumerWarps = 4 * kConsumers;  // 8
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kStagingBytes = kConsumerWarps * kCBuffers * kCBoxBytes;  // 32 KiB
// The ring, C's staging, the barriers, and room to align the ring to a swizzle atom: 230,464 bytes.
constexpr int kSmemBytes = kRingBytes + kStagingBytes + 2 * kStages * 8 + kAtomBytes;
static_assert(kSmemBytes <= 227 * 1024, "an H100 block may have 227 KiB of shared memory");
static_assert(kRingBytes % kAtomBytes == 0 && kCBoxBytes % kAtomBytes == 0,
              "the staging buffers start at swizzle atoms (multiples of 1024 bytes)");
// Shapes TMA cannot load run this registered kernel. Called through the registry, not by
// instantiating its template here: a kernel template instantiated in two translation units shares
// its host-side "attribute already set" flag but not its device code (each file is its own CUDA
// module), so the second copy would launch without its shared-memory opt-in.
constexpr const char* kFallback = "03/v5_tensor_core";
static_assert(kStageBytes % kAtomBytes == 0 && kABytes % kAtomBytes == 0, "atoms stay aligned");

// Two fp32 to shared memory (an 8-byte st.shared at a shared-window address).
__device__ __forceinline__ void st_shared_v2(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

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
    gemm_t17_kernel(const __grid_constant__ CUtensorMap tmap_a,
                    const __grid_constant__ CUtensorMap tmap_b,
                    const __grid_constant__ CUtensorMap tmap_c, int64_t M, int64_t N, int64_t K) {
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and wgmma assumes atoms start at multiples of
  // 1024: align the stage buffers by hand (dynamic shared memory only promises 16 bytes).
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* staging = smem + kRingBytes;  // [kConsumerWarps][kCBuffers] boxes of C
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + kStagingBytes);  // TMA -> MMA
  uint64_t* empty = full + kStages;                                       // MMA -> TMA
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
  // all its tiles (tile after tile, k-step after k-step). The producer derives the stage and the
  // phase from it, stage = fill % kStages and use = fill / kStages, exactly as t07 did from kt;
  // the consumers carry the same two values as counters (the stage wraps at kStages, the phase
  // flips when it does). Producer and consumers walk the same tiles in the same order with the
  // same k_tiles per tile, so they agree at every step. 64 bits, so `fill` never wraps.

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
  const int lane = t % 32;
  // This warp's two staging buffers, and where this thread's values go in them. The buffer holds
  // 16 rows of 128 bytes in the 128-byte swizzle the tensor map names: the 16-byte chunk c of row r
  // lies at chunk c ^ (r % 8), rows 8 apart are 1024 bytes apart (the buffers start at multiples
  // of 1024, so the engine's swizzle, taken from address bits, matches). Thread (g, q) holds, for
  // the box's 4 groups of 8 columns jj = 0..3, columns 8jj + 2q, +1 (chunk 2jj + q / 2, 8 bytes
  // into it when q is odd) of rows g and g + 8, both with r % 8 = g.
  const uint32_t my_staging =
      mma::smem_addr(staging) + uint32_t((consumer * 4 + w) * kCBuffers * kCBoxBytes);
  const uint32_t my_row = uint32_t(g * 128 + (q & 1) * 8);
  // The order of this thread's four column groups in a box: group jj is written by the jj-th store
  // of even g and the (jj ^ 2)-th of odd g, so that each half-warp's 16 stores of one instruction
  // fill all 32 banks once (see the header). In chunk units the store's chunk is then
  // (2 jj) ^ my_chunk: (2 (jj ^ 2 (g & 1)) + (q >> 1)) ^ g, with the sum's two terms disjoint bits.
  const bool odd_g = (g & 1) != 0;
  const uint32_t my_chunk = uint32_t((q >> 1) ^ g ^ (4 * (g & 1)));
  uint32_t boxes = 0;  // boxes this warp has stored, over all its tiles: box b uses buffer b % 2
  float acc[128];
  // The descriptors of stage 0, built once. A stage and a k16 step only move the start address,
  // so inside the mainloop each descriptor costs one add (smem_desc_advance).
  const uint64_t desc_a0 = hopper::smem_desc_sw128(a_tile(0) + consumer * kRowsPerConsumer * 128,
                                                   16, kAtomBytes);  // this consumer's 64 rows
  const uint64_t desc_b0 = hopper::smem_desc_sw128(b_tile(0), kBStripBytes, kAtomBytes);
  // The producer's fill counter, carried as what the consumers need of it: the stage it names
  // (fill % kStages), its use's parity ((fill / kStages) & 1), and the stage of the fill before.
  int s = 0, prev_s = 0;
  uint32_t phase = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const TileCoords tc = tile_coords(tile, tiles_m, tiles_n);
    // The tile's first wgmma overwrites the accumulators (accumulate = 0) instead of adding to
    // zeros written before it; only a tile with no k-step (K = 0) needs them zeroed.
    if (k_tiles == 0) {
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
      hopper::mbar_wait(&full[s], phase);
      hopper::fence_registers(acc);
      hopper::wgmma_fence();
      const uint32_t stage = uint32_t(s) * kStageBytes;
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        // A: 16 k = 32 bytes further per step. B: 16 k-rows = two 8-row groups = 2048 bytes.
        const uint64_t da = hopper::smem_desc_advance(desc_a0, stage + kk * 32);
        const uint64_t db = hopper::smem_desc_advance(desc_b0, stage + kk * 2 * kAtomBytes);
        if constexpr (std::is_same_v<T, __nv_bfloat16>)
          hopper::wgmma_m64n256k16_bf16(acc, da, db, kt > 0 || kk > 0);
        else
          hopper::wgmma_m64n256k16_f16(acc, da, db, kt > 0 || kk > 0);
      }
      hopper::wgmma_commit();
      hopper::wgmma_wait<1>();  // the batch of the previous k-step is done reading its stage
      hopper::fence_registers(acc);
      if (kt > 0) hopper::mbar_arrive(&empty[prev_s]);
      prev_s = s;
      if (++s == kStages) s = 0, phase ^= 1;
    }
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc);
    // The tile's last stage is free as soon as its wgmmas are done: release it *before* the
    // epilogue (v6 and t07 never released it, the block ended), so the producer can refill it
    // with the next tile's data while these threads store C. Every fill thus gets exactly one
    // arrival from each consumer thread: at the next k-step for all but a tile's last, here for it.
    if (k_tiles > 0) hopper::mbar_arrive(&empty[prev_s]);

    // Epilogue: this warp's 16 x 256 slab (rows 16w..16w+15 of this consumer's 64) leaves as up to
    // 8 boxes of 16 x 32 through the warp's two buffers. Every condition below is the same for all
    // 32 threads of the warp (it depends on the tile, the warp and the box), so the __syncwarps are
    // reached by all of them. A box wholly outside C is skipped (no writes, no store, no count);
    // one partly outside is stored whole and the engine clips it at M and N.
    // 64-bit sums: row0 < M < 2^31, but row0 + 112 need not fit an int; coordinates that pass the
    // tests below are < M or < N, so they do.
    const int64_t slab_row = int64_t(tc.row0) + consumer * kRowsPerConsumer + 16 * w;
    if (slab_row < M) {
#pragma unroll
      for (int i = 0; i < kBN / kCCols; ++i) {
        const int64_t box_col = int64_t(tc.col0) + i * kCCols;
        if (box_col < N) {
          const uint32_t buf = my_staging + (boxes % kCBuffers) * kCBoxBytes;
          // The buffer was last read by box `boxes - 2`. Lane 0 committed one group a box, so
          // "at most 1 group still reading" (box `boxes - 1`) means box `boxes - 2` is done.
          // Waiting here rather than after the previous store gives the engine the most time, and
          // puts the wait for a tile's last two boxes into the next tile's epilogue.
          if (lane == 0) hopper::bulk_wait_group_read<1>();
          __syncwarp();
#pragma unroll
          for (int jj = 0; jj < kCCols / 8; ++jj) {
            // This store writes the accumulator's 8-column group j (even g) or j2 (odd g): a
            // select, as registers cannot be indexed by a value that differs between threads.
            const int j = i * (kCCols / 8) + jj, j2 = i * (kCCols / 8) + (jj ^ 2);
            const uint32_t chunk = ((2 * uint32_t(jj)) ^ my_chunk) * 16;
            st_shared_v2(buf + my_row + chunk, odd_g ? acc[4 * j2] : acc[4 * j],
                         odd_g ? acc[4 * j2 + 1] : acc[4 * j + 1]);  // row g
            st_shared_v2(buf + 1024 + my_row + chunk, odd_g ? acc[4 * j2 + 2] : acc[4 * j + 2],
                         odd_g ? acc[4 * j2 + 3] : acc[4 * j + 3]);  // row g + 8
          }
          hopper::fence_proxy_async_smem();  // each thread's writes, visible to the engine...
          __syncwarp();  // ...before lane 0 (ordered after every lane's fence) issues
          if (lane == 0) {
            hopper::tma_store_2d(&tmap_c, buf, int(box_col), int(slab_row));
            hopper::bulk_commit_group();  // one group a box: the waits above count boxes
          }
          ++boxes;
        }
      }
    }
  }
  // The stores still in flight read this block's shared memory and write C: finish them before the
  // block exits (its shared memory may then be given to another block).
  if (lane == 0) hopper::bulk_wait_group<0>();
}

// ---- host side ---------------------------------------------------------------------------------

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

// C: a row-major [M, N] fp32 matrix, written in boxes of kCRows x kCCols (16 x 32: 128 bytes a row,
// the widest box the 128-byte swizzle allows) from the staging buffers, laid out there with that
// swizzle. The engine writes only the elements of a box that lie inside the matrix. Needs C 16-byte
// aligned and N * 4 a multiple of 16 (the launcher's tma_ok).
CUtensorMap make_tmap_c(float* C, int64_t M, int64_t N) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(N), cuuint64_t(M)};
  const cuuint64_t strides[1] = {cuuint64_t(N) * 4};  // bytes between rows
  const cuuint32_t box[2] = {cuuint32_t(kCCols), cuuint32_t(kCRows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult rc = tensor_map_encode_fn()(
      &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, C, dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FA_REQUIRE(rc == CUDA_SUCCESS, "cuTensorMapEncodeTiled (C) failed with CUresult " +
                                     std::to_string(int(rc)) + " (M " + std::to_string(M) + ", N " +
                                     std::to_string(N) + ")");
  return map;
}

template <class T>
void set_smem_limit() {
  static const bool done = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(gemm_t17_kernel<T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)done;
}

template <class T>
void launch(const void* A, const void* B, float* C, GemmShape s, DType dtype, int sm_count,
            cudaStream_t stream) {
  // TMA's rules: 16-byte aligned base and row strides, sizes below 2^31 (coordinates are int32).
  // C's map too: its rows are N * 4 bytes apart (a multiple of 16 since N % 8 == 0) and C must be
  // 16-byte aligned (cudaMalloc's pointers are; a pointer into the middle of a buffer may not be).
  const bool tma_ok = s.K % 8 == 0 && s.N % 8 == 0 && mma_gemm::aligned16(A) &&
                      mma_gemm::aligned16(B) && mma_gemm::aligned16(C) &&
                      s.M < (int64_t(1) << 31) && s.N < (int64_t(1) << 31) &&
                      s.K < (int64_t(1) << 31);
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
  const CUtensorMap tmap_c = make_tmap_c(C, s.M, s.N);
  // The persistent grid in whole rounds: as many rounds as one block per SM needs (225 KiB of
  // shared memory allow no second block), and no more blocks than those rounds need, so every block
  // walks the same number of tiles (blockIdx.x, + gridDim.x, ...) and each round's tiles are one
  // window of the grouped order, the same window for every round.
  const int64_t tiles = ceil_div(s.M, kBM) * ceil_div(s.N, kBN);
  const int64_t rounds = ceil_div(tiles, int64_t(sm_count));
  const int64_t blocks = ceil_div(tiles, rounds);
  gemm_t17_kernel<T>
      <<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(tmap_a, tmap_b, tmap_c, s.M, s.N, s.K);
  FA_CHECK_LAUNCH();
}

void gemm_t17(const void* A, const void* B, float* C, GemmShape s, DType dtype,
              cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype == DType::F32, "03/t17_conflict_free_staging takes bf16 and fp16 only");
  const GpuInfo& gpu = gpu_info();
  FA_UNSUPPORTED_IF(
      gpu.sm != 90,
      "03/t17_conflict_free_staging uses sm_90a instructions (wgmma, TMA): it runs on compute "
      "capability 9.0 (H100, H200) only");
  FA_REQUIRE(gpu.sm_count > 0, "03/t17_conflict_free_staging: the GPU reports no SMs");
  if (dtype == DType::BF16)
    launch<__nv_bfloat16>(A, B, C, s, dtype, gpu.sm_count, stream);
  else
    launch<__half>(A, B, C, s, dtype, gpu.sm_count, stream);
}

}  // namespace

FA_REGISTER(GemmKernel, {"03/t17_conflict_free_staging",
                         gemm_t17,
                         "t15 with C staged without bank conflicts: odd rows of a warp's 8 write "
                         "their column groups in the other order",
                         {DType::BF16, DType::F16},
                         90});

}  // namespace fa::ch03
