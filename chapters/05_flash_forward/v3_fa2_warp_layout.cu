// v3_fa2_warp_layout.cu: v2 (v2_mma.cu) laid out the way FlashAttention-2 lays out its warps:
// each warp owns 32 query rows (two m16 tiles) instead of 16, so every K or V fragment it loads
// from shared memory feeds 4 tensor-core MMAs instead of 2, and a warp skips the key tiles its
// rows cannot see under causal masking. The 128-row Q tile is now 4 warps, not 8.
//
// What changed vs v2, and why
//   1. Two m16 tiles per warp (kM = 2, 4 warps x 32 rows = Br 128). In v2 a warp's 16 rows are one
//      m16 tile: per k16 slice of S it loads one K fragment (ldmatrix.x4) per 2 MMAs, and per
//      16 keys of P V one V fragment per 2 MMAs. FlashAttention-2 gives a warp 32 rows: the same
//      fragment then serves both m16 tiles. Every per-row array gains an m index: S is
//      s[kM][Bc/8][4], O is o_acc[kM][D/8][4], m and l are [kM][2]. Nsight Compute (H100, D 64,
//      N 8192): ldmatrix 134 M -> 67 M, tensor pipe busy 44% -> 53%, 4.65 -> 4.06 ms.
//   2. The scale rides in the exponent's FMA. v2 multiplies every score by c = scale * log2(e)
//      before the row max (one FMUL per score), then computes 2^(x - m). Since c > 0,
//      max(c * s) = c * max(s): the max is taken on the raw scores, and each probability becomes
//      2^(fma(s, c, -c * m)): one FFMA + one ex2 per score instead of FMUL + FADD + ex2. m is kept
//      in raw score units; c * m is computed once per row per tile. A negative scale (legal, if
//      odd) would turn the max into a min: then S is negated once per tile (a uniform branch)
//      and |c| is used, since c * s = |c| * (-s). L = ln(2^(c m) l) = (c * m + log2 l) * ln 2.
//   3. Per-warp skipping of masked-out tiles under causal masking. The block-level loop bound
//      (the last row of the Q tile) still loads the tiles that cross the diagonal for every warp,
//      but a warp whose rows see none of tile j's keys (k0 > the last key of its last row) skips
//      S, the softmax and P V for it: exactly what the masked computation would give (P = 0,
//      alpha = 1), without the work. The warp still takes part in the loads and the barrier.
//   4. Registers, so that 1-3 fit. O is 32 x D fp32 per warp = D registers per thread (128 at
//      D = 128), S 64 more at Bc = 64. Q stays in registers only at D = 32 and 64; at D 96 and 128
//      each k16 slice of Q is read from shared memory when S is computed (one ldmatrix.x4 per m16
//      tile per slice, 2 per 4 K fragments), as v2 does at D = 256. Every ldmatrix address is a
//      32-bit shared-memory base per lane plus a compile-time offset (LaneAddr below), folded
//      into the instruction ([base + imm]): 64-bit pointers per fragment, live across the loop,
//      pushed D = 128 into spills. Key indices (the loop counter, the tile start k0, the last keys)
//      are 32-bit, so the launcher refuses sequence lengths of 2^31 - 256 or more; the last
//      visible key of each row is recomputed where a tile needs a mask; the O and L pointers are
//      formed in the epilogue, not before the loop.
//   Blocks per SM: 128 threads with up to 255 registers, two blocks per SM at every D (v2 ran one
//   256-thread block at D = 96, 128): the same 8 warps per SM, but as two independent blocks, so
//   while one waits at its barrier for a K/V tile the other computes. D = 256 keeps one m16 tile
//   per warp (kM = 1, 4 warps, Br 64, Bc 32): there the O accumulator alone is 128 registers.
//
// Map of the kernel (per block: one Q tile of Br rows of one (batch, head); per warp: rows
// 32w .. 32w + 31, the thread owns rows g, g + 8 of m16 tile 0 (rows 32w + g, + 8) and of m16 tile
// 1 (+ 16))
//   prologue   cp.async Q tile and K/V tile 0; wait; Q fragments into registers (D <= 64)
//   loop j     wait; __syncthreads; cp.async K/V tile j + 1 into the other buffer
//              skip if no row of this warp sees tile j
//     (1) S = Q K_j^T: for each k16 slice, each K fragment -> 2 MMAs per m16 tile
//     (2) mask (only tiles at the ragged end or on the diagonal)
//     (3) online softmax of each m16 tile's two rows per thread, the scale in the exp2 FFMA
//     (4) O = alpha O + P V_j: each V fragment -> 2 MMAs per m16 tile
//   epilogue   O / l staged through each m16 tile's own 16 rows of sQ, then L
//   Shared memory, padding, fragment ownership and the register reuse of P: as v2 (its header).
//
// At D = 128 this layout does not pay yet: O (128 registers) + S (64) + fragments and addresses
// come to a little more than 255, ptxas spills 64 bytes, and to keep the spills that small the
// k16 loop of S = Q K^T stays rolled, so each slice waits for its own ldmatrix (2.9x v2's
// short-scoreboard stalls). v4 gives the registers back.
//
// Speed (H100 80GB HBM3, 2026-11-23): bf16 D 64 N 8192 317.7 TFLOP/s, FlashAttention-2 301.0 in
// the same run (1.06x); D 128 N 8192 270.3, FA2 349.0 (fa_bench, B = 16384/N, H = 2048/D;
// notes/measured/h100-2026-11-23d/bench_05v4.log, sdpa_05v4.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "check.h"
#include "gpu.h"
#include "mma.cuh"
#include "registry.h"

namespace fa {
namespace {

constexpr const char* kName = "05/v3_fa2_warp_layout";  // the registered name

constexpr int kM16Rows = 16;  // rows of one m16 tile (mma.sync m16n8k16)

// The tiles of head dim D: 4 warps of kM m16 tiles each (the header says why).
template <int D>
struct Tiles {
  static constexpr int kM = D <= 128 ? 2 : 1;  // m16 tiles per warp
  static constexpr int kRowsPerWarp = kM16Rows * kM;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;       // two blocks per SM at up to 255 registers
  static constexpr int kBr = kWarps * kRowsPerWarp;  // query rows per block: 128, or 64 (D = 256)
  static constexpr int kBc = D <= 128 ? 64 : 32;     // keys per K/V tile
  static constexpr int kSTiles = kBc / 8;            // n8 tiles of S per m16 tile
  static constexpr bool kQInRegs = kM * D <= 128;    // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // With Q in shared memory nothing is indexed by the k16 slice, so the loop of S = Q K^T need not
  // be unrolled in full: fully unrolled, ptxas hoisted the K and Q loads of many slices ahead and
  // spilled at D = 128.
  static constexpr int kUnrollK = kQInRegs ? D / 16 : 1;
  static_assert(kBc % 16 == 0, "P V takes the keys 16 at a time");
};

// A lane's ldmatrix address into a tile, as a 32-bit shared-memory address: every fragment it
// reads is base + rows + 32 j (rows: a byte offset of whole rows; j: the 16-column step of 32
// bytes), a compile-time offset that ptxas folds into the instruction.
struct LaneAddr {
  uint32_t base;
  __device__ __forceinline__ explicit LaneAddr(uint32_t plain) : base(plain) {}
  // The same lane in a tile `offset` bytes further (another buffer).
  __device__ __forceinline__ LaneAddr(const LaneAddr& a, uint32_t offset) : base(a.base + offset) {}
  __device__ __forceinline__ uint32_t at(uint32_t rows, int j) const {
    return base + rows + 32 * j;
  }
};

// Shared memory: the Q tile, then K and V double-buffered, rows padded by kPad elements (v2's
// header says why), 16-bit elements.
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

template <int D>
struct SmemLayout {
  static constexpr int kPitch = D + kPad;  // elements between consecutive rows
  static constexpr int kQElems = Tiles<D>::kBr * kPitch;
  static constexpr int kKVElems = Tiles<D>::kBc * kPitch;     // one K (or V) buffer
  static constexpr int kTotalElems = kQElems + 4 * kKVElems;  // Q, K[2], V[2]
  static constexpr size_t kBytes = size_t(kTotalElems) * 2;
  using Lane = LaneAddr;
};

// Row `row` of a shared tile: the cp.async writes, the ldmatrix lane addresses and the epilogue
// all start from it.
template <int D, class T>
__device__ __forceinline__ T* tile_row(T* tile, int row) {
  return tile + row * SmemLayout<D>::kPitch;
}

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t seq_q, seq_k;
  int num_q_tiles;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e)
};

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Copy rows [row0, row0 + ROWS) of the row-major [seq, D] matrix `gmem` into the shared tile
// `tile`, one 16-byte cp.async per chunk, the block's threads splitting the ROWS * D / 8 chunks
// evenly. Rows at or past `seq` are zero-filled: cp.async with src-size 0 reads nothing (an
// in-range pointer is still passed). The copies are only issued; the caller commits and waits
// (mma::cp_async_commit / cp_async_wait) before reading the tile.
template <int D, int ROWS, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* gmem, int64_t row0, int64_t seq,
                                                int tid) {
  static_assert(sizeof(T) == 2, "16-bit elements: 8 per 16-byte chunk");
  constexpr int kThreads = Tiles<D>::kThreads;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert((ROWS * kChunks) % kThreads == 0, "the tile must split evenly over the block");
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = row0 + r;
    const bool valid = grow < seq;
    const T* src = gmem + (valid ? grow * D + ch * 8 : 0);
    T* dst = tile_row<D>(tile, r) + ch * 8;
    mma::cp_async_16(dst, src, valid);
  }
}

// K/V tile j into buffer buf.
template <class T, int D>
__device__ __forceinline__ void load_kv_tile(T* sK, T* sV, const T* K, const T* V, int j, int buf,
                                             int64_t seq_k, int tid) {
  using Sm = SmemLayout<D>;
  constexpr int kBc = Tiles<D>::kBc;
  load_tile_async<D, kBc>(sK + buf * Sm::kKVElems, K, int64_t(j) * kBc, seq_k, tid);
  load_tile_async<D, kBc>(sV + buf * Sm::kKVElems, V, int64_t(j) * kBc, seq_k, tid);
}

// This lane's ldmatrix.x4 address for the A fragment of k16 slice 0 of the 16 Q rows of m16 tile
// `slab` of the block (slice kk is kk * 16 elements further along). Lane l addresses row l % 8 of
// matrix l / 8; the four 8x8 matrices are
//   m0 = rows 0-7, cols 0-7   -> a[0]      m1 = rows 8-15, cols 0-7  -> a[1]
//   m2 = rows 0-7, cols 8-15  -> a[2]      m3 = rows 8-15, cols 8-15 -> a[3]
// (cols relative to the slice), exactly the A fragment order of mma.cuh.
template <int D, class T>
__device__ __forceinline__ const T* q_lane_ptr(const T* sQ, int slab, int lane) {
  const int row = slab * kM16Rows + (lane % 8) + 8 * ((lane / 8) & 1);
  const int col = 8 * (lane / 16);
  return sQ + row * SmemLayout<D>::kPitch + col;
}

// S = 0 for the warp's kM m16 tiles (the accumulators of S = Q K_j^T).
template <int D>
__device__ __forceinline__ void zero_s_m(float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4]) {
#pragma unroll
  for (int m = 0; m < Tiles<D>::kM; ++m)
#pragma unroll
    for (int nt = 0; nt < Tiles<D>::kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = 0.0f;
}

// S = Q K_j^T for the warp's kM m16 tiles. Each K fragment (ldmatrix.x4: two n8 tiles, one k16
// slice) is loaded once and used by every m16 tile. Q comes from q_frag where Tiles<D>::kQInRegs,
// else from shared memory at q (m16 tile m is 16 rows further per m); k: this lane's ldmatrix
// address in the K buffer.
template <class T, int D>
__device__ __forceinline__ void compute_s_m(
    float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4],
    const uint32_t (&q_frag)[Tiles<D>::kM][Tiles<D>::kQRegSlices][4],
    const typename SmemLayout<D>::Lane& q, const typename SmemLayout<D>::Lane& k) {
  using Tl = Tiles<D>;
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  zero_s_m<D>(s);
#pragma unroll(Tl::kUnrollK)
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t qa[Tl::kM][4];
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      if constexpr (Tl::kQInRegs) {
#pragma unroll
        for (int r = 0; r < 4; ++r) qa[m][r] = q_frag[m][kk][r];
      } else {
        mma::ldmatrix_x4(qa[m], q.at(kM16Rows * kRowBytes * m, kk));
      }
    }
#pragma unroll
    for (int np = 0; np < Tl::kSTiles / 2; ++np) {
      uint32_t kb[4];
      mma::ldmatrix_x4(kb, k.at(16 * kRowBytes * np, kk));
      const uint32_t b_lo[2] = {kb[0], kb[1]};
      const uint32_t b_hi[2] = {kb[2], kb[3]};
#pragma unroll
      for (int m = 0; m < Tl::kM; ++m) {
        mma::mma_16816<T>(s[m][2 * np], qa[m], b_lo);
        mma::mma_16816<T>(s[m][2 * np + 1], qa[m], b_hi);
      }
    }
  }
}

// O *= alpha for the warp's kM m16 tiles.
template <int D>
__device__ __forceinline__ void rescale_o_m(float (&o_acc)[Tiles<D>::kM][D / 8][4],
                                            const float (&alpha)[Tiles<D>::kM][2]) {
#pragma unroll
  for (int m = 0; m < Tiles<D>::kM; ++m) {
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      o_acc[m][dn][0] *= alpha[m][0];
      o_acc[m][dn][1] *= alpha[m][0];
      o_acc[m][dn][2] *= alpha[m][1];
      o_acc[m][dn][3] *= alpha[m][1];
    }
  }
}

// O = alpha O + P V_j for the warp's kM m16 tiles; each V fragment is loaded once for all of them.
// v: this lane's ldmatrix .trans address in the V buffer.
template <class T, int D>
__device__ __forceinline__ void rescale_o_add_pv_m(
    float (&o_acc)[Tiles<D>::kM][D / 8][4], const float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4],
    const float (&alpha)[Tiles<D>::kM][2], const typename SmemLayout<D>::Lane& v) {
  using Tl = Tiles<D>;
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  rescale_o_m<D>(o_acc, alpha);
#pragma unroll
  for (int kk = 0; kk < Tl::kBc / 16; ++kk) {
    uint32_t p_frag[Tl::kM][4];  // two S tiles of one m16 tile are one A fragment (v2's header)
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      p_frag[m][0] = mma::pack2<T>(s[m][2 * kk][0], s[m][2 * kk][1]);
      p_frag[m][1] = mma::pack2<T>(s[m][2 * kk][2], s[m][2 * kk][3]);
      p_frag[m][2] = mma::pack2<T>(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
      p_frag[m][3] = mma::pack2<T>(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      mma::ldmatrix_x4_trans(vb, v.at(16 * kRowBytes * kk, dp));
      const uint32_t b_lo[2] = {vb[0], vb[1]};
      const uint32_t b_hi[2] = {vb[2], vb[3]};
#pragma unroll
      for (int m = 0; m < Tl::kM; ++m) {
        mma::mma_16816<T>(o_acc[m][2 * dp], p_frag[m], b_lo);
        mma::mma_16816<T>(o_acc[m][2 * dp + 1], p_frag[m], b_hi);
      }
    }
  }
}

// Write the 16 rows of m16 tile `slab` of O = o_acc * inv_l (16-bit) to global memory (its first
// row is row0), rows past seq_q not at all. O is staged in the same 16 rows of sQ: only this warp
// ever read them (its Q fragments), and no cp.async targets sQ any more, so a warp-level sync is
// enough. Each thread writes 4 bytes at (row g or g+8, col 8dn + 2t): with the padded pitch these
// 32 writes fall in 32 different banks. Then each lane copies 16-byte chunks of whole rows to
// global memory.
template <class T, int D>
__device__ __forceinline__ void store_o_tile(T* O, const float (&o_acc)[D / 8][4],
                                             const float (&inv_l)[2], T* sQ, int slab, int lane,
                                             int64_t row0, int64_t seq_q) {
  const int g = lane / 4, t = lane % 4;
  // Lanes of a warp may drift apart (independent thread scheduling): make sure every lane's
  // ldmatrix reads of these rows are done before any lane overwrites them (racecheck caught this).
  __syncwarp();
  T* const sO = sQ + slab * kM16Rows * SmemLayout<D>::kPitch;
  // Chunk ch (8 elements) of row r of those 16 rows.
  const auto chunk = [sO](int r, int ch) { return tile_row<D>(sO, r) + ch * 8; };
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    *reinterpret_cast<uint32_t*>(chunk(g, dn) + 2 * t) =
        mma::pack2<T>(o_acc[dn][0] * inv_l[0], o_acc[dn][1] * inv_l[0]);
    *reinterpret_cast<uint32_t*>(chunk(g + 8, dn) + 2 * t) =
        mma::pack2<T>(o_acc[dn][2] * inv_l[1], o_acc[dn][3] * inv_l[1]);
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
  static_assert((kM16Rows * kChunks) % 32 == 0, "O rows must split evenly over the warp");
#pragma unroll
  for (int i = 0; i < kM16Rows * kChunks / 32; ++i) {
    const int c = lane + 32 * i;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = row0 + r;
    if (grow < seq_q)
      *reinterpret_cast<uint4*>(O + grow * D + ch * 8) =
          *reinterpret_cast<const uint4*>(chunk(r, ch));
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

template <class T, int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads, 2) flash_fwd_v3_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Sm = SmemLayout<D>;
  constexpr int kM = Tiles<D>::kM;            // m16 tiles per warp
  constexpr int kBr = Tiles<D>::kBr;          // query rows per block
  constexpr int kBc = Tiles<D>::kBc;          // keys per K/V tile
  constexpr int kSTiles = Tiles<D>::kSTiles;  // n8 tiles of S per m16 tile
  constexpr int kOTiles = D / 8;              // n8 tiles of O
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + Sm::kQElems;  // buffer b at sK + b * kKVElems
  T* sV = sK + 2 * Sm::kKVElems;

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

  // This thread's rows are g and g + 8 of each of the warp's kM m16 tiles: rows warp_row0 + 16 m +
  // g + 8 h. Their last visible keys are recomputed where a tile needs a mask (kept in registers
  // across the loop they pushed D = 128 into spills).
  const int64_t warp_row0 = q0 + warp * Tiles<D>::kRowsPerWarp;
  // The smallest last key over the warp (its first row): a tile whose keys all lie at or below it
  // needs no mask for any row of the warp. The largest (its last row): a tile starting after it is
  // invisible to the whole warp, which then skips it.
  const int warp_last_key = int(p.causal ? (causal_last_key(warp_row0, seq_q, seq_k) < seq_k - 1
                                                ? causal_last_key(warp_row0, seq_q, seq_k)
                                                : seq_k - 1)
                                         : seq_k - 1);
  const int warp_max_key = int(
      p.causal ? (causal_last_key(warp_row0 + Tiles<D>::kRowsPerWarp - 1, seq_q, seq_k) < seq_k - 1
                      ? causal_last_key(warp_row0 + Tiles<D>::kRowsPerWarp - 1, seq_q, seq_k)
                      : seq_k - 1)
               : seq_k - 1);

  // ---- Prologue: Q tile (group 0) and K/V tile 0 (group 1) in flight together.
  load_tile_async<D, kBr>(sQ, Q, q0, seq_q, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) load_kv_tile<T, D>(sK, sV, K, V, 0, 0, seq_k, tid);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q: m16 tile m of this warp is the 16-row slab kM * warp + m of sQ. Fragments kept in
  // registers at D <= 64 only.
  constexpr int kRowBytes = Sm::kPitch * 2;
  const T* q_lane = q_lane_ptr<D>(sQ, kM * warp, lane);  // m16 tile m: 16 m rows down
  const typename Sm::Lane q_addr(mma::smem_addr(q_lane));
  uint32_t q_frag[kM][Tiles<D>::kQRegSlices][4];
  if constexpr (Tiles<D>::kQInRegs) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        mma::ldmatrix_x4(q_frag[m][kk], q_addr.at(kM16Rows * kRowBytes * m, kk));
  }

  float o_acc[kM][kOTiles][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int dn = 0; dn < kOTiles; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[m][dn][e] = 0.0f;
  float m_run[kM][2], l_run[kM][2];  // running max in raw score units, per-thread partial sum
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_run[m][h] = kNegInf;
      l_run[m][h] = 0.0f;
    }

  // Per-lane row/column offsets of the ldmatrix addresses for K and V (v2's kernel explains the
  // mapping), as 32-bit shared addresses of buffer 0.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16);
  const int k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1);
  const int v_ld_col = 8 * (lane / 16);
  const typename Sm::Lane k_addr0(mma::smem_addr(tile_row<D>(sK, k_ld_row) + k_ld_col));
  const typename Sm::Lane v_addr0(mma::smem_addr(tile_row<D>(sV, v_ld_row) + v_ld_col));
  constexpr uint32_t kKVBytes = Sm::kKVElems * 2;

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
      load_kv_tile<T, D>(sK, sV, K, V, j + 1, buf ^ 1, seq_k, tid);
      mma::cp_async_commit();
    }
    const int k0 = j * kBc;
    if (k0 > warp_max_key) continue;  // no row of this warp sees any key of tile j

    // ---- (1) S = Q K_j^T: 32 x Bc per warp (kM m16 tiles).
    float s[kM][kSTiles][4];
    const typename Sm::Lane k_addr(k_addr0, buf * kKVBytes);
    compute_s_m<T, D>(s, q_frag, q_addr, k_addr);

    if (p.scale_log2 < 0.0f) {  // negative scale: c * s = |c| * (-s), so the max stays a max
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[m][nt][e] = -s[m][nt][e];
    }

    // ---- (2) Mask: keys past seq_k, and (causal) keys after a row's last visible key. Uniform
    // per warp, so only the tiles at the ragged end or on the diagonal pay for it.
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

    // ---- (3) Online softmax on rows g (h = 0) and g+8 (h = 1) of each m16 tile, the scale
    // c = |scale| * log2(e) inside the exponent's FMA. c is read from the kernel parameters
    // (constant memory) where it is used: kept in a register across the loop it pushed D = 64 past
    // its 128-register budget (at the time two blocks of 256 threads).
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
      float base[2];  // c * m_new, in log2 units
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the 4 threads of a quad hold the whole row
        m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 1));
        m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 2));
        base[h] = m_new[h] == kNegInf ? 0.0f : m_new[h] * c;  // no key seen yet: no -inf - -inf
        alpha[m][h] = ex2_approx(fmaf(m_run[m][h], c, -base[h]));  // 0 when m_run = -inf
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
    const typename Sm::Lane v_addr(v_addr0, buf * kKVBytes);
    rescale_o_add_pv_m<T, D>(o_acc, s, alpha, v_addr);
  }

  // ---- Epilogue, per m16 tile: finish the row sums (each thread summed only its own columns),
  // O through the tile's own 16 rows of sQ, then L. The O and L pointers are formed only here.
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
    write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
  }
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  // 32-bit key indices: k0 + Bc and q0 + Br must not overflow; 256 = 2 x the largest Br.
  constexpr int64_t kSeqMargin = 256;
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.seq_k > INT_MAX - kSeqMargin,
                    std::string(kName) + ": sequence lengths must stay below 2^31 - 256");
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
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_v3_kernel<T, D>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; also ask for the largest
  // shared-memory carveout so that two blocks fit per SM.
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
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) +
                                  " not instantiated (32, 64, 96, 128, 256)");
  }
}

void attention_fwd(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return dispatch_head_dim<__nv_bfloat16>(a, stream);
    case DType::F16:
      return dispatch_head_dim<__half>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::kName,
             fa::attention_fwd,
             "v2 with FlashAttention-2's warps (32 query rows each: a K/V fragment feeds 4 MMAs), "
             "the scale in the exp2 FFMA and the causal tiles a warp cannot see skipped",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
FA_REGISTER_SMEM(fa::kName, [](int d) {
  return fa::smem_at<32, 64, 96, 128, 256>(
      d, [](auto D) { return fa::SmemLayout<decltype(D)::value>::kBytes; });
});
