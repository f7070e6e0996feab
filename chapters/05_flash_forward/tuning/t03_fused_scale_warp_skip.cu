// t03_fused_scale_warp_skip.cu: tuning step 3, v2 (../v2_mma.cu) plus two small ideas from
// FlashAttention-2's own kernel, and the register diet that lets them fit. Everything else (tiles,
// shared memory, fragments, pipeline) is v2's, here in ch05_mma_fwd.cuh: read v2 first, its
// header has the map of the kernel, the padding argument and the fragment ownership. The next
// step, t04 (two m16 tiles per warp), is the main path's v3_fa2_warp_layout.cu, which keeps all
// three ideas of this one.
//
// What changed vs v2, and why
//   1. The scale rides in the exponent's FMA. v2 multiplies every score by c = scale * log2(e)
//      before the row max (one FMUL per score), then computes 2^(x - m). Since c > 0,
//      max(c * s) = c * max(s): the max can be taken on the raw scores, and each probability
//      becomes 2^(fma(s, c, -c * m)): one FFMA + one ex2 per score instead of FMUL + FADD + ex2.
//      m is now kept in raw score units; c * m is computed once per row per tile. A negative
//      scale (legal, if odd) would turn the max into a min: then S is negated once per tile
//      (a uniform branch) and |c| is used, since c * s = |c| * (-s). L = ln(2^(c m) l)
//      = (c * m + log2 l) * ln 2.
//   2. Per-warp skipping of masked-out tiles under causal masking. The block-level loop bound
//      (the last row of the Q tile) still loads the tiles that cross the diagonal for all 8 warps,
//      but a warp whose 16 rows see none of tile j's keys (k0 > the last key of its last row)
//      skips S, the softmax and P V for it: the result is exactly what the masked computation
//      would give (P = 0, alpha = 1), without the work. The warp still takes part in the loads and
//      the barrier. With Br = 128 and Bc = 64 the last tile of each causal Q tile is fully masked
//      for warps 0-3: it matters most at short sequence lengths, where that tile is a large
//      fraction of the work.
//   3. A register diet, so that 1 and 2 fit in D = 64's budget of 128 registers (two blocks per
//      SM): key indices (the per-row last keys, the loop counter, the tile start k0) are 32-bit
//      instead of v2's 64-bit, so the launcher refuses sequence lengths of 2^31 - 256 or more;
//      and the O and L pointers are formed in the epilogue, not before the loop, so they are not
//      live across it.
//
// Map, tile sizes, shared memory and fragments: as v2 (Br = 128 rows = 8 warps x 16, Bc = 64,
// padded rows of D + 8 elements, P reused from registers as the A operand of P V, cp.async double
// buffering of K/V). At D = 256: Br = 64 (4 warps), Bc = 32 and Q read from shared memory at every
// k16 slice (ch05_mma_fwd.cuh says why).
//
// Speed (H100 80GB HBM3, 2026-11-21): bf16 D 128 N 8192 274.2 TFLOP/s (261.1 causal), N 2048
// 267.8 (240.5 causal), against v2's 278.5 (252.1) and 241.8 (221.4): the ideas pay at short
// lengths and under causal masking (fa_bench; notes/measured/h100-2026-11-21/bench.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ch05_mma_fwd.cuh"
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace fa {
namespace {

// Tiles, shared-memory layout, Params and the shared device pieces: ch05_mma_fwd.cuh.
using namespace fwd_mma;

template <class T, int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads, Tiles<D>::kMinBlocksPerSm)
    flash_fwd_t03_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  constexpr int kBr = Tiles<D>::kBr;          // query rows per block
  constexpr int kBc = Tiles<D>::kBc;          // keys per K/V tile
  constexpr int kSTiles = Tiles<D>::kSTiles;  // n8 tiles of S
  constexpr int kOTiles = D / 8;              // n8 tiles of O
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + SmemLayout<D>::kQElems;  // buffer b at sK + b * kKVElems
  T* sV = sK + 2 * SmemLayout<D>::kKVElems;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  // ---- Which (batch*head) and which Q tile: both on blockIdx.x (gridDim.y/z stop at 65535).
  // Q tiles of one head are consecutive blocks (K/V of that head stay hot in L2), last tile first
  // (under causal masking the last Q tiles have the most work; starting them first evens the tail).
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;

  // ---- How many K/V tiles this Q tile needs. Causal (bottom-right): query i sees keys
  // j <= causal_last_key(i) = i + seq_k - seq_q, so the last real row of the tile bounds the loop;
  // tiles entirely above the diagonal are never loaded.
  int64_t n_tiles = ceil_div(seq_k, kBc);
  if (p.causal) {
    const int64_t last_row = (q0 + kBr < seq_q ? q0 + kBr : seq_q) - 1;
    const int64_t last_key = causal_last_key(last_row, seq_q, seq_k);
    n_tiles = last_key < 0 ? 0 : (last_key / kBc + 1 < n_tiles ? last_key / kBc + 1 : n_tiles);
  }

  // This thread's two rows (g and g+8 of the warp's 16) and the last key each may see.
  const int64_t warp_row0 = q0 + warp * kRowsPerWarp;
  // Idea 3: key indices fit in 32 bits (the launcher refuses seq lengths near 2^31): 32-bit here
  // saves registers, which at D = 64 sit right at the 128 of two blocks per SM.
  int last_key_of[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = warp_row0 + g + 8 * h;
    int64_t lk = seq_k - 1;
    const int64_t causal_lk = causal_last_key(row, seq_q, seq_k);
    if (p.causal && causal_lk < lk) lk = causal_lk;
    last_key_of[h] = int(lk < -1 ? -1 : lk);
  }
  // The smallest of those over the warp (its first row): a tile whose keys all lie at or below it
  // needs no mask for any row of the warp.
  const int warp_last_key = int(p.causal ? (causal_last_key(warp_row0, seq_q, seq_k) < seq_k - 1
                                                ? causal_last_key(warp_row0, seq_q, seq_k)
                                                : seq_k - 1)
                                         : seq_k - 1);

  // The largest over the warp (its last row): a tile starting after it is invisible to the whole
  // warp, which then skips it (idea 2).
  const int warp_max_key =
      int(p.causal ? (causal_last_key(warp_row0 + kRowsPerWarp - 1, seq_q, seq_k) < seq_k - 1
                          ? causal_last_key(warp_row0 + kRowsPerWarp - 1, seq_q, seq_k)
                          : seq_k - 1)
                   : seq_k - 1);
  // Idea 1: c = |scale| * log2(e) multiplies inside the exponent's FMA; a negative scale flips S.
  // Both are read from the kernel parameters (constant memory) where they are used: keeping them
  // in registers across the loop pushed D = 64 past its 128-register budget.

  // ---- Prologue: Q tile (group 0) and K/V tile 0 (group 1) in flight together.
  load_tile_async<D, kBr>(sQ, Q, q0, seq_q, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) {
    load_tile_async<D, kBc>(sK, K, 0, seq_k, tid);
    load_tile_async<D, kBc>(sV, V, 0, seq_k, tid);
  }
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q fragments of this warp's 16 rows, one A fragment per k16 slice, kept in registers for the
  // whole kernel where they fit (D <= 128); at D = 256 compute_s reads each slice from sQ at
  // q_lane instead (ch05_mma_fwd.cuh says why), and q_frag is an unused placeholder.
  uint32_t q_frag[Tiles<D>::kQRegSlices][4];
  if constexpr (Tiles<D>::kQInRegs) load_q_fragments<D>(q_frag, sQ, warp, lane);
  const T* q_lane = q_lane_ptr<D>(sQ, warp, lane);

  float o_acc[kOTiles][4];
#pragma unroll
  for (int dn = 0; dn < kOTiles; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o_acc[dn][e] = 0.0f;
  float m_run[2] = {kNegInf, kNegInf};  // running max, in raw score units (idea 1)
  float l_run[2] = {0.0f, 0.0f};        // running sum; per thread partial, quad-reduced at the end

  // Per-lane row/column offsets of the ldmatrix addresses for K and V (constant over the loop).
  // K (for S = Q K^T; B operand = K^T, which in the "col" layout is K's rows as stored: no .trans).
  // One x4 covers the n8 tiles 2np (keys 0-7 of the 16) and 2np+1 (keys 8-15), one k16 slice:
  //   m0 = keys 0-7,  d 0-7  -> b[0] of tile 2np     m1 = keys 0-7,  d 8-15 -> b[1] of tile 2np
  //   m2 = keys 8-15, d 0-7  -> b[0] of tile 2np+1   m3 = keys 8-15, d 8-15 -> b[1] of tile 2np+1
  const int k_ld_row = (lane % 8) + 8 * (lane / 16);
  const int k_ld_col = 8 * ((lane / 8) & 1);
  // V (for O += P V; B operand = V [Bc x D] row-major, i.e. B[k][n] = V[key k][dim n]; the fragment
  // wants two consecutive keys of one dim, a column of V: ldmatrix .trans delivers exactly that).
  // One x4.trans covers one k16 slice of keys and the n8 tiles 2dp, 2dp+1 of D:
  //   m0 = keys 0-7, d 0-7  -> b[0] of tile 2dp      m1 = keys 8-15, d 0-7  -> b[1] of tile 2dp
  //   m2 = keys 0-7, d 8-15 -> b[0] of tile 2dp+1    m3 = keys 8-15, d 8-15 -> b[1] of tile 2dp+1
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1);
  const int v_ld_col = 8 * (lane / 16);

  const int n_tiles32 = int(n_tiles);
  for (int j = 0; j < n_tiles32; ++j) {
    const int buf = int(j & 1);
    if (j > 0) {
      // Tile j (the only group in flight) has landed for this thread; the barrier makes it
      // visible to all, and also guarantees every warp is done with tile j-1, whose buffer the
      // next cp.async overwrites.
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < n_tiles32) {
      const int nb = buf ^ 1;
      load_tile_async<D, kBc>(sK + nb * SmemLayout<D>::kKVElems, K, int64_t(j + 1) * kBc, seq_k,
                              tid);
      load_tile_async<D, kBc>(sV + nb * SmemLayout<D>::kKVElems, V, int64_t(j + 1) * kBc, seq_k,
                              tid);
      mma::cp_async_commit();
    }
    const T* sKb = sK + buf * SmemLayout<D>::kKVElems;
    const T* sVb = sV + buf * SmemLayout<D>::kKVElems;
    const int k0 = j * kBc;
    if (k0 > warp_max_key) continue;  // idea 2: no row of this warp sees any key of tile j

    // ---- (1) S = Q K_j^T: 16 x Bc per warp.
    float s[kSTiles][4];
    compute_s<T, D>(s, q_frag, q_lane, sKb, k_ld_row, k_ld_col);

    // ---- Negative scale only: c * s = |c| * (-s), so the max below stays a max (idea 1).
    if (p.scale_log2 < 0.0f) {
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = -s[nt][e];
    }

    // ---- (2) Mask: keys past seq_k, and (causal) keys after a row's last visible key. Uniform
    // per warp, so only the tiles at the ragged end or on the diagonal pay for it.
    if (k0 + kBc - 1 > warp_last_key) {
      int lim[2];  // last visible key of each row, relative to k0, clamped to [-1, kBc]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int r = last_key_of[h] - k0;
        r = r < -1 ? -1 : (r > kBc ? kBc : r);
        lim[h] = int(r);
      }
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = nt * 8 + 2 * t + (e & 1);
          if (col > lim[e >> 1]) s[nt][e] = kNegInf;
        }
    }

    // ---- (3) Online softmax on rows g (h = 0) and g+8 (h = 1).
    float m_new[2] = {m_run[0], m_run[1]};
    row_max<D>(m_new, s);
    const float c = fabsf(p.scale_log2);
    float base[2], alpha[2];  // base = c * m_new, in log2 units
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      base[h] = m_new[h] == kNegInf ? 0.0f : m_new[h] * c;  // no key seen yet: avoid -inf - -inf
      alpha[h] = ex2_approx(fmaf(m_run[h], c, -base[h]));   // 0 when m_run = -inf
      m_run[h] = m_new[h];
      l_run[h] *= alpha[h];
    }
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      s[nt][0] = ex2_approx(fmaf(s[nt][0], c, -base[0]));
      s[nt][1] = ex2_approx(fmaf(s[nt][1], c, -base[0]));
      s[nt][2] = ex2_approx(fmaf(s[nt][2], c, -base[1]));
      s[nt][3] = ex2_approx(fmaf(s[nt][3], c, -base[1]));
      l_run[0] += s[nt][0] + s[nt][1];
      l_run[1] += s[nt][2] + s[nt][3];
    }

    // ---- (4) O = alpha * O + P V_j.
    rescale_o_add_pv<T, D>(o_acc, s, alpha, sVb, v_ld_row, v_ld_col);
  }

  // ---- Epilogue. (O and L pointers are formed only here, idea 3.)
  T* O = static_cast<T*>(p.o) + bh * seq_q * D;
  float* Lse = p.lse + bh * seq_q;
  const float c = fabsf(p.scale_log2);
  // Finish the row sums (each thread summed only its own columns).
  float inv_l[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    inv_l[h] = l_run[h] > 0.0f ? 1.0f / l_run[h] : 0.0f;  // l = 0: no visible key, O = 0
  }

  // O (16-bit), staged through the warp's own rows of sQ, then 16-byte stores.
  store_o_tile<T, D>(O, o_acc, inv_l, sQ, warp, lane, warp_row0, seq_q);
  if (t == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = warp_row0 + g + 8 * h;
      if (row < seq_q)
        Lse[row] =
            l_run[h] > 0.0f ? (m_run[h] * c + log2f(l_run[h])) * 0.6931471805599453f : kNegInf;
    }
  }
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX,
                    "05/t03_fused_scale_warp_skip: more than 2^31-1 thread blocks");
  // 32-bit key indices (idea 3): k0 + Bc and q0 + Br must not overflow; 256 = 2 x the largest Br.
  constexpr int64_t kSeqMargin = 256;
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.seq_k > INT_MAX - kSeqMargin,
                    "05/t03_fused_scale_warp_skip: sequence lengths must stay below 2^31 - 256");
  Params p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.scale_log2 = s.softmax_scale() * 1.4426950408889634f;  // log2(e)

  constexpr size_t smem = SmemLayout<D>::kBytes;
  // D = 256 needs 99 KiB: every GPU from sm_80 on has that much, but say so clearly if not.
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    "05/t03_fused_scale_warp_skip: head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_t03_kernel<T, D>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; also ask for the largest
  // shared-memory carveout so that two blocks fit per SM where registers allow it.
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(blocks), Tiles<D>::kThreads, smem, stream>>>(p);
  FA_CHECK_LAUNCH();
}

template <class T>
void dispatch_head_dim(const AttentionFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 32:
      return launch<T, 32>(a, stream);
    case 64:
      return launch<T, 64>(a, stream);
    case 96:
      return launch<T, 96>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    case 256:
      return launch<T, 256>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "05/t03_fused_scale_warp_skip: head_dim " +
                                  std::to_string(a.shape.head_dim) +
                                  " not instantiated (32, 64, 96, 128, 256)");
  }
}

void attention_fwd_t03(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return dispatch_head_dim<__nv_bfloat16>(a, stream);
    case DType::F16:
      return dispatch_head_dim<__half>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "05/t03_fused_scale_warp_skip: takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {"05/t03_fused_scale_warp_skip",
             fa::attention_fwd_t03,
             "v2 + scale folded into the exp2 FFMA (max on raw scores) + per-warp causal skip",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
