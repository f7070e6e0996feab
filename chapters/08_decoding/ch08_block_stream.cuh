// ch08_block_stream.cuh: the kernel of 08/v5_block_stream, which 08/v6_l2_prefetch runs with its
// copies carrying the .L2::128B prefetch hint (kL2Hint), and 08/v7_swizzled_ring with that hint
// and swizzled instead of padded K/V rows (kSwizzle); the rung files (v5_block_stream.cu,
// v6_l2_prefetch.cu, v7_swizzled_ring.cu) tell the story and hold the measurements. Device code and its launcher, in
// an anonymous namespace like ch08_split_kv.cuh (each including .cu file compiles its own copy).
//
// The map: a block is kWarps = 4 warps and one m16 tile of query rows of a (sequence, K/V head);
// it walks its split of the keys in tiles of kTile = 64 keys. Per tile the 128 threads copy K and
// V (16-byte cp.async, one fixed chunk plan per thread, bounds tested only on the split's last
// tile) into a 2-stage ring; one __syncthreads per tile; warp w computes keys [16 w, 16 w + 16) of
// the tile with mma_step (ch08_mma_split.cuh) and keeps its own (m, l, o). At the end merge_warps
// folds the four warps' states with chapter 02's merge and writes one partial per row and split
// (or O and L with one split); v2's merge kernel folds the splits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention_tiles.cuh"  // padded tiles and their cp.async loader
#include "ch08_mma_split.cuh"   // what v3-v6 share: rows, Q fragments, keys, the step, write-out
#include "ch08_parallel_merge.cuh"  // v2's merge
#include "ch08_split_kv.cuh"        // Params, make_params, resident_blocks
#include "check.h"
#include "mma.cuh"

namespace {

// kWarp, kTileRows (one m16 tile of rows per block) and kKeys (keys per warp per step) are
// ch08_mma_split.cuh's.
constexpr int kWarps = 4;              // warps per block, each its own kKeys of every tile
constexpr int kTile = kWarps * kKeys;  // keys per block per step: one 16 KB burst of K at D 128
constexpr int kStages = 2;             // shared-memory stages per block (one in flight)
static_assert(kThreads == kWarps * kWarp, "ch08_split_kv.cuh's kThreads: four warps");

template <int D, bool kSwizzle>
// 2 stages x (K + V) x 64 keys x (D + 8) x 2 B = 69632 B at D 128 (65536 B swizzled): past the
// 48 KiB default, so the launcher opts in (sm_80 and later allow it).
using MmaLayout = Ring<D, kTile, kStages, kSwizzle>;  // ch08_mma_split.cuh

template <class T, int D, bool kL2Hint, bool kSwizzle>
__global__ void __launch_bounds__(kThreads, 2) mma_split_kernel(Params p) {
  using Lay = MmaLayout<D, kSwizzle>;
  constexpr int kPitch = Lay::kPitch;
  constexpr float kNegInf = -INFINITY;
  // Swizzled rows must start at 128-byte boundaries (fa::tiles::swizzled_offset).
  extern __shared__ __align__(kSwizzle ? 128 : 16) unsigned char smem[];
  T* const stages = reinterpret_cast<T*>(smem);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane holds rows g and g + 8 of every fragment

  // Which (sequence, K/V head), row tile and split this block owns; this lane's two rows and Q
  // fragments; the block's keys (ch08_mma_split.cuh).
  const MmaTile t = mma_tile(p, blockIdx.x);
  int64_t out_row[2], last[2];
  uint32_t qf[D / 16][4];
  mma_rows<T, D>(p, t, g, t4, out_row, last, qf);
  int64_t k_begin, k_end;
  mma_keys(p, t, k_begin, k_end);
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kTile - 1) / kTile : 0;
  const T* kbase = static_cast<const T*>(p.k) + t.bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + t.bkv * p.seq_k * D;

  // The copies, planned once as in v4 (RingCopy), but by the whole block: kTile rows per step.
  const RingCopy<T, D, kTile, kStages, kThreads, kL2Hint, kSwizzle> copy(
      stages, kbase, vbase, k_begin, k_end, nsteps, tid);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) copy.issue(st);

  // ldmatrix lane offsets, as in chapter 05 (ch05_mma_fwd.cuh). K: x4 = keys 0-7 / 8-15 times
  // columns 0-7 / 8-15 of a k16 slice (b of n8 tiles 0 and 1). V (.trans): x4 = keys 0-7 / 8-15
  // times columns 0-7 / 8-15 of a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1).
  // As 32-bit shared addresses of stage 0, in bytes: a step adds its stage's offset, a fragment a
  // compile-time constant. Warp w reads keys [w * kKeys, (w + 1) * kKeys) of each tile.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16), k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1), v_ld_col = 8 * (lane / 16);
  const uint32_t k_ld =
      fa::mma::smem_addr(stages) + uint32_t((warp * kKeys + k_ld_row) * kPitch + k_ld_col) * 2;
  const uint32_t v_ld = fa::mma::smem_addr(stages) + Lay::kVBytes +
                        uint32_t((warp * kKeys + v_ld_row) * kPitch + v_ld_col) * 2;
  // Swizzled: those are the unswizzled addresses; every row this lane reads is lane % 8 modulo 8.
  const uint32_t swz = fa::tiles::swizzle_xor(lane);

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  float m[2] = {kNegInf, kNegInf};  // running max, log2 units (rows g, g + 8)
  float l[2] = {0.0f, 0.0f};        // this lane's share of the running sum (its columns)

  for (int64_t st = 0; st < nsteps; ++st) {
    fa::mma::cp_async_wait<kStages - 2>();  // this thread's copies of step st have landed
    __syncthreads();  // everyone's have, and every warp is done with the stage of step st - 1
    copy.issue(st + kStages - 1);  // into that stage: in flight while step st is computed
    const uint32_t stage = uint32_t(st % kStages) * Lay::kStageBytes;

    const int64_t k0 = k_begin + st * kTile + warp * kKeys;  // this warp's first key
    mma_step<T, D, kSwizzle>(qf, k_ld + stage, v_ld + stage, k0, k_end, last, p.scale_log2, t4, m,
                             l, o, swz);
  }
  fa::mma::cp_async_wait<0>();  // nothing of this thread's left in flight (empty groups only)

  // Epilogue. Each warp holds the state (m, l, o) of the 16 rows over its quarter of the block's
  // keys; chapter 02's pair merge folds the four into one per row, through shared memory (the ring
  // is free now), and the block writes one partial per row and split, as v4 did, or with a single
  // split O and L (merge_warps, ch08_mma_split.cuh).
  quad_sum(l);
  static_assert(kWarps * kTileRows * (D + 2) * 4 <= Lay::kSmem, "the fold fits in the ring");
  merge_warps<T, D, kWarps>(p, t, smem, tid, g, t4, m, l, o);
}

// The launcher: plan the splits for 64-key tiles and this kernel's residency (2 blocks per SM on
// an H100: registers), opt in to the shared memory, launch, then v2's merge of the splits.
template <bool kL2Hint, bool kSwizzle = false>
struct BlockStream {
  template <class T, int D>
  static void launch(const AttentionFwdArgs& a, cudaStream_t stream);
};

template <bool kL2Hint, bool kSwizzle>
template <class T, int D>
void BlockStream<kL2Hint, kSwizzle>::launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Lay = MmaLayout<D, kSwizzle>;
  auto kernel = mma_split_kernel<T, D, kL2Hint, kSwizzle>;
  FA_CUDA_CHECK(cudaFuncSetAttribute((const void*)kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(Lay::kSmem)));
  const fa::ch08::SplitPlan plan = fa::ch08::plan_split_kv(
      a.shape, kTile, resident_blocks((const void*)kernel, kThreads, Lay::kSmem));
  // The plan tiles group * seq_q rows by at most 16 (kMaxRows): one m16 tile per tile.
  FA_REQUIRE(plan.row_tiles == fa::ceil_div(a.shape.group() * a.shape.seq_q, kTileRows),
             "internal: the plan's row tiles and the kernel's m16 tiles disagree");
  FA_UNSUPPORTED_IF(plan.blocks > 0x7fffffff, "more than 2^31 - 1 blocks");
  const Params p = make_params(a, plan);
  kernel<<<unsigned(plan.blocks), kThreads, Lay::kSmem, stream>>>(p);
  FA_CHECK_LAUNCH();
  launch_parallel_merge<T, D>(p, stream);
}

}  // namespace
