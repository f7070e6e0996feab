// v1_varlen.cu: chapter 05's final forward kernel (05/v5_fewer_instructions.cu) on a batch of
// sequences of different lengths, packed without padding: an offset table in front of its tile
// loop.
//
// What changed vs 05/v5, and why
//   A server's batch holds sequences of different lengths. Padding each to the longest and running
//   05/v5 computes, reads and writes the padding; a launch per sequence pays a launch and a tail of
//   idle SMs per sequence. Here the sequences are packed (VarlenShape in shapes.h: head-major
//   [heads, total, D], sequence b at rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1 of every head's
//   slab) and one launch covers them all. Each block first reads four numbers of the offset table,
//     cu_seqlens_q[b], cu_seqlens_q[b + 1], cu_seqlens_k[b], cu_seqlens_k[b + 1],
//   which give its sequence's lengths seq_q and seq_k and where its rows start:
//     Q and O of query head h   q + (h * total_q + cu_seqlens_q[b]) * D
//     K and V                   k + (kvh * total_k + cu_seqlens_k[b]) * D
//     L                         lse + h * total_q + cu_seqlens_q[b]
//   with kvh = h / (heads / heads_kv), the K/V head that query head h reads
//   (grouped-query attention is the division in kvh). From there on it is 05/v5's block on a
//   problem of those lengths. The grid is sized for the longest sequence, ceil(max_seq_q / Br) Q
//   tiles per (sequence, head), and a block whose tile starts at or past its sequence's end returns
//   before it loads anything: the padding a padded batch would compute is a block that exits.
//
//   The tile loop, the masks and the epilogue are 05/v5's, with seq_q and seq_k the sequence's.
//   They already keep every read and write inside the sequence's rows, which packing now needs (the
//   next sequence's rows follow directly; the last sequence's end is the end of the tensor):
//     * Q rows at or past seq_q and K/V rows at or past seq_k are zero-filled (cp.async with
//       src-size 0, from a row of the sequence), never read: no row of the next sequence, nor any
//       byte past the end of the tensor, is loaded.
//     * Keys at or past seq_k are masked to -inf in S (the tile at the ragged end pays for it), and
//       their V rows are those zeros, so P V adds exactly 0 for them.
//     * O and L are stored for rows below seq_q only: the rows after them are the next sequence's.
//     * seq_k = 0: no K/V tile at all, so l = 0 and every row stores O = 0 and L = -inf, as a row
//       that sees no key does in 05/v5.
//   Head dims 64 and 128 only: 05/v5's D 32, 96 and 256 are not instantiated, and what only they
//   needed is gone (padded shared-memory rows, load_tile_async for K/V tiles, one m16 tile per
//   warp, 32-key tiles).
//
// Map of the kernel (per block: one Q tile of Br = 128 rows of one (sequence, head); per warp:
// 32 rows, the thread owns rows g and g + 8 of each of its two m16 tiles)
//   offsets    sequence b's lengths and base pointers from cu_seqlens; return if q0 >= seq_q
//   prologue   cp.async Q tile and K/V tile 0; wait; Q fragments into registers (D 64)
//   loop j     wait; __syncthreads; cp.async K/V tile j + 1 (the copy plan) into the other buffer
//              skip if no row of this warp sees tile j
//     (1) S = Q K_j^T: for each k16 slice, each K fragment -> 2 MMAs per m16 tile
//     (2) mask (only tiles at the ragged end of seq_k or on the causal diagonal)
//     (3) online softmax of each m16 tile's two rows per thread, the scale in the exp2 FFMA
//     (4) O = alpha O + P V_j (O rescaled only where a max moved, D 128)
//   epilogue   O / l through stmatrix (sm_90; each m16 tile through its rows of sQ on older GPUs),
//              rows below seq_q only; then L
//
// 05/v5's pieces (its tiles, layout, Q copy, the two products on m16 tiles, the epilogue) are
// called from common/device/mma_fwd_v5.cuh, 05/v5's code at D 64 and 128, compiled to the machine
// code a copy had; this file holds the parameters, the K/V copy plan, the kernel and the launch.
//
// Speed: measured in chapters/09_serving/README.md
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "attention_tiles.cuh"  // tiles::LaneAddr, a lane's ldmatrix addresses (05/v4)
#include "check.h"
#include "gpu.h"
#include "mma.cuh"
#include "mma_fwd_v5.cuh"
#include "registry.h"

namespace fa {
namespace {

using namespace fa::ch05::v5;  // 05/v5's tiles, products, epilogue (mma_fwd_v5.cuh)

constexpr const char* kName = "09/v1_varlen";  // the registered name

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  const int32_t* cu_seqlens_q;  // batch + 1 offsets: sequence b is rows cu[b] .. cu[b + 1] - 1
  const int32_t* cu_seqlens_k;
  int64_t total_q, total_k;  // rows of one head's slab of Q (O) and of K (V)
  int heads;                 // query heads
  int group;                 // query heads per K/V head (heads / heads_kv)
  int num_q_tiles;           // Q tiles per (sequence, head): ceil(max_seq_q / Br)
  bool causal;
  float scale_log2;  // softmax_scale * log2(e)
};

// The copies of K/V tile j, planned once per thread. Working out every 16-byte chunk's row,
// column, 64-bit source, bounds test and destination from scratch (load_tile_async) costs about
// 100 instructions per tile and warp at D 128, between the barrier and the first ldmatrix of each
// step. The plan is fixed: with kChunks = D / 8 chunks per row, thread tid copies chunk
// tid % kChunks of rows tid / kChunks + kRowsPerPass * i, i < kPasses. Pass i's source and
// destination are the thread's first ones plus compile-time constants (folded into the cp.async),
// tile j's source is kBc * D * j elements further, buffer b's destination b tiles further. The
// plan is two registers (a shared address and an offset into a tile; K and V are laid out alike),
// since D 64 and 128 have none to spare. Only a tile that ends past seq_k (the last one, when
// seq_k % kBc != 0) tests its rows, one comparison per pass.
template <class T, int D>
struct KVCopyPlan {
  using Sm = SmemLayout<D>;
  using Tl = Tiles<D>;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = Tl::kThreads / kChunks;
  static_assert(Tl::kThreads % kChunks == 0 && Tl::kBc % kRowsPerPass == 0 &&
                    kRowsPerPass % kSwizzleRows == 0,
                "the block copies whole rows per pass, and every pass sees the same swizzle");
  static constexpr int kPasses = Tl::kBc / kRowsPerPass;
  static constexpr uint32_t kTileBytes = Sm::kKVElems * 2;  // one K (or V) buffer
  static constexpr uint32_t kVBytes = 2 * kTileBytes;       // V buffer 0 from K buffer 0
  static constexpr uint32_t kPassBytes = kRowsPerPass * Sm::kPitch * 2;  // pass i to i + 1

  uint32_t dst;  // this thread's first chunk in K buffer 0 (32-bit shared address)
  uint32_t src;  // ... and its element offset in a tile of K or V (below 2^31: Bc x D)

  __device__ __forceinline__ KVCopyPlan(T* sK, int tid) {
    const int row = tid / kChunks, chunk = tid % kChunks;
    dst = mma::smem_addr(sK) + uint32_t(chunk_at<D>(row, chunk)) * 2;
    src = uint32_t(row * D + 8 * chunk);
  }

  // Tile j of K and V (rows j Bc ... of the sequence's [seq_k, D] matrices) into buffer buf. A
  // tile that ends past seq_k (rows_left = seq_k - j Bc < Bc) zero-fills the rows past the end:
  // cp.async with src-size 0, from the tile's first row (in range) rather than past the end. Those
  // rows are the next sequence's, or past the end of the tensor: never read.
  __device__ __forceinline__ void issue(const T* K, const T* V, int j, int buf, int rows_left,
                                        int tid) const {
    const uint32_t d = dst + uint32_t(buf) * kTileBytes;
    const int64_t tile = int64_t(j) * (Tl::kBc * D);
    const T* k = K + tile + src;
    const T* v = V + tile + src;
    if (rows_left >= Tl::kBc) {
#pragma unroll
      for (int i = 0; i < kPasses; ++i)
        mma::cp_async_16(d + i * kPassBytes, k + i * kRowsPerPass * D);
#pragma unroll
      for (int i = 0; i < kPasses; ++i)
        mma::cp_async_16(d + kVBytes + i * kPassBytes, v + i * kRowsPerPass * D);
    } else {
      const int row = tid / kChunks;
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const bool in = row + i * kRowsPerPass < rows_left;
        mma::cp_async_16(d + i * kPassBytes, in ? k + i * kRowsPerPass * D : K + tile, in);
        mma::cp_async_16(d + kVBytes + i * kPassBytes, in ? v + i * kRowsPerPass * D : V + tile,
                         in);
      }
    }
  }
};

template <class T, int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads, 2) flash_fwd_varlen_kernel(const Params p) {
  using Sm = SmemLayout<D>;
  constexpr int kM = Tiles<D>::kM;            // m16 tiles per warp
  constexpr int kBr = Tiles<D>::kBr;          // query rows per block
  constexpr int kBc = Tiles<D>::kBc;          // keys per K/V tile
  constexpr int kSTiles = Tiles<D>::kSTiles;  // n8 tiles of S per m16 tile
  constexpr int kOTiles = D / 8;              // n8 tiles of O
  constexpr float kNegInf = -INFINITY;

  // Swizzled tiles must start at 128-byte boundaries; so must the block's shared memory.
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + Sm::kQElems;  // buffer b at sK + b * kKVElems
  T* sV = sK + 2 * Sm::kKVElems;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  // ---- Which (sequence, head) and which Q tile: all on blockIdx.x (gridDim.y/z stop at 65535,
  // and sequences x heads may pass that). The Q tiles of one (sequence, head) are consecutive
  // blocks, and so are the heads of one sequence (K/V of that sequence stay hot in L2; with GQA
  // consecutive query heads read the same K/V head), last tile first (under causal masking the
  // last Q tiles have the most work; starting them first evens the tail).
  const int bh = int(blockIdx.x / unsigned(p.num_q_tiles));  // b * heads + head
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % unsigned(p.num_q_tiles));
  const int b = bh / p.heads, head = bh % p.heads;
  const int64_t q0 = int64_t(q_tile) * kBr;

  // ---- The offset table: sequence b's lengths, and where its rows start in the packed tensors.
  // A tile at or past the end of the sequence is padding: no work, nothing to write.
  const int64_t q_start = p.cu_seqlens_q[b], k_start = p.cu_seqlens_k[b];
  const int64_t seq_q = p.cu_seqlens_q[b + 1] - q_start;
  const int64_t seq_k = p.cu_seqlens_k[b + 1] - k_start;
  if (q0 >= seq_q) return;  // the whole block: before any barrier

  const int64_t kv_head = head / p.group;  // the K/V head this query head reads (GQA)
  const T* Q = static_cast<const T*>(p.q) + (int64_t(head) * p.total_q + q_start) * D;
  const T* K = static_cast<const T*>(p.k) + (kv_head * p.total_k + k_start) * D;
  const T* V = static_cast<const T*>(p.v) + (kv_head * p.total_k + k_start) * D;

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

  // This thread's K/V copies, planned once.
  const KVCopyPlan<T, D> plan(sK, tid);

  // ---- Prologue: Q tile (group 0) and K/V tile 0 (group 1) in flight together. Rows past the
  // sequence's end (Q rows >= seq_q, K/V rows >= seq_k) are zero-filled, never read.
  load_tile_async<D, kBr>(sQ, Q, q0, seq_q, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) plan.issue(K, V, 0, 0, int(seq_k), tid);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q: m16 tile m of this warp is the 16-row slab kM * warp + m of sQ. Fragments kept in
  // registers at D 64 only.
  constexpr int kRowBytes = Sm::kPitch * 2;
  // Every ldmatrix row of this lane is lane % 8 modulo 8: one XOR pattern for all of its reads
  // (LaneAddr).
  const uint32_t swz = swizzle_xor(lane);
  const T* q_lane = q_lane_ptr<D>(sQ, kM * warp, lane);  // m16 tile m: 16 m rows down
  const typename Sm::Lane q_addr(mma::smem_addr(q_lane), swz);
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

  // Per-lane row/column offsets of the ldmatrix addresses for K (05/v2's kernel explains the
  // mapping), as 32-bit shared addresses of buffer 0.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16);
  const int k_ld_col = 8 * ((lane / 8) & 1);
  const typename Sm::Lane k_addr0(mma::smem_addr(tile_row<D>(sK, k_ld_row) + k_ld_col), swz);
  constexpr uint32_t kKVBytes = Sm::kKVElems * 2;
  // V's lane mapping (.trans: row (lane % 8) + 8 ((lane / 8) & 1), column 8 (lane / 16) of a
  // 16 x 16 block) is Q's, so q_addr's bases reach V as well: V buffer b lies (Q tile + both K
  // buffers - this warp's Q offset + b * buffer) bytes further. (K's mapping differs: its own set
  // of bases stays.)
  const uint32_t v_from_q =
      uint32_t(Sm::kQElems * 2 + 2 * Sm::kKVElems * 2) - uint32_t(16 * kRowBytes * kM * warp);

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
      // The launcher keeps lengths below 2^31: rows_left in 32 bits.
      plan.issue(K, V, j + 1, buf ^ 1, int(seq_k) - (j + 1) * kBc, tid);
      mma::cp_async_commit();
    }
    const int k0 = j * kBc;
    if (k0 > warp_max_key) continue;  // no row of this warp sees any key of tile j

    // ---- (1) S = Q K_j^T: 32 x Bc per warp (kM m16 tiles).
    float s[kM][kSTiles][4];
    const typename Sm::Lane k_addr(k_addr0, buf * kKVBytes);
    compute_s_m<T, D>(s, q_frag, q_addr, k_addr);

    if (p.scale_log2 < 0.0f) negate_s_m<D>(s);  // c * s = |c| * (-s): the max stays a max

    // ---- (2) Mask: keys past seq_k (the next sequence's rows, zero-filled in shared memory),
    // and (causal) keys after a row's last visible key. Uniform per warp, so only the tiles at the
    // ragged end or on the diagonal pay for it.
    if (k0 + kBc - 1 > warp_last_key) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        int lim[2];  // last visible key of each row, relative to k0, clamped to [-1, kBc]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // In 32 bits (the launcher keeps lengths below 2^31 - 256): causal_last_key's
          // row + seq_k - seq_q, capped at the last key.
          const int row = int(warp_row0) + 16 * m + g + 8 * h;
          int lk = int(seq_k) - 1;
          if (p.causal) lk = min(lk, row + int(seq_k - seq_q));
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
    bool rescale[kM];  // whether m16 tile m's O is multiplied by alpha (a warp vote)
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
        // An unmoved max gives alpha = 1 exactly; else 0 when m_run = -inf.
        alpha[m][h] = m_new[h] == m_run[m][h] ? 1.0f : ex2_approx(fmaf(m_run[m][h], c, -base[h]));
        m_run[m][h] = m_new[h];
        l_run[m][h] *= alpha[m][h];
      }
      rescale[m] = !Tiles<D>::kSkipRescale ||
                   __any_sync(0xffffffffu, alpha[m][0] != 1.0f || alpha[m][1] != 1.0f);
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
    const typename Sm::Lane v_addr(q_addr, v_from_q + buf * kKVBytes);
    rescale_o_add_pv_m<T, D>(o_acc, s, alpha, rescale, v_addr);
  }

  // ---- Epilogue: finish the row sums (each thread summed only its own columns), then O of all
  // m16 tiles at once through store_o_m (stmatrix, where the build targets sm_90 or newer; older
  // GPUs store each m16 tile through its own 16 rows of sQ), then L; rows below seq_q only.
  T* O = static_cast<T*>(p.o) + (int64_t(head) * p.total_q + q_start) * D;
  float* Lse = p.lse + int64_t(head) * p.total_q + q_start;
  const float c = fabsf(p.scale_log2);
  if constexpr (mma::kHasStmatrix) {
    float inv_l[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 1);
        l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 2);
        inv_l[m][h] = l_run[m][h] > 0.0f ? 1.0f / l_run[m][h] : 0.0f;  // no visible key: O = 0
      }
    store_o_m<T, D>(O + warp_row0 * D, seq_q - warp_row0, o_acc, inv_l, q_addr,
                    tile_row<D>(sQ, Tiles<D>::kRowsPerWarp * warp), lane);
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
      store_o_tile<T, D>(O, o_acc[m], inv_l, sQ, kM * warp + m, lane, warp_row0 + 16 * m, seq_q);
      write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
    }
  }
}

template <class T, int D>
void launch(const VarlenFwdArgs& a, cudaStream_t stream) {
  const VarlenShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.max_seq_q(), Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.heads * s.batch();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  // 32-bit key indices: k0 + Bc and q0 + Br must not overflow; 256 = 2 x Br. Every sequence is at
  // most its total.
  constexpr int64_t kSeqMargin = 256;
  FA_UNSUPPORTED_IF(s.total_q() > INT_MAX - kSeqMargin || s.total_k() > INT_MAX - kSeqMargin,
                    std::string(kName) + ": packed lengths must stay below 2^31 - 256");
  Params p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.total_q = s.total_q();
  p.total_k = s.total_k();
  p.heads = int(s.heads);
  p.group = int(s.heads / s.kv_heads());
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.scale_log2 = s.sequence(0).softmax_scale() * 1.4426950408889634f;  // log2(e)

  constexpr size_t smem = SmemLayout<D>::kBytes;
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_varlen_kernel<T, D>;
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
void dispatch_head_dim(const VarlenFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) + " not instantiated (64, 128)");
  }
}

void varlen_fwd(const VarlenFwdArgs& a, cudaStream_t stream) {
  const VarlenShape& s = a.shape;
  FA_REQUIRE(s.seqlens_k.size() == s.seqlens_q.size(), "one key length per sequence");
  for (size_t b = 0; b < s.seqlens_q.size(); ++b)
    FA_REQUIRE(s.seqlens_q[b] >= 0 && s.seqlens_k[b] >= 0, "negative sequence length");
  FA_REQUIRE(s.heads >= 0 && s.heads_kv >= 0, "negative size");
  FA_UNSUPPORTED_IF(s.has_window(),
                    std::string(kName) + ": no sliding window (09/v2_window takes one)");
  if (s.batch() == 0 || s.heads == 0 || s.total_q() == 0) return;  // nothing to write
  FA_UNSUPPORTED_IF(s.heads % s.kv_heads() != 0,
                    std::string(kName) + ": heads must be a multiple of heads_kv");
  FA_REQUIRE(a.cu_seqlens_q != nullptr && a.cu_seqlens_k != nullptr, "cu_seqlens on the device");
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

FA_REGISTER(VarlenFwdKernel,
            {fa::kName,
             fa::varlen_fwd,
             "05/v5 on a packed batch of ragged sequences: each block reads its sequence's offsets "
             "and lengths from cu_seqlens, tiles past a sequence's end exit at once; GQA",
             {fa::DType::F16, fa::DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*window=*/false});
FA_REGISTER_SMEM(fa::kName, [](int d) {
  return fa::smem_at<64, 128>(d, [](auto D) { return fa::SmemLayout<decltype(D)::value>::kBytes; });
});
