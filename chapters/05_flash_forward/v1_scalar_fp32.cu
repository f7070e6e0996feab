// v1_scalar_fp32.cu: the readable FlashAttention forward kernel, fp32, no tensor cores.
//
// What changed vs the baseline (v0_materialized.cu): the N x N score matrix S never exists.
// The baseline writes S to global memory, reads it back for the softmax, writes P, and reads P
// again for P V: O(N^2) bytes of traffic and of memory. Here one thread block owns a tile of Br
// query rows and streams the K/V tiles of its head through shared memory, keeping S and P in
// registers and the softmax statistics (m, l) running: O(N * D) bytes of traffic, and no
// workspace at all. It is the algorithm of notes/05_flash_forward.md and of ch05_cpu_model.cpp,
// line for line; readability comes before speed (the tensor-core versions, v2 and v3, are fast).
//
// Work split
//   * grid: one block per (Q tile, batch*head), both folded into blockIdx.x (64-bit decode):
//     batch*heads can exceed the 65535 limit of gridDim.y/z.
//   * block: Br = 64 query rows x kThreadsPerRow = 4 threads per row = 256 threads. The 4 threads
//     of a row split the head dimension (thread `part` owns dims part, part+4, part+8, ...), so
//     each holds D/4 values of q and of the O accumulator: 64 registers at D = 128 instead of 256
//     (a thread per row would spill). A dot product is 4 partial sums plus 2 warp shuffles.
//   * shared memory: one K tile and one V tile, Bc = 32 keys x D floats each (32 KiB at D = 128).
//
// Causal masking (bottom-right aligned): the K/V loop stops at the last key the tile's last row
// may see, so tiles above the diagonal are never loaded; only tiles the diagonal crosses (and the
// ragged last tile) pay for the element-wise mask.
//
// Speed (H100, 2026-11-21): 12.5 TFLOP/s fp32 D128 N2048 (11.6 causal), 13.5 at D64
// (fa_bench; notes/measured/h100-2026-11-21/bench.log).
// EXERCISE-KERNELS: 05/v1_scalar_fp32
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "check.h"
#include "registry.h"

namespace fa {
namespace {

constexpr int kBr = 64;            // query rows per block (one Q tile)
constexpr int kBc = 32;            // keys per K/V tile
constexpr int kThreadsPerRow = 4;  // threads sharing one query row
constexpr int kThreads = kBr * kThreadsPerRow;
static_assert(32 % kThreadsPerRow == 0, "the threads of a row must sit in one warp");

// Sum over the kThreadsPerRow neighbouring lanes that share a row; every one of them gets the sum.
__device__ __forceinline__ float sum_over_row_threads(float x) {
#pragma unroll
  for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_fwd_v1_kernel(const float* __restrict__ Q, const float* __restrict__ K,
                        const float* __restrict__ V, float* __restrict__ O, float* __restrict__ Lse,
                        int64_t seq_q, int64_t seq_k, int64_t num_q_tiles, float scale,
                        bool causal) {
  static_assert(D % kThreadsPerRow == 0, "D must split evenly over the threads of a row");
  constexpr int kDimsPerThread = D / kThreadsPerRow;
  __shared__ float Ks[kBc][D];
  __shared__ float Vs[kBc][D];

  // ---- Which head and which Q tile. Within a head the last Q tiles come first: under causal
  // masking they have the most keys to visit, and starting the longest blocks first evens out
  // the tail of the grid.
  const int64_t block = blockIdx.x;
  const int64_t bh = block / num_q_tiles;
  const int64_t q_tile = num_q_tiles - 1 - block % num_q_tiles;
  const int64_t row0 = q_tile * kBr;

  const int part = threadIdx.x % kThreadsPerRow;          // which slice of D this thread owns
  const int64_t i = row0 + threadIdx.x / kThreadsPerRow;  // this thread's query row
  const bool row_valid = i < seq_q;  // rows past seq_q still compute (the shuffles need every
                                     // lane), they only skip the final store

  const float* Qh = Q + bh * seq_q * D;
  const float* Kh = K + bh * seq_k * D;
  const float* Vh = V + bh * seq_k * D;

  // This thread's slice of its query row, and of its output accumulator.
  float q[kDimsPerThread], o[kDimsPerThread];
#pragma unroll
  for (int t = 0; t < kDimsPerThread; ++t) {
    q[t] = row_valid ? Qh[i * D + part + t * kThreadsPerRow] : 0.0f;
    o[t] = 0.0f;
  }
  float m = -INFINITY;  // running max of this row's scores
  float l = 0.0f;       // running sum of exp(score - m)

  // Bottom-right causal alignment: query i sees keys j <= causal_last_key(i) = i + offset
  // (shapes.h). The offset is hoisted once here; the loops below only add it.
  const int64_t offset = causal_last_key(0, seq_q, seq_k);
  const int64_t last_row = (row0 + kBr < seq_q ? row0 + kBr : seq_q) - 1;
  int64_t kv_end = seq_k;  // one past the last key any row of this tile may see
  if (causal) {
    const int64_t last_visible = last_row + offset;  // negative: the whole tile sees nothing
    kv_end = last_visible + 1 < seq_k ? (last_visible + 1 > 0 ? last_visible + 1 : 0) : seq_k;
  }

  // kv_end is the same for every thread of the block, so every thread runs the same iterations
  // and reaches the same __syncthreads().
  for (int64_t col0 = 0; col0 < kv_end; col0 += kBc) {
    // ---- Load the K and V tiles (keys past seq_k are zero-filled and masked below).
    __syncthreads();  // everyone is done with the previous tile
    for (int e = threadIdx.x; e < kBc * D; e += kThreads) {
      const int c = e / D, d = e % D;
      const int64_t j = col0 + c;
      Ks[c][d] = j < seq_k ? Kh[j * D + d] : 0.0f;
      Vs[c][d] = j < seq_k ? Vh[j * D + d] : 0.0f;
    }
    __syncthreads();

    // Does this tile need the element-wise mask? Only if it is ragged or the diagonal crosses it
    // (its last key is past what the tile's first row may see).
    const bool needs_mask = col0 + kBc > seq_k || (causal && col0 + kBc - 1 > row0 + offset);

    // ---- S = scale * q K_tile^T for this row, and its max.
    float s[kBc];
    float m_tile = -INFINITY;
#pragma unroll
    for (int c = 0; c < kBc; ++c) {
      float partial = 0.0f;
#pragma unroll
      for (int t = 0; t < kDimsPerThread; ++t)
        partial = fmaf(q[t], Ks[c][part + t * kThreadsPerRow], partial);
      s[c] = scale * sum_over_row_threads(partial);
      if (needs_mask) {
        const int64_t j = col0 + c;
        if (j >= seq_k || (causal && j > i + offset)) s[c] = -INFINITY;
      }
      m_tile = fmaxf(m_tile, s[c]);
    }

    // ---- Online softmax: a new max rescales what was accumulated against the old one.
    // EXERCISE(online-rescale): this tile may raise the row's running maximum: everything summed so far (l and the O accumulator) was weighted against the old maximum and must be brought to the new one; a row that has seen no key yet must skip the tile without producing NaN
    const float m_new = fmaxf(m, m_tile);
    if (m_new == -INFINITY) continue;     // this row has seen no key yet (same for its 4 threads)
    const float alpha = expf(m - m_new);  // exp(-inf) = 0 on the first visible tile
    l *= alpha;
#pragma unroll
    for (int t = 0; t < kDimsPerThread; ++t) o[t] *= alpha;
      // EXERCISE-PLACEHOLDER
      // const float m_new = m_tile;  // stand-in: forgets the running max, rescales nothing
      // EXERCISE-END

      // ---- P = exp(S - m_new), l += rowsum(P), O += P V_tile (still unnormalised).
#pragma unroll
    for (int c = 0; c < kBc; ++c) {
      const float p = expf(s[c] - m_new);
      l += p;
#pragma unroll
      for (int t = 0; t < kDimsPerThread; ++t)
        o[t] = fmaf(p, Vs[c][part + t * kThreadsPerRow], o[t]);
    }
    m = m_new;
  }

  // ---- Epilogue: divide by l once, and save L = m + log(l) for the backward pass. A row that
  // saw no key at all (causal, seq_q > seq_k) has l = 0: O = 0 and L = -inf by convention.
  if (!row_valid) return;
  // EXERCISE(normalise): the accumulator holds unnormalised sums: what turns them into O? A causal row that saw no key must give O = 0, not NaN
  const bool sees_nothing = l == 0.0f;
  const float inv_l = sees_nothing ? 0.0f : 1.0f / l;
  // EXERCISE-PLACEHOLDER
  // const float inv_l = 1.0f;  // stand-in: O left unnormalised
  // EXERCISE-END
  float* Oh = O + bh * seq_q * D;
#pragma unroll
  for (int t = 0; t < kDimsPerThread; ++t) Oh[i * D + part + t * kThreadsPerRow] = o[t] * inv_l;
  // EXERCISE(logsumexp): the backward pass needs each row's log-sum-exp L (natural log), from the running maximum and sum; one thread of the row stores it, and a row that saw no key stores -inf
  if (part == 0) Lse[bh * seq_q + i] = sees_nothing ? -INFINITY : m + logf(l);
  // EXERCISE-END
}

template <int D>
void launch_v1(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > 0x7fffffffLL, "v1: more than 2^31-1 blocks (batch*heads*Q tiles)");
  flash_fwd_v1_kernel<D><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const float*>(a.q), static_cast<const float*>(a.k),
      static_cast<const float*>(a.v), static_cast<float*>(a.o), a.lse, s.seq_q, s.seq_k,
      num_q_tiles, s.softmax_scale(), s.causal);
  FA_CHECK_LAUNCH();
}

void flash_fwd_v1(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(a.dtype != DType::F32, "05/v1_scalar_fp32 takes fp32 only");
  const AttentionShape& s = a.shape;
  if (s.seq_q == 0 || s.bh() == 0) return;
  switch (s.head_dim) {
    case 32:
      return launch_v1<32>(a, stream);
    case 64:
      return launch_v1<64>(a, stream);
    case 96:
      return launch_v1<96>(a, stream);
    case 128:
      return launch_v1<128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "05/v1_scalar_fp32 has no head_dim " + std::to_string(s.head_dim) +
                                  " instantiation (32, 64, 96, 128)");
  }
}

}  // namespace

FA_REGISTER(
    AttentionFwdKernel,
    {"05/v1_scalar_fp32",
     flash_fwd_v1,
     "fused, fp32 CUDA cores: a block per Q tile, K/V tiles in shared memory, online softmax",
     {DType::F32},
     {32, 64, 96, 128},
     70});

}  // namespace fa
