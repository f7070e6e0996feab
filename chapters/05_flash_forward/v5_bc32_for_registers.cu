// v5_bc32_for_registers.cu: v4 (v4_two_mtiles_per_warp.cu) with one change: at head dims 96 and
// 128 a K/V tile is 32 keys instead of 64, which halves the S accumulator and ends v4's spills.
//
// Why: what Nsight Compute saw (H100, bf16, N 8192, B 2, H 16; 2026-11-23; notes/05 section 8)
//   v4 at D 64 did what it promised: ldmatrix count 134 M -> 67 M, tensor pipe busy 44% -> 53%,
//   1.06x FlashAttention-2's forward at N 8192 (317.7 TFLOP/s against 301.0 measured in the same
//   run; v3: 275.2). At D 128 it did not: 270.3 against FA2's 349.0 (v3 267.7), tensor pipe 43%.
//   Registers hit it twice there. The live set is O (32 rows x 128 fp32 per warp = 128 registers
//   per thread), S (32 rows x Bc keys: 64 registers at Bc = 64), the Q and K fragments of a k16
//   slice, the softmax state and the addresses: a little more than 255. So ptxas spills (64 bytes;
//   ncu counts 12.6 M local-memory loads), and to keep the spills that small v4 leaves the k16
//   loop of S = Q K^T rolled, so each slice waits for its own ldmatrix: short-scoreboard stalls
//   (shared-memory results) 2.9x v3's. Spilling alone is survivable: FA2's own D 128 kernel
//   makes 14.7 M local loads (call4_ncu_fa2_fwd_d128.txt) and still keeps its tensor pipe 57%
//   busy. The rolled loop is the likelier cost.
//
// What changed vs v4
//   * Bc = 32 keys per K/V tile at D = 96 and 128 (64 elsewhere, as before). S is 32 x 32 per warp:
//     32 registers per thread instead of 64. ptxas (CUDA 13.0, sm_90): D 128 255 registers and no
//     spills, D 96 221; v4: 64 and 48 bytes of spills.
//   * With the registers back, the k16 loop of S = Q K^T is unrolled in full again (v4 had to stop
//     ptxas from hoisting the loads of many slices; 12 bytes of spills at D 128 if it is kept at 2).
//   * The shared-memory layout has its own K/V buffer size (Bc rows): 68 KiB at D = 128 instead of
//     102 KiB.
//   The price: twice as many K/V tiles, so twice the barriers, the mask tests and the O rescales
//   (alpha) per key. FlashAttention-2 makes the same choice for D = 128, non-causal, on sm_86/89
//   (128 x 32 there, "the fastest for non-causal since we get 2 CTAs per SM"; 128 x 64 on A100
//   and H100: run_mha_fwd_hdim128 in Dao-AILab/flash-attention,
//   csrc/flash_attn/src/flash_fwd_launch_template.h).
//
// Speed (H100 80GB HBM3, 2026-11-23, bf16, B = 16384/N, H = 2048/D; fa_bench with PyTorch SDPA in
// the same call: notes/measured/h100-2026-11-23d/call3_sdpa.log, call3_bench.log)
//   D 128, N 8192: 316.0 TFLOP/s (v4 270.4; FlashAttention-2 338.8, 0.93x); causal 297.2 (v4
//   244.5; FA2 315.5, 0.94x). Over N 1024 .. 16384 at D 128: 0.82x to 0.96x FA2.
//   Nsight Compute (call3_sdpa.log's table, call4_ncu_fwd_v5_bc32_for_registers.txt): no local
//   loads, tensor pipe busy 51% (v4 43%), short-scoreboard stalls half of v4's, 100.7 M ldmatrix
//   (v4 83.9 M: Q is now read from shared memory once per 32 keys instead of once per 64).
//   At D 64 nothing changed (Bc stays 64): v5 has v4's tiles and loops there.
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

// Shared with v2/v3: Params, ex2_approx, q_lane_ptr, store_o_tile (ch05_mma_fwd.cuh);
// with v4: the smem layout, S = Q K^T and O = alpha O + P V over kM m16 tiles
// (ch05_mma_fwd_mtiles.cuh).
using namespace fwd_mma;

// v5's tiles: v4's, with Bc = 32 at D = 96 and 128 (the idea of this rung).
template <int D>
struct TilesV5 {
  static constexpr int kM = D <= 128 ? 2 : 1;  // m16 tiles per warp (the idea of this rung)
  static constexpr int kWarps = Tiles<D>::kBr / (16 * kM);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = 16 * kM;
  static constexpr int kBr = Tiles<D>::kBr;  // 128 (D <= 128) or 64: v3's, so is the smem layout
  static constexpr int kBc = (D == 96 || D == 128) ? 32 : Tiles<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  static constexpr bool kQInRegs = kM * D <= 128;  // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  static constexpr int kUnrollK = D / 16;  // the k16 loop of S = Q K^T, unrolled in full
  static_assert(kWarps == 4, "128 threads: two blocks per SM at up to 255 registers");
};

// The shared-memory layout: ch05_mma_fwd_mtiles.cuh's, with this rung's tiles.
template <int D>
using SmemV5 = SmemFor<TilesV5<D>, D>;

template <class T, int D>
__global__ void __launch_bounds__(TilesV5<D>::kThreads, 2) flash_fwd_v5_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Tl = TilesV5<D>;
  constexpr int kM = Tl::kM;
  constexpr int kBr = Tl::kBr;
  constexpr int kBc = Tl::kBc;
  constexpr int kSTiles = Tl::kSTiles;
  constexpr int kOTiles = D / 8;
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + SmemV5<D>::kQElems;  // buffer b at sK + b * kKVElems
  T* sV = sK + 2 * SmemV5<D>::kKVElems;

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
  constexpr int kRowBytes = SmemV5<D>::kPitch * 2;
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
  constexpr uint32_t kKVBytes = SmemV5<D>::kKVElems * 2;

  const int n_tiles32 = int(n_tiles);
  for (int j = 0; j < n_tiles32; ++j) {
    const int buf = int(j & 1);
    if (j > 0) {
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < n_tiles32) {
      const int nb = buf ^ 1;
      tiles::load_tile_async<D, kBc, Tl::kThreads>(sK + nb * SmemV5<D>::kKVElems, K,
                                                   int64_t(j + 1) * kBc, seq_k, tid);
      tiles::load_tile_async<D, kBc, Tl::kThreads>(sV + nb * SmemV5<D>::kKVElems, V,
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
  const int64_t num_q_tiles = ceil_div(s.seq_q, TilesV5<D>::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, "05/v5_bc32_for_registers: more than 2^31-1 thread blocks");
  constexpr int64_t kSeqMargin = 256;  // 32-bit key indices, as v3
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.seq_k > INT_MAX - kSeqMargin,
                    "05/v5_bc32_for_registers: sequence lengths must stay below 2^31 - 256");
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

  constexpr size_t smem = SmemV5<D>::kBytes;
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    "05/v5_bc32_for_registers: head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_v5_kernel<T, D>;
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(blocks), TilesV5<D>::kThreads, smem, stream>>>(p);
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
      FA_UNSUPPORTED_IF(true, "05/v5_bc32_for_registers: head_dim " +
                                  std::to_string(a.shape.head_dim) +
                                  " not instantiated (32, 64, 96, 128, 256)");
  }
}

void attention_fwd_v5(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return dispatch_head_dim<__nv_bfloat16>(a, stream);
    case DType::F16:
      return dispatch_head_dim<__half>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "05/v5_bc32_for_registers: takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel, {"05/v5_bc32_for_registers",
                                 fa::attention_fwd_v5,
                                 "v4 with Bc = 32 at head dims 96 and 128: S halves, the spills go",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {32, 64, 96, 128, 256},
                                 80});
