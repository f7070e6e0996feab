// hopper_attention.cuh: the pieces every Hopper (sm_90a) attention forward shares, so that a
// rung file holds only the structure of its kernel (and `diff v1 v2` shows only the idea that
// changed):
//   * tile sizes per head dim, the shared-memory tile layout and the wgmma descriptors into it;
//   * the online softmax on a wgmma accumulator fragment (mask, running max and sum, exp2);
//   * P (the probabilities) packed from the S accumulators into register A fragments for P V;
//   * the epilogue (O = acc / l, L = ln-sum-exp), with predicated stores;
//   * host side: TMA descriptors of Q, K, V, the fallback, the opt-in to more shared memory.
// Chapter 07 introduces every piece (notes/07_flash_hopper.md; its namespace, fa::ch07, says so),
// and chapter 09's Hopper rungs build on them: that is why the header lives here and not in
// chapter 07's folder (README.md of this folder). Included by sm_90a files only; chapter 07's
// forward rungs take their launch, their checks and the timeline's phase marks from
// chapters/07_flash_hopper/ch07_launch.cuh.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudaTypedefs.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.h"
#include "dtype.h"
#include "hopper.cuh"
#include "kv_tiles.h"
#include "tensor_map.h"
#include "mma.cuh"
#include "registry.h"

namespace fa::ch07 {

// ---- Tiles ---------------------------------------------------------------------------------------
// One consumer warpgroup owns 64 query rows (one wgmma M). Per thread it holds the S tile, 64 x Bc
// fp32 -> Bc / 2 registers, and the O tile, 64 x D fp32 -> D / 2 registers, plus P in 16 bits
// (Bc / 4 registers) while P V runs:
//   D =  64: Bc = 128  -> S 64 + O  32 + P 32 = 128 registers of tiles
//   D = 128: Bc = 128  -> S 64 + O  64 + P 32 = 160
//   D = 256: Bc =  64  -> S 32 + O 128 + P 16 = 176
// A thread has at most 255 registers (240 after setmaxnreg in a 3-warpgroup kernel); addresses,
// row statistics and loop state need about 40-60 more. D = 256 with Bc = 128 would need
// 64 + 128 + 32 = 224 for the tiles alone and spill, so D = 256 halves Bc.
//
// FlashAttention-3 picks wider K/V tiles where the registers allow: 176 keys at D = 128 (S 88 +
// O 64 + P 44 = 196) and 80 at D = 256 (S 40 + O 128 + P 20 = 188), hopper/tile_size.h of
// github.com/Dao-AILab/flash-attention: kWideBc, which chapter 07's tuning steps t51 (on v4) and
// t52 (on v5) pass as BC (D = 64 keeps 128). Its instance D = 192 takes 112 keys (S 56 + O 96 +
// P 28 = 180), which t52 alone instantiates (the others round D 192 up to 256). So does its
// instance D = 96, with D 128's 176 keys (S 88 + O 48 + P 44 = 180): a row of 96 columns fills
// one 64-column strip and half of the next, whose other half TMA fills with zeros, as it does
// for a head dim rounded up; the products stop at column 96.
template <int D>
constexpr int kDefaultBc = D <= 128 ? 128 : 64;
template <int D>
constexpr int kWideBc = D == 96 || D == 128 ? 176
                        : D == 192          ? 112
                        : D == 256          ? 80
                                            : kDefaultBc<D>;

template <int D, int BC = kDefaultBc<D>>
struct Tiles {
  static_assert(D == 64 || D == 96 || D == 128 || D == 192 || D == 256,
                "head dims 64, 96, 128, 192, 256");
  static_assert(BC % 16 == 0 && BC <= 256, "a K/V tile is k16 slices of P V, one TMA box");
  static constexpr int kBc = BC;                        // keys per K/V tile
  static constexpr int kStrips = (D + 63) / 64;         // 128-byte column strips of a row of D
  static constexpr int kSAcc = kBc / 2;                 // S accumulators per thread
  static constexpr int kOAcc = D / 2;                   // O accumulators per thread
  static constexpr int kPSlices = kBc / 16;             // k16 slices of P V
  static constexpr int kKVBytes = kBc * kStrips * 128;  // one K (or V) tile, whole strips
};

constexpr int kRowsPerWarpgroup = 64;  // wgmma M
constexpr int kSwizzleCols = 64;       // 128 bytes of 16-bit elements: the widest swizzled box
constexpr int kAtomBytes = 1024;       // 8 rows x 128 bytes: one swizzle atom

// Shared-memory layout of a [rows x D] tile as TMA writes it with the 128-byte swizzle: D / 64
// column strips, strip s (columns 64s .. 64s+63) at byte s * rows * 128, row r of a strip at
// r * 128 (its 16-byte chunks XOR-permuted by r % 8). rows % 8 == 0 keeps every strip on a
// 1024-byte atom boundary, as the swizzle requires.
//
// Descriptors (hopper.cuh, smem_desc_sw128), for the k16 step kk of a product:
//  * K-major operand, a [rows x D] tile read along D (Q as A and K as B of S = Q K^T): step kk lies
//    in strip kk / 4, (kk % 4) * 32 bytes into each row; SBO = 1024 (the next 8 rows); LBO unused.
//  * MN-major operand, a [Bc x D] tile read along its rows (V as B of O += P V: k = key = row,
//    n = d = column): step kk starts at row 16 kk, i.e. 2 atoms = 2048 bytes further; the N
//    direction crosses strips, LBO = the strip size Bc * 128; SBO = 1024 (the next 8 keys).
template <int ROWS>
__device__ __forceinline__ uint64_t desc_k_major(const unsigned char* tile, int kk) {
  return hopper::smem_desc_sw128(tile + (kk / 4) * ROWS * 128 + (kk % 4) * 32, 16, kAtomBytes);
}
template <int D, int BC = kDefaultBc<D>>
__device__ __forceinline__ uint64_t desc_v(const unsigned char* tile, int kk) {
  return hopper::smem_desc_sw128(tile + kk * 2 * kAtomBytes, BC * 128, kAtomBytes);
}

// ---- Kernel parameters ---------------------------------------------------------------------------
struct Params {
  void* o;
  float* lse;
  int64_t seq_q, seq_k;
  int d;  // the real head dim: O's row length (the kernel's D rounds it up; head_dim_instance)
  int num_q_tiles;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e); its absolute value is used (see negate_if)
};

// ---- Softmax on an accumulator fragment ----------------------------------------------------------
// Thread t of a warpgroup (w = t / 32, g = (t % 32) / 4, q = t % 4) holds, of a 64 x N accumulator,
// rows 16w + g (h = 0) and 16w + g + 8 (h = 1); element i is row h = (i / 2) % 2, column
// 8 (i / 4) + 2q + i % 2 (hopper.cuh). The four threads of a quad hold a whole row between them.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// A negative scale would turn the max of scale * s into a min: flip S instead and use |scale|
// (scale * s = |scale| * (-s)), as chapter 05's kernels do.
template <int N>
__device__ __forceinline__ void negate_if(float (&s)[N], bool negative) {
  if (negative) {
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] = -s[i];
  }
}

// Keys after a row's last visible key (causal) or at or past seq_k become -inf. last_key[h] is
// the last key row h may see (kv_tiles.h), k0 the first key of the tile.
template <int N>
__device__ __forceinline__ void mask_tile(float (&s)[N], int64_t k0, const int64_t (&last_key)[2],
                                          int q) {
  int lim[2];  // last visible column of each row, relative to the tile, clamped to [-1, 2N]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = last_key[h] - k0;
    lim[h] = int(r < -1 ? -1 : (r > 2 * N ? 2 * N : r));
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int col = 8 * (i / 4) + 2 * q + (i % 2);
    if (col > lim[(i / 2) % 2]) s[i] = -INFINITY;
  }
}

// One step of the online softmax on this tile's scores (raw units, max taken before scaling:
// c = |scale| * log2 e > 0 rides in the exp2's FMA). Turns s into the unnormalised probabilities
// p = 2^(c s - c m_new), updates the running max m (raw units) and this thread's partial sum l,
// and returns in alpha the factor 2^(c m_old - c m_new) that O must be rescaled by.
template <int N>
__device__ __forceinline__ void online_softmax(float (&s)[N], float (&m)[2], float (&l)[2], float c,
                                               float (&alpha)[2]) {
  float m_new[2] = {m[0], m[1]};
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    m_new[0] = fmaxf(m_new[0], fmaxf(s[i], s[i + 1]));
    m_new[1] = fmaxf(m_new[1], fmaxf(s[i + 2], s[i + 3]));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // the quad's four threads hold the row
    m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 1));
    m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 2));
  }
  float base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    base[h] = m_new[h] == -INFINITY ? 0.0f : m_new[h] * c;  // no key seen yet: no -inf - -inf
    // An unmoved max must give alpha = 1 exactly. fmaf(m, c, -base) with m = m_new is not 0 but
    // the rounding error of base = m c (up to half an ulp of base), and 2^that is 1 + ~1e-7,
    // which multiplies l once per tile and compounds: at seq_k 131072 (1024 tiles) L came out
    // 1.2e-4 to 1.8e-4 off while O, rescaled by the same factor, stayed right (O / l cancels it).
    // Else 0 while m = -inf.
    alpha[h] = m_new[h] == m[h] ? 1.0f : ex2_approx(fmaf(m[h], c, -base[h]));
    m[h] = m_new[h];
    l[h] *= alpha[h];
  }
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    s[i] = ex2_approx(fmaf(s[i], c, -base[0]));
    s[i + 1] = ex2_approx(fmaf(s[i + 1], c, -base[0]));
    s[i + 2] = ex2_approx(fmaf(s[i + 2], c, -base[1]));
    s[i + 3] = ex2_approx(fmaf(s[i + 3], c, -base[1]));
    l[0] += s[i] + s[i + 1];
    l[1] += s[i + 2] + s[i + 3];
  }
}

template <int N>
__device__ __forceinline__ void rescale(float (&o)[N], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    o[i] *= alpha[0];
    o[i + 1] *= alpha[0];
    o[i + 2] *= alpha[1];
    o[i + 3] *= alpha[1];
  }
}

// P (fp32 accumulators of S) -> register A fragments of P V, one per k16 slice of keys: the
// accumulators of columns 16k .. 16k+15 are the A fragment of slice k (hopper.cuh, wgmma_rs).
template <class T, int N>
__device__ __forceinline__ void pack_p(const float (&s)[N], uint32_t (&p)[N / 8][4]) {
#pragma unroll
  for (int k = 0; k < N / 8; ++k) {
    p[k][0] = mma::pack2<T>(s[8 * k + 0], s[8 * k + 1]);  // row g,     keys 16k + 2q, +1
    p[k][1] = mma::pack2<T>(s[8 * k + 2], s[8 * k + 3]);  // row g + 8, keys 16k + 2q, +1
    p[k][2] = mma::pack2<T>(s[8 * k + 4], s[8 * k + 5]);  // row g,     keys 16k + 8 + 2q, +1
    p[k][3] = mma::pack2<T>(s[8 * k + 6], s[8 * k + 7]);  // row g + 8, keys 16k + 8 + 2q, +1
  }
}

// ---- Epilogue ------------------------------------------------------------------------------------
// O = acc / l in the dtype, L = ln(sum_j exp(scale s_j)) = (c m + log2 l) ln 2; a row that saw no
// key (l = 0) gets O = 0 and L = -inf. row0: the warpgroup's first query row; rows at or past seq_q
// are not stored. Each thread stores pairs of columns (4 bytes), so O must be 4-byte aligned.
// d: O's row length, the real head dim; columns at or past it (the zeros of a head dim rounded up
// to D, head_dim_instance) are not stored. d is a multiple of 8, so a quad's columns 8j .. 8j + 7
// are all stored or all skipped.
template <class T, int D>
__device__ __forceinline__ void store_o_l(const float (&o)[D / 2], const float (&m)[2],
                                          float (&l)[2], float c, T* O, float* L, int64_t row0,
                                          int64_t seq_q, int t, int d = D) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  float inv_l[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    inv_l[h] = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + 16 * w + g + 8 * h;
    if (row >= seq_q) continue;
    T* out = O + row * d + 2 * q;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      if (8 * j < d)
        *reinterpret_cast<uint32_t*>(out + 8 * j) =
            mma::pack2<T>(o[4 * j + 2 * h] * inv_l[h], o[4 * j + 2 * h + 1] * inv_l[h]);
    if (q == 0) L[row] = l[h] > 0.0f ? (m[h] * c + log2f(l[h])) * 0.6931471805599453f : -INFINITY;
  }
}

// A quad's 4 x 4 transpose, for epilogues that store 16 bytes a thread (07/t56_wide_o_stores
// introduces it; notes/figures/fig_quad_transpose.svg draws it). In the accumulator layout thread
// q of a quad holds two columns of each 8-column chunk of a row; packed to 32 bits, four
// consecutive chunks give x[jj] = M[q][jj] (chunk jj, columns 2q, 2q + 1 of it). After the
// transpose x[k] = M[k][q]: thread q holds all of chunk q, 16 contiguous bytes. Two butterfly
// stages, each swapping two values with one partner (4 shuffles, no shared memory):
//   stage 1 (lane q ^ 2): the values whose jj bit 1 differs from q's;
//   stage 2 (lane q ^ 1): inside each pair, the value whose jj bit 0 differs from q's.
// Every lane of the warp must call it (the shuffles take the full mask).
__device__ __forceinline__ void quad_transpose(uint32_t (&x)[4], int q) {
  constexpr unsigned kAll = 0xffffffffu;
  const bool bit1 = (q & 2) != 0, bit0 = (q & 1) != 0;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const uint32_t r = __shfl_xor_sync(kAll, bit1 ? x[e] : x[2 + e], 2);
    if (bit1)
      x[e] = r;
    else
      x[2 + e] = r;
  }
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const uint32_t r = __shfl_xor_sync(kAll, bit0 ? x[2 * b] : x[2 * b + 1], 1);
    if (bit0)
      x[2 * b] = r;
    else
      x[2 * b + 1] = r;
  }
}

// store_o_l with 16-byte stores (07/t56_wide_o_stores introduces it): O = acc / l and L as
// store_o_l computes them; only the way O reaches memory differs. For each 32 columns of a row
// the quad packs its four 8-column chunks, transposes them (quad_transpose) so that each thread
// holds one chunk's 16 contiguous bytes, and stores them with one uint4 store: a warp-wide store
// writes 64 bytes into each of 8 rows instead of 16. O must be 16-byte aligned (the launcher
// checks; rows of d elements, d a multiple of 8, keep every row so once the base is). Every lane
// runs the shuffles, rows past seq_q included: only the stores are skipped for them.
template <class T, int D>
__device__ __forceinline__ void store_o_l_16(const float (&o)[D / 2], const float (&m)[2],
                                             float (&l)[2], float c, T* O, float* L, int64_t row0,
                                             int64_t seq_q, int t, int d) {
  static_assert(D % 32 == 0, "four 8-column chunks a group");
  constexpr unsigned kAll = 0xffffffffu;
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  float inv_l[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(kAll, l[h], 1);
    l[h] += __shfl_xor_sync(kAll, l[h], 2);
    inv_l[h] = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + 16 * w + g + 8 * h;
#pragma unroll
    for (int a = 0; a < D / 32; ++a) {  // columns 32a .. 32a + 31 of the row
      uint32_t x[4];                    // x[jj]: columns 8(4a + jj) + 2q, +1
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = 4 * a + jj;
        x[jj] = mma::pack2<T>(o[4 * j + 2 * h] * inv_l[h], o[4 * j + 2 * h + 1] * inv_l[h]);
      }
      quad_transpose(x, q);
      // x[k] now holds columns 8(4a + q) + 2k, +1: 16 contiguous bytes of the row.
      const int col = 8 * (4 * a + q);
      if (row < seq_q && col < d)
        *reinterpret_cast<uint4*>(O + row * d + col) = make_uint4(x[0], x[1], x[2], x[3]);
    }
    if (q == 0 && row < seq_q)
      L[row] = l[h] > 0.0f ? (m[h] * c + log2f(l[h])) * 0.6931471805599453f : -INFINITY;
  }
}

// ---- Host side -----------------------------------------------------------------------------------
// Shapes TMA cannot load run this registered kernel, called through the registry (not by
// instantiating its template here: each .cu file is its own CUDA module, and a kernel template
// instantiated in two of them shares its host-side "shared memory already opted in" flag but not
// its device code; see 03/v6): chapter 05's final forward. It has instances at head dims 32, 64
// and 128 only (its K/V copy plan), so at any other head dim (96, 192, 256, one rounded up inside
// the rungs) a shape TMA cannot load (below: an input not 16-byte aligned, no keys at all, sizes
// past 2^31) is refused with its message.
constexpr const char* kFallback = "05/v5_fewer_instructions";

inline bool aligned(const void* p, uintptr_t n) {
  return reinterpret_cast<uintptr_t>(p) % n == 0;
}

// TMA's rules: a 16-byte aligned base, row strides that are multiples of 16 bytes (d * 2 is for a
// head dim d that is a multiple of 8), sizes and coordinates that fit in int32. The epilogue
// stores O in 4-byte pairs. Empty K (seq_k = 0) cannot be described either.
inline bool tma_can_load(const AttentionFwdArgs& a) {
  const AttentionShape& s = a.shape;
  return aligned(a.q, 16) && aligned(a.k, 16) && aligned(a.v, 16) && aligned(a.o, 4) &&
         s.head_dim % kHeadDimStep == 0 && s.seq_k > 0 && s.seq_q < INT_MAX - 512 &&
         s.seq_k < INT_MAX - 512 && s.bh() < INT_MAX;
}

// Head dims rounded up inside the kernel. The rungs are instantiated for D = 64, 128 and 256; a
// head dim d in between that is a multiple of 8 runs the next instance, D >= d. Nothing is padded
// in memory: the TMA maps describe rows of d elements, so the boxes' columns past d arrive as
// zeros in shared memory (TMA fills whatever lies outside the tensor, as it does the rows past
// seq), and zero columns of Q and K add nothing to S = Q K^T, nor zero columns of V anything but
// zero columns to O, which the epilogue does not store. The price: d / D of the tensor cores' work
// is useful (D 80 runs as D 128, at 80 / 128 of D 128's TFLOP/s counted on d). FlashAttention-3
// rounds the same way between its instances 64, 96, 128, 192 and 256 (round_up_headdim in
// hopper/flash_api.cpp, github.com/Dao-AILab/flash-attention). 0 for a head dim no instance takes.
inline int head_dim_instance(int64_t d) {
  if (d <= 0 || d % kHeadDimStep != 0 || d > 256) return 0;
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}
// The same for a kernel that also has an instance at 192 (07/t52): 136-192 run there, not at 256.
inline int head_dim_instance_with_192(int64_t d) {
  const int i = head_dim_instance(d);
  return i == 256 && d <= 192 ? 192 : i;
}
// And for one with an instance at 96 too (07/t52): 72-96 run there, not at 128.
inline int head_dim_instance_with_96_192(int64_t d) {
  const int i = head_dim_instance_with_192(d);
  return i == 128 && d <= 96 ? 96 : i;
}

// A launcher's switch over the instances: calls launch(std::integral_constant<int, D>{}) for the
// instance D that head dim d runs as (64, 128, 256, 192 where kWith192, 96 where kWith96), and
// refuses a head dim no instance takes by the rung's name. launch<T, decltype(D)::value> inside
// it picks the kernel.
template <bool kWith192, bool kWith96 = false, class Launch>
void launch_head_dim_instance(const std::string& name, int64_t d, Launch&& launch) {
  static_assert(!kWith96 || kWith192, "the instance at 96 comes with the one at 192 (07/t52)");
  switch (kWith96    ? head_dim_instance_with_96_192(d)
          : kWith192 ? head_dim_instance_with_192(d)
                     : head_dim_instance(d)) {
    case 64:
      return launch(std::integral_constant<int, 64>{});
    case 96:
      if constexpr (kWith96) return launch(std::integral_constant<int, 96>{});
      break;
    case 128:
      return launch(std::integral_constant<int, 128>{});
    case 192:
      if constexpr (kWith192) return launch(std::integral_constant<int, 192>{});
      break;
    case 256:
      return launch(std::integral_constant<int, 256>{});
    default:
      break;
  }
  FA_UNSUPPORTED_IF(true, name + ": head_dim " + std::to_string(d) + " not instantiated (64, " +
                              (kWith96 ? "96, " : "") + "128, " + (kWith192 ? "192, " : "") +
                              "256, and the multiples of 8 between them, rounded up)");
}

inline void run_fallback(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionFwdKernel* k = find_entry<AttentionFwdKernel>(kFallback);
  FA_REQUIRE(k != nullptr, std::string(kFallback) + " is not linked in");
  k->run(a, stream);
}

// Q, K or V as a 3-D tensor [bh][seq][d] (d innermost), read in boxes of box_rows x 64 columns of
// one head, swizzled by 128 bytes, zeros where a box passes seq (the ragged tails) or d.
inline CUtensorMap make_tmap(const void* base, int64_t bh, int64_t seq, int d, int box_rows,
                             DType dtype) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(seq), cuuint64_t(bh)};
  const cuuint64_t strides[2] = {cuuint64_t(d) * 2, cuuint64_t(seq) * cuuint64_t(d) * 2};  // bytes
  const cuuint32_t box[3] = {cuuint32_t(kSwizzleCols), cuuint32_t(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult rc = tensor_map_encode_fn()(
      &map,
      dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FA_REQUIRE(rc == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " +
                                     std::to_string(int(rc)) + " (bh " + std::to_string(bh) +
                                     ", seq " + std::to_string(seq) + ", d " + std::to_string(d) +
                                     ")");
  return map;
}

// The opt-in to more than 48 KiB of dynamic shared memory, once per kernel. The flag is a static of
// this template, keyed by the kernel's address: every rung's kernels live in an anonymous namespace
// of their own .cu file, so each instantiation, and its flag, belongs to one kernel of one CUDA
// module (the trap kFallback above avoids cannot happen here).
template <auto kKernel, int kBytes>
void set_smem_limit_once() {
  static const bool done = [] {
    FA_CUDA_CHECK(
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
    return true;
  }();
  (void)done;
}

inline Params make_params(const AttentionFwdArgs& a, int num_q_tiles) {
  Params p;
  p.o = a.o;
  p.lse = a.lse;
  p.seq_q = a.shape.seq_q;
  p.seq_k = a.shape.seq_k;
  p.d = int(a.shape.head_dim);  // <= 256: head_dim_instance took it
  p.num_q_tiles = num_q_tiles;
  p.causal = a.shape.causal;
  p.scale_log2 = a.shape.softmax_scale() * 1.4426950408889634f;  // log2(e)
  return p;
}

}  // namespace fa::ch07
