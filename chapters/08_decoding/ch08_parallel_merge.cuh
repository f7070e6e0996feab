// ch08_parallel_merge.cuh: the merge kernel of 08/v2_parallel_merge, which 08/v3_mma_split runs
// too: one block per output row, the row's splits spread over the block, every workspace load
// issued before the arithmetic that needs it. Device code and its launcher, in an anonymous
// namespace like ch08_split_kv.cuh (each including .cu file compiles its own copy).
//
// Why a second merge: 08/v1's merge gives each output row one warp, which walks the splits one
// after another; every step waits for its (m, l) pair and its o row to arrive from memory before
// the next one is asked for. At B 1, H 16, seq_k 131072 (16 rows, 24 splits) that is 24 dependent
// round trips per warp on 4 blocks, and it took 22.6 us (Nsight Compute, H100, 2026-11-23) where
// FlashAttention-2's combine kernel took 10.8 us; the split kernels themselves took 364.0 and
// 362.8 us, so the merge was the whole gap. It moves 16 x 24 x 130 floats (200 KB): latency, not
// bandwidth.
//
// The map here: block = one output row, kMergeThreads = 256 threads; thread t owns the 16-byte
// column chunk c = t % (D / 4) and the splits s = g, g + G, g + 2G, ... with g = t / (D / 4) and
// G = 256 / (D / 4) groups (8 at D 128, 16 at D 64). A thread loads kBatch of its splits' (m, l)
// pairs and o chunks at once (independent loads, all in flight together), then folds them into
// its running (m, l, o) with chapter 02's pair merge, rescaling o by the factor that rescales l.
// The G groups' states are then merged through shared memory, one thread per column, with the
// same operator: associativity (notes/02_online_softmax.md) is what allows the splits to be
// grouped this way instead of folded left to right, and the result to equal v1's up to rounding.
// At 24 splits each thread folds 3 of them: one batch, one round trip to memory, where v1 made 24.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "../02_online_softmax/ch02_softmax_device.cuh"  // Stats, merge, rescale: the pair merge
#include "ch08_split_kv.cuh"                             // Params, Traits
#include "check.h"

namespace {

constexpr int kMergeThreads = 256;
constexpr int kBatch = 8;  // splits whose loads one thread issues before folding any

template <class T, int D>
__global__ void __launch_bounds__(kMergeThreads) parallel_merge_kernel(Params p) {
  using ch02::gpu::Stats;
  constexpr int kChunks = D / 4;                    // float4 chunks of a row of o
  constexpr int kGroups = kMergeThreads / kChunks;  // split groups
  static_assert(D % 4 == 0 && kMergeThreads % kChunks == 0 && D <= kMergeThreads,
                "a row must split into float4 chunks over the block");
  __shared__ float4 red_o[kGroups][kChunks];
  __shared__ Stats red_ml[kGroups];

  const int64_t row = blockIdx.x;  // < total_rows: the grid has one block per row
  const int tid = threadIdx.x;
  const int c = tid % kChunks, g = tid / kChunks;

  Stats acc = ch02::gpu::empty_stats();
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t s0 = g; s0 < p.num_splits; s0 += int64_t(kGroups) * kBatch) {
    // Issue every load of the batch first: none depends on another or on the arithmetic below.
    float2 ml[kBatch];
    float4 part[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t s = s0 + int64_t(kGroups) * u;
      if (s < p.num_splits) {
        const int64_t w = s * p.total_rows + row;
        ml[u] = __ldg(p.ws_ml + w);
        part[u] = __ldg(reinterpret_cast<const float4*>(p.ws_o + w * D) + c);
      } else {
        ml[u] = make_float2(-INFINITY, 0.0f);  // the identity (-inf, 0, 0): changes nothing
        part[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    // Then fold them: chapter 02's pair merge, o rescaled by the same factors as l.
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const Stats s{ml[u].x, ml[u].y};
      const Stats merged = ch02::gpu::merge(acc, s);
      const float fa = ch02::gpu::rescale(acc.m, merged.m);
      const float fb = ch02::gpu::rescale(s.m, merged.m);
      o.x = o.x * fa + part[u].x * fb;
      o.y = o.y * fa + part[u].y * fb;
      o.z = o.z * fa + part[u].z * fb;
      o.w = o.w * fa + part[u].w * fb;
      acc = merged;
    }
  }

  // The groups' states: every thread of group g holds the same (m, l) (same splits, same order).
  red_o[g][c] = o;
  if (c == 0) red_ml[g] = acc;
  __syncthreads();
  if (tid >= D) return;
  const int d = tid;
  Stats tot = ch02::gpu::empty_stats();
  float od = 0.0f;
#pragma unroll
  for (int gg = 0; gg < kGroups; ++gg) {
    const Stats s = red_ml[gg];
    const Stats merged = ch02::gpu::merge(tot, s);
    const float x = reinterpret_cast<const float*>(&red_o[gg][0])[d];
    od = od * ch02::gpu::rescale(tot.m, merged.m) + x * ch02::gpu::rescale(s.m, merged.m);
    tot = merged;
  }
  // A row that saw no key in any split: l = 0, O = 0 and L = -inf.
  static_cast<T*>(p.o)[row * D + d] = Traits<T>::from_float(tot.l > 0.0f ? od / tot.l : 0.0f);
  if (d == 0) p.lse[row] = tot.l > 0.0f ? tot.m + logf(tot.l) : -INFINITY;
}

// One block per output row; a no-op with a single split (the split kernel wrote O and L).
template <class T, int D>
void launch_parallel_merge(const Params& p, cudaStream_t stream) {
  if (p.num_splits <= 1) return;
  FA_UNSUPPORTED_IF(p.total_rows > 0x7fffffff, "more than 2^31 - 1 merge blocks");
  parallel_merge_kernel<T, D><<<unsigned(p.total_rows), kMergeThreads, 0, stream>>>(p);
  FA_CHECK_LAUNCH();
}

}  // namespace
