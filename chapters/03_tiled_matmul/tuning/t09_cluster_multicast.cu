// 03/t09_cluster_multicast: t08 in clusters of two blocks that share one load of B (TMA multicast).
// Status: verified on an H100 (GPU tests pass). Slower than t08: the prediction below failed.
// Speed: measured in chapters/03_tiled_matmul/tuning/README.md (H100, 2026-11-26, bf16): 698.5
// TFLOP/s at 4096^3 (t08 720.7, cuBLAS 759.3 in the same run), 749.2 at 8192^3 (t08 771.4,
// cuBLAS 790.0). Its first version, with cluster-scope release/acquire on the "empty" barrier,
// ran at 309.4: see mbar_arrive_cluster.
//
// What changed vs t08: every block of t08 asks L2 for its own A tile and its own B tile at every
// k-step: 16 KiB of A (128 x 64) and 32 KiB of B (64 x 256), 48 KiB per k-step, 3 MiB per tile at
// K = 4096. Two blocks that compute vertically adjacent tiles of C (rows 256p .. 256p + 255, the
// same 256 columns) read the same B tile, so half of that traffic is the same bytes twice. t09
// launches the blocks in thread-block clusters of two (the two run on SMs of one GPC and can reach
// each other's shared memory), and each block asks for only half of B, multicast: one TMA request
// whose data lands at the same offset in the shared memory of both blocks. Per block and k-step:
//   t08   A 16 KiB + B 32 KiB        = 48 KiB from L2   (3 MiB a tile at K = 4096)
//   t09   A 16 KiB + half of B 16 KiB = 32 KiB from L2   (2 MiB a tile), still 48 KiB delivered
// a third less L2-to-SM traffic: at 4096^3, 1.5 GiB -> 1.0 GiB in ~0.19 ms, i.e. from ~8.4 to
// ~5.6 TB/s of L2 bandwidth. Pairing horizontally instead (two tiles side by side sharing A) would
// save only A's half, 8 of 48 KiB (a sixth): B's tile is the larger, so the pair shares B.
// What the sharing costs, each marked in the code:
//   * a stage of one block is written by both producers, so it may be refilled only when the
//     consumers of BOTH blocks are done with it: each consumer warp arrives on the "empty" barrier
//     of both blocks (the peer's through its cluster address: mapa, then a remote
//     mbarrier.arrive with the instruction's default semantics), and "empty" counts 2 blocks x 8
//     warps = 16 arrivals;
//   * each block's "full" barrier expects the bytes of its own A plus the whole B tile (half from
//     its own request, half from the peer's);
//   * the two blocks walk their tile pairs in lockstep: cluster c takes pairs c, c + G/2, ...
//     (G/2 clusters), both blocks the same pairs, so their fills are numbered alike;
//   * a cluster barrier after the mbarriers are initialised (no block may signal a peer's barrier
//     before it exists) and another before exit (no block may leave while its peer can still
//     arrive on its barriers);
//   * the grid: 2 x (the clusters that fit at once, cudaOccupancyMaxActiveClusters), at most
//     2 x the number of pairs. A cluster's blocks must sit in one GPC, so that may be fewer than
//     the SMs;
//   * ragged M: when the number of tile rows is odd, the second tile of the last pair row lies
//     wholly below M. Its block still takes part in the multicast and in every barrier, but skips
//     its A load (its "full" barrier then expects B's bytes only: no TMA request for a box that is
//     entirely outside the tensor), multiplies stale shared memory, and stores nothing (every row
//     of its tile is >= M).
//
//   grid        2 x min(clusters that fit, pairs) blocks in clusters of 2 (cudaLaunchKernelEx with
//               cudaLaunchAttributeClusterDimension), one block per SM
//   tile order  t08's grouped order over pairs of tile rows: 4 pair rows (8 tile rows) per group,
//               column by column inside a group; block rank r of the cluster takes tile row
//               2 x (pair row) + r. Up to 66 pairs in flight on a 132-SM H100: t08's window.
//   block       as t08: producer warpgroup (setmaxnreg 40, one thread issues TMA), two consumer
//               warpgroups (setmaxnreg 232) of 64 x 256 each, 128 x 256 x 64 tiles, 4 stages; the
//               ring carries on across tiles
//   B loads     block r issues B's 64-column strips 2r and 2r + 1 with .multicast::cluster, mask
//               0b11: each lands in both blocks, and each signals the "full" barrier at the same
//               offset in both
//   ragged      as t08 for N and K (TMA zero-fills, C stored with predicates); M as above; shapes
//               TMA cannot describe run v5's code
//
// Prediction: +1-4% over t08 at 4096^3 (t08 718.6 TFLOP/s, cuBLAS 754.8: between 725 and 745),
// +0-2% at 8192^3. Reasoning: at 4096^3 t08 asks L2 for ~8.4 TB/s, which is near what an H100's
// L2 can serve (an estimate: this repository has not measured L2 bandwidth; Nsight Compute's L2
// throughput for t08 against t09 would confirm it), so part of some k-steps is a wait on TMA; a
// third less traffic removes most of it. What can eat the gain: the lockstep (a stall of one block
// of the pair stalls both), a grid smaller than t08's if clusters of 2 do not fill every SM, and
// the 16 cluster-wide arrivals per stage. The tail is unchanged: 256 pairs on 66 clusters are
// t08's 3.88 waves.
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
#include "registry.h"
#include "tensor_map.h"

namespace fa::ch03 {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;
constexpr int kStages = 4;
constexpr int kConsumers = 2;                     // warpgroups that multiply
constexpr int kThreads = 128 * (1 + kConsumers);  // + the producer warpgroup
constexpr int kClusterSize = 2;  // blocks per cluster: two tiles, one above the other
constexpr uint16_t kClusterMask = (1u << kClusterSize) - 1;  // multicast to every block: 0b11
// Registers per thread after the split. Launched at 168 (65536 / 384): 40 + 2 x 232 = 3 x 168.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (1 + kConsumers) * 168,
              "setmaxnreg: the consumers cannot take more than the block was launched with");
constexpr int kRowsPerConsumer = kBM / kConsumers;    // 64: one wgmma M
constexpr int kSwizzleCols = 64;                      // 128 bytes of 16-bit elements
constexpr int kABytes = kBM * kBK * 2;                // 16 KiB
constexpr int kBStripBytes = kBK * kSwizzleCols * 2;  // 8 KiB: 64 k-rows of one 64-column strip
constexpr int kBStrips = kBN / kSwizzleCols;          // 4
constexpr int kBStripsPerBlock = kBStrips / kClusterSize;  // 2: each block requests half of B
constexpr int kBBytes = kBK * kBN * 2;                     // 32 KiB = 4 strips
constexpr int kStageBytes = kABytes + kBBytes;             // what lands in each block per stage
constexpr int kAtomBytes = 1024;                           // 8 rows x 128 bytes: one swizzle atom
// "empty" completes when every consumer warp of both blocks has released the stage.
constexpr int kEmptyArrivals = kClusterSize * kConsumers * 4;
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + kAtomBytes;  // + barriers,
                                                                                  // + alignment
// Tile rows per group of the order, as in t08 (kGroupM = 8): 4 pairs of tile rows.
constexpr int kGroupPairRows = mma_gemm::kGroupM / kClusterSize;
// Shapes TMA cannot load run this registered kernel (called through the registry: see t08).
constexpr const char* kFallback = "03/v5_tensor_core";
static_assert(kStageBytes % kAtomBytes == 0 && kABytes % kAtomBytes == 0, "atoms stay aligned");
static_assert(kBStrips % kClusterSize == 0, "each block requests the same share of B");

// ---- the cluster instructions this step adds (common/device/hopper.cuh has the rest) ------------

// This block's rank in its cluster (0 or 1), the cluster's index in the grid, and the number of
// clusters. With clusters of (2, 1, 1) they are blockIdx.x % 2, blockIdx.x / 2 and gridDim.x / 2;
// reading the special registers says what is meant.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
#if FA_SM90A
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#else
  __trap();
#endif
  return r;
}
__device__ __forceinline__ uint32_t cluster_index() {
  uint32_t r = 0;
#if FA_SM90A
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
#else
  __trap();
#endif
  return r;
}
__device__ __forceinline__ uint32_t cluster_count() {
  uint32_t r = 0;
#if FA_SM90A
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
#else
  __trap();
#endif
  return r;
}

// Every thread of every block of the cluster: arrive (release: this thread's earlier writes, the
// mbarrier inits included, become visible to the cluster), then wait for all (acquire). The
// non-.aligned form: the threads of a warp need not arrive together (the producer warp's thread 0
// comes from its loop, the other 31 straight from the branch).
__device__ __forceinline__ void cluster_sync() {
#if FA_SM90A
  asm volatile(
      "barrier.cluster.arrive.release;\n"
      "barrier.cluster.wait.acquire;\n" ::
          : "memory");
#else
  __trap();
#endif
}

// One arrival on the mbarrier at the same offset as `bar` in the shared memory of block `cta` of
// this cluster (this block's own when cta is its rank): mapa turns the local address into that
// block's address in the cluster's shared window. The arrive keeps the instruction's defaults
// (.release at .cta scope), and the producer waits with the plain hopper::mbar_wait, as CUTLASS's
// ClusterBarrier does for its multicast pipelines (cutlass/arch/barrier.h: arrive(cta_id, pred),
// wait(phase)): the stage's readers are wgmmas this warp has already waited for, and the writer is
// the peer's TMA, which the peer's producer issues only after its own wait completes. An earlier
// version of this step used .release.cluster / .acquire.cluster: it passed its tests and ran at
// 40% of t08 (chapters/03_tiled_matmul/tuning/README.md).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
#if FA_SM90A
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(mma::smem_addr(bar)),
      "r"(cta)
      : "memory");
#else
  __trap();
#endif
}

// hopper::tma_load_2d, multicast: the box lands at the offset of `dst` in the shared memory of
// every block of the cluster whose bit is set in `mask`, and each of them gets the bytes counted
// on its own mbarrier at the offset of `bar`. One L2 read, several SMs served.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const void* tmap, uint64_t* bar,
                                                      int c0, int c1, uint16_t mask) {
#if FA_SM90A
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(mma::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(mma::smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
#else
  __trap();
#endif
}

// ---- the tile order -------------------------------------------------------------------------------

// t08's grouped order, one level up: the unit is a pair of tile rows (256 rows of C), numbered in
// groups of kGroupPairRows pair rows, column by column inside a group. Pair p covers tile rows
// 2 pm and 2 pm + 1 of tile column tn; block rank r of the cluster computes tile row 2 pm + r.
// When the number of tile rows is odd, the last pair row's second tile starts at row >= M (the
// kernel handles it): row0 is 64-bit for that reason, it may pass 2^31 - 1 when M is close to it.
struct PairTile {
  int64_t row0;  // the first row of this block's tile (may be >= M: see above)
  int col0;      // the first column (< N < 2^31: the launcher checks)
};

__device__ __forceinline__ PairTile pair_tile(int64_t pair, int64_t pairs_m, int64_t tiles_n,
                                              uint32_t rank) {
  const int64_t group_size = int64_t(kGroupPairRows) * tiles_n;
  const int64_t first_pm = (pair / group_size) * kGroupPairRows;
  const int64_t group_rows =
      (pairs_m - first_pm < kGroupPairRows) ? pairs_m - first_pm : kGroupPairRows;
  const int64_t pm = first_pm + (pair % group_size) % group_rows;
  const int64_t tn = (pair % group_size) / group_rows;
  return {(2 * pm + rank) * kBM, int(tn * kBN)};
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_t09_kernel(const __grid_constant__ CUtensorMap tmap_a,
                    const __grid_constant__ CUtensorMap tmap_b, float* __restrict__ C, int64_t M,
                    int64_t N, int64_t K, bool pair_ok) {
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and wgmma assumes atoms start at multiples of
  // 1024: align the stage buffers by hand (dynamic shared memory only promises 16 bytes). Both
  // blocks of a cluster run the same kernel with the same shared memory, so the padding, and with
  // it every buffer's and barrier's offset, is the same in both: what multicast relies on.
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);  // TMA -> MMA
  uint64_t* empty = full + kStages;                                            // MMA -> TMA
  auto a_tile = [&](int s) { return smem + s * kStageBytes; };
  auto b_tile = [&](int s) { return smem + s * kStageBytes + kABytes; };

  const int64_t tiles_m = ceil_div(M, kBM), tiles_n = ceil_div(N, kBN);
  const int64_t pairs_m = ceil_div(tiles_m, kClusterSize);
  const int64_t pairs = pairs_m * tiles_n;
  const uint32_t rank = cluster_rank();
  const int64_t first_pair = cluster_index(), pair_step = cluster_count();
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;
  const int k_tiles = int(ceil_div(K, kBK));

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&full[s], 1);                // this block's producer's expect_tx arrival
      hopper::mbar_init(&empty[s], kEmptyArrivals);  // every consumer warp of both blocks
    }
    hopper::mbar_fence_init();  // .release.cluster: visible to the peer's TMA and arrivals too
  }
  // Not __syncthreads: the peer's producer will multicast into this block's stages and signal its
  // "full" barriers, and the peer's consumers will arrive on its "empty" barriers, so both blocks
  // must have initialised theirs before either starts.
  cluster_sync();

  // As in t08, `fill` numbers this block's stage fills over all its tiles. Both blocks of the
  // cluster walk the same pairs (first_pair, + pair_step, ...) with the same k_tiles each, so
  // fill f means the same k-step of the same pair in both: the peer's half of B for fill f goes to
  // stage f % kStages here as well, and both blocks' consumers release fill f of both blocks.

  if (warpgroup == 0) {
    // ---- producer ----
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      uint64_t fill = 0;
      for (int64_t pair = first_pair; pair < pairs; pair += pair_step) {
        const PairTile pt = pair_tile(pair, pairs_m, tiles_n, rank);
        // A tile wholly below M (the lower tile of the last pair row when tiles_m is odd): no
        // request for it; the block still receives and sends its halves of B.
        const bool a_inside = pt.row0 < M;
        for (int kt = 0; kt < k_tiles; ++kt, ++fill) {
          const int s = int(fill % kStages);
          const uint64_t use = fill / kStages;
          // The stage is free only when the consumers of both blocks have released it: the peer's
          // producer writes into this block's stage too, and this one into the peer's.
          if (use > 0) hopper::mbar_wait(&empty[s], uint32_t((use - 1) & 1));
          // Own A plus the whole of B: half from this block's request, half from the peer's. The
          // peer's bytes may land before this arrival; the phase still cannot complete before it
          // (the barrier waits for this one arrival as well as for the bytes).
          hopper::mbar_arrive_expect_tx(&full[s], (a_inside ? kABytes : 0) + kBBytes);
          if (a_inside) hopper::tma_load_2d(a_tile(s), &tmap_a, &full[s], kt * kBK, int(pt.row0));
          for (int j = 0; j < kBStripsPerBlock; ++j) {
            const int strip = int(rank) * kBStripsPerBlock + j;
            tma_load_2d_multicast(b_tile(s) + strip * kBStripBytes, &tmap_b, &full[s],
                                  pt.col0 + strip * kSwizzleCols, kt * kBK, kClusterMask);
          }
        }
      }
    }
  } else {
    // ---- consumers ----
    hopper::setmaxnreg_inc<kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int w = t / 32, g = (t % 32) / 4, q = t % 4;  // the accumulator layout (hopper.cuh)
    const bool warp_leader = t % 32 == 0;
    // One arrival per warp on the stage's "empty" barrier in each block of the cluster. The wgmma
    // wait before it is warp-synchronous (.sync.aligned), so when lane 0 arrives the whole warp's
    // share of the batch is done reading the stage. The __syncwarp brings the warp back together
    // before its next .aligned instruction (wgmma.fence).
    auto release = [&](uint64_t f) {
      if (warp_leader)
        for (uint32_t cta = 0; cta < uint32_t(kClusterSize); ++cta)
          mbar_arrive_cluster(&empty[f % kStages], cta);
      __syncwarp();
    };
    float acc[128];
    uint64_t fill = 0;
    for (int64_t pair = first_pair; pair < pairs; pair += pair_step) {
      const PairTile pt = pair_tile(pair, pairs_m, tiles_n, rank);
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
        if (kt > 0) release(fill - 1);
      }
      hopper::wgmma_wait<0>();
      hopper::fence_registers(acc);
      if (k_tiles > 0) release(fill - 1);  // the tile's last stage, before the epilogue (t08)

      // Epilogue, as in t08; a tile wholly below M stores nothing (store_pair tests r < M).
      const int64_t r = pt.row0 + consumer * kRowsPerConsumer + 16 * w + g;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int64_t c = int64_t(pt.col0) + 8 * j + 2 * q;
        mma_gemm::store_pair(C, r, c, M, N, acc[4 * j], acc[4 * j + 1], pair_ok);
        mma_gemm::store_pair(C, r + 8, c, M, N, acc[4 * j + 2], acc[4 * j + 3], pair_ok);
      }
    }
  }
  // No block may exit while its peer can still arrive on its barriers (the peer's consumers
  // release each stage in both blocks) or while the peer's shared memory is still a target: every
  // thread of both blocks waits here until both are done.
  cluster_sync();
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

// The launch configuration: kThreads threads, kSmemBytes of shared memory, clusters of
// kClusterSize blocks along x. `blocks` must be a multiple of kClusterSize.
struct ClusterLaunch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t config;
  ClusterLaunch(const ClusterLaunch&) = delete;  // config.attrs points into this object
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
  ClusterLaunch(unsigned blocks, cudaStream_t stream) : attr{}, config{} {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kClusterSize;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kSmemBytes;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
  }
};

// Once per kernel instance: the shared-memory opt-in, then how many clusters of two such blocks
// the GPU holds at once (a cluster's blocks must share a GPC, so this can be less than SMs / 2).
// Zero means the configuration cannot launch at all: a clear error instead of a launch failure.
template <class T>
int max_active_clusters() {
  static const int clusters = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(gemm_t09_kernel<T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    const ClusterLaunch probe(kClusterSize, nullptr);
    int n = 0;
    FA_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, gemm_t09_kernel<T>, &probe.config));
    FA_REQUIRE(n > 0, "03/t09_cluster_multicast: no cluster of 2 blocks of " +
                          std::to_string(kSmemBytes) + " bytes of shared memory fits on this GPU");
    return n;
  }();
  return clusters;
}

template <class T>
void launch(const void* A, const void* B, float* C, GemmShape s, DType dtype, cudaStream_t stream) {
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
  const int64_t clusters_fit = max_active_clusters<T>();
  const CUtensorMap tmap_a = make_tmap(A, s.M, s.K, kBM, dtype);
  const CUtensorMap tmap_b = make_tmap(B, s.K, s.N, kBK, dtype);
  // The persistent grid in clusters: as many clusters as fit at once, never more than pairs.
  const int64_t pairs = ceil_div(ceil_div(s.M, kBM), kClusterSize) * ceil_div(s.N, kBN);
  const int64_t clusters = pairs < clusters_fit ? pairs : clusters_fit;
  const ClusterLaunch launch_cfg(unsigned(clusters * kClusterSize), stream);
  const bool pair_ok = reinterpret_cast<uintptr_t>(C) % 8 == 0;  // N is even here
  FA_CUDA_CHECK(cudaLaunchKernelEx(&launch_cfg.config, gemm_t09_kernel<T>, tmap_a, tmap_b, C, s.M,
                                   s.N, s.K, pair_ok));
  FA_CHECK_LAUNCH();
}

void gemm_t09(const void* A, const void* B, float* C, GemmShape s, DType dtype,
              cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype == DType::F32, "03/t09_cluster_multicast takes bf16 and fp16 only");
  const GpuInfo& gpu = gpu_info();
  FA_UNSUPPORTED_IF(
      gpu.sm != 90,
      "03/t09_cluster_multicast uses sm_90a instructions (wgmma, TMA multicast, clusters): it "
      "runs on compute capability 9.0 (H100, H200) only");
  if (dtype == DType::BF16)
    launch<__nv_bfloat16>(A, B, C, s, dtype, stream);
  else
    launch<__half>(A, B, C, s, dtype, stream);
}

}  // namespace

FA_REGISTER(GemmKernel, {"03/t09_cluster_multicast",
                         gemm_t09,
                         "t08 + clusters of 2: two vertically adjacent 128x256 tiles share each "
                         "B tile, each block loading half of it by TMA multicast",
                         {DType::BF16, DType::F16},
                         90});

}  // namespace fa::ch03
