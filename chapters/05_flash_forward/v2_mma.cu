// v2_mma.cu: the FlashAttention-2 forward kernel on tensor cores (mma.sync m16n8k16, fp16/bf16 in,
// fp32 accumulation). Same algorithm as v1; what changes is where every number lives.
//
// What changed vs v1 (v1_scalar_fp32.cu, fp32 on the CUDA cores)
//   * the two matmuls S = Q K^T and O += P V run on the tensor cores, one warp-wide
//     mma.sync.m16n8k16 at a time (common/mma.cuh), inputs 16-bit, accumulators fp32;
//   * each warp owns 16 whole query rows, so S, P, O and the softmax statistics (m, l) of those
//     rows never leave the warp's registers: no shared-memory round trip for S or P at all;
//   * P is converted to 16 bits in registers and fed straight back as the A operand of P V (the
//     "register reuse" trick below), instead of being written out and re-read;
//   * the next K/V tile is copied global -> shared with cp.async while the current one is being
//     computed (double buffering), so the loads hide behind the math;
//   * exponentials are base 2: scale * log2(e) is folded into one multiplier (see "Softmax in
//     base 2" below) and each probability costs one ex2.approx (the MUFU unit).
//
// Map of the kernel (one thread block = one Q tile of Br rows of one (batch, head))
//   prologue   cp.async Q tile and K/V tile 0 -> shared; wait; each warp ldmatrix-es its 16 rows
//              of Q into registers, where they stay for the whole kernel.
//   loop j     wait for K/V tile j; __syncthreads; start cp.async of tile j+1 into the other buffer;
//     (1) S = Q K_j^T          16 x Bc per warp, fp32 accumulators (ldmatrix K, no .trans)
//     (2) mask                 only on tiles that cross the causal diagonal or the ragged end
//     (3) online softmax       m_new = max(m, rowmax S); alpha = 2^(m - m_new); P = 2^(S - m_new);
//                              l = alpha * l + rowsum P  (quad shuffles, see below)
//     (4) rescale O by alpha, then O += P V_j  (P from registers, ldmatrix V with .trans)
//   epilogue   O /= l (0 for a row with no visible key); L = ln(sum exp) = (m + log2 l) * ln 2;
//              O staged through the warp's own (now idle) rows of the Q buffer, written to global
//              with 16-byte stores; rows past seq_q are not written.
//
// Tile sizes
//   Br = 128 query rows per block = 8 warps x 16 rows. Every K/V tile brought into shared memory
//   is reused by 128 query rows (halving the K/V traffic of Br = 64). Bc = 64 keys per tile keeps
//   the S accumulator at 32 fp32 registers per thread. Registers per thread at D = 128: O 64,
//   S 32, Q 32 -> one 256-thread block per SM (up to 255 registers); at D = 64 (O 32, S 32, Q 16)
//   two blocks fit per SM. Head dims 32, 64, 96, 128 are instantiated (D % 16 == 0 is what the
//   fragment loops need), and 256 with other tiles (below). Anything else is refused with
//   FA_UNSUPPORTED_IF.
//
// Tiles at D = 256: Br = 64 (4 warps x 16 rows), Bc = 32, Q read from shared memory at every k16
//   slice. Why: per thread the O accumulator is 16 x 256 fp32 / 32 lanes = 128 registers by
//   itself. Q fragments kept in registers would add 16 x 256 x 2 B / 32 / 4 B = 64 more, and S at
//   Bc = 64 another 32: 224 before a single address or loop variable, at the 255 limit (spills).
//   With Q in shared memory (one ldmatrix.x4 per k16 slice, 4 live registers) and Bc = 32 (S =
//   16 x 32 fp32 = 16 registers; P packs into 8 of them, reused in place) the live set is about
//   128 + 16 + 8 (Q, K fragments) + the softmax state and addresses, well under 255.
//   Shared memory, padded rows of 256 + 8 elements (528 B): sQ 64 rows = 33 KiB, K and V double
//   buffered 4 x 32 rows = 66 KiB, in all 99 KiB = 101376 B, exactly the opt-in limit of sm_86 and
//   sm_89 (99 KiB), so D = 256 runs on every GPU from sm_80 on; on an H100 (227 KiB) two blocks
//   fit per SM, and __launch_bounds__(128, 2) caps registers at 255 (2 x 128 x 256 = the SM's
//   65536). Br = 128 would double sQ (132 KiB: too big for sm_86/89, one block per H100 SM) and
//   Bc = 64 would double the K/V buffers (165 KiB): the same 8 warps per H100 SM or fewer, and
//   GPUs refused. The price of Br = 64: each K/V tile is reused by 64 query rows instead of 128
//   (twice the K/V reads, mostly from L2); of Q in shared memory: one more ldmatrix per 2 (K)
//   per k16 slice of S.
//
// Shared memory (dynamic; > 48 KiB needs an opt-in, done in the launcher)
//   sQ [Br][D + 8], sK [2][Bc][D + 8], sV [2][Bc][D + 8], 16-bit elements.
//   Each row is padded by 8 elements = 16 bytes. ldmatrix reads eight 16-byte rows at a time (one
//   8x8 matrix), all at the same column: without padding the rows are 2*D bytes apart, a multiple
//   of 128 bytes for D = 64 and 128, so all eight land in the same 4 banks (8-way conflict). With
//   a row pitch of 2*D + 16 bytes, row r starts 16*r bytes (mod 128) further along for D = 64 and
//   128, and 80*r (mod 128) for D = 32 and 96: in both cases the eight rows hit eight different
//   16-byte bank groups, so each ldmatrix phase is conflict-free (.trans or not), and every 16-byte
//   cp.async destination stays aligned. The cp.async writes and the ldmatrix reads both go
//   through the one helper `tile_row` (same padding on both sides).
//   Sizes: D = 64: 54 KiB, D = 128: 102 KiB, D = 256 (Br = 64, Bc = 32): 99 KiB.
//
// Fragment ownership (g = lane / 4, t = lane % 4; layouts of common/mma.cuh)
//   A warp owns query rows 16w .. 16w+15 of the tile; a thread owns rows g and g + 8 of those.
//   S accumulator, n8 tile nt (keys 8nt .. 8nt+7 of the tile): s[nt][0..1] = S[g][8nt+2t, +1],
//   s[nt][2..3] = S[g+8][8nt+2t, +1]. So the four threads of a quad (same g) together hold whole
//   rows g and g+8: a row max or row sum is a local reduction plus two shuffles (xor 1, xor 2).
//   O accumulator, n8 tile dn (dims 8dn .. 8dn+7): same layout as S.
//
// Register reuse of P (why no shared memory is needed between the two matmuls)
//   The A operand of m16n8k16 for the k16 slice kk (keys 16kk .. 16kk+15) wants
//     a[0] = P[g][2t, 2t+1]  a[1] = P[g+8][2t, 2t+1]  a[2] = P[g][2t+8, +9]  a[3] = P[g+8][2t+8, +9]
//   (columns relative to the slice). The S accumulators of the two n8 tiles 2kk and 2kk+1 hold
//     s[2kk][0..1] = S[g][2t, 2t+1]     s[2kk][2..3] = S[g+8][2t, 2t+1]
//     s[2kk+1][0..1] = S[g][8+2t, +1]   s[2kk+1][2..3] = S[g+8][8+2t, +1]
//   which are exactly the same elements in the same threads. Packing each pair into one 32-bit
//   register (pack2) therefore turns two accumulator tiles into one A fragment, with no data
//   movement between threads.
//
// Softmax in base 2
//   exp(scale * s) = 2^(scale * log2(e) * s). Multiplying S once by c = scale * log2(e) puts every
//   score in "log2 units"; then m, the max, lives in the same units, and each probability is one
//   subtraction and one ex2.approx (a single MUFU instruction; expf would be a multiply plus ex2
//   plus range fix-ups). The multiply comes before the max, so any sign of scale is handled.
//   At the end L = ln(2^m * l) = (m + log2(l)) * ln(2), converted back to natural-log units.
//   Rows that have seen no key yet have m = -inf: 0 is used as the subtraction base instead, so
//   that (-inf) - (-inf) = NaN never happens (2^(-inf - 0) = 0 is what we want).
//
// Speed (H100 80GB HBM3, 2026-11-21): bf16 D 128 N 8192 278.5 TFLOP/s (252.1 causal), N 2048
// 241.8 (221.4 causal) (fa_bench, B = 16384/N, H = 2048/D; notes/measured/h100-2026-11-21/bench.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.h"
#include "gpu.h"
#include "mma.cuh"
#include "registry.h"

namespace fa {
namespace {

constexpr const char* kName = "05/v2_mma";  // the registered name

constexpr int kRowsPerWarp = 16;  // one m16 tile per warp

// The tiles of head dim D (the header says how they were chosen).
template <int D>
struct Tiles {
  static constexpr bool kWide = D > 128;  // D = 256: fewer rows, fewer keys, Q not in registers
  static constexpr int kWarps = kWide ? 4 : 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBr = kWarps * kRowsPerWarp;  // query rows per block: 128, or 64 (D = 256)
  static constexpr int kBc = kWide ? 32 : 64;        // keys per K/V tile
  static constexpr int kSTiles = kBc / 8;            // n8 tiles of S: 8, or 4 (D = 256)
  static constexpr bool kQInRegs = !kWide;           // Q fragments live in registers
  // Register arrays of Q fragments: one A fragment per k16 slice, or a single unused one.
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // Blocks per SM asked of __launch_bounds__: 2 caps registers at 128 for 256 threads (D <= 64)
  // and at 255 for 128 threads (D = 256); D = 96, 128 need up to 255 with 256 threads: 1.
  static constexpr int kMinBlocksPerSm = (D <= 64 || kWide) ? 2 : 1;
  static_assert(kBc % 16 == 0, "P V takes the keys 16 at a time");
};

// Shared memory: the Q tile, then K and V double-buffered, rows padded by kPad elements (the
// header says why), 16-bit elements.
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

template <int D>
struct SmemLayout {
  static constexpr int kPitch = D + kPad;  // elements between consecutive rows
  static constexpr int kQElems = Tiles<D>::kBr * kPitch;
  static constexpr int kKVElems = Tiles<D>::kBc * kPitch;     // one K (or V) buffer
  static constexpr int kTotalElems = kQElems + 4 * kKVElems;  // Q, K[2], V[2]
  static constexpr size_t kBytes = size_t(kTotalElems) * 2;
};
static_assert(SmemLayout<256>::kBytes == 99 * 1024, "D = 256 is sized for sm_86/89's 99 KiB");

// The single address function for shared tiles: cp.async writes and ldmatrix reads both use it.
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

// Copy rows [row0, row0 + ROWS) of the row-major [seq, D] matrix `gmem` into the padded tile
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

// This lane's ldmatrix.x4 address for the A fragment of k16 slice 0 of this warp's 16 Q rows
// (slice kk is kk * 16 elements further along). Lane l addresses row l % 8 of matrix l / 8; the
// four 8x8 matrices are
//   m0 = rows 0-7, cols 0-7   -> a[0]      m1 = rows 8-15, cols 0-7  -> a[1]
//   m2 = rows 0-7, cols 8-15  -> a[2]      m3 = rows 8-15, cols 8-15 -> a[3]
// (cols relative to the slice), exactly the A fragment order of mma.cuh.
template <int D, class T>
__device__ __forceinline__ const T* q_lane_ptr(const T* sQ, int warp, int lane) {
  const int row = warp * kRowsPerWarp + (lane % 8) + 8 * ((lane / 8) & 1);
  const int col = 8 * (lane / 16);
  return sQ + row * SmemLayout<D>::kPitch + col;
}

// Q fragments of this warp's 16 rows, one A fragment per k16 slice, kept for the whole kernel
// (D <= 128 only: at D = 256 they would take 64 registers, see the header).
template <int D, class T>
__device__ __forceinline__ void load_q_fragments(uint32_t (&q_frag)[Tiles<D>::kQRegSlices][4],
                                                 const T* sQ, int warp, int lane) {
  static_assert(Tiles<D>::kQInRegs, "Q stays in shared memory at this head dim");
  const T* q_lane = q_lane_ptr<D>(sQ, warp, lane);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) mma::ldmatrix_x4(q_frag[kk], q_lane + kk * 16);
}

// S += Q K_j^T for one k16 slice kk of the head dim, qa = the A fragment of that slice.
template <class T, int D>
__device__ __forceinline__ void add_s_slice(float (&s)[Tiles<D>::kSTiles][4],
                                            const uint32_t (&qa)[4], const T* sKb, int kk,
                                            int k_ld_row, int k_ld_col) {
#pragma unroll
  for (int np = 0; np < Tiles<D>::kSTiles / 2; ++np) {
    uint32_t kb[4];
    mma::ldmatrix_x4(kb, tile_row<D>(sKb, np * 16 + k_ld_row) + kk * 16 + k_ld_col);
    const uint32_t b_lo[2] = {kb[0], kb[1]};
    const uint32_t b_hi[2] = {kb[2], kb[3]};
    mma::mma_16816<T>(s[2 * np], qa, b_lo);
    mma::mma_16816<T>(s[2 * np + 1], qa, b_hi);
  }
}

// S = Q K_j^T: 16 x Bc per warp, fp32 accumulators. Q comes from q_frag (registers) where
// Tiles<D>::kQInRegs, else from shared memory at q_lane (q_lane_ptr), one ldmatrix.x4 per k16
// slice; the other argument is then unused. k_ld_row, k_ld_col: this lane's ldmatrix offsets into
// the K tile (see the kernel).
template <class T, int D>
__device__ __forceinline__ void compute_s(float (&s)[Tiles<D>::kSTiles][4],
                                          const uint32_t (&q_frag)[Tiles<D>::kQRegSlices][4],
                                          const T* q_lane, const T* sKb, int k_ld_row,
                                          int k_ld_col) {
#pragma unroll
  for (int nt = 0; nt < Tiles<D>::kSTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    if constexpr (Tiles<D>::kQInRegs) {
      add_s_slice<T, D>(s, q_frag[kk], sKb, kk, k_ld_row, k_ld_col);
    } else {
      uint32_t qa[4];
      mma::ldmatrix_x4(qa, q_lane + kk * 16);
      add_s_slice<T, D>(s, qa, sKb, kk, k_ld_row, k_ld_col);
    }
  }
}

// The row max of S over the quad's 4 threads, starting from m (rows g and g + 8).
template <int D>
__device__ __forceinline__ void row_max(float (&m_new)[2], const float (&s)[Tiles<D>::kSTiles][4]) {
#pragma unroll
  for (int nt = 0; nt < Tiles<D>::kSTiles; ++nt) {
    m_new[0] = fmaxf(m_new[0], fmaxf(s[nt][0], s[nt][1]));
    m_new[1] = fmaxf(m_new[1], fmaxf(s[nt][2], s[nt][3]));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // the 4 threads of a quad hold the whole row
    m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 1));
    m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 2));
  }
}

// O = alpha * O + P V_j, P (in s, already exponentiated) straight from registers.
// v_ld_row, v_ld_col: this lane's ldmatrix .trans offsets into the V tile (see the kernel).
template <class T, int D>
__device__ __forceinline__ void rescale_o_add_pv(float (&o_acc)[D / 8][4],
                                                 const float (&s)[Tiles<D>::kSTiles][4],
                                                 const float (&alpha)[2], const T* sVb,
                                                 int v_ld_row, int v_ld_col) {
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    o_acc[dn][0] *= alpha[0];
    o_acc[dn][1] *= alpha[0];
    o_acc[dn][2] *= alpha[1];
    o_acc[dn][3] *= alpha[1];
  }
#pragma unroll
  for (int kk = 0; kk < Tiles<D>::kBc / 16; ++kk) {
    // Two S accumulator tiles (2kk, 2kk+1) are one A fragment: see "Register reuse of P" above.
    const uint32_t p_frag[4] = {mma::pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                                mma::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                mma::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                mma::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      mma::ldmatrix_x4_trans(vb, tile_row<D>(sVb, kk * 16 + v_ld_row) + dp * 16 + v_ld_col);
      const uint32_t b_lo[2] = {vb[0], vb[1]};
      const uint32_t b_hi[2] = {vb[2], vb[3]};
      mma::mma_16816<T>(o_acc[2 * dp], p_frag, b_lo);
      mma::mma_16816<T>(o_acc[2 * dp + 1], p_frag, b_hi);
    }
  }
}

// Write this warp's 16 rows of O = o_acc * inv_l (16-bit) to global memory, rows past seq_q not
// at all. O is staged in the warp's own 16 rows of sQ: only this warp ever read them (its Q
// fragments, once before the loop or, at D = 256, at every tile), and no cp.async targets sQ any
// more, so a warp-level sync is enough. Each thread writes 4 bytes at (row g or g+8, col
// 8dn + 2t): with the padded pitch these 32 writes fall in 32 different banks. Then each lane
// copies 16-byte chunks of whole rows to global memory.
template <class T, int D>
__device__ __forceinline__ void store_o_tile(T* O, const float (&o_acc)[D / 8][4],
                                             const float (&inv_l)[2], T* sQ, int warp, int lane,
                                             int64_t warp_row0, int64_t seq_q) {
  const int g = lane / 4, t = lane % 4;
  // Lanes of a warp may drift apart (independent thread scheduling): make sure every lane's
  // ldmatrix reads of these rows are done before any lane overwrites them (racecheck caught this).
  __syncwarp();
  T* const sO = tile_row<D>(sQ, warp * kRowsPerWarp);
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
  static_assert((kRowsPerWarp * kChunks) % 32 == 0, "O rows must split evenly over the warp");
#pragma unroll
  for (int i = 0; i < kRowsPerWarp * kChunks / 32; ++i) {
    const int c = lane + 32 * i;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = warp_row0 + r;
    if (grow < seq_q)
      *reinterpret_cast<uint4*>(O + grow * D + ch * 8) =
          *reinterpret_cast<const uint4*>(chunk(r, ch));
  }
}

template <class T, int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads, Tiles<D>::kMinBlocksPerSm)
    flash_fwd_v2_kernel(const Params p) {
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
  T* O = static_cast<T*>(p.o) + bh * seq_q * D;
  float* Lse = p.lse + bh * seq_q;

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
  int64_t last_key_of[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = warp_row0 + g + 8 * h;
    int64_t lk = seq_k - 1;
    const int64_t causal_lk = causal_last_key(row, seq_q, seq_k);
    if (p.causal && causal_lk < lk) lk = causal_lk;
    last_key_of[h] = lk;
  }
  // The smallest of those over the warp (its first row): a tile whose keys all lie at or below it
  // needs no mask for any row of the warp.
  const int64_t warp_last_key = p.causal ? (causal_last_key(warp_row0, seq_q, seq_k) < seq_k - 1
                                                ? causal_last_key(warp_row0, seq_q, seq_k)
                                                : seq_k - 1)
                                         : seq_k - 1;

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
  // q_lane instead (the header says why), and q_frag is an unused placeholder.
  uint32_t q_frag[Tiles<D>::kQRegSlices][4];
  if constexpr (Tiles<D>::kQInRegs) load_q_fragments<D>(q_frag, sQ, warp, lane);
  const T* q_lane = q_lane_ptr<D>(sQ, warp, lane);

  float o_acc[kOTiles][4];
#pragma unroll
  for (int dn = 0; dn < kOTiles; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o_acc[dn][e] = 0.0f;
  float m_run[2] = {kNegInf, kNegInf};  // running max, log2 units (already times scale*log2 e)
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

  for (int64_t j = 0; j < n_tiles; ++j) {
    const int buf = int(j & 1);
    if (j > 0) {
      // Tile j (the only group in flight) has landed for this thread; the barrier makes it
      // visible to all, and also guarantees every warp is done with tile j-1, whose buffer the
      // next cp.async overwrites.
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < n_tiles) {
      const int nb = buf ^ 1;
      load_tile_async<D, kBc>(sK + nb * SmemLayout<D>::kKVElems, K, (j + 1) * kBc, seq_k, tid);
      load_tile_async<D, kBc>(sV + nb * SmemLayout<D>::kKVElems, V, (j + 1) * kBc, seq_k, tid);
      mma::cp_async_commit();
    }
    const T* sKb = sK + buf * SmemLayout<D>::kKVElems;
    const T* sVb = sV + buf * SmemLayout<D>::kKVElems;
    const int64_t k0 = j * kBc;

    // ---- (1) S = Q K_j^T: 16 x Bc per warp.
    float s[kSTiles][4];
    compute_s<T, D>(s, q_frag, q_lane, sKb, k_ld_row, k_ld_col);

    // ---- Scores to log2 units (see "Softmax in base 2").
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] *= p.scale_log2;

    // ---- (2) Mask: keys past seq_k, and (causal) keys after a row's last visible key. Uniform
    // per warp, so only the tiles at the ragged end or on the diagonal pay for it.
    if (k0 + kBc - 1 > warp_last_key) {
      int lim[2];  // last visible key of each row, relative to k0, clamped to [-1, kBc]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int64_t r = last_key_of[h] - k0;
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
    float base[2], alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      base[h] = m_new[h] == kNegInf ? 0.0f : m_new[h];  // no key seen yet: avoid -inf - -inf
      alpha[h] = ex2_approx(m_run[h] - base[h]);        // 0 when m_run = -inf
      m_run[h] = m_new[h];
      l_run[h] *= alpha[h];
    }
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      s[nt][0] = ex2_approx(s[nt][0] - base[0]);
      s[nt][1] = ex2_approx(s[nt][1] - base[0]);
      s[nt][2] = ex2_approx(s[nt][2] - base[1]);
      s[nt][3] = ex2_approx(s[nt][3] - base[1]);
      l_run[0] += s[nt][0] + s[nt][1];
      l_run[1] += s[nt][2] + s[nt][3];
    }

    // ---- (4) O = alpha * O + P V_j.
    rescale_o_add_pv<T, D>(o_acc, s, alpha, sVb, v_ld_row, v_ld_col);
  }

  // ---- Epilogue. Finish the row sums (each thread summed only its own columns).
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
        Lse[row] = l_run[h] > 0.0f ? (m_run[h] + log2f(l_run[h])) * 0.6931471805599453f : kNegInf;
    }
  }
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
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
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_v2_kernel<T, D>;
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
             "tensor cores (mma.sync m16n8k16), P reused from registers, cp.async double buffer",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
FA_REGISTER_SMEM(fa::kName, [](int d) {
  return fa::smem_at<32, 64, 96, 128, 256>(
      d, [](auto D) { return fa::SmemLayout<decltype(D)::value>::kBytes; });
});
