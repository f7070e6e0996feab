// ch06_kv128.cuh: what the tuning steps 06/t04 to 06/t12 share (README.md beside this file
// has the table of steps). They all start from 06/v3_atomic_dq (dQ added into an fp32 accumulator
// by atomics) and use FlashAttention-2's tile: a block owns Bc = 128 keys with 8 warps and walks
// the Q tiles of Br = 64 queries that see them. Each step file holds its story, its measurements
// and its registration; the kernels are t04_bc128_8warps.cu's own, ch06_kv128_kernel.cuh's (t05
// to t09) and ch06_warp_tiles_kernel.cuh's (t11, t12). The main path has each of these pieces in
// its own rung files (v3_atomic_dq.cu, v4_bc128_tuned.cu): this header keeps the steps' code as it
// was measured (bench/sass_identical.py checks that the machine code did not change).
//
// The map:
//   fa::bwd_tc           the padded and swizzled shared-memory tiles, the cp.async tile loader,
//                        the ldmatrix fragment loaders, exponentials, L in log2 form, the
//                        write-out of a 16-row accumulator (06/v2_mma's and 06/v3_atomic_dq's)
//   Params, convert_dq_kernel   what the dK/dV kernel gets; dQ = dQaccum * scale (06/v3's; t21's
//                               tail of 1-3 elements in convert_dq_tail_kernel)
//   kWarps .. kLdS       the tile and the shared-memory pitch of dS^T
//   kv128_backward<Step> the host side: checks, the D preprocess, the two launches
// Device code and its launcher, in an anonymous namespace (each including .cu file compiles its
// own copy).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ch06_preprocess.h"
#include "check.h"
#include "gpu.h"
#include "mma.cuh"
#include "registry.h"

namespace fa::bwd_tc {

// Padded tiles: rows of D + kPad elements, so that the eight rows of an ldmatrix 8x8 matrix fall
// into eight different 16-byte bank groups (no bank conflicts, with or without .trans).
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

// Swizzled tiles (t11, t12): rows of D elements (D a multiple of 64), logical 16-byte chunk c of
// row r stored at chunk c ^ (r % 8) of its 128-byte group; the tile starts at a 128-byte
// boundary. The copies then fill whole 128-byte lines, and the eight rows of an ldmatrix 8x8
// matrix still land in eight different chunks (06/v4_bc128_tuned.cu tells why).
constexpr int kSwizzleRows = 8;  // the permutation repeats every 8 rows

// Element offset of logical chunk `chunk` (8 elements) of row `row` in a swizzled tile.
template <int D>
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  static_assert(D % 64 == 0, "a swizzled row holds whole 128-byte groups of 8 chunks");
  return row * D + (chunk ^ (row % kSwizzleRows)) * 8;
}

// What a reader's ldmatrix address is XORed with: bits 4-6 of the address are the chunk, so a
// lane whose rows all have the same row % 8 flips them by (row % 8) * 16.
__device__ __forceinline__ uint32_t swizzle_xor(int row) {
  return uint32_t(row % kSwizzleRows) * 16;
}

// Copy rows [row0, row0 + ROWS) of a [seq, D] row-major matrix `g` into the padded tile `s`,
// 16 bytes per cp.async. Rows at or past `seq` are zero-filled (nothing is read for them).
// kSwizzled (t11, t12): into a swizzled tile of D elements per row instead (swizzled_offset).
template <class T, int D, int ROWS, int THREADS, bool kSwizzled = false>
__device__ __forceinline__ void load_tile_async(T* s, const T* g, int64_t row0, int64_t seq,
                                                int tid) {
  constexpr int kChunksPerRow = D * int(sizeof(T)) / 16;
  constexpr int kChunks = ROWS * kChunksPerRow;
  constexpr int kLd = D + kPad;
#pragma unroll
  for (int c = tid; c < kChunks; c += THREADS) {
    const int r = c / kChunksPerRow;
    const int cc = c % kChunksPerRow;
    const bool valid = row0 + r < seq;
    const T* src = valid ? g + (row0 + r) * int64_t(D) + cc * 8 : g;
    if constexpr (kSwizzled)
      fa::mma::cp_async_16(s + swizzled_offset<D>(r, cc), src, valid);
    else
      fa::mma::cp_async_16(s + r * kLd + cc * 8, src, valid);
  }
}

// A fragment of the 16x16 block A[m0.., k0..] of a row-major tile (A = the tile itself).
// Matrices: 0 = rows 0-7 / cols 0-7 -> a[0], 1 = rows 8-15 / cols 0-7 -> a[1],
//           2 = rows 0-7 / cols 8-15 -> a[2], 3 = rows 8-15 / cols 8-15 -> a[3].
template <int LD, class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* s, int m0, int k0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  fa::mma::ldmatrix_x4(a, s + (m0 + r + (i & 1) * 8) * LD + k0 + (i >> 1) * 8);
}

// B fragments of two adjacent n-tiles (n0..n0+7 and n0+8..n0+15, k0..k0+15) when B = X^T, i.e.
// B[k][n] = X[n][k] with X the row-major tile (rows are n). Used for S = Q K^T (X = K) and its
// relatives: the "col-major B" of mma.sync is exactly a row-major X, so no transpose is needed.
// b[0], b[1] -> n-tile n0;  b[2], b[3] -> n-tile n0 + 8.
template <int LD, class T>
__device__ __forceinline__ void load_b_xt(uint32_t (&b)[4], const T* s, int n0, int k0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  fa::mma::ldmatrix_x4(b, s + (n0 + r + (i >> 1) * 8) * LD + k0 + (i & 1) * 8);
}

// B fragments of two adjacent n-tiles when B = X, i.e. B[k][n] = X[k][n] with X the row-major
// tile (rows are k). mma.sync wants pairs along k, which are a column of X: ldmatrix .trans
// hands thread (g, t) the elements X[2t][g], X[2t+1][g] of each 8x8 matrix. Used for dV += P^T dO
// (X = dO), dK += dS^T Q (X = Q), dQ += dS K (X = K).
// b[0], b[1] -> n-tile n0;  b[2], b[3] -> n-tile n0 + 8.
template <int LD, class T>
__device__ __forceinline__ void load_b_x(uint32_t (&b)[4], const T* s, int k0, int n0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  fa::mma::ldmatrix_x4_trans(b, s + (k0 + r + (i & 1) * 8) * LD + n0 + (i >> 1) * 8);
}

// The C fragments of two adjacent n-tiles (16 columns) of a 16 x N accumulator, rounded to 16
// bits, are exactly the A fragment of the 16x16 block with those columns as k:
//   a[0] = C[g][2t..]   (tile j, c[0..1])    a[1] = C[g+8][2t..]   (tile j, c[2..3])
//   a[2] = C[g][2t+8..] (tile j+1, c[0..1])  a[3] = C[g+8][2t+8..] (tile j+1, c[2..3])
// This is why P and dS never go through shared memory.
template <class T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                         const float (&c1)[4]) {
  a[0] = fa::mma::pack2<T>(c0[0], c0[1]);
  a[1] = fa::mma::pack2<T>(c0[2], c0[3]);
  a[2] = fa::mma::pack2<T>(c1[0], c1[1]);
  a[3] = fa::mma::pack2<T>(c1[2], c1[3]);
}

template <class T>
__device__ __forceinline__ void mma_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]};
  const uint32_t b1[2] = {b[2], b[3]};
  fa::mma::mma_16816<T>(d0, a, b0);
  fa::mma::mma_16816<T>(d1, a, b1);
}

// A fragment of the 16x16 block A[m0.., k0..] when A = X^T, i.e. A[m][k] = X[k][m] with X the
// row-major tile (rows are k). ldmatrix .trans hands thread (g, t) X[2t][g], X[2t+1][g] of each
// 8x8 matrix, which is A[g][2t], A[g][2t+1]. Matrices: 0 = k 0-7 / m 0-7 -> a[0],
// 1 = k 0-7 / m 8-15 -> a[1], 2 = k 8-15 / m 0-7 -> a[2], 3 = k 8-15 / m 8-15 -> a[3].
// Used for dQ += dS K with dS^T in shared memory (X = dS^T, rows are keys).
template <int LD, class T>
__device__ __forceinline__ void load_a_xt(uint32_t (&a)[4], const T* s, int m0, int k0, int lane) {
  const int i = lane >> 3, r = lane & 7;
  fa::mma::ldmatrix_x4_trans(a, s + (k0 + r + (i >> 1) * 8) * LD + m0 + (i & 1) * 8);
}

// Store an A fragment (as acc_to_a makes it) as the 16x16 block [m0.., k0..] of a row-major tile:
// the inverse of load_a. Four 32-bit stores per thread; in a padded tile (LD = 8 mod 16 elements)
// the 32 lanes of each store hit 32 different banks.
template <int LD, class T>
__device__ __forceinline__ void store_a(T* s, const uint32_t (&a)[4], int m0, int k0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  T* p = s + (m0 + g) * LD + k0 + 2 * t;
  *reinterpret_cast<uint32_t*>(p) = a[0];
  *reinterpret_cast<uint32_t*>(p + 8 * LD) = a[1];
  *reinterpret_cast<uint32_t*>(p + 8) = a[2];
  *reinterpret_cast<uint32_t*>(p + 8 * LD + 8) = a[3];
}

// 2^x by the MUFU unit alone (ex2.approx.ftz.f32: results below 2^-126 flush to 0). exp2f
// without --use_fast_math wraps the same instruction in a guard for results in the denormal range
// (a compare and two predicated multiplies: four instructions instead of one); a probability that
// small changes no sum here (t06_ex2_approx.cu). exp2(-inf) is +0, which the masking relies on.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// L in the form the loops want: L * log2(e), or +inf for a row that does not exist or sees no
// key (L = -inf), which makes every P of that row exp2(finite - inf) = 0.
__device__ __forceinline__ float load_l2(const float* lse, int64_t row, int64_t seq_q) {
  constexpr float kLog2e = 1.4426950408889634f;
  if (row >= seq_q) return INFINITY;
  const float l = lse[row];
  return l == -INFINITY ? INFINITY : l * kLog2e;
}

// Store a 16 x DC fp32 accumulator, times `mul`: rows r0 + g, r0 + g + 8 and columns
// col0 .. col0 + DC - 1 of a [seq, D] matrix (DC = D, col0 = 0 unless the columns are split).
template <class T, int D, int DC>
__device__ __forceinline__ void store_rows(T* out, const float (&acc)[DC / 8][4], int64_t r0,
                                           int col0, int64_t seq, float mul, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = r0 + g + 8 * h;
    if (row >= seq) continue;
    T* dst = out + row * int64_t(D) + col0 + 2 * t;
#pragma unroll
    for (int nt = 0; nt < DC / 8; ++nt) {
      *reinterpret_cast<uint32_t*>(dst + 8 * nt) =
          fa::mma::pack2<T>(acc[nt][2 * h] * mul, acc[nt][2 * h + 1] * mul);
    }
  }
}

}  // namespace fa::bwd_tc

namespace {

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse;
  const float* delta;
  float* dq_accum;  // fp32 [batch * heads][seq_q][D], zero on entry (the caller's workspace)
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int64_t n_tiles;   // key tiles per (batch, head)
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(S * scale_log2 - L * log2(e))
  bool causal;
};
// t19's kernel parameters: Params and the real head dim d, the length of a row in global memory
// (every other step's rows are D long). The launcher fills this; a kernel that takes Params gets
// its Params part.
struct ParamsRowsOfD : Params {
  int d;
};

// ---- dQ = dQaccum * scale ------------------------------------------------------------------
// n4 = elements / 4, rounded down (a multiple of 8 for every d but t21's); 16-byte loads, 8-byte
// stores.
template <class T>
__global__ void convert_dq_kernel(const float* __restrict__ acc, T* __restrict__ dq, int64_t n4,
                                  float scale) {
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < n4;
       x += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(acc)[x];
    uint2 out;
    out.x = fa::mma::pack2<T>(v.x * scale, v.y * scale);
    out.y = fa::mma::pack2<T>(v.z * scale, v.w * scale);
    reinterpret_cast<uint2*>(dq)[x] = out;
  }
}

// t21: the last n (1-3) elements, from `first` on, that convert_dq_kernel's groups of four leave
// when a head dim that is no multiple of 8 makes q_numel no multiple of 4. One thread each.
template <class T>
__global__ void convert_dq_tail_kernel(const float* __restrict__ acc, T* __restrict__ dq,
                                       int64_t first, int n, float scale) {
  if (int(threadIdx.x) < n) {
    const int64_t i = first + threadIdx.x;
    reinterpret_cast<unsigned short*>(dq)[i] =
        static_cast<unsigned short>(fa::mma::pack2<T>(acc[i] * scale, 0.0f) & 0xffffu);
  }
}

// ---- the tile ------------------------------------------------------------------------------
using fa::causal_last_key;
using fa::ceil_div;
using fa::bwd_tc::kPad;
using fa::bwd_tc::load_l2;
using fa::bwd_tc::load_tile_async;
using fa::bwd_tc::store_rows;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBr = 64;   // query rows per tile
constexpr int kBc = 128;  // key rows per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kLdS = kBr + kPad;  // row of the dS^T tile: kBr queries + padding
static_assert(kBc == kWarps * 16, "one warp per 16 keys");

// Shared memory: K_j, V_j (kBc rows) | Q_i x2 | dO_i x2 (kBr rows) | L_i*log2(e) x2 | D_i x2 |
// dS^T (kBc keys x kBr queries). 59 / 91 / 123 / 155 KiB at D = 32 / 64 / 96 / 128.
template <int D>
constexpr int smem_bytes_tiles() {
  return (2 * kBc + 4 * kBr) * (D + kPad) * 2;  // K_j, V_j; Q_i, dO_i double-buffered
}
template <int D>
constexpr int dkdv_smem_bytes() {
  return smem_bytes_tiles<D>() + 4 * kBr * int(sizeof(float)) + kBc * kLdS * 2;
}

// ---- the host side -------------------------------------------------------------------------
// A step is a struct with kName (its registered name), kernel<T, D>(), its dK/dV kernel,
// smem_bytes<D>(), the shared memory that kernel takes, and keys<D>(), the keys of a block:
// KvStep's for the layout above (t04-t09).
struct KvStep {
  template <int D>
  static constexpr int smem_bytes() {
    return dkdv_smem_bytes<D>();
  }
  template <int D>
  static constexpr int keys() {
    return kBc;
  }
};
template <class Step, class T, int D>
void launch(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  ParamsRowsOfD p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.dout = a.dout;
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq_accum = a.workspace;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;
  p.d = int(s.head_dim);

  const int64_t n_kt = ceil_div(s.seq_k, int64_t(Step::template keys<D>()));
  FA_REQUIRE(n_kt * s.bh() <= INT32_MAX, "batch * heads * key tiles must fit in gridDim.x");

  if (n_kt > 0 && s.bh() > 0) {
    constexpr int kSmem = Step::template smem_bytes<D>();
    const auto kernel = Step::template kernel<T, D>();
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_kt;
    kernel<<<static_cast<unsigned>(n_kt * s.bh()), kThreads, kSmem, stream>>>(p);
    FA_CHECK_LAUNCH();
  }
  // dQ = dQaccum * scale, every element (rows no key tile reached are 0 in the workspace).
  const int64_t n4 = s.q_numel() / 4;
  if (n4 > 0) {
    constexpr int kConvThreads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(n4, kConvThreads), int64_t(1) << 20);
    convert_dq_kernel<T><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
        a.workspace, static_cast<T*>(a.dq), n4, p.scale);
    FA_CHECK_LAUNCH();
  }
  const int tail = int(s.q_numel() % 4);  // t21's head dims only: every other d is a multiple of 8
  if (tail > 0) {
    convert_dq_tail_kernel<T><<<1, 4, 0, stream>>>(a.workspace, static_cast<T*>(a.dq),
                                                   s.q_numel() - tail, tail, p.scale);
    FA_CHECK_LAUNCH();
  }
}

// The dynamic shared memory one block may opt in to on the current device (gpu.h).
using fa::smem_optin_bytes;

template <class Step, int D>
void run_head_dim(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  // t04-t09 need 155 KiB per block at D = 128, t11 and t12 171 KiB, t14 211 KiB at D = 256, t18
  // and t19 (one Q and one dO buffer) 147 KiB at D 256: an H100 (227 KiB) has each, an A100 (163
  // KiB) the first and the last, sm_86/89 (99 KiB) none. Refuse before anything runs, rather than
  // fail in cudaFuncSetAttribute.
  constexpr size_t kSmem = size_t(Step::template smem_bytes<D>());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    std::string(Step::kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  FA_REQUIRE(a.workspace != nullptr,
             std::string(Step::kName) + " needs the fp32 workspace (dQ accumulator)");

  // 1. D = rowsum(dO * O), before the kernel that reads it (same stream).
  fa::launch_delta_preprocess(a.o, a.dout, a.delta, a.shape, a.dtype, stream);

  // 2. dK, dV and the dQ atomics, 3. dQ from the accumulator.
  if (a.dtype == fa::DType::BF16)
    launch<Step, __nv_bfloat16, D>(a, stream);
  else
    launch<Step, __half, D>(a, stream);
}

// The registered entry point of a step. Head dim 256 is not instantiated: K_j and V_j alone
// would take 2 x 128 x 264 x 2 B = 132 KiB, 264 KiB with Q_i and dO_i double-buffered, past the
// 227 KiB a block can have on an H100; t14 (t14_d256_tiles.cu) has D = 256 with 64 keys a block,
// and an entry point of its own.
template <class Step>
void kv128_backward(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(Step::kName) + " takes bf16 and fp16 only");
  switch (s.head_dim) {  // every D here is a multiple of 16, which the mma loops need
    case 32:
      return run_head_dim<Step, 32>(a, stream);
    case 64:
      return run_head_dim<Step, 64>(a, stream);
    case 96:
      return run_head_dim<Step, 96>(a, stream);
    case 128:
      return run_head_dim<Step, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(Step::kName) +
                                  " is instantiated for head_dim 32, 64, 96 and 128 only "
                                  "(06/v3_atomic_dq has 256)");
  }
}

}  // namespace
