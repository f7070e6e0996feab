// ch06_kv128_kernel.cuh: the dK/dV kernel of the tuning steps 06/t05 to 06/t09,
// kv128_kernel<T, D, Steps>. t05's kernel is the base (every address of the loop computed once:
// TileCopy, and ldmatrix bases plus constants); each later step turns on one named switch of
// Steps, and the kernel keeps the earlier form beside it, so the code of any step can be read
// here and the step files (t05_hoisted_addresses.cu ... t09_dq_two_mtiles.cu) tell why and how
// fast:
//   kEx2Approx    t06  P = 2^x by ex2.approx.ftz alone, not exp2f                     (exp2_p)
//   kMaskOnce     t07  the mask test once per chunk of P^T, not once per element
//   kWholeQTile   t08  S^T and dP^T for all 64 queries of the tile at once, not two chunks of
//                      32 (kChunk)
//   kDqTwoMtiles  t09  dQ in 32 x 32 warp tiles at D = 128                     (kDqRowTiles)
// With all four on, and the tiles swizzled at D 64 and 128, this is 06/v4_bc128_tuned's kernel
// (that step, the swizzle, is the main path's: v4_bc128_tuned.cu). The rest, shared with t04's
// kernel, is in ch06_kv128.cuh. Device code, in an anonymous namespace.
#pragma once
#include <cstdint>

#include "ch06_kv128.cuh"
#include "mma.cuh"

namespace {

using fa::bwd_tc::acc_to_a;
using fa::bwd_tc::ex2_ftz;
using fa::bwd_tc::mma_pair;
using fa::mma::ldmatrix_x4;
using fa::mma::ldmatrix_x4_trans;
using fa::mma::smem_addr;

// The switches of the steps after t05, all off: a step's file derives its Steps from this and
// turns on its own switch and those of the steps before it.
struct KvSteps {
  static constexpr bool kEx2Approx = false;    // t06: P = 2^x by ex2.approx.ftz alone
  static constexpr bool kMaskOnce = false;     // t07: one mask test per chunk of P^T
  static constexpr bool kWholeQTile = false;   // t08: S^T, dP^T for the whole Q tile at once
  static constexpr bool kDqTwoMtiles = false;  // t09: dQ in 32 x 32 warp tiles at D = 128
};
// All four: the kernel that t11 and t12 run at D 32 and 96 (06/v4_bc128_tuned's there, whose
// swizzle needs rows of whole 128-byte groups, D 64 and 128).
struct KvAllSteps : KvSteps {
  static constexpr bool kEx2Approx = true, kMaskOnce = true, kWholeQTile = true,
                        kDqTwoMtiles = true;
};

// The warps' tiles of dQ_i (kBr x D): kDqRowTiles m16 tiles by kDqWarpCols columns each, summed
// over all kBc keys, kDqChunk columns at a time. Before t09: 16 rows by D / 2 (four warps along
// the rows, two along the columns); t09, at D = 128: 32 rows by D / 4 (two by four).
template <int D, class Steps>
constexpr int kDqRowTiles = Steps::kDqTwoMtiles&& D == 128 ? 2 : 1;
template <int D, class Steps>
constexpr int kDqRowWarps = kBr / (16 * kDqRowTiles<D, Steps>);  // warps along the rows
template <int D, class Steps>
constexpr int kDqWarpCols = D* kDqRowWarps<D, Steps> / kWarps;  // columns a warp adds
// 32 columns where they divide the warp's share (D 64, 128), 16 where not (32, 96).
template <int D, class Steps>
constexpr int kDqChunk = kDqWarpCols<D, Steps> % 32 == 0 ? 32 : 16;
static_assert(kDqWarpCols<128, KvSteps> == 64 && kDqWarpCols<128, KvAllSteps> == 32 &&
                  kDqWarpCols<64, KvAllSteps> == 32 && kDqChunk<96, KvAllSteps> == 16 &&
                  kDqChunk<32, KvSteps> == 16,
              "dQ warp tiles");

// ---- t05: the addresses, computed once -----------------------------------------------------
// The lane's part of the two ldmatrix x4 address patterns of ch06_kv128.cuh, in bytes, for a
// tile of pitch LD elements (lane l gives row r = l % 8 of matrix i = l / 8):
//   lane_rows:  (r + 8 (i % 2)) LD + 8 (i / 2)   load_a, load_b_x: A = the tile, B = the tile
//   lane_trans: (r + 8 (i / 2)) LD + 8 (i % 2)   load_b_xt, load_a_xt: B = tile^T, A = tile^T
// The fragment at (row0, col0) of the tile is then base + lane part + (row0 * LD + col0) * 2.
template <int LD>
__device__ __forceinline__ uint32_t lane_rows(int lane) {
  return uint32_t(((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4)) * 2;
}
template <int LD>
__device__ __forceinline__ uint32_t lane_trans(int lane) {
  return uint32_t(((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1)) * 2;
}
// Byte offset of element (row, col) of a tile of pitch LD: a compile-time constant in the loop.
template <int LD>
constexpr uint32_t at(int row, int col) {
  return uint32_t(row * LD + col) * 2;
}

// store_a of ch06_kv128.cuh from the lane's address p = s + (m0 + g) LD + k0 + 2t.
template <int LD, class T>
__device__ __forceinline__ void store_a_at(T* p, const uint32_t (&a)[4]) {
  *reinterpret_cast<uint32_t*>(p) = a[0];
  *reinterpret_cast<uint32_t*>(p + 8 * LD) = a[1];
  *reinterpret_cast<uint32_t*>(p + 8) = a[2];
  *reinterpret_cast<uint32_t*>(p + 8 * LD + 8) = a[3];
}

// The copies of a full Q or dO tile (kBr rows), planned once per thread: thread tid copies the
// 16-byte chunk tid % kChunksPerRow of rows row + kRowsPerPass * i, i < kPasses. Threads past
// kRowsPerPass * kChunksPerRow (D = 96: 12 chunks a row, 21 rows a pass) copy nothing.
// kSwizzled (t11, t12): into swizzled rows of D elements; the chunk moves by row % 8, the same for
// every pass (kRowsPerPass is a multiple of 8 at D = 64 and 128), so the pass offsets stay constant.
template <class T, int D, bool kSwizzled = false, int ROWS = kBr>
struct TileCopy {
  static constexpr int kLd = kSwizzled ? D : D + kPad;
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = (ROWS + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr bool kExact = kThreads % kChunksPerRow == 0 && ROWS % kRowsPerPass == 0;
  int row;       // this thread's first row (ROWS: none)
  int src;       // its first chunk, in elements from the tile's first row in global memory
  uint32_t dst;  // and in bytes from the tile's start in shared memory

  __device__ __forceinline__ explicit TileCopy(int tid) {
    row = tid < kRowsPerPass * kChunksPerRow ? tid / kChunksPerRow : ROWS;
    const int col = (tid % kChunksPerRow) * 8;
    src = row * D + col;
    static_assert(!kSwizzled || (kExact && kRowsPerPass % fa::bwd_tc::kSwizzleRows == 0),
                  "one swizzle for every pass");
    if constexpr (kSwizzled)
      dst = uint32_t(fa::bwd_tc::swizzled_offset<D>(row, col / 8)) * 2;
    else
      dst = at<kLd>(row, col);
  }
  // Rows [0, ROWS) of the tile whose first row is `g` into the tile at shared address `s`.
  __device__ __forceinline__ void full(uint32_t s, const T* g) const {
#pragma unroll
    for (int i = 0; i < kPasses; ++i)
      if (kExact || row + i * kRowsPerPass < ROWS)
        fa::mma::cp_async_16(s + dst + at<kLd>(i * kRowsPerPass, 0),
                             g + src + i * kRowsPerPass * D);
  }
};

// t06: 2^x by the MUFU instruction alone; t05 calls exp2f (ch06_kv128.cuh, ex2_ftz, says what
// differs).
template <class Steps>
__device__ __forceinline__ float exp2_p(float x) {
  if constexpr (Steps::kEx2Approx)
    return ex2_ftz(x);
  else
    return exp2f(x);
}

// ---- dK, dV, and the dQ atomics ------------------------------------------------------------
template <class T, int D, class Steps>
__global__ void __launch_bounds__(kThreads, 1) kv128_kernel(Params p) {
  // t08: S^T and dP^T for the whole Q tile at once; before, in two chunks of 32 queries.
  constexpr int kChunk = Steps::kWholeQTile ? kBr : 32;
  static_assert(kBr % kChunk == 0 && kChunk % 16 == 0, "chunking");
  constexpr int kLd = D + kPad;
  constexpr int kTile = kBr * kLd;    // a Q or dO tile (kBr rows)
  constexpr int kKvTile = kBc * kLd;  // a K or V tile (kBc rows: twice v3's)
  extern __shared__ __align__(16) unsigned char smem_padded[];
  T* sK = reinterpret_cast<T*>(smem_padded);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                   // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of kBr: L * log2(e)
  float* sD = sL + 2 * kBr;                               // two buffers of kBr: D
  T* sdS = reinterpret_cast<T*>(sD + 2 * kBr);            // dS^T: kBc keys x kBr queries

  // t09: dQ in warp tiles of kDqRt m16 tiles (kDqRowTiles).
  constexpr int kDqRt = kDqRowTiles<D, Steps>;
  constexpr int kDqWc = kDqWarpCols<D, Steps>, kDqC = kDqChunk<D, Steps>;
  static_assert(kDqWc % kDqC == 0, "dQ chunks");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;  // bh * n_tiles + key tile
  const int64_t bh = tile_bh / p.n_tiles;
  const int64_t k0 = (tile_bh % p.n_tiles) * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  // Causal (bottom-right): query i sees keys j <= causal_last_key(i) = i + off (shapes.h).
  const int64_t off = causal_last_key(0, seq_q, seq_k);

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* dO = static_cast<const T*>(p.dout) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;
  float* dQacc = p.dq_accum + bh * seq_q * D;
  const float* lse = p.lse + bh * seq_q;
  const float* delta = p.delta + bh * seq_q;

  // The Q tiles that can see this K tile: with causal masking the first query to see key k0 is
  // k0 - off; every tile before the one holding it is entirely masked and skipped.
  const int64_t n_qt = ceil_div(seq_q, kBr);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBr;  // may be >= n_qt: no work

  // Prologue: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i by plain loads.
  load_tile_async<T, D, kBc, kThreads>(sK, K, k0, seq_k, tid);
  load_tile_async<T, D, kBc, kThreads>(sV, V, k0, seq_k, tid);
  if (qt_begin < n_qt) {
    const int64_t q0 = qt_begin * kBr;
    load_tile_async<T, D, kBr, kThreads>(sQ, Q, q0, seq_q, tid);
    load_tile_async<T, D, kBr, kThreads>(sdO, dO, q0, seq_q, tid);
    const int64_t row = q0 + (tid & (kBr - 1));
    if (tid < kBr)
      sL[tid] = load_l2(lse, row, seq_q);
    else if (tid < 2 * kBr)
      sD[tid - kBr] = row < seq_q ? delta[row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  float dv[D / 8][4], dk[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[nt][e] = dk[nt][e] = 0.0f;

  const int kr0 = warp * 16;  // this warp's first key row in the tile
  const int qr0 = (warp % kDqRowWarps<D, Steps>)*16 * kDqRt;  // its first query row, for dQ,
  const int dq0 = (warp / kDqRowWarps<D, Steps>)*kDqWc;       // and its first column of dQ

  // t05: the bases of every address in the loop. ldmatrix: K, V as A of S^T, dP^T (this warp's
  // rows); K as B of dQ (.trans, this warp's columns); Q, dO as B in both forms (buffer 0; a
  // tile adds its buffer's offset); dS^T as A of dQ (.trans, this warp's query rows). store_a's
  // address of dS^T (rows kr0 + g, + 8; columns 2t, 2t + 1). The Q / dO copy plan. A read is
  // then one of these bases plus a compile-time constant.
  constexpr uint32_t kTileBytes = kTile * 2;
  const uint32_t rows_off = lane_rows<kLd>(lane), trans_off = lane_trans<kLd>(lane);
  const uint32_t k_a = smem_addr(sK) + rows_off + at<kLd>(kr0, 0);
  const uint32_t v_a = smem_addr(sV) + rows_off + at<kLd>(kr0, 0);
  const uint32_t k_x = smem_addr(sK) + rows_off + at<kLd>(0, dq0);
  const uint32_t q_t0 = smem_addr(sQ) + trans_off, q_x0 = smem_addr(sQ) + rows_off;
  const uint32_t do_t0 = smem_addr(sdO) + trans_off, do_x0 = smem_addr(sdO) + rows_off;
  const uint32_t ds_t = smem_addr(sdS) + lane_trans<kLdS>(lane) + at<kLdS>(0, qr0);
  T* const ds_st = sdS + (kr0 + g) * kLdS + 2 * t;
  const TileCopy<T, D> copy(tid);
  const uint32_t sq_addr = smem_addr(sQ), sdo_addr = smem_addr(sdO);

  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int buf = int(qt - qt_begin) & 1;
    const int64_t q0 = qt * kBr;
    const bool has_next = qt + 1 < n_qt;

    // Prefetch Q_{i+1}, dO_{i+1} into the other buffer (always commit: an empty group keeps the
    // wait<1> below correct on the last tile). L and D go through registers, stored after the
    // math so their latency hides behind it.
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = q0 + kBr;
      if (q1 + kBr <= seq_q) {  // a full tile: the plan, no bounds test
        const uint32_t next = uint32_t(buf ^ 1) * kTileBytes;
        copy.full(sq_addr + next, Q + q1 * D);
        copy.full(sdo_addr + next, dO + q1 * D);
      } else {  // the sequence ends inside it: rows past seq_q zero-filled
        load_tile_async<T, D, kBr, kThreads>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, tid);
        load_tile_async<T, D, kBr, kThreads>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, tid);
      }
      const int64_t row = q1 + (tid & (kBr - 1));
      if (tid < kBr)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBr)
        next_ld = row < seq_q ? delta[row] : 0.0f;
    }
    fa::mma::cp_async_commit();
    fa::mma::cp_async_wait<1>();
    __syncthreads();

    const uint32_t cur = uint32_t(buf) * kTileBytes;
    const uint32_t q_t = q_t0 + cur, q_x = q_x0 + cur, do_t = do_t0 + cur, do_x = do_x0 + cur;
    const float* l_s = sL + buf * kBr;
    const float* d_s = sD + buf * kBr;
    // Mask only where needed: keys past seq_k, or a tile crossing the causal diagonal (some key
    // of the tile lies beyond what the tile's first query sees).
    const bool need_mask = (k0 + kBc > seq_k) || (p.causal && k0 + kBc - 1 > q0 + off);

#pragma unroll
    for (int qc = 0; qc < kBr / kChunk; ++qc) {
      constexpr int kNt = kChunk / 8;  // n-tiles of the chunk
      const int c0 = qc * kChunk;      // first query column of the chunk, within the tile

      // S^T = K_j Q^T over this chunk of queries.
      float s[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, k_a + at<kLd>(0, 16 * ks));
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, q_t + at<kLd>(c0 + np * 16, 16 * ks));
          mma_pair<T>(s[2 * np], s[2 * np + 1], a, b);
        }
      }

      // P^T = exp(scale S^T - L), masked where needed. Element (nt, e): key row kr0 + g +
      // 8*(e/2), query column c0 + 8*nt + 2t + e%2.
      if constexpr (Steps::kMaskOnce) {  // t07: one test of need_mask per chunk
        if (need_mask) {
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = c0 + nt * 8 + 2 * t + (e & 1);
              const int64_t key = k0 + kr0 + g + 8 * (e >> 1);
              const int64_t query = q0 + col;
              const bool keep = key < seq_k && !(p.causal && key > query + off);
              s[nt][e] = keep ? exp2_p<Steps>(fmaf(s[nt][e], p.scale_log2, -l_s[col])) : 0.0f;
            }
          }
        } else {
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              s[nt][e] =
                  exp2_p<Steps>(fmaf(s[nt][e], p.scale_log2, -l_s[c0 + nt * 8 + 2 * t + (e & 1)]));
        }
      } else {  // t05, t06: the test inside the element loop
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c0 + nt * 8 + 2 * t + (e & 1);
            float pv = exp2_p<Steps>(fmaf(s[nt][e], p.scale_log2, -l_s[col]));
            if (need_mask) {
              const int64_t key = k0 + kr0 + g + 8 * (e >> 1);
              const int64_t query = q0 + col;
              if (key >= seq_k || (p.causal && key > query + off)) pv = 0.0f;
            }
            s[nt][e] = pv;
          }
        }
      }

      // dV_j += P^T dO: k runs over the chunk's queries, 16 at a time.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, do_x + at<kLd>(c0 + kk * 16, 16 * np));
          mma_pair<T>(dv[2 * np], dv[2 * np + 1], a, b);
        }
      }

      // dP^T = V_j dO^T over the same chunk.
      float dp[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, v_a + at<kLd>(0, 16 * ks));
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, do_t + at<kLd>(c0 + np * 16, 16 * ks));
          mma_pair<T>(dp[2 * np], dp[2 * np + 1], a, b);
        }
      }

      // dS^T = P^T * (dP^T - D): D belongs to the query, the column.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dp[nt][e] = s[nt][e] * (dp[nt][e] - d_s[c0 + nt * 8 + 2 * t + (e & 1)]);

          // dK_j += dS^T Q; the same 16-bit dS^T into sdS for dQ.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, dp[2 * kk], dp[2 * kk + 1]);
        store_a_at<kLdS>(ds_st + c0 + kk * 16, a);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, q_x + at<kLd>(c0 + kk * 16, 16 * np));
          mma_pair<T>(dk[2 * np], dk[2 * np + 1], a, b);
        }
      }
    }

    // dQaccum_i += dS K_j: warp w takes query rows qr0 .. qr0 + 16 kDqRt - 1 and columns dq0 ..
    // dq0 + kDqWarpCols - 1, A = dS = sdS^T (all kBc keys, written by the eight warps), B = K_j;
    // kDqCols columns at a time. t09: each B fragment feeds the kDqRt m-tiles.
    __syncthreads();         // sdS complete
    if (q0 + qr0 < seq_q) {  // else every row of this warp lies past seq_q
#pragma unroll
      for (int dc = 0; dc < kDqWc / kDqC; ++dc) {
        const int n0 = dq0 + dc * kDqC;  // first column of the chunk
        float acc[kDqRt][kDqC / 8][4];
#pragma unroll
        for (int mt = 0; mt < kDqRt; ++mt)
#pragma unroll
          for (int nt = 0; nt < kDqC / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kBc / 16; ++ks) {
          uint32_t a[kDqRt][4];
#pragma unroll
          for (int mt = 0; mt < kDqRt; ++mt)
            ldmatrix_x4_trans(a[mt], ds_t + at<kLdS>(ks * 16, mt * 16));
#pragma unroll
          for (int np = 0; np < kDqC / 16; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, k_x + at<kLd>(ks * 16, dc * kDqC + 16 * np));
#pragma unroll
            for (int mt = 0; mt < kDqRt; ++mt)
              mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], a[mt], b);
          }
        }
        // Element (mt, nt, e): query row qr0 + 16 mt + g + 8*(e/2), column n0 + 8*nt + 2t + e%2.
#pragma unroll
        for (int mt = 0; mt < kDqRt; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t row = q0 + qr0 + 16 * mt + g + 8 * h;
            if (row >= seq_q) continue;
            float* dst = dQacc + row * D + n0 + 2 * t;
#pragma unroll
            for (int nt = 0; nt < kDqC / 8; ++nt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
              // sm_90 adds a float2 in one atomic (the two columns are adjacent and 8-byte
              // aligned: 2t is even): half the atomic instructions and L2 sector updates of two
              // scalar ones (Nsight Compute, H100: 1.61 G reduction sectors with scalar atomics).
              atomicAdd(reinterpret_cast<float2*>(dst + 8 * nt),
                        make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]));
#else
              atomicAdd(dst + 8 * nt, acc[mt][nt][2 * h]);
              atomicAdd(dst + 8 * nt + 1, acc[mt][nt][2 * h + 1]);
#endif
            }
          }
      }
    }

    // L, D of the next tile into the other buffer (nobody reads it during this iteration).
    if (has_next) {
      if (tid < kBr)
        sL[(buf ^ 1) * kBr + tid] = next_ld;
      else if (tid < 2 * kBr)
        sD[(buf ^ 1) * kBr + tid - kBr] = next_ld;
    }
    __syncthreads();  // everyone is done with `buf` before the next prefetch overwrites it
  }
  fa::mma::cp_async_wait<0>();

  // Rows of keys that no query sees (causal) leave here with dK = dV = 0, as they must.
  T* dK = static_cast<T*>(p.dk) + bh * seq_k * D;
  T* dV = static_cast<T*>(p.dv) + bh * seq_k * D;
  store_rows<T, D, D>(dK, dk, k0 + kr0, 0, seq_k, p.scale, lane);
  store_rows<T, D, D>(dV, dv, k0 + kr0, 0, seq_k, 1.0f, lane);
}

}  // namespace
