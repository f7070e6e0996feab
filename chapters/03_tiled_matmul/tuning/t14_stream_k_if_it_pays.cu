// 03/t14_stream_k_if_it_pays: t13 with t11's Stream-K on the last wave, where it pays.
// Status: verified on an H100 (GPU tests, the long ones included, and the four sanitizers pass).
// Speed: measured in chapters/03_tiled_matmul/tuning/README.md (H100, 2026-11-26, bf16, cuBLAS
// and t13 in the same runs): 99.4-100.8% of cuBLAS at 8192^3 (+1.1-3.1% over t13), 97.9-98.7% at
// 4096^3 (unsplit, 0-1% below t13); 36% over t13 at 1000 x 4800 x 4000, a tail of 53 k-steps.
//
// What changed vs t13: the schedule of t11, and a rule for when to use it. t11 (read its header
// first: segments, first and later parts, the flags, why all blocks must be resident) shares the
// k-iterations of the last, partial wave of tiles equally among all blocks, so no SM idles at the
// end. Measured against t10 on an H100 it lost 0.8-1.6% at 4096^3 and gained 1.4-1.5% at 8192^3:
// the split has a price (a block computes parts of two or three tiles where it computed one or
// two, so most blocks store one more epilogue; later parts reduce-add; and out of step, the
// blocks share the L2 worse), and the tail it removes is 3.0% of the run at both sizes but a
// different number of k-steps: 7.8 a block at 4096^3 (64 k-steps a tile, 3.88 tiles a block) and
// 62 at 8192^3 (128 k-steps a tile, 15.52 tiles a block). The price, from the same measurements,
// is about 11 k-steps' time at 4096^3 and 32 at 8192^3. So t14 computes, before the launch, the
// tail in k-steps: k_tiles x (rounds x G - tiles) / G, what the busiest block runs past the
// average; it splits when that is at least kMinTailKSteps (32, the larger price), and otherwise
// runs t13's schedule unchanged: at 4096^3 t13, at 8192^3 t11's split on t13's mainloop.
//
//   rule      a threshold in k-steps, not a fraction of the run: the price of a split does not
//             shrink as K grows (an epilogue and a fixup per block), the tail it removes grows with
//             k_tiles. The threshold comes from two shapes on one GPU; it is a heuristic, like the
//             one CUTLASS's stream-K scheduler uses to choose between data-parallel, split-K and
//             stream-K (its "Heuristic" decomposition mode), not a model.
//   tests     a split needs a tail of 32 k-steps or more: K of 2048 or more (32 k-steps a tile)
//             with most of the last wave empty. LongRaggedManyTiles runs 1000 x 4800 x 4000 for
//             that (8 x 19 = 152 tiles: 20 in the last wave, a tail of 63 x 112 / 132 = 53
//             k-steps), where 4000 x 4000 x 1000 (16 k-steps a tile) now runs unsplit.
//
// Prediction: t13's speed at 4096^3 (the same schedule and code path), and t11's gain over t10
// at 8192^3, +1.4-1.5% over t13 there.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudaTypedefs.h>

#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

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

// ---- stream-K's additions: the reduce-add store and the flags between blocks --------------------

// Like tma_store_2d, but the engine adds the box into global memory instead of overwriting it:
// each element of C becomes C + box, performed as an atomic add in L2, so later parts of one tile
// may add at the same time. The element type (fp32) comes from the tensor map; the PTX ISA lists
// .add for cp.reduce.async.bulk.tensor with .f32 among its types (and .tile is the load mode of
// boxes, the same as the store's). Same bulk-group completion as the store.
__device__ __forceinline__ void tma_reduce_add_2d(const void* tmap, uint32_t src, int c0, int c1) {
#if FA_SM90A
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], "
      "[%1];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)),
      "r"(src), "r"(c0), "r"(c1)
      : "memory");
#else
  __trap();
#endif
}

// The flag protocol: a release store publishes "this slab of C is stored", an acquire load
// observes it (PTX memory consistency model: a release and an acquire at .gpu scope on the same
// location synchronise, so what the releasing thread wrote before is visible to what the acquiring
// thread does after).
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
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

// ---- the schedule: which k-iterations of which tiles a block computes, in which order -----------
//
// Tiles 0 .. dp_tiles - 1 (in the grouped order above) are data-parallel: whole, block b takes
// b, b + G, b + 2G, ... exactly as t10. The last sk_tiles tiles are stream-K: their
// sk_tiles x k_tiles k-iterations, laid end to end (tile after tile, k = 0 .. k_tiles - 1 in each),
// are cut into G contiguous ranges that differ by at most one iteration, block b's being
// [sk_begin, sk_end). A range starts and ends anywhere inside a tile, so a tile may be computed in
// parts by several blocks. The part that starts at k = 0 is the tile's FIRST part (it stores C);
// every other part is a LATER part (it adds onto C once the first part is stored).
// 32-bit throughout (the launcher checks tiles < 2^31 and sk_tiles x k_tiles < 2^31): the
// consumers keep this live beside their 128 accumulators, and 64-bit fields made ptxas spill.
struct Schedule {
  int dp_tiles;          // the data-parallel tiles come first in the order
  int sk_begin, sk_end;  // this block's range, in k-iterations from tile dp_tiles's first
  int blocks, block;     // G and b
  int k_tiles;
};

// One unit of a block's work: k-iterations [k_begin, k_end) of one tile. k_begin == 0 and
// k_end == k_tiles: a whole tile; k_begin == 0 and k_end < k_tiles: a first part; k_begin > 0: a
// later part (the end part of a tile, or a middle part when a range lies inside one tile).
struct Segment {
  int tile;
  int k_begin, k_end;
};

__device__ __forceinline__ Schedule make_schedule(int tiles, int k_tiles, int sk_tiles) {
  Schedule s;
  s.blocks = int(gridDim.x);
  s.block = int(blockIdx.x);
  s.k_tiles = k_tiles;
  s.dp_tiles = tiles - sk_tiles;
  const int iters = sk_tiles * k_tiles, base = iters / s.blocks, extra = iters % s.blocks;
  // The first `extra` blocks take one iteration more: lengths differ by at most one.
  s.sk_begin = s.block * base + (s.block < extra ? s.block : extra);
  s.sk_end = s.sk_begin + base + (s.block < extra ? 1 : 0);
  return s;
}

__device__ __forceinline__ int dp_segments(const Schedule& s) {
  return s.block < s.dp_tiles ? (s.dp_tiles - s.block + s.blocks - 1) / s.blocks : 0;
}

// How many segments block b walks: its data-parallel tiles, then one segment per tile its range
// touches (tiles first .. last of the range: 1 + last - first).
__device__ __forceinline__ int segment_count(const Schedule& s) {
  const int dp = dp_segments(s);
  if (s.sk_end == s.sk_begin) return dp;
  return dp + 1 + (s.sk_end - 1) / s.k_tiles - s.sk_begin / s.k_tiles;
}

// The i-th segment of this block: producer and consumers both call this, so they walk the same
// (tile, k_begin, k_end) sequence and their fill counts agree. The order inside the range: first
// the part of the tile the range ends in (a first part: it starts at k = 0), then the whole tiles,
// last the part of the tile the range starts in when it starts past k = 0 (a later part). So a
// block computes and stores its first part before it could wait on anything, and its one wait, if
// any, comes at the very end of its work, when the first part it waits for is long stored.
__device__ __forceinline__ Segment segment(const Schedule& s, int i) {
  const int dp = dp_segments(s);
  const int k = s.k_tiles;
  if (i < dp) return {s.block + i * s.blocks, 0, k};
  const int j = i - dp;
  const int first = s.sk_begin / k, last = (s.sk_end - 1) / k;      // tiles of the range (>= 0)
  const int k_first = s.sk_begin - first * k;                       // where the range starts
  const int k_last = s.sk_end - last * k;                           // where it ends, 1 .. k
  if (first == last) return {s.dp_tiles + first, k_first, k_last};  // inside one tile
  if (j == 0) return {s.dp_tiles + last, 0, k_last};                // its end: a first part
  const int whole0 = k_first == 0 ? first : first + 1;              // the whole tiles
  if (j <= last - whole0) return {s.dp_tiles + whole0 + j - 1, 0, k};
  return {s.dp_tiles + first, k_first, k};  // its start, past k = 0: a later part
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_t14_kernel(const __grid_constant__ CUtensorMap tmap_a,
                    const __grid_constant__ CUtensorMap tmap_b,
                    const __grid_constant__ CUtensorMap tmap_c, int64_t M, int64_t N, int64_t K,
                    int sk_tiles, int* flags, int epoch) {
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
  const Schedule sched = make_schedule(int(tiles), k_tiles, sk_tiles);
  const int segments = segment_count(sched);

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
      for (int i = 0; i < segments; ++i) {
        const Segment sg = segment(sched, i);
        const TileCoords tc = tile_coords(sg.tile, tiles_m, tiles_n);
        for (int kt = sg.k_begin; kt < sg.k_end; ++kt, ++fill) {
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
  uint32_t boxes = 0;  // boxes this warp has stored, over all its tiles: box b uses buffer b % 2
  float acc[128];
  // t13's lean mainloop: stage 0's descriptors built once and advanced by one add, the producer's
  // fill counter carried as the stage it names, its use's parity, and the stage of the fill before.
  const uint64_t desc_a0 = hopper::smem_desc_sw128(a_tile(0) + consumer * kRowsPerConsumer * 128,
                                                   16, kAtomBytes);  // this consumer's 64 rows
  const uint64_t desc_b0 = hopper::smem_desc_sw128(b_tile(0), kBStripBytes, kAtomBytes);
  int s = 0, prev_s = 0;
  uint32_t phase = 0;
  for (int seg = 0; seg < segments; ++seg) {
    const Segment sg = segment(sched, seg);
    const TileCoords tc = tile_coords(sg.tile, tiles_m, tiles_n);
    // Every segment starts its own sum: its first wgmma overwrites the accumulators (t13).
    if (sg.k_begin == sg.k_end) {
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    }

    for (int kt = sg.k_begin; kt < sg.k_end; ++kt) {
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
          hopper::wgmma_m64n256k16_bf16(acc, da, db, kt > sg.k_begin || kk > 0);
        else
          hopper::wgmma_m64n256k16_f16(acc, da, db, kt > sg.k_begin || kk > 0);
      }
      hopper::wgmma_commit();
      hopper::wgmma_wait<1>();  // the batch of the previous k-step is done reading its stage
      hopper::fence_registers(acc);
      if (kt > sg.k_begin) hopper::mbar_arrive(&empty[prev_s]);
      prev_s = s;
      if (++s == kStages) s = 0, phase ^= 1;
    }
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc);
    // The tile's last stage is free as soon as its wgmmas are done: release it *before* the
    // epilogue (v6 and t07 never released it, the block ended), so the producer can refill it
    // with the next tile's data while these threads store C. Every fill thus gets exactly one
    // arrival from each consumer thread: at the next k-step for all but a tile's last, here for it.
    if (sg.k_end > sg.k_begin) hopper::mbar_arrive(&empty[prev_s]);

    // Epilogue: this warp's 16 x 256 slab (rows 16w..16w+15 of this consumer's 64) leaves as up to
    // 8 boxes of 16 x 32 through the warp's two buffers. Every condition below is the same for all
    // 32 threads of the warp (it depends on the tile, the warp and the box), so the __syncwarps are
    // reached by all of them. A box wholly outside C is skipped (no writes, no store, no count);
    // one partly outside is stored whole and the engine clips it at M and N.
    // 64-bit sums: row0 < M < 2^31, but row0 + 112 need not fit an int; coordinates that pass the
    // tests below are < M or < N, so they do.
    const int64_t slab_row = int64_t(tc.row0) + consumer * kRowsPerConsumer + 16 * w;
    // Stream-K: a later part adds its slab onto the first part's, so it must not start before the
    // first part's slab is in C. This warp's slab depends only on the same warp's slab of the
    // first part (same rows, same columns), so each warp has a flag of its own: flags[tile * 8 +
    // warp] holds the last epoch (launch number) in which that slab's first part was stored.
    const bool later = sg.k_begin > 0;
    const bool first = sg.k_begin == 0 && sg.k_end < k_tiles;
    int* const flag =
        (later || first) ? flags + (int64_t(sg.tile) * kConsumerWarps + consumer * 4 + w) : nullptr;
    if (slab_row < M) {
      if (later && lane == 0) {
        while (ld_acquire_gpu(flag) < epoch) __nanosleep(64);
        // The acquire above ordered the first part's stores (made by its async proxy, published
        // through the generic proxy) before this thread's generic accesses; this fence extends
        // that to the async-proxy reduces lane 0 issues next.
        hopper::fence_proxy_async_global();
      }
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
            const int j = i * (kCCols / 8) + jj;  // the accumulator's 8-column group
            const uint32_t chunk = uint32_t(((2 * jj + (q >> 1)) ^ g) * 16);
            st_shared_v2(buf + my_row + chunk, acc[4 * j], acc[4 * j + 1]);             // row g
            st_shared_v2(buf + 1024 + my_row + chunk, acc[4 * j + 2], acc[4 * j + 3]);  // row g + 8
          }
          hopper::fence_proxy_async_smem();  // each thread's writes, visible to the engine...
          __syncwarp();  // ...before lane 0 (ordered after every lane's fence) issues
          if (lane == 0) {
            if (later)
              tma_reduce_add_2d(&tmap_c, buf, int(box_col), int(slab_row));
            else
              hopper::tma_store_2d(&tmap_c, buf, int(box_col), int(slab_row));
            hopper::bulk_commit_group();  // one group a box: the waits above count boxes
          }
          ++boxes;
        }
      }
    }
    // A first part publishes its slab: its stores must be *complete* (written to global memory,
    // not only read from shared memory: wait_group without .read), then ordered from the async
    // proxy into the generic proxy, then released at GPU scope. Every warp signals, whether or not
    // its slab held any box (a warp with nothing to store has nothing to wait for either).
    if (first && lane == 0) {
      hopper::bulk_wait_group<0>();
      hopper::fence_proxy_async_global();
      st_release_gpu(flag, epoch);
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
    FA_CUDA_CHECK(cudaFuncSetAttribute(gemm_t14_kernel<T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)done;
}

// Extra full waves of tiles given to stream-K beyond the partial last wave (the Stream-K paper's
// "two-tile Stream-K + data-parallel" hybrid when 1; 0 splits only the last partial wave). The
// header argued for 1 (every block gets at least one tile's worth of iterations, so the first part
// a later part waits for was stored long before); measured on an H100, 1 cost 13% at 4096^3, where
// half of the 512 tiles ran out of step, and 0 is faster at both sizes (t11's Speed line).
constexpr int64_t kSkFullWaves = 0;

// Stream-K, only where it pays. Splitting the last wave costs a block about one more epilogue,
// the later parts' reduce-adds and the blocks' falling out of step in the L2; it returns the idle
// time of the SMs that t13's last round leaves without a tile. Measured with t11 on an H100
// (tuning/README.md), in k-steps of one block (one 128 x 256 x 64 slice, ~0.7 us): at 4096^3 the
// tail is 64 x 16 / 132 = 7.8 k-steps and splitting lost 0.8-1.6% (3-4 k-steps of 256), so it
// cost ~11; at 8192^3 the tail is 128 x 64 / 132 = 62 k-steps and splitting gained 1.4-1.5% (30 of
// 2048), so it cost ~32. The larger of the two costs is the threshold: below it the tail is kept.
constexpr int64_t kMinTailKSteps = 32;

// The flags of stream-K, kConsumerWarps ints a tile, and the launch counter `epoch` they are
// compared with. One buffer per (device, stream): launches on one stream run one after the other,
// so a flag written by an earlier launch holds an older epoch and never satisfies a later launch's
// wait; launches on two streams may run at the same time, so they must not share flags. A process-
// lifetime cache: grown to the largest tile count seen (zeroed when (re)allocated), never freed.
struct StreamKFlags {
  int* flags = nullptr;
  int64_t count = 0;
  int epoch = 0;  // of the last launch; the next launch uses epoch + 1
};

std::pair<int*, int> stream_k_flags(int64_t tiles, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, StreamKFlags> cache;
  int device = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  StreamKFlags& f = cache[{device, stream}];
  const int64_t need = tiles * kConsumerWarps;
  if (f.count < need) {
    if (f.flags != nullptr) {
      FA_CUDA_CHECK(cudaStreamSynchronize(stream));  // the earlier launches may still read it
      FA_CUDA_CHECK(cudaFree(f.flags));
      f.flags = nullptr;
      f.count = 0;
    }
    FA_CUDA_CHECK(cudaMalloc(&f.flags, size_t(need) * sizeof(int)));
    f.count = need;
    FA_CUDA_CHECK(cudaMemsetAsync(f.flags, 0, size_t(need) * sizeof(int), stream));
    f.epoch = 0;
  }
  if (f.epoch == INT_MAX) {  // 2^31 - 1 launches: start again from zeroed flags
    FA_CUDA_CHECK(cudaMemsetAsync(f.flags, 0, size_t(f.count) * sizeof(int), stream));
    f.epoch = 0;
  }
  return {f.flags, ++f.epoch};
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
  // blocks than tiles. Each block walks tiles blockIdx.x, + gridDim.x, ... (the kernel's loop).
  const int64_t tiles = ceil_div(s.M, kBM) * ceil_div(s.N, kBN);
  const int64_t blocks = tiles < int64_t(sm_count) ? tiles : int64_t(sm_count);
  // Stream-K only where the last wave is partial (tiles % blocks != 0, hence tiles > blocks =
  // sm_count) and there are k-iterations to share; otherwise t10's schedule, unchanged. Not while
  // the stream is being captured into a graph: a replay would reuse the captured epoch, and the
  // flags would already hold it.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  // The kernel numbers tiles, and the stream-K range's k-iterations, in 32-bit ints. A C of 2^31
  // tiles would hold at least 2^31 x 128 x 256 fp32 elements, far more than any GPU's memory.
  FA_REQUIRE(tiles < (int64_t(1) << 31), "03/t14_stream_k_if_it_pays: more than 2^31 tiles");
  const int64_t k_tiles = ceil_div(s.K, kBK);
  const int64_t full_waves = tiles / blocks;  // >= 1
  const int64_t sk_candidate =
      tiles % blocks + (full_waves < kSkFullWaves ? full_waves : kSkFullWaves) * blocks;
  // Whether the tail is worth splitting: the k-steps the busiest block runs past the average, the
  // idle time Stream-K could hand out, against what splitting costs (kMinTailKSteps, above).
  const int64_t rounds = ceil_div(tiles, blocks);
  const int64_t tail_k_steps = k_tiles * (rounds * blocks - tiles) / blocks;
  const bool split = tiles % blocks != 0 && k_tiles > 0 && tail_k_steps >= kMinTailKSteps &&
                     sk_candidate * k_tiles < (int64_t(1) << 31) &&
                     capture == cudaStreamCaptureStatusNone;
  int sk_tiles = 0;
  int* flags = nullptr;
  int epoch = 0;
  if (split) {
    // A later part spins until another block's first part is stored: that block must be running,
    // so every block of the grid must be resident at once (one a SM here, the grid no larger).
    static const int per_sm = [] {
      int n = 0;
      FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemm_t14_kernel<T>, kThreads,
                                                                  kSmemBytes));
      return n;
    }();
    FA_REQUIRE(blocks <= int64_t(per_sm) * sm_count,
               "03/t14_stream_k_if_it_pays: the grid of " + std::to_string(blocks) +
                   " blocks cannot all be resident (" + std::to_string(per_sm) + " a SM, " +
                   std::to_string(sm_count) + " SMs)");
    sk_tiles = int(sk_candidate);
    const std::pair<int*, int> f = stream_k_flags(tiles, stream);
    flags = f.first;
    epoch = f.second;
  }
  gemm_t14_kernel<T><<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(
      tmap_a, tmap_b, tmap_c, s.M, s.N, s.K, sk_tiles, flags, epoch);
  FA_CHECK_LAUNCH();
}

void gemm_t14(const void* A, const void* B, float* C, GemmShape s, DType dtype,
              cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype == DType::F32, "03/t14_stream_k_if_it_pays takes bf16 and fp16 only");
  const GpuInfo& gpu = gpu_info();
  FA_UNSUPPORTED_IF(
      gpu.sm != 90,
      "03/t14_stream_k_if_it_pays uses sm_90a instructions (wgmma, TMA): it runs on compute "
      "capability 9.0 (H100, H200) only");
  FA_REQUIRE(gpu.sm_count > 0, "03/t14_stream_k_if_it_pays: the GPU reports no SMs");
  if (dtype == DType::BF16)
    launch<__nv_bfloat16>(A, B, C, s, dtype, gpu.sm_count, stream);
  else
    launch<__half>(A, B, C, s, dtype, gpu.sm_count, stream);
}

}  // namespace

FA_REGISTER(GemmKernel,
            {"03/t14_stream_k_if_it_pays",
             gemm_t14,
             "t13 + stream-K where the tail is long enough to pay: t11's split of the last "
             "wave, taken only when the idle k-steps it returns exceed its measured cost",
             {DType::BF16, DType::F16},
             90});

}  // namespace fa::ch03
