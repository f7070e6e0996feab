// attention_tiled_race.cu: attention forward (fp32) with K and V staged through shared memory in
// tiles of kBc keys, one thread per query row, kBr rows (four warps) per block.
//
// Each tile needs two barriers:
//   load K/V tile -> __syncthreads (1) -> every row uses the tile -> __syncthreads (2) -> next load
// (1) stops a thread from reading a tile before the other threads have finished writing it;
// (2) stops a fast warp from overwriting the tile with the next one while a slow warp (a causal
// row further down has more keys to process) is still reading it.
//   attn_fwd_tiled_synced        both barriers (the twin)
//   attn_fwd_tiled_missing_sync  (d) barrier (2) forgotten: a write-after-read race on Ks/Vs. The
//                                answer is often right anyway, which is why races survive testing;
//                                compute-sanitizer --tool racecheck reports it every time.
#include <cstdint>

#include "check.h"
#include "mutants.h"

namespace mutants {
namespace {

constexpr int kD = kHeadDim;
constexpr int kBr = 128;  // query rows per block = threads per block (four warps)
constexpr int kBc = 32;   // keys per shared-memory tile: 2 x 32 x 64 x 4 B = 16 KiB

template <bool kSyncAfterUse>
__global__ void attn_fwd_tiled(const float* __restrict__ q, const float* __restrict__ k,
                               const float* __restrict__ v, float* __restrict__ o,
                               float* __restrict__ lse, int64_t seq_q, int64_t seq_k, bool causal,
                               float scale) {
  __shared__ float Ks[kBc][kD];
  __shared__ float Vs[kBc][kD];
  const int64_t bh = blockIdx.x;
  const int64_t row0 = int64_t(blockIdx.y) * kBr;
  const int64_t i = row0 + threadIdx.x;
  const bool active = i < seq_q;  // inactive threads still help load and still reach the barriers
  const float* kh = k + bh * seq_k * kD;
  const float* vh = v + bh * seq_k * kD;

  // The last key any row of this block sees (the same for all threads: a uniform loop bound).
  const int64_t block_last_row = (row0 + kBr < seq_q ? row0 + kBr : seq_q) - 1;
  int64_t block_last_key = causal ? fa::causal_last_key(block_last_row, seq_q, seq_k) : seq_k - 1;
  if (block_last_key > seq_k - 1) block_last_key = seq_k - 1;
  int64_t my_last_key = causal ? fa::causal_last_key(i, seq_q, seq_k) : seq_k - 1;
  if (my_last_key > seq_k - 1) my_last_key = seq_k - 1;
  if (!active) my_last_key = -1;

  float qr[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) qr[d] = active ? q[(bh * seq_q + i) * kD + d] : 0.0f;
  float acc[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  for (int64_t j0 = 0; j0 <= block_last_key; j0 += kBc) {
    for (int idx = threadIdx.x; idx < kBc * kD; idx += kBr) {
      const int r = idx / kD, c = idx % kD;
      const int64_t j = j0 + r;
      Ks[r][c] = j < seq_k ? kh[j * kD + c] : 0.0f;
      Vs[r][c] = j < seq_k ? vh[j * kD + c] : 0.0f;
    }
    __syncthreads();  // (1) the tile is complete before anyone reads it

    int64_t keys_here = my_last_key - j0 + 1;  // keys of this tile this row sees (may be <= 0)
    if (keys_here > kBc) keys_here = kBc;
    for (int r = 0; r < keys_here; ++r) {
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < kD; ++d) s += qr[d] * Ks[r][d];
      s *= scale;
      const float m_new = fmaxf(m, s);
      const float alpha = expf(m - m_new);
      const float p = expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int d = 0; d < kD; ++d) acc[d] = acc[d] * alpha + p * Vs[r][d];
      m = m_new;
    }
    if (kSyncAfterUse) __syncthreads();  // (2) everyone is done with the tile before the next load
    // (d) without (2): the next iteration's stores above race with the reads just made.
  }

  if (!active) return;
  float* oi = o + (bh * seq_q + i) * kD;
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int d = 0; d < kD; ++d) oi[d] = acc[d] * inv_l;
  lse[bh * seq_q + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

template <bool kSyncAfterUse>
void launch(const fa::AttentionFwdArgs& a, cudaStream_t st) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(s.head_dim != kD, "mutant kernels take head_dim 64 only");
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::F32, "the tiled mutant takes fp32 only");
  const int64_t row_blocks = (s.seq_q + kBr - 1) / kBr;
  if (s.bh() == 0 || row_blocks == 0) return;
  FA_REQUIRE(row_blocks <= 65535, "too many query rows for gridDim.y");
  const dim3 grid(static_cast<unsigned>(s.bh()), static_cast<unsigned>(row_blocks));
  attn_fwd_tiled<kSyncAfterUse>
      <<<grid, kBr, 0, st>>>(static_cast<const float*>(a.q), static_cast<const float*>(a.k),
                             static_cast<const float*>(a.v), static_cast<float*>(a.o), a.lse,
                             s.seq_q, s.seq_k, s.causal, s.softmax_scale());
  FA_CHECK_LAUNCH();
}

}  // namespace

void attn_fwd_tiled_synced(const fa::AttentionFwdArgs& a, cudaStream_t st) {
  launch<true>(a, st);
}
void attn_fwd_tiled_missing_sync(const fa::AttentionFwdArgs& a, cudaStream_t st) {
  launch<false>(a, st);
}

}  // namespace mutants

FA_REGISTER_MUTANT(AttentionFwdKernel, {"mutant/05_tiled_missing_sync",
                                        mutants::attn_fwd_tiled_missing_sync,
                                        "no __syncthreads after using a K/V tile (a race)",
                                        {fa::DType::F32},
                                        {mutants::kHeadDim}});
