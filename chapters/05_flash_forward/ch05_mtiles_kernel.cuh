// ch05_mtiles_kernel.cuh: the kernel and the launcher of 05/v4 to 05/v12, which differ only in
// their tiles (each rung file defines its Tiles struct); the rungs from v6 on add one switch each to
// them: kExactAlpha (v6, the one change of code below), kSwizzle (v7, the shared-memory layout),
// kOneLaneAddr (v8, one set of ldmatrix addresses for Q and V), kPipelineLoads (v9, the
// fragment loads of both matmuls software-pipelined, ch05_mma_fwd_mtiles.cuh) and kHoistCopies
// (v10, each thread's K/V copies planned once: KVCopyPlan there, load_kv_tile below); v11
// changes one tile size, v12 adds kStmatrixO (the epilogue through stmatrix, store_o_m). The rung
// files tell the story and hold the measurements; the pieces below the kernel (S = Q K^T and
// O = alpha O + P V over kM m16 tiles, the shared-memory layout) are ch05_mma_fwd_mtiles.cuh's,
// and Params, ex2_approx, q_lane_ptr and store_o_tile are v2/v3's (ch05_mma_fwd.cuh). Moving the
// three kernels v4-v6 here changed no instruction: the PTX of each
// rung's kernels is the same before and after (names, virtual registers and anonymous-namespace
// tags normalised). Each including .cu file compiles its own copy (anonymous namespace).
#pragma once
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

using namespace fwd_mma;

// K/V tile j into buffer buf: through v10's copy plan, else (before v10, and at D 96 and 256)
// load_tile_async, which works out every chunk's addresses and bounds test from scratch.
template <class T, int D, class Tl>
__device__ __forceinline__ void load_kv_tile(T* sK, T* sV, const T* K, const T* V,
                                             const KVCopyPlan<T, D, Tl>& plan, int j, int buf,
                                             int64_t seq_k, int tid) {
  using Sm = SmemFor<Tl, D>;
  if constexpr (Tl::kHoistCopies && KVCopyPlan<T, D, Tl>::kPlanned) {
    plan.issue(K, V, j, buf, int(seq_k) - j * Tl::kBc, tid);  // the launcher keeps seq_k < 2^31
  } else {
    tiles::load_tile_async<D, Tl::kBc, Tl::kThreads, Sm::kSwizzle>(
        sK + buf * Sm::kKVElems, K, int64_t(j) * Tl::kBc, seq_k, tid);
    tiles::load_tile_async<D, Tl::kBc, Tl::kThreads, Sm::kSwizzle>(
        sV + buf * Sm::kKVElems, V, int64_t(j) * Tl::kBc, seq_k, tid);
  }
}

// L = ln(sum_j exp(s_j)) of rows row0 + g and row0 + g + 8 of one m16 tile (l, m: this lane's
// row sums, already reduced over the quad, and raw-score maxima), written by the quad's first lane
// (t = 0); rows past seq_q are not.
__device__ __forceinline__ void write_lse(float* Lse, const float (&l)[2], const float (&m)[2],
                                          float c, int64_t row0, int64_t seq_q, int g, int t) {
  if (t == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + g + 8 * h;
      if (row < seq_q)
        Lse[row] = l[h] > 0.0f ? (m[h] * c + log2f(l[h])) * 0.6931471805599453f : -INFINITY;
    }
  }
}

// The kernel of 05/v4 to v12. Tl is the rung's tile struct: v4's and v5's differ in their members
// only (v5: Bc = 32 at D 96 and 128); v6's sets kExactAlpha, the one change of code; v7's sets
// kSwizzle (SmemFor, ch05_mma_fwd_mtiles.cuh: swizzled rows instead of padded ones); v8's
// kOneLaneAddr (below, at the ldmatrix addresses); v9's kPipelineLoads; v10's kHoistCopies; v11
// changes kBc at D 128 only; v12's kStmatrixO (the epilogue).
template <class T, int D, class Tl>
__global__ void __launch_bounds__(Tl::kThreads, 2) flash_fwd_mtiles_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Sm = SmemFor<Tl, D>;
  constexpr int kM = Tl::kM;
  constexpr int kBr = Tl::kBr;
  constexpr int kBc = Tl::kBc;
  constexpr int kSTiles = Tl::kSTiles;
  constexpr bool kSkipRescale = Tl::kSkipRescale;  // v6, where it pays: Bc = 32
  constexpr int kOTiles = D / 8;
  constexpr float kNegInf = -INFINITY;

  // Swizzled tiles (v7) must start at 128-byte boundaries; so must the block's shared memory.
  // Two arrays, one per alignment: one name declared with both (D 32/96 padded and D 64/128/256
  // swizzled in one translation unit) is one array with the first alignment (nvcc warning 1886),
  // and the PTX of the swizzled kernels would not ask for the 128-byte base they rely on.
  extern __shared__ __align__(16) unsigned char smem_padded[];
  extern __shared__ __align__(128) unsigned char smem_swizzled[];
  T* sQ = reinterpret_cast<T*>(Sm::kSwizzle ? smem_swizzled : smem_padded);
  T* sK = sQ + Sm::kQElems;  // buffer b at sK + b * kKVElems
  T* sV = sK + 2 * Sm::kKVElems;

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

  // v10 (kHoistCopies): this thread's K/V copies, planned once (ch05_mma_fwd_mtiles.cuh). Unused
  // before v10, where ptxas drops it.
  const KVCopyPlan<T, D, Tl> plan(sK, tid);

  // ---- Prologue: Q tile (group 0) and K/V tile 0 (group 1) in flight together.
  tiles::load_tile_async<D, kBr, Tl::kThreads, Sm::kSwizzle>(sQ, Q, q0, seq_q, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) load_kv_tile<T, D, Tl>(sK, sV, K, V, plan, 0, 0, seq_k, tid);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q: m16 tile m of this warp is the 16-row slab kM * warp + m of sQ, so q_lane_ptr's 16-row
  // addressing applies unchanged. Fragments kept in registers at D <= 64 only.
  constexpr int kRowBytes = Sm::kPitch * 2;
  // Every ldmatrix row of this lane is lane % 8 modulo 8 (16-row tiles): one XOR pattern for all
  // of its reads where the tiles are swizzled (tiles::LaneAddr; unused with padded rows).
  const uint32_t swz = tiles::swizzle_xor(lane);
  const T* q_lane = q_lane_ptr<D, Sm::kPitch>(sQ, kM * warp, lane);  // m16 tile m: 16 m rows down
  const typename Sm::Lane q_addr(mma::smem_addr(q_lane), swz);
  uint32_t q_frag[kM][Tl::kQRegSlices][4];
  if constexpr (Tl::kQInRegs) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        mma::ldmatrix_x4(q_frag[m][kk], q_addr.at(16 * kRowBytes * m, kk));
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
  const typename Sm::Lane k_addr0(mma::smem_addr(Sm::row(sK, k_ld_row) + k_ld_col), swz);
  const typename Sm::Lane v_addr0(mma::smem_addr(Sm::row(sV, v_ld_row) + v_ld_col), swz);
  constexpr uint32_t kKVBytes = Sm::kKVElems * 2;
  // v8 (kOneLaneAddr): V's lane mapping is Q's, so q_addr's four bases reach V as well: V buffer
  // b lies (Q tile + both K buffers - this warp's Q offset + b * buffer) bytes further. v7 keeps a
  // third set of bases for V. (K's mapping differs: its own set stays.)
  const uint32_t v_from_q =
      uint32_t(Sm::kQElems * 2 + 2 * Sm::kKVElems * 2) - uint32_t(16 * kRowBytes * kM * warp);

  const int n_tiles32 = int(n_tiles);
  for (int j = 0; j < n_tiles32; ++j) {
    const int buf = int(j & 1);
    if (j > 0) {
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < n_tiles32) {
      load_kv_tile<T, D, Tl>(sK, sV, K, V, plan, j + 1, buf ^ 1, seq_k, tid);
      mma::cp_async_commit();
    }
    const int k0 = j * kBc;
    if (k0 > warp_max_key) continue;  // no row of this warp sees any key of tile j

    // ---- (1) S = Q K_j^T: 32 x Bc per warp (kM m16 tiles).
    float s[kM][kSTiles][4];
    const typename Sm::Lane k_addr(k_addr0, buf * kKVBytes);
    if constexpr (Tl::kPipelineLoads)
      compute_s_m_pipelined<T, D, Tl>(s, q_frag, q_addr, k_addr);
    else
      compute_s_m<T, D, Tl>(s, q_frag, q_addr, k_addr);

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
    bool rescale[kM];  // v6 only
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
        if constexpr (Tl::kExactAlpha)  // v6: an unmoved max gives alpha = 1 exactly
          alpha[m][h] = m_new[h] == m_run[m][h] ? 1.0f : ex2_approx(fmaf(m_run[m][h], c, -base[h]));
        else
          alpha[m][h] = ex2_approx(fmaf(m_run[m][h], c, -base[h]));
        m_run[m][h] = m_new[h];
        l_run[m][h] *= alpha[m][h];
      }
      if constexpr (Tl::kExactAlpha)
        rescale[m] =
            !kSkipRescale || __any_sync(0xffffffffu, alpha[m][0] != 1.0f || alpha[m][1] != 1.0f);
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
    const typename Sm::Lane v_addr = Tl::kOneLaneAddr
                                         ? typename Sm::Lane(q_addr, v_from_q + buf * kKVBytes)
                                         : typename Sm::Lane(v_addr0, buf * kKVBytes);
    if constexpr (Tl::kPipelineLoads)
      rescale_o_add_pv_m_pipelined<T, D, Tl>(o_acc, s, alpha, rescale, v_addr);
    else if constexpr (Tl::kExactAlpha)
      rescale_o_add_pv_m<T, D, Tl>(o_acc, s, alpha, rescale, v_addr);
    else
      rescale_o_add_pv_m<T, D, Tl>(o_acc, s, alpha, v_addr);
  }

  // ---- Epilogue: per m16 tile, v3's (O through the tile's own 16 rows of sQ, then L); v12: all
  // m16 tiles at once through store_o_m (stmatrix, where the build targets sm_90 or newer).
  T* O = static_cast<T*>(p.o) + bh * seq_q * D;
  float* Lse = p.lse + bh * seq_q;
  const float c = fabsf(p.scale_log2);
  if constexpr (Tl::kStmatrixO && mma::kHasStmatrix) {
    float inv_l[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 1);
        l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 2);
        inv_l[m][h] = l_run[m][h] > 0.0f ? 1.0f / l_run[m][h] : 0.0f;  // no visible key: O = 0
      }
    store_o_m<T, D, Tl>(O + warp_row0 * D, seq_q - warp_row0, o_acc, inv_l, q_addr,
                        Sm::row(sQ, Tl::kRowsPerWarp * warp), lane);
#pragma unroll
    for (int m = 0; m < kM; ++m)
      write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
  } else {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float inv_l[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 1);
        l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 2);
        inv_l[h] = l_run[m][h] > 0.0f ? 1.0f / l_run[m][h] : 0.0f;  // no visible key: O = 0
      }
      store_o_tile<T, D, Sm::kSwizzle>(O, o_acc[m], inv_l, sQ, kM * warp + m, lane,
                                       warp_row0 + 16 * m, seq_q);
      write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
    }
  }
}

// ---- The host side. A rung is a struct with kName (its registered name) and Tiles<D>.
template <class Rung, class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Tl = typename Rung::template Tiles<D>;
  const std::string name = Rung::kName;
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tl::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, name + ": more than 2^31-1 thread blocks");
  constexpr int64_t kSeqMargin = 256;  // 32-bit key indices, as v3
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.seq_k > INT_MAX - kSeqMargin,
                    name + ": sequence lengths must stay below 2^31 - 256");
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

  constexpr size_t smem = SmemFor<Tl, D>::kBytes;
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    name + ": head_dim " + std::to_string(D) + " needs " + std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_mtiles_kernel<T, D, Tl>;
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(blocks), Tl::kThreads, smem, stream>>>(p);
  FA_CHECK_LAUNCH();
}

template <class Rung, class T>
void dispatch_head_dim(const AttentionFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 32:
      return launch<Rung, T, 32>(a, stream);
    case 64:
      return launch<Rung, T, 64>(a, stream);
    case 96:
      return launch<Rung, T, 96>(a, stream);
    case 128:
      return launch<Rung, T, 128>(a, stream);
    case 256:
      return launch<Rung, T, 256>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(Rung::kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) +
                                  " not instantiated (32, 64, 96, 128, 256)");
  }
}

// The registered entry point of a rung.
template <class Rung>
void mtiles_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return dispatch_head_dim<Rung, __nv_bfloat16>(a, stream);
    case DType::F16:
      return dispatch_head_dim<Rung, __half>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(Rung::kName) + ": takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa
