// GENERATED from chapters/08_decoding/v1_split_kv.cu by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// 08/v1_split_kv: the split-KV decoding forward ("flash-decoding"), fp32/fp16/bf16, D 64 and 128,
// grouped-query attention included.
//
// Decoding asks for a few query rows (seq_q 1..16) against a long K/V cache. The forward kernels of
// chapter 05 give each block a tile of query rows of one head, so here the grid is B * H blocks
// (256 at B 8, H 32) that each walk all seq_k keys one after another: a few SMs' worth of blocks
// streaming K and V. This kernel cuts the keys into splits as well (the plan in ch08_split_kv.h:
// enough to fill one wave of resident blocks on every SM), and each block:
//   1. loads its rows' Q once (all query heads of one K/V head: GQA's K/V are read once per group),
//      scaled by softmax_scale * log2(e) so that the softmax uses exp2;
//   2. walks its split in tiles of kBc keys: K and V come in with 16-byte loads into registers one
//      tile ahead (the loads of tile t+1 are in flight while tile t is computed), then go to padded
//      shared memory; S = Q K^T (one key per thread), the online softmax per row (one warp per
//      row), O = alpha O + P V (threads split the columns, rows and keys);
//   3. writes its partial (m, l, o) per row to a workspace, or with a single split the final O and
//      L directly.
// A second kernel merges the splits of each row with chapter 02's pair merge (one warp per row).
// The split kernel lives in ch08_split_kv.cuh (08/v2_parallel_merge runs it too); this file holds
// the merge kernel and the launcher.
//
// CUDA cores only: with at most 16 rows per block the arithmetic is a few FMAs per loaded element,
// which the CUDA cores keep up with at HBM speed; tensor cores pay off once rows per K/V tile grow.
//
// Speed (NVIDIA H100 80GB HBM3, 2026-11-23, third session, call 5; bench/compare_decode.py, bf16
// D 128, seq_q 1, read-only L2 flush, copy ceiling 2908 GB/s in the same run, PyTorch SDPA on the
// same shapes: notes/measured/h100-2026-11-23c/call5_decode.log): B 8, H 32, seq_k 32768: 3113 GB/s
// (107.1% of copy; FlashAttention-2 2832, cuDNN 3210); the same with H_kv 8 (GQA): 2480 (85.3%;
// FA2 3082, 0.80x its speed: the one shape below 90% of copy); B 1, H 16, seq_k 131072: 2913
// (100.2%; FA2 3003). Above 100%: the ceiling is a read-and-write copy, decoding only reads.
// 05/v3 on the first and last shapes: 1967 and 271 GB/s.
// Tests on that GPU: the generic forward tests and the DecodingKernels tests (ragged caches, GQA
// groups, every dtype, 131072 keys, B * H past 65535) passed; compute-sanitizer clean after the
// __syncwarp in the online softmax (racecheck had found a write-after-read on m_s, see there).
// The decoding long test (K/V past 2^31 elements) passed too
// (notes/measured/h100-2026-11-23c/call6_ctest_long.log).
// EXERCISE-KERNELS: 08/v1_split_kv
#include <cuda_runtime.h>

#include <cstdint>

#include "ch08_split_kv.cuh"  // Params, Traits, the split kernel, the workspace, the dispatch
#include "registry.h"

namespace {

// The merge: one warp per output row folds the splits' partials with chapter 02's pair merge;
// o is rescaled by the same factors as l.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) merge_splits_kernel(Params p) {
  using ch02::gpu::Stats;
  constexpr int kPerLane = (D + 31) / 32;
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.total_rows) return;
  Stats acc = ch02::gpu::empty_stats();
  float o[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) o[e] = 0.0f;
  for (int64_t s = 0; s < p.num_splits; ++s) {
    const int64_t w = s * p.total_rows + row;
    const float2 ml = p.ws_ml[w];
    const Stats part{ml.x, ml.y};
    // TODO(exercise pair-merge): fold split s into the running (acc, o) with chapter 02's pair merge: merged = ch02::gpu::merge(acc, part); each side's o is rescaled by the same factor as its l, rescale(acc.m, merged.m) for the running o and rescale(part.m, merged.m) for the split's o (p.ws_o[w * D + d], lane's columns d = lane + 32 * e); then acc = merged
    (void)part;
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < D)
      static_cast<T*>(p.o)[row * D + d] = Traits<T>::from_float(acc.l > 0.0f ? o[e] / acc.l : 0.0f);
  }
  if (lane == 0) p.lse[row] = acc.l > 0.0f ? acc.m + logf(acc.l) : -INFINITY;
}

struct V1 {
  template <class T, int D, int kRows>
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    const Params p = launch_split_kv<T, D, kRows>(a, stream);
    if (p.num_splits > 1) {
      const int64_t blocks = fa::ceil_div(p.total_rows, kThreads / 32);
      FA_UNSUPPORTED_IF(blocks > 0x7fffffff, "more than 2^31 - 1 merge blocks");
      merge_splits_kernel<T, D><<<unsigned(blocks), kThreads, 0, stream>>>(p);
      FA_CHECK_LAUNCH();
    }
  }
};

void split_kv_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  dispatch<V1>(a, stream, "08/v1_split_kv");
}

}  // namespace

FA_REGISTER(
    AttentionFwdKernel,
    {"08/v1_split_kv",
     split_kv_forward,
     "split-KV decoding: keys split across blocks to fill every SM, partial (m, l, o) merged "
     "with the chapter 02 pair merge; GQA K/V read once per group",
     {DType::F32, DType::F16, DType::BF16},
     {64, 128},
     /*min_sm=*/80,
     /*gqa=*/true,
     /*decoding=*/true});

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/08_decoding/exercises/v1_split_kv.cu", {"08/v1_split_kv"}, 1});
