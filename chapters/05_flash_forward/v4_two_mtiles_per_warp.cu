// v4_two_mtiles_per_warp.cu: v3 (v3_fused_scale_warp_skip.cu) with one change: each warp owns
// 32 query rows (two m16 tiles) instead of 16, so every K or V fragment it loads from shared
// memory feeds two tensor-core MMAs instead of one. The 128-row Q tile is now 4 warps, not 8.
// Everything else (the softmax with the scale in the exponent's FMA, the per-warp causal skip,
// the padded shared-memory tiles, cp.async double buffering, P reused from registers) is v3's.
//
// Why: what Nsight Compute saw (H100, bf16, D 128, N 8192, B 2, H 16; 2026-11-23; notes/05)
//   v3 issued 134 M ldmatrix for 4.73 ms of kernel; FlashAttention-2's forward on the same problem
//   issued 84 M for 3.59 ms, with its tensor pipe busy 57% of the cycles against v3's 43%, and
//   1.82 instructions per cycle against 1.25 (both at 8 warps per SM). In v3 a warp's 16 rows are
//   one m16 tile: per k16 slice of S it loads one K fragment (ldmatrix.x4) per 2 MMAs, and per
//   16 keys of P V one V fragment per 2 MMAs. FA2 gives a warp 32 rows (its 128-row tile is 4 warps
//   of 2 m16 tiles each): the same fragment then serves both m16 tiles, 4 MMAs per ldmatrix.x4.
//
// What changed vs v3
//   * kRowsPerWarp 16 -> 32 (kM = 2 m16 tiles per warp), kWarps 8 -> 4 (128 threads), so Br stays
//     128 and the shared-memory layout is v3's. Every per-row array gains an m index: S is
//     s[kM][Bc/8][4], O is o_acc[kM][D/8][4], m, l, the last keys are [kM][2].
//   * S = Q K^T loads each K fragment once per k16 slice and issues it to both m16 tiles; O += P V
//     loads each V fragment once per 16 keys and issues it to both. Half the ldmatrix of K and V
//     per MMA.
//   * Registers: O is 32 x D fp32 per warp = D registers per thread (128 at D = 128), S 64. Q can
//     no longer stay in registers at D = 96 or 128 (another 48 or 64): there, as v3 does at
//     D = 256, each k16 slice of Q is read from shared memory when S is computed (one ldmatrix.x4
//     per m16 tile per slice, 2 per 4 K fragments). At D = 32 and 64 Q stays in registers.
//   * Blocks per SM: 128 threads with up to 255 registers: two blocks per SM at every D (v3 ran one
//     256-thread block at D = 96, 128). The same 8 warps per SM, but as two independent blocks:
//     while one waits at its barrier for a K/V tile, the other computes.
//   * D = 256 is v3 unchanged (kM = 1): the O accumulator alone is 128 registers for 16 rows, so
//     32 rows would not fit.
//
// Map (per block: one Q tile of 128 rows of one (batch, head); per warp: rows 32w .. 32w + 31, the
// thread owns rows g, g + 8 of m16 tile 0 (rows 32w + g, + 8) and of m16 tile 1 (+ 16)):
//   prologue   cp.async Q tile and K/V tile 0; wait; Q fragments into registers (D <= 64)
//   loop j     wait; __syncthreads; cp.async K/V tile j + 1 into the other buffer
//              skip if no row of this warp sees tile j (v3's idea 2)
//     (1) S = Q K_j^T: for each k16 slice, each K fragment -> 2 MMAs per m16 tile
//     (2) mask (only tiles at the ragged end or on the diagonal)
//     (3) online softmax of each m16 tile's two rows per thread (v3's, per m16 tile)
//     (4) O = alpha O + P V_j: each V fragment -> 2 MMAs per m16 tile
//   epilogue   O / l staged through the warp's own 32 rows of sQ (two 16-row halves), L
//
// Speed (H100 80GB HBM3, 2026-11-23, bf16, B = 16384/N, H = 2048/D; fa_bench with PyTorch SDPA in
// the same call: notes/measured/h100-2026-11-23d/call2_sdpa.log, call2_bench.log)
//   D 64, N 8192: 317.7 TFLOP/s (v3 275.2; FlashAttention-2 301.0, 1.06x); causal 309.3 (v3
//   269.2; FA2 295.1). At D 64 v4 is at 1.00x to 1.06x FA2 over N 1024 .. 16384, causal and not.
//   Nsight Compute (call2_ncu_ours_fwd_v4_d64.txt): ldmatrix 134 M -> 67 M, tensor pipe busy 44%
//   -> 53%, 4.65 -> 4.06 ms.
//   D 128, N 8192: 270.3 (v3 267.7; FA2 349.0): no gain. ptxas: 255 registers and 64 bytes of
//   spills; ncu: 12.6 M local-memory loads, tensor pipe 43% (call2_ncu_ours_fwd_v4_d128.txt), and
//   with the k16 loop rolled, 2.9x v3's short-scoreboard stalls (call4_ncu_fwd_v4_*.txt). v5 is
//   the rung that fixes it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "attention_tiles.cuh"
#include "ch05_mma_fwd.cuh"
#include "ch05_mma_fwd_mtiles.cuh"
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace fa {
namespace {

// Shared with v2/v3: Params, SmemLayout, ex2_approx, q_lane_ptr, store_o_tile (ch05_mma_fwd.cuh);
// with v5/v6: S = Q K^T and O = alpha O + P V over kM m16 tiles (ch05_mma_fwd_mtiles.cuh).
using namespace fwd_mma;

// v4's tiles: v3's Br and Bc, with the rows of a warp doubled where the registers allow it.
template <int D>
struct TilesV4 {
  static constexpr int kM = D <= 128 ? 2 : 1;  // m16 tiles per warp (the idea of this rung)
  static constexpr int kWarps = Tiles<D>::kBr / (16 * kM);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = 16 * kM;
  static constexpr int kBr = Tiles<D>::kBr;  // 128 (D <= 128) or 64: v3's, so is the smem layout
  static constexpr int kBc = Tiles<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  static constexpr bool kQInRegs = kM * D <= 128;  // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // With Q in shared memory nothing is indexed by the k16 slice, so the loop of S = Q K^T need not
  // be unrolled in full: fully unrolled, ptxas hoisted the K and Q loads of many slices ahead and
  // spilled at D = 128.
  static constexpr int kUnrollK = kQInRegs ? D / 16 : 1;
  static_assert(kWarps == 4, "128 threads: two blocks per SM at up to 255 registers");
};

template <class T, int D>
__global__ void __launch_bounds__(TilesV4<D>::kThreads, 2) flash_fwd_v4_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Tl = TilesV4<D>;
  constexpr int kM = Tl::kM;
  constexpr int kBr = Tl::kBr;
  constexpr int kBc = Tl::kBc;
  constexpr int kSTiles = Tl::kSTiles;
  constexpr int kOTiles = D / 8;
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + SmemLayout<D>::kQElems;  // buffer b at sK + b * kKVElems
  T* sV = sK + 2 * SmemLayout<D>::kKVElems;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  // ---- Which (batch*head) and which Q tile (as v3: blockIdx.x, last tile first).
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;

  // ---- How many K/V tiles this Q tile needs (as v3).
  int64_t n_tiles = ceil_div(seq_k, kBc);
  if (p.causal) {
    const int64_t last_row = (q0 + kBr < seq_q ? q0 + kBr : seq_q) - 1;
    const int64_t last_key = causal_last_key(last_row, seq_q, seq_k);
    n_tiles = last_key < 0 ? 0 : (last_key / kBc + 1 < n_tiles ? last_key / kBc + 1 : n_tiles);
  }

  // This thread's rows are g and g + 8 of each of the warp's kM m16 tiles: rows warp_row0 + 16 m +
  // g + 8 h. Their last visible keys are recomputed where a tile needs a mask (kept in registers
  // across the loop they pushed D = 128 into spills).
  const int64_t warp_row0 = q0 + warp * Tl::kRowsPerWarp;
  // The smallest last key over the warp (its first row) and the largest (its last row), as v3.
  const int warp_last_key = int(p.causal ? (causal_last_key(warp_row0, seq_q, seq_k) < seq_k - 1
                                                ? causal_last_key(warp_row0, seq_q, seq_k)
                                                : seq_k - 1)
                                         : seq_k - 1);
  const int warp_max_key =
      int(p.causal ? (causal_last_key(warp_row0 + Tl::kRowsPerWarp - 1, seq_q, seq_k) < seq_k - 1
                          ? causal_last_key(warp_row0 + Tl::kRowsPerWarp - 1, seq_q, seq_k)
                          : seq_k - 1)
                   : seq_k - 1);

  // ---- Prologue: Q tile (group 0) and K/V tile 0 (group 1) in flight together.
  tiles::load_tile_async<D, kBr, Tl::kThreads>(sQ, Q, q0, seq_q, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) {
    tiles::load_tile_async<D, kBc, Tl::kThreads>(sK, K, 0, seq_k, tid);
    tiles::load_tile_async<D, kBc, Tl::kThreads>(sV, V, 0, seq_k, tid);
  }
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q: m16 tile m of this warp is the 16-row slab kM * warp + m of sQ, so q_lane_ptr's 16-row
  // addressing applies unchanged. Fragments kept in registers at D <= 64 only.
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  const T* q_lane = q_lane_ptr<D>(sQ, kM * warp, lane);  // m16 tile m: 16 m rows further down
  const uint32_t q_addr = mma::smem_addr(q_lane);
  uint32_t q_frag[kM][Tl::kQRegSlices][4];
  if constexpr (Tl::kQInRegs) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        mma::ldmatrix_x4(q_frag[m][kk], q_addr + 16 * kRowBytes * m + 32 * kk);
  }

  float o_acc[kM][kOTiles][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int dn = 0; dn < kOTiles; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[m][dn][e] = 0.0f;
  float m_run[kM][2], l_run[kM][2];  // raw-score running max (v3's idea 1), per-thread partial sum
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_run[m][h] = kNegInf;
      l_run[m][h] = 0.0f;
    }

  // ldmatrix lane offsets into the K and V tiles: v3's (its kernel explains them).
  // As 32-bit shared addresses of buffer 0: every fragment is then this base plus a compile-time
  // offset, folded into the ldmatrix ([base + imm]); 64-bit pointers per fragment, kept live
  // across the loop, pushed D = 128 into spills (the register diet this rung needs).
  const int k_ld_row = (lane % 8) + 8 * (lane / 16);
  const int k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1);
  const int v_ld_col = 8 * (lane / 16);
  const uint32_t k_addr0 = mma::smem_addr(tile_row<D>(sK, k_ld_row) + k_ld_col);
  const uint32_t v_addr0 = mma::smem_addr(tile_row<D>(sV, v_ld_row) + v_ld_col);
  constexpr uint32_t kKVBytes = SmemLayout<D>::kKVElems * 2;

  const int n_tiles32 = int(n_tiles);
  for (int j = 0; j < n_tiles32; ++j) {
    const int buf = int(j & 1);
    if (j > 0) {
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < n_tiles32) {
      const int nb = buf ^ 1;
      tiles::load_tile_async<D, kBc, Tl::kThreads>(sK + nb * SmemLayout<D>::kKVElems, K,
                                                   int64_t(j + 1) * kBc, seq_k, tid);
      tiles::load_tile_async<D, kBc, Tl::kThreads>(sV + nb * SmemLayout<D>::kKVElems, V,
                                                   int64_t(j + 1) * kBc, seq_k, tid);
      mma::cp_async_commit();
    }
    const int k0 = j * kBc;
    if (k0 > warp_max_key) continue;  // no row of this warp sees any key of tile j

    // ---- (1) S = Q K_j^T: 32 x Bc per warp (kM m16 tiles).
    float s[kM][kSTiles][4];
    compute_s_m<T, D, Tl>(s, q_frag, q_addr, k_addr0 + buf * kKVBytes);

    if (p.scale_log2 < 0.0f) {  // negative scale: c * s = |c| * (-s) (v3's idea 1)
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[m][nt][e] = -s[m][nt][e];
    }

    // ---- (2) Mask, on the tiles at the ragged end or across the diagonal only.
    if (k0 + kBc - 1 > warp_last_key) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        int lim[2];  // last visible key of each row, relative to k0, clamped to [-1, kBc]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // In 32 bits (the launcher keeps lengths below 2^31 - 256): causal_last_key's
          // row + seq_k - seq_q, capped at the last key.
          const int row = int(warp_row0) + 16 * m + g + 8 * h;
          int lk = int(p.seq_k) - 1;
          if (p.causal) lk = min(lk, row + int(p.seq_k - p.seq_q));
          const int r = lk - k0;
          lim[h] = r < -1 ? -1 : (r > kBc ? kBc : r);
        }
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = nt * 8 + 2 * t + (e & 1);
            if (col > lim[e >> 1]) s[m][nt][e] = kNegInf;
          }
      }
    }

    // ---- (3) Online softmax, v3's, for each m16 tile.
    const float c = fabsf(p.scale_log2);
    float alpha[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float m_new[2] = {m_run[m][0], m_run[m][1]};
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        m_new[0] = fmaxf(m_new[0], fmaxf(s[m][nt][0], s[m][nt][1]));
        m_new[1] = fmaxf(m_new[1], fmaxf(s[m][nt][2], s[m][nt][3]));
      }
      float base[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 1));
        m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 2));
        base[h] = m_new[h] == kNegInf ? 0.0f : m_new[h] * c;
        alpha[m][h] = ex2_approx(fmaf(m_run[m][h], c, -base[h]));
        m_run[m][h] = m_new[h];
        l_run[m][h] *= alpha[m][h];
      }
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        s[m][nt][0] = ex2_approx(fmaf(s[m][nt][0], c, -base[0]));
        s[m][nt][1] = ex2_approx(fmaf(s[m][nt][1], c, -base[0]));
        s[m][nt][2] = ex2_approx(fmaf(s[m][nt][2], c, -base[1]));
        s[m][nt][3] = ex2_approx(fmaf(s[m][nt][3], c, -base[1]));
        l_run[m][0] += s[m][nt][0] + s[m][nt][1];
        l_run[m][1] += s[m][nt][2] + s[m][nt][3];
      }
    }

    // ---- (4) O = alpha * O + P V_j.
    rescale_o_add_pv_m<T, D, Tl>(o_acc, s, alpha, v_addr0 + buf * kKVBytes);
  }

  // ---- Epilogue: per m16 tile, v3's (O through the tile's own 16 rows of sQ, then L).
  T* O = static_cast<T*>(p.o) + bh * seq_q * D;
  float* Lse = p.lse + bh * seq_q;
  const float c = fabsf(p.scale_log2);
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    float inv_l[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 1);
      l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 2);
      inv_l[h] = l_run[m][h] > 0.0f ? 1.0f / l_run[m][h] : 0.0f;  // no visible key: O = 0
    }
    store_o_tile<T, D>(O, o_acc[m], inv_l, sQ, kM * warp + m, lane, warp_row0 + 16 * m, seq_q);
    if (t == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = warp_row0 + 16 * m + g + 8 * h;
        if (row < seq_q)
          Lse[row] = l_run[m][h] > 0.0f
                         ? (m_run[m][h] * c + log2f(l_run[m][h])) * 0.6931471805599453f
                         : kNegInf;
      }
    }
  }
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, TilesV4<D>::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, "05/v4_two_mtiles_per_warp: more than 2^31-1 thread blocks");
  constexpr int64_t kSeqMargin = 256;  // 32-bit key indices, as v3
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.seq_k > INT_MAX - kSeqMargin,
                    "05/v4_two_mtiles_per_warp: sequence lengths must stay below 2^31 - 256");
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
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    "05/v4_two_mtiles_per_warp: head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_v4_kernel<T, D>;
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(blocks), TilesV4<D>::kThreads, smem, stream>>>(p);
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
      FA_UNSUPPORTED_IF(true, "05/v4_two_mtiles_per_warp: head_dim " +
                                  std::to_string(a.shape.head_dim) +
                                  " not instantiated (32, 64, 96, 128, 256)");
  }
}

void attention_fwd_v4(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return dispatch_head_dim<__nv_bfloat16>(a, stream);
    case DType::F16:
      return dispatch_head_dim<__half>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "05/v4_two_mtiles_per_warp: takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {"05/v4_two_mtiles_per_warp",
             fa::attention_fwd_v4,
             "v3 with 32 query rows (two m16 tiles) per warp: each K/V fragment feeds 4 MMAs",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
