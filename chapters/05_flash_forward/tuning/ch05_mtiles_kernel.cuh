// ch05_mtiles_kernel.cuh: the kernel and the launcher of the tuning steps t04 to t11 and t13, which
// differ only in their tiles (ch05_tuning_tiles.cuh: one struct per step, each the previous step's
// with one idea switched on). The switches are named bools of the tiles: kExactAlpha and
// kSkipRescale (t06, the one change of code in the softmax below), kSwizzle (t07, the shared-memory
// layout), kOneLaneAddr (t08, one set of ldmatrix addresses for Q and V), kPipelineLoads (t09, the
// fragment loads of both matmuls software-pipelined, ch05_mma_fwd_mtiles.cuh) and kHoistCopies
// (t10, each thread's K/V copies planned once: KVCopyPlan there, load_kv_tile below); t05, t11 and
// t13 change tile sizes only. The step files tell the story and hold the measurements; the pieces
// below the kernel (S = Q K^T and O = alpha O + P V over kM m16 tiles, the shared-memory layout)
// are ch05_mma_fwd_mtiles.cuh's, and Params, ex2_approx, q_lane_ptr and store_o_tile are t03's
// (ch05_mma_fwd.cuh). The main path has the same kernels without switches: t04 is
// v3_fa2_warp_layout.cu, t09 v4_swizzled_pipelined.cu, and t11 plus the stmatrix epilogue
// v5_fewer_instructions.cu. Each including .cu file compiles its own copy (anonymous namespace).
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

// K/V tile j into buffer buf: through t10's copy plan, else (before t10, and at D 96 and 256)
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

// The kernel of t04 to t11 and t13. Tl is the step's tile struct: t04's and t05's differ in their
// members only (t05: Bc = 32 at D 96 and 128); t06's sets kExactAlpha, the one change of code;
// t07's sets kSwizzle (SmemFor, ch05_mma_fwd_mtiles.cuh: swizzled rows instead of padded ones);
// t08's kOneLaneAddr (below, at the ldmatrix addresses); t09's kPipelineLoads; t10's kHoistCopies;
// t11 changes kBc at D 128 only; t13 the block at D 256 (kWarps, kBr, kBc, and kMinBlocks, the
// blocks per SM that __launch_bounds__ leaves registers for).
template <class T, int D, class Tl>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kMinBlocks)
    flash_fwd_mtiles_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Sm = SmemFor<Tl, D>;
  constexpr int kM = Tl::kM;
  constexpr int kBr = Tl::kBr;
  constexpr int kBc = Tl::kBc;
  constexpr int kSTiles = Tl::kSTiles;
  constexpr bool kSkipRescale = Tl::kSkipRescale;  // t06, where it pays: Bc = 32
  constexpr int kOTiles = D / 8;
  constexpr float kNegInf = -INFINITY;

  // Swizzled tiles (t07) must start at 128-byte boundaries; so must the block's shared memory.
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

  // ---- Which (batch*head) and which Q tile (as t03: blockIdx.x, last tile first).
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;

  // ---- How many K/V tiles this Q tile needs (as t03).
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
  // The smallest last key over the warp (its first row) and the largest (its last row), as t03.
  const int warp_last_key = int(p.causal ? (causal_last_key(warp_row0, seq_q, seq_k) < seq_k - 1
                                                ? causal_last_key(warp_row0, seq_q, seq_k)
                                                : seq_k - 1)
                                         : seq_k - 1);
  const int warp_max_key =
      int(p.causal ? (causal_last_key(warp_row0 + Tl::kRowsPerWarp - 1, seq_q, seq_k) < seq_k - 1
                          ? causal_last_key(warp_row0 + Tl::kRowsPerWarp - 1, seq_q, seq_k)
                          : seq_k - 1)
                   : seq_k - 1);

  // t10 (kHoistCopies): this thread's K/V copies, planned once (ch05_mma_fwd_mtiles.cuh). Unused
  // before t10, where ptxas drops it.
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
  float m_run[kM][2], l_run[kM][2];  // raw-score running max (t03's idea 1), per-thread partial sum
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_run[m][h] = kNegInf;
      l_run[m][h] = 0.0f;
    }

  // ldmatrix lane offsets into the K and V tiles: t03's (v2_mma.cu's kernel explains them).
  // As 32-bit shared addresses of buffer 0: every fragment is then this base plus a compile-time
  // offset, folded into the ldmatrix ([base + imm]); 64-bit pointers per fragment, kept live
  // across the loop, pushed D = 128 into spills (the register diet t04 needs).
  const int k_ld_row = (lane % 8) + 8 * (lane / 16);
  const int k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1);
  const int v_ld_col = 8 * (lane / 16);
  const typename Sm::Lane k_addr0(mma::smem_addr(Sm::row(sK, k_ld_row) + k_ld_col), swz);
  const typename Sm::Lane v_addr0(mma::smem_addr(Sm::row(sV, v_ld_row) + v_ld_col), swz);
  constexpr uint32_t kKVBytes = Sm::kKVElems * 2;
  // t08 (kOneLaneAddr): V's lane mapping is Q's, so q_addr's four bases reach V as well: V buffer
  // b lies (Q tile + both K buffers - this warp's Q offset + b * buffer) bytes further. t07 keeps a
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

    if (p.scale_log2 < 0.0f) {  // negative scale: c * s = |c| * (-s) (t03's idea 1)
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

    // ---- (3) Online softmax, t03's, for each m16 tile.
    const float c = fabsf(p.scale_log2);
    float alpha[kM][2];
    bool rescale[kM];  // t06 on
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
        if constexpr (Tl::kExactAlpha)  // t06: an unmoved max gives alpha = 1 exactly
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

  // ---- Epilogue, per m16 tile, t03's: O through the tile's own 16 rows of sQ, then L.
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
    store_o_tile<T, D, Sm::kSwizzle>(O, o_acc[m], inv_l, sQ, kM * warp + m, lane,
                                     warp_row0 + 16 * m, seq_q);
    write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
  }
}

// ---- The host side. A step is a struct with kName (its registered name) and Tiles<D>.
template <class Step, class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Tl = typename Step::template Tiles<D>;
  const std::string name = Step::kName;
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tl::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, name + ": more than 2^31-1 thread blocks");
  constexpr int64_t kSeqMargin = 256;  // 32-bit key indices, as t03
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

template <class Step, class T>
void dispatch_head_dim(const AttentionFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 32:
      return launch<Step, T, 32>(a, stream);
    case 64:
      return launch<Step, T, 64>(a, stream);
    case 96:
      return launch<Step, T, 96>(a, stream);
    case 128:
      return launch<Step, T, 128>(a, stream);
    case 256:
      return launch<Step, T, 256>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(Step::kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) +
                                  " not instantiated (32, 64, 96, 128, 256)");
  }
}

// The registered entry point of a step.
template <class Step>
void mtiles_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return dispatch_head_dim<Step, __nv_bfloat16>(a, stream);
    case DType::F16:
      return dispatch_head_dim<Step, __half>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(Step::kName) + ": takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa
