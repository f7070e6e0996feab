// 03/t12_pingpong: t10 with each consumer warpgroup on a tile of its own, taking turns at the
// tensor cores (ping-pong), so that one's epilogue runs while the other multiplies.
// Status: passes its GPU tests and the sanitizers, and is SLOWER than t10 (80% of cuBLAS): kept
// as a measured step that did not pay (end of this header).
// Speed: measured in chapters/03_tiled_matmul/tuning/README.md
//
// What changed vs t10: who owns a tile, and when each consumer multiplies. In t10 both consumer
// warpgroups compute halves (64 rows each) of the same 128 x 256 tile, so both reach the epilogue
// at the same moment and no wgmma runs on the SM while C is converted, staged and handed to the
// TMA engine; the producer is already loading the next tile (t08) but nobody multiplies. Here each
// consumer owns whole tiles, and the two take turns at the mainloop: while consumer 0 stores tile
// n's C, consumer 1 runs tile n + 1's mainloop, and the tensor cores idle only at the block's very
// end. This is the idea of CUTLASS 3's "KernelTmaWarpSpecializedPingpong" kernel schedule,
// written here from the idea (the two consumers' mainloops ordered by a barrier, the producer
// filling the ring for their tiles in turn).
//
//   tile      128 x 128 a consumer (two m64n128k16 a k16 step: rows 0..63 and 64..127, 2 x 64
//             fp32 accumulators a thread), rather than 64 x 256 (one m64n256k16, 128 fp32): both
//             keep 128 accumulators a thread and give the same tile count, 1024 at 4096^3 and 4096
//             at 8192^3 (3.88 and 15.52 a consumer, 7.76 and 31.03 a block: t10's 3.88 and 15.52
//             a block in tiles of half the work, so the same 3.0% wave tail at both sizes). They
//             differ in traffic. From L2 into shared memory a k-step of 64 brings (128 + 128) x 64
//             x 2 = 32 KiB for 1 M multiply-adds at 128 x 128, (64 + 256) x 64 x 2 = 40 KiB at
//             64 x 256 (t10's 128 x 256: 48 KiB for 2 M, i.e. 24 KiB a million). Shared-memory
//             reads of the wgmmas, a k16 step (262,144 multiply-adds) at 128 x 128: 2 x (A 2 KiB +
//             B 4 KiB) = 12 KiB, at 64 x 256: A 2 KiB + B 8 KiB = 10 KiB (t10: the same 10 KiB, as
//             each consumer reads the shared B on its own). Reads plus TMA's writes per million
//             multiply-adds: 48 + 32 = 80 KiB at 128 x 128, 40 + 40 = 80 KiB at 64 x 256, 40 + 24
//             = 64 KiB in t10. Equal in shared memory, 128 x 128 moves a fifth less through L2 and
//             its 32 KiB stages fit 6 deep where 64 x 256's 40 KiB fit 4 (each stage a k-step of
//             ~512 cycles of tensor work): 128 x 128 it is.
//   ring      6 stages of 32 KiB (A 128 x 64, B 64 x 128 as two 64-column strips), filled by the
//             producer in the order the mainloops run: tile 0's k-steps (consumer 0), tile 1's
//             (consumer 1), tile 2's (consumer 0), ... A block walks t10's numbering (tiles b,
//             b + G, b + 2G, ... with G = gridDim.x, in the grouped order of 128 x 128 tiles) and
//             the n-th tile of that walk is consumer n % 2's, so the producer's code is t10's
//             unchanged and each consumer skips the other's fills: its n-th tile starts at fill
//             n x k_tiles. Each fill now has one consumer (128 arrivals on "empty", not 256).
//   turns     two named barriers, one per consumer ("your turn"). Consumer c waits on its own
//             before the mainloop of every tile but the block's first (bar.sync, 256 threads: its
//             128 and the other's 128 arrivals), and once it has issued its last k-step's wgmmas it
//             arrives on the other's (bar.arrive: no wait), then drains its wgmmas, releases the
//             last stage and stores C. So the mainloops alternate 0, 1, 0, 1, ... and never
//             interleave: interleaved, the two tiles would progress at half speed each and reach
//             their epilogues together again, as in t10. The turn is handed over before the last
//             k-step's wgmmas finish, so the other's first wgmmas queue behind them (its first 5
//             stages are loaded: the producer runs 6 fills ahead). A consumer arrives only when the
//             block has a next tile (n + 1), and waits only when n > 0, so every arrival meets its
//             wait and no barrier is left half-arrived at the block's end (a block with an odd
//             number of tiles, or one tile, included). At most one arrival is ever pending: the
//             next one on the same barrier comes after its owner's own wait, which needs the other
//             consumer to have passed its wait first.
//   epilogue  t10's TMA stores unchanged: each consumer warp stages its two 16 x 128 slabs (rows
//             16w.. of each 64-row half) as 8 boxes of 16 x 32 through its two 2 KiB buffers,
//             which no other warp touches, so nothing is shared between the consumers but the ring
//   smem      6 x 32 KiB ring + 32 KiB staging + barriers + 1 KiB alignment = 230,496 bytes,
//             under the 227 KiB (232,448 bytes) a block may have
//
// Prediction: +1-2% over t10 at 4096^3 (about 750-760 TFLOP/s: cuBLAS's 755 in reach), +0.5-1% at
// 8192^3, if the extra traffic stays hidden. The arithmetic: at ~750 TFLOP/s an SM does ~2.8
// multiply-adds a picosecond, so a 128 x 128 tile's mainloop (1 M multiply-adds a k-step) lasts
// ~24 us at 4096^3 (64 k-steps) and ~47 us at 8192^3 (128). Its epilogue (64 KiB of fp32: 256
// warp-wide st.shared of 2 wavefronts a warp, ~0.3 us of shared-memory bandwidth, and the engine's
// writes) is 1-3% of the other consumer's mainloop, so it hides whole; in t10 the same epilogue
// work, done by both consumers at once for a 128 x 256 tile of ~47 us (4096^3), leaves the tensor
// cores idle ~0.6-1 us a tile: 1-2% at 4096^3, half that at 8192^3, which is what t12 can win. The
// wave tail stays at 3.0% at both sizes (above); the block's last epilogue is now exposed, once a
// block (~0.3 us of ~190 us). The risks are the costs of the smaller tile: a third more L2-to-SM
// traffic than t10 (~11.6 TB/s at t10's speed, where t10 draws ~8.7 and t09 found no L2 limit
// there), and a quarter more shared-memory traffic per multiply-add (80 against 64 KiB a million
// above: ~160 bytes a cycle at the tensor cores' peak rate of ~2048 multiply-adds a cycle, against
// the 128 a cycle shared memory serves, so the kernel cannot pass ~80% of peak, ~790 TFLOP/s, if
// the wgmmas read B once for the four warps as assumed). If t12 is slower than t10, the smaller
// tile's traffic costs more than the epilogue it hides.
//
// Measured (H100 80GB HBM3, 2026-11-26, two rounds with t10 and cuBLAS in the same run): 612.3 and
// 612.0 TFLOP/s at 4096^3 (80.7% and 81.0% of cuBLAS; t10 746.4 and 745.9), 620.9 and 617.8 at
// 8192^3 (79.0%, 78.7%; t10 773.6, 769.3): 0.82x t10, far below the prediction. Nsight Compute at
// 4096^3: the tensor pipe busy 70.7% of the active cycles (t10: 90.9%), the top stall "barrier"
// (the turn barriers: 87 k cycles a warp against t10's 62 k), then "wait" and "dispatch". The
// reading: the strict turns let one warpgroup at a time issue wgmmas, and a single warpgroup's
// chain of m64n128k16 pairs does not keep the SM's tensor cores as busy as two warpgroups issuing
// side by side (t10), a loss of a fifth where the epilogue it hides was 1-2%. (Whether the
// shared-memory estimate above binds as well, this profile does not say.) A ping-pong schedule
// can win at most what the epilogue costs, which is large only where K is short or the epilogue
// heavy; at K = 4096 with a plain store it is the 1-2% above.
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

constexpr int kBM = 128, kBN = 128, kBK = 64;  // one consumer's tile
constexpr int kStages = 6;
constexpr int kConsumers = 2;                     // warpgroups that multiply, each its own tiles
constexpr int kThreads = 128 * (1 + kConsumers);  // + the producer warpgroup
// Registers per thread after the split. Launched at 168 (65536 / 384): 40 + 2 x 232 = 3 x 168.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (1 + kConsumers) * 168,
              "setmaxnreg: the consumers cannot take more than the block was launched with");
constexpr int kWgmmaM = 64;                           // rows of one wgmma
constexpr int kHalves = kBM / kWgmmaM;                // 2: a consumer's tile is two wgmma rows
constexpr int kSwizzleCols = 64;                      // 128 bytes of 16-bit elements
constexpr int kABytes = kBM * kBK * 2;                // 16 KiB
constexpr int kBStripBytes = kBK * kSwizzleCols * 2;  // 8 KiB: 64 k-rows of one 64-column strip
constexpr int kBBytes = kBK * kBN * 2;                // 16 KiB = 2 strips
constexpr int kStageBytes = kABytes + kBBytes;        // what TMA delivers per stage
constexpr int kAtomBytes = 1024;                      // 8 rows x 128 bytes: one swizzle atom
// C's staging, as t10: each consumer warp stores its 16-row slabs in boxes of 16 rows x 32 fp32
// columns (128 bytes a row: the widest box the 128-byte swizzle allows), through two buffers.
constexpr int kCRows = 16, kCCols = 32;
constexpr int kCBoxBytes = kCRows * kCCols * 4;  // 2 KiB = 2 swizzle atoms
constexpr int kCBuffers = 2;
constexpr int kConsumerWarps = 4 * kConsumers;  // 8
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kStagingBytes = kConsumerWarps * kCBuffers * kCBoxBytes;  // 32 KiB
// The ring, C's staging, the barriers, and room to align the ring to a swizzle atom: 230,496 bytes.
constexpr int kSmemBytes = kRingBytes + kStagingBytes + 2 * kStages * 8 + kAtomBytes;
static_assert(kSmemBytes <= 227 * 1024, "an H100 block may have 227 KiB of shared memory");
static_assert(kRingBytes % kAtomBytes == 0 && kCBoxBytes % kAtomBytes == 0,
              "the staging buffers start at swizzle atoms (multiples of 1024 bytes)");
static_assert(kStageBytes % kAtomBytes == 0 && kABytes % kAtomBytes == 0, "atoms stay aligned");
static_assert((kWgmmaM * 128) % kAtomBytes == 0, "the second 64 rows of A start at an atom");
// The turn barriers: named barrier kTurnBar + c says "consumer c may start its next mainloop".
// Id 0 is __syncthreads; nothing else in this kernel uses named barriers.
constexpr int kTurnBar = 1;
constexpr int kTurnThreads = 2 * 128;  // the waiting consumer's 128 and the other's 128 arrivals
// Shapes TMA cannot load run this registered kernel. Called through the registry, not by
// instantiating its template here: a kernel template instantiated in two translation units shares
// its host-side "attribute already set" flag but not its device code (each file is its own CUDA
// module), so the second copy would launch without its shared-memory opt-in.
constexpr const char* kFallback = "03/v5_tensor_core";

// Two fp32 to shared memory (an 8-byte st.shared at a shared-window address).
__device__ __forceinline__ void st_shared_v2(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// t10's grouped order, for 128 x 128 tiles: tiles are numbered in groups of kGroupM (8) block rows;
// inside a group, column by column, each column top to bottom. Block b walks tiles b, b + G,
// b + 2G, ... (G = gridDim.x), its two consumers taking them in turn, so the 2G tiles in flight
// (one in a mainloop and one in an epilogue or about to start, a block) are 2G consecutive numbers:
// at 4096^3 a group is 8 x 32 = 256 tiles, and the 264 in flight cover the same 128 x 256 x 132
// elements of C as t10's 132, with the same slices of A and B live in L2 at each k-step.
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
    gemm_t12_kernel(const __grid_constant__ CUtensorMap tmap_a,
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
      hopper::mbar_init(&full[s], 1);     // the producer's expect_tx arrival
      hopper::mbar_init(&empty[s], 128);  // every thread of the one consumer that used it
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();

  // The ring does not restart at a tile boundary: `fill` counts the stage fills of this block over
  // all its tiles (tile after tile, k-step after k-step), and both sides derive the stage and the
  // phase from it, stage = fill % kStages and use = fill / kStages. The block's n-th tile is fills
  // n x k_tiles .. (n + 1) x k_tiles - 1, whichever consumer computes it. 64 bits: never wraps.

  if (warpgroup == 0) {
    // ---- producer: t10's, unchanged but for the tile's shape. One thread fills the ring for the
    // block's tiles in its walk's order, which is the order the consumers' mainloops take turns in,
    // up to kStages fills ahead: the next tile's first stages load during the current mainloop.
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      uint64_t fill = 0;
      for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const TileCoords tc = tile_coords(tile, tiles_m, tiles_n);
        for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
          const int s = int(fill % kStages);
          const uint64_t use = fill / kStages;
          if (use > 0) hopper::mbar_wait(&empty[s], uint32_t((use - 1) & 1));  // consumer freed it
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
  // This warp's two staging buffers, and where this thread's values go in them (t10's layout: 16
  // rows of 128 bytes in the 128-byte swizzle, chunk c of row r at chunk c ^ (r % 8); thread (g, q)
  // holds columns 8jj + 2q, +1 of rows g and g + 8 for the box's 4 groups of 8 columns jj).
  const uint32_t my_staging =
      mma::smem_addr(staging) + uint32_t((consumer * 4 + w) * kCBuffers * kCBoxBytes);
  const uint32_t my_row = uint32_t(g * 128 + (q & 1) * 8);
  uint32_t boxes = 0;  // boxes this warp has stored, over all its tiles: box b uses buffer b % 2
  // acc[h]: rows 64h..64h+63 of the tile, the m64n128 accumulator layout (hopper.cuh): acc[h][4j +
  // 0, 1] = C[64h + 16w + g][8j + 2q, +1], acc[h][4j + 2, 3] = the same at row + 8, j = 0..15.
  float acc[kHalves][kBN / 2];
  const int64_t G = gridDim.x;
  // The block's n-th tile is consumer n % 2's: this consumer's are n = consumer, consumer + 2, ...
  for (int64_t n = consumer; blockIdx.x + n * G < tiles; n += kConsumers) {
    const int64_t tile = blockIdx.x + n * G;
    const TileCoords tc = tile_coords(tile, tiles_m, tiles_n);
    const bool block_has_next = blockIdx.x + (n + 1) * G < tiles;
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) acc[h][i] = 0.f;

    // Wait for this consumer's turn: the other consumer has issued the whole mainloop of tile
    // n - 1 (the block's first tile, n = 0, waits for nobody).
    if (n > 0) hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);

    uint64_t fill = uint64_t(n) * uint64_t(k_tiles);
    for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
      const int s = int(fill % kStages);
      hopper::mbar_wait(&full[s], uint32_t((fill / kStages) & 1));
#pragma unroll
      for (int h = 0; h < kHalves; ++h) hopper::fence_registers(acc[h]);
      hopper::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        // B: 16 k-rows = two 8-row groups = 2048 bytes further per step; strips 8 KiB apart.
        const uint64_t db =
            hopper::smem_desc_sw128(b_tile(s) + kk * 2 * kAtomBytes, kBStripBytes, kAtomBytes);
#pragma unroll
        for (int h = 0; h < kHalves; ++h) {
          // A: rows 64h.. (64 x 128 bytes further), 16 k = 32 bytes further per step.
          const uint64_t da =
              hopper::smem_desc_sw128(a_tile(s) + h * kWgmmaM * 128 + kk * 32, 16, kAtomBytes);
          hopper::wgmma_ss<kBN, T, 1>(acc[h], da, db, 1);
        }
      }
      hopper::wgmma_commit();
      hopper::wgmma_wait<1>();  // the batch of the previous fill is done reading its stage
#pragma unroll
      for (int h = 0; h < kHalves; ++h) hopper::fence_registers(acc[h]);
      if (kt > 0) hopper::mbar_arrive(&empty[(fill - 1) % kStages]);
    }
    // Every wgmma of this tile is issued: hand the tensor cores to the other consumer for the
    // block's next tile (if there is one: an arrival nobody waits for is not made), while this
    // tile's last batch still runs.
    if (block_has_next) hopper::named_bar_arrive(kTurnBar + (1 - consumer), kTurnThreads);
    hopper::wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < kHalves; ++h) hopper::fence_registers(acc[h]);
    // The tile's last stage is free as soon as its wgmmas are done: release it before the epilogue,
    // so the producer can refill it while these threads store C (t10). Every fill gets exactly one
    // arrival from each of its consumer's threads: at the next k-step for all but a tile's last,
    // here for it.
    if (k_tiles > 0) hopper::mbar_arrive(&empty[(fill - 1) % kStages]);

#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      // Epilogue (t10's, once per 64-row half): this warp's two 16 x 128 slabs (rows
      // 16w..16w+15 of each half) leave as up to 8 boxes of 16 x 32 through the warp's two
      // buffers, while the other consumer multiplies. Every condition below is the same for all 32
      // threads of the warp (it depends on the tile, the warp, the half and the box), so the
      // __syncwarps are reached by all of them. A box wholly outside C is skipped (no writes, no
      // store, no count); one partly outside is stored whole and the engine clips it at M and N.
      // 64-bit sums: row0 < M < 2^31, but row0 + 112 need not fit an int; coordinates that pass
      // the tests below are < M or < N, so they do.
      const int64_t slab_row = int64_t(tc.row0) + h * kWgmmaM + 16 * w;
      if (slab_row < M) {
#pragma unroll
        for (int i = 0; i < kBN / kCCols; ++i) {
          const int64_t box_col = int64_t(tc.col0) + i * kCCols;
          if (box_col < N) {
            const uint32_t buf = my_staging + (boxes % kCBuffers) * kCBoxBytes;
            // The buffer was last read by box `boxes - 2`. Lane 0 committed one group a box, so
            // "at most 1 group still reading" (box `boxes - 1`) means box `boxes - 2` is done.
            if (lane == 0) hopper::bulk_wait_group_read<1>();
            __syncwarp();
#pragma unroll
            for (int jj = 0; jj < kCCols / 8; ++jj) {
              const int j = i * (kCCols / 8) + jj;  // the accumulator's 8-column group
              const uint32_t chunk = uint32_t(((2 * jj + (q >> 1)) ^ g) * 16);
              st_shared_v2(buf + my_row + chunk, acc[h][4 * j], acc[h][4 * j + 1]);  // row g
              st_shared_v2(buf + 1024 + my_row + chunk, acc[h][4 * j + 2],
                           acc[h][4 * j + 3]);  // row g + 8
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
  }
  // The stores still in flight read this block's shared memory and write C: finish them before the
  // block exits (its shared memory may then be given to another block).
  if (lane == 0) hopper::bulk_wait_group<0>();
}

// ---- host side (t10's, but for the kernel's name and its 128-row, 128-column tiles) -------------

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

// C: a row-major [M, N] fp32 matrix, written in boxes of kCRows x kCCols (16 x 32) from the staging
// buffers, laid out there with the 128-byte swizzle. The engine writes only the elements of a box
// that lie inside the matrix. Needs C 16-byte aligned and N * 4 a multiple of 16 (tma_ok).
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
    FA_CUDA_CHECK(cudaFuncSetAttribute(gemm_t12_kernel<T>,
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
  // The persistent grid: one block per SM (225 KiB of shared memory allow no second), never more
  // blocks than tiles (with fewer tiles than SMs each block gets one, and its consumer 1 idles).
  const int64_t tiles = ceil_div(s.M, kBM) * ceil_div(s.N, kBN);
  const int64_t blocks = tiles < int64_t(sm_count) ? tiles : int64_t(sm_count);
  gemm_t12_kernel<T>
      <<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(tmap_a, tmap_b, tmap_c, s.M, s.N, s.K);
  FA_CHECK_LAUNCH();
}

void gemm_t12(const void* A, const void* B, float* C, GemmShape s, DType dtype,
              cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype == DType::F32, "03/t12_pingpong takes bf16 and fp16 only");
  const GpuInfo& gpu = gpu_info();
  FA_UNSUPPORTED_IF(gpu.sm != 90,
                    "03/t12_pingpong uses sm_90a instructions (wgmma, TMA): it runs on compute "
                    "capability 9.0 (H100, H200) only");
  FA_REQUIRE(gpu.sm_count > 0, "03/t12_pingpong: the GPU reports no SMs");
  if (dtype == DType::BF16)
    launch<__nv_bfloat16>(A, B, C, s, dtype, gpu.sm_count, stream);
  else
    launch<__half>(A, B, C, s, dtype, gpu.sm_count, stream);
}

}  // namespace

FA_REGISTER(GemmKernel, {"03/t12_pingpong",
                         gemm_t12,
                         "t10 with ping-pong consumers: each warpgroup owns 128 x 128 tiles and "
                         "the two take turns at the mainloop, one storing C while the other "
                         "multiplies",
                         {DType::BF16, DType::F16},
                         90});

}  // namespace fa::ch03
