// ch06_warp_tiles_kernel.cuh: the dK/dV kernel of the tuning steps 06/t11, 06/t12 and 06/t14,
// warp_tiles_kernel<T, D, Steps, Tile>: FlashAttention-2's warp tiles (t11_warp_tiles.cu tells
// why), D 64 and 128, on top of 06/v4_bc128_tuned's swizzled tiles.
//   t11           S, dP in 32 x 32 warp tiles; P, dS through shared memory; dK, dV in 32 keys x
//                 D / 2 (the base of this kernel)
//   t12           one barrier per tile fewer                                (kOneBarrierFewer)
//   t14           t12 at D 256 with a block of 64 keys                      (Tile: D256Tile)
//   t18           t14 with one Q and one dO buffer, for 163 KiB GPUs        (Tile::kQdoBuffers 1)
//   t19           t18 with rows of d in global memory (d <= D, d % 8 == 0)  (kRowsOfD)
//   t21           t19 with rows of any length d (59, 139, ...)              (kAnyRowLength)
// With 128-query tiles at D 64 on top of t12, this is 06/v5_warp_tiles's kernel (that step is the
// main path's: v5_warp_tiles.cu). The tile (128 keys, 64 queries, 8 warps; WarpTilesTile) and the
// host side are ch06_kv128.cuh's; the address helpers and the copy plan ch06_kv128_kernel.cuh's.
// Device code, in an anonymous namespace.
#pragma once
#include <cstdint>
#include <type_traits>

#include "attention_tiles.cuh"  // fa::tiles::copy_chunk_by_elements (t21)
#include "ch06_kv128.cuh"
#include "ch06_kv128_kernel.cuh"  // kv128_kernel (for D 32 and 96), lane_rows, TileCopy, ...

namespace {

// The switch of the step after t11, off: t12's file turns it on.
struct WarpTilesSteps {
  static constexpr bool kOneBarrierFewer = false;  // t12: two barriers per Q tile, not three
  static constexpr bool kRowsOfD = false;          // t19: rows of p.d elements in global memory
  static constexpr bool kAnyRowLength = false;     // t21: p.d no multiple of 8 too (with kRowsOfD)
};

// The kernel's parameters: t19's carry the real head dim (ch06_kv128.cuh).
template <class Steps>
using WarpTilesParams = std::conditional_t<Steps::kRowsOfD, ParamsRowsOfD, Params>;

// The length of a row in global memory: D, or t19's d.
template <int D, class Steps>
__device__ __forceinline__ int row_length(const WarpTilesParams<Steps>& p) {
  if constexpr (Steps::kRowsOfD)
    return p.d;
  else
    return D;
}

constexpr int kLdP = kBc + kPad;  // a row of the P or dS tile: kBc keys + padding (16-bit)

// The block's tile: kKeys keys (K_j, V_j) and Q tiles of kBr queries, 8 warps. t11 and t12 have
// ch06_kv128.cuh's 128 keys, rows of Q, K, V and dO in v4_bc128_tuned's places (D + kPad elements,
// used D at a time), and dK, dV in warp tiles of 32 keys x D / 2 (kKeyWarps = 4 warps along the
// keys). t14's tile is D256Tile (t14_d256_tiles.cu).
template <int D>
struct WarpTilesTile {
  static constexpr int kKeys = kBc;      // keys per block
  static constexpr int kLd = D + kPad;   // elements between two rows of the Q, K, V, dO tiles
  static constexpr int kLdPT = kLdP;     // ... of the P and dS tiles
  static constexpr int kKeyShift = 2;    // dK, dV: 1 << kKeyShift warps of 32 keys each
  static constexpr int kQdoBuffers = 2;  // Q_i and dO_i double-buffered (t18: one buffer each)
};

// Shared memory: K, V, Q x2, dO x2 (swizzled rows, in rows of Tile::kLd; x1 each with t18's
// tile), L x2, D x2, then the P and dS tiles (kBr x kLdPT each). 171 KiB at D 128, 107 KiB at D 64
// with WarpTilesTile.
template <int D, class Tile = WarpTilesTile<D>>
constexpr int warp_tiles_smem_bytes() {
  constexpr int kRows = kBr;
  return (2 * Tile::kKeys + 2 * Tile::kQdoBuffers * kRows) * Tile::kLd * 2 +
         4 * kRows * int(sizeof(float)) + 2 * kRows * Tile::kLdPT * 2;
}
static_assert(warp_tiles_smem_bytes<128>() ==
                  smem_bytes_tiles<128>() + 4 * kBr * int(sizeof(float)) + 2 * kBr * kLdP * 2,
              "v4_bc128_tuned's tiles plus P and dS");

// An ldmatrix address into a swizzled tile: the unswizzled one with bits 4-6 flipped by the lane's
// row % 8 (every fragment starts at a multiple of 16 rows; fa::bwd_tc::swizzle_xor).
__device__ __forceinline__ uint32_t swz_addr(uint32_t plain, uint32_t swz) {
  return plain ^ swz;
}

// acc += A B^T over D for one warp: A is 32 rows of a swizzled tile (two m16 tiles, ldmatrix
// from a, this lane's address of its first row), B^T the kSn * 8 rows of another (b, lane_trans
// form): S = Q K^T and dP = dO V^T. Per k16 step 2 A and kSn / 2 B fragments feed 2 * kSn MMAs.
template <class T, int D, int kSn>
__device__ __forceinline__ void rows_times_keys(float (&acc)[2][kSn][4], uint32_t a_base,
                                                uint32_t b_base, uint32_t swz) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[2][4], b[kSn / 2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
      ldmatrix_x4(a[mt], swz_addr(a_base + at<D>(16 * mt, 16 * ks), swz));
#pragma unroll
    for (int np = 0; np < kSn / 2; ++np)
      ldmatrix_x4(b[np], swz_addr(b_base + at<D>(16 * np, 16 * ks), swz));
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int np = 0; np < kSn / 2; ++np)
        mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], a[mt], b[np]);
  }
}

// acc += X^T Y over the kRows queries of a tile, for one warp's 32 keys and kCols columns: X is
// the P or dS tile (a: this lane's ldmatrix .trans address of its first key column), Y the dO or
// Q tile (b, swizzled, lane_rows form, at the warp's first column): dV += P^T dO, dK += dS^T Q.
// kXT = false: acc += X Y over kRows keys instead, for one warp's 32 queries (a: this lane's plain
// ldmatrix address of its first query row in dS) and Y the K tile: dQ += dS K. LdP: the pitch of
// the P and dS tiles (t14 has 64-key tiles).
template <class T, int D, int kRows, int kCols, bool kXT = true, int LdP = kLdP>
__device__ __forceinline__ void keys_times_cols(float (&acc)[2][kCols / 8][4], uint32_t a_base,
                                                uint32_t b_base, uint32_t swz) {
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    uint32_t a[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if constexpr (kXT)
        ldmatrix_x4_trans(a[mt], a_base + at<LdP>(16 * kk, 16 * mt));
      else
        ldmatrix_x4(a[mt], a_base + at<LdP>(16 * mt, 16 * kk));
    }
#pragma unroll
    for (int np = 0; np < kCols / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, swz_addr(b_base + at<D>(16 * kk, 16 * np), swz));
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) mma_pair<T>(acc[mt][2 * np], acc[mt][2 * np + 1], a[mt], b);
    }
  }
}

// t19: rows [row0, row0 + ROWS) of a [seq, d] row-major matrix into a swizzled tile of rows of
// D >= d elements, 16 bytes per cp.async; the chunks at or past d, and the rows at or past seq,
// zero-filled (nothing is read for them). d is a multiple of 8: a chunk lies wholly inside the
// row or wholly past it, and every row starts at a 16-byte boundary. t21 (kAnyLength): where d is
// no multiple of 8 the rows are not 16-byte aligned, and each chunk is copied element by element
// instead (synchronously), zeros past d.
template <class T, int D, int ROWS, bool kAnyLength = false>
__device__ __forceinline__ void load_rows_of_d(T* s, const T* g, int64_t row0, int64_t seq, int d,
                                               int tid) {
  constexpr int kChunksPerRow = D / 8;
#pragma unroll
  for (int c = tid; c < ROWS * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, cc = c % kChunksPerRow;
    const bool valid = row0 + r < seq && cc * 8 < d;
    const T* src = valid ? g + (row0 + r) * int64_t(d) + cc * 8 : g;
    if constexpr (kAnyLength) {
      if (d % 8 != 0) {
        fa::tiles::copy_chunk_by_elements(s + fa::bwd_tc::swizzled_offset<D>(r, cc),
                                          valid ? src : nullptr, d - cc * 8);
        continue;
      }
    }
    fa::mma::cp_async_16(s + fa::bwd_tc::swizzled_offset<D>(r, cc), src, valid);
  }
}

// t19: store_rows for rows of d elements: the columns at or past d (zero: the products of zero
// columns) are not stored. Two adjacent columns 2t, 2t + 1 of an 8-column group are both below
// d or both past it. t21 (kAnyLength): where d is no multiple of 8 a row may start at an odd
// element, so each of the pair's two elements is stored on its own, those below d.
template <class T, int DC, bool kAnyLength = false>
__device__ __forceinline__ void store_rows_of_d(T* out, const float (&acc)[DC / 8][4], int64_t r0,
                                                int col0, int64_t seq, float mul, int d, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = r0 + g + 8 * h;
    if (row >= seq) continue;
    T* dst = out + row * int64_t(d) + col0 + 2 * t;
#pragma unroll
    for (int nt = 0; nt < DC / 8; ++nt) {
      if constexpr (kAnyLength) {
        if (d % 8 != 0) {
          const int col = col0 + 8 * nt + 2 * t;
          const uint32_t pair = fa::mma::pack2<T>(acc[nt][2 * h] * mul, acc[nt][2 * h + 1] * mul);
          unsigned short* const e = reinterpret_cast<unsigned short*>(dst + 8 * nt);
          if (col < d) e[0] = static_cast<unsigned short>(pair & 0xffffu);
          if (col + 1 < d) e[1] = static_cast<unsigned short>(pair >> 16);
          continue;
        }
      }
      if (col0 + 8 * nt < d)
        *reinterpret_cast<uint32_t*>(dst + 8 * nt) =
            fa::mma::pack2<T>(acc[nt][2 * h] * mul, acc[nt][2 * h + 1] * mul);
    }
  }
}

// A tile's copy: rows of D in global memory as t12 (load_tile_async), or of d with t19.
template <class T, int D, int ROWS, class Steps>
__device__ __forceinline__ void load_tile(T* s, const T* g, int64_t row0, int64_t seq, int d,
                                          int tid) {
  if constexpr (Steps::kRowsOfD)
    load_rows_of_d<T, D, ROWS, Steps::kAnyRowLength>(s, g, row0, seq, d, tid);
  else
    load_tile_async<T, D, ROWS, kThreads, true>(s, g, row0, seq, tid);
}

// dQaccum[p], [p + 1] += x, y: sm_90 adds a float2 in one atomic (v3_atomic_dq's).
__device__ __forceinline__ void add_dq(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(x, y));
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}

template <class T, int D, class Steps, class Tile = WarpTilesTile<D>>
__global__ void __launch_bounds__(kThreads, 1) warp_tiles_kernel(WarpTilesParams<Steps> p) {
  static_assert(D % 64 == 0, "swizzled 128-byte rows: D a multiple of 64");
  constexpr int kKeysT = Tile::kKeys;   // keys per block (ch06_kv128.cuh's kBc for t11, t12)
  constexpr int kPitchP = Tile::kLdPT;  // a row of the P or dS tile
  constexpr int kKeyWarps = 1 << Tile::kKeyShift;
  static_assert(kWarps == 8 && kBr == 64 && kKeysT == 32 * kKeyWarps,
                "warps: 2 x 4 (S, dQ), kKeyWarps x 8 / kKeyWarps (dK, dV)");
  constexpr int kBrT = kBr;  // queries per Q tile
  // t18: one Q and one dO buffer. The next tile's copies then wait until every warp is done with
  // this tile's (after dK += dS^T Q) and run under dQ = dS K and its atomics only.
  constexpr bool kDoubleBuffered = Tile::kQdoBuffers == 2;
  static_assert(Tile::kQdoBuffers == 2 || (Tile::kQdoBuffers == 1 && Steps::kOneBarrierFewer),
                "one buffer needs t12's barrier at the top of the loop (every copy landed)");
  constexpr int kLd = Tile::kLd;                   // rows of kLd elements, used D at a time
  constexpr int kTile = kBrT * kLd;                // a Q or dO buffer
  constexpr int kKvTile = kKeysT * kLd;            // K or V
  constexpr int kHalf = D / (kWarps / kKeyWarps);  // columns of dK, dV per warp: D / 2 (t14: D / 4)
  // Warps of S, dP and dQ: 32 queries each, kWm along the queries (2; 4 with the 128-query tiles
  // of 06/v5_warp_tiles at D 64) by kWn along the keys of S (or the columns of dQ).
  constexpr int kWm = kBrT / 32, kWn = kWarps / kWm;
  constexpr int kKw = kKeysT / kWn;  // keys of S, dP per warp: 32 (or 64)
  constexpr int kSn = kKw / 8;       // their n8 tiles
  constexpr int kQuarter = D / kWn;  // columns of dQ per warp: D / 4 (or D / 2)
  // Swizzled tiles start at 128-byte boundaries. The array has a name of its own: the same
  // `extern __shared__` name declared in one translation unit with two alignments (this kernel's
  // 128 and kv128_kernel's 16, the kernel at D 32 and 96) is one array with the first alignment
  // (nvcc warning 1886), and the PTX would no longer ask for the 128 bytes this kernel relies on.
  extern __shared__ __align__(128) unsigned char smem_warp_tiles[];
  T* sK = reinterpret_cast<T*>(smem_warp_tiles);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                                   // two buffers (t18: one)
  T* sdO = sQ + Tile::kQdoBuffers * kTile;                                // two buffers (t18: one)
  float* sL = reinterpret_cast<float*>(sdO + Tile::kQdoBuffers * kTile);  // two of kBrT: L log2 e
  float* sD = sL + 2 * kBrT;                                              // two buffers of kBrT: D
  T* sP = reinterpret_cast<T*>(sD + 2 * kBrT);  // P: kBrT queries x kKeysT keys
  T* sdS = sP + kBrT * kPitchP;                 // dS: the same layout

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;  // bh * n_tiles + key tile
  const int64_t bh = tile_bh / p.n_tiles;
  const int64_t k0 = (tile_bh % p.n_tiles) * kKeysT;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off

  // t19: rows of d elements in global memory (D in shared memory and registers).
  const int d = row_length<D, Steps>(p);
  const int64_t ld = d;
  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * ld;
  const T* dO = static_cast<const T*>(p.dout) + bh * seq_q * ld;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * ld;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * ld;
  float* dQacc = p.dq_accum + bh * seq_q * ld;
  const float* lse = p.lse + bh * seq_q;
  const float* delta = p.delta + bh * seq_q;

  const int64_t n_qt = ceil_div(seq_q, kBrT);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBrT;  // may be >= n_qt: no work

  // Prologue, as v4_bc128_tuned: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i.
  load_tile<T, D, kKeysT, Steps>(sK, K, k0, seq_k, d, tid);
  load_tile<T, D, kKeysT, Steps>(sV, V, k0, seq_k, d, tid);
  if (qt_begin < n_qt) {
    const int64_t q0 = qt_begin * kBrT;
    load_tile<T, D, kBrT, Steps>(sQ, Q, q0, seq_q, d, tid);
    load_tile<T, D, kBrT, Steps>(sdO, dO, q0, seq_q, d, tid);
    const int64_t row = q0 + (tid & (kBrT - 1));
    if (tid < kBrT)
      sL[tid] = load_l2(lse, row, seq_q);
    else if (tid < 2 * kBrT)
      sD[tid - kBrT] = row < seq_q ? delta[row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  // The three warp layouts (this step).
  constexpr int kWnShift = kWn == 4 ? 2 : 1;  // warp / kWn as a shift (kWn is 4 or 2)
  static_assert(kWn == 1 << kWnShift, "kWn: 4 or 2");
  const int wm = warp >> kWnShift, wn = warp & (kWn - 1);  // S, dP: queries 32 wm, keys kKw wn
  // dK, dV: keys 32 wk .., columns kHalf wd ..
  const int wk = warp & (kKeyWarps - 1), wd = warp >> Tile::kKeyShift;
  const int wq = wm, wc = wn;  // dQ: queries 32 wq .., columns kQuarter wc ..

  float dv[2][kHalf / 8][4], dk[2][kHalf / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kHalf / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dv[mt][nt][e] = dk[mt][nt][e] = 0.0f;

  // Every address of the loop as a base plus a compile-time offset (t05's idea); the swizzled
  // tiles' reads then flip bits 4-6 (swz_addr). Q, dO: buffer 0 (a tile adds its buffer's offset).
  // ldmatrix forms (ch06_kv128.cuh): A = tile, rows (lane_rows); B = tile^T (lane_trans);
  // A = tile^T, .trans (lane_trans); B = tile, .trans (lane_rows).
  const uint32_t swz = fa::bwd_tc::swizzle_xor(lane);
  const uint32_t rows_d = lane_rows<D>(lane), trans_d = lane_trans<D>(lane);
  const uint32_t q_a0 = smem_addr(sQ) + rows_d + at<D>(32 * wm, 0);       // S: A = Q
  const uint32_t do_a0 = smem_addr(sdO) + rows_d + at<D>(32 * wm, 0);     // dP: A = dO
  const uint32_t k_b = smem_addr(sK) + trans_d + at<D>(kKw * wn, 0);      // S: B = K^T
  const uint32_t v_b = smem_addr(sV) + trans_d + at<D>(kKw * wn, 0);      // dP: B = V^T
  const uint32_t do_x0 = smem_addr(sdO) + rows_d + at<D>(0, kHalf * wd);  // dV: B = dO
  const uint32_t q_x0 = smem_addr(sQ) + rows_d + at<D>(0, kHalf * wd);    // dK: B = Q
  const uint32_t k_x = smem_addr(sK) + rows_d + at<D>(0, kQuarter * wc);  // dQ: B = K
  const uint32_t p_at = smem_addr(sP) + lane_trans<kPitchP>(lane) + at<kPitchP>(0, 32 * wk);  // P^T
  const uint32_t ds_at =
      smem_addr(sdS) + lane_trans<kPitchP>(lane) + at<kPitchP>(0, 32 * wk);  // dS^T
  const uint32_t ds_a = smem_addr(sdS) + lane_rows<kPitchP>(lane) + at<kPitchP>(32 * wq, 0);  // dS
  // Where this thread stores its P and dS elements: row 32 wm + g, columns kKw wn + 2t.
  T* const p_st = sP + (32 * wm + g) * kPitchP + kKw * wn + 2 * t;
  T* const ds_st = sdS + (32 * wm + g) * kPitchP + kKw * wn + 2 * t;
  const TileCopy<T, D, true, kBrT> copy(tid);
  const uint32_t sq_addr = smem_addr(sQ), sdo_addr = smem_addr(sdO);
  constexpr uint32_t kTileBytes = kTile * 2;

  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int buf = int(qt - qt_begin) & 1;         // L and D: two buffers always
    const int qdo_buf = kDoubleBuffered ? buf : 0;  // t18: Q and dO in buffer 0
    const int64_t q0 = qt * kBrT;
    const bool has_next = qt + 1 < n_qt;

    // t12: one barrier where t11 has two (this one and the last of the previous tile). Tile i
    // is the only copy in flight here; once every warp has it, every warp is also done with tile
    // i - 1: its Q and dO buffer (which the prefetch below overwrites), P, dS, L and D.
    if constexpr (Steps::kOneBarrierFewer) {
      fa::mma::cp_async_wait<0>();
      __syncthreads();
    }

    // Prefetch Q_{i+1}, dO_{i+1}, L and D as v4_bc128_tuned (t18: Q and dO after dK below).
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = q0 + kBrT;
      if constexpr (kDoubleBuffered) {
        if (!Steps::kRowsOfD && q1 + kBrT <= seq_q) {  // a whole tile of rows of D
          const uint32_t next = uint32_t(buf ^ 1) * kTileBytes;
          copy.full(sq_addr + next, Q + q1 * D);
          copy.full(sdo_addr + next, dO + q1 * D);
        } else {
          load_tile<T, D, kBrT, Steps>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, d, tid);
          load_tile<T, D, kBrT, Steps>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, d, tid);
        }
      }
      const int64_t row = q1 + (tid & (kBrT - 1));
      if (tid < kBrT)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBrT)
        next_ld = row < seq_q ? delta[row] : 0.0f;
    }
    fa::mma::cp_async_commit();
    if constexpr (!Steps::
                      kOneBarrierFewer) {  // t11: wait for tile i, the prefetch of i + 1 in flight
      fa::mma::cp_async_wait<1>();
      __syncthreads();
    }

    const uint32_t cur = uint32_t(qdo_buf) * kTileBytes;
    const uint32_t q_a = q_a0 + cur, do_a = do_a0 + cur, do_x = do_x0 + cur, q_x = q_x0 + cur;
    const float* l_s = sL + buf * kBrT;
    const float* d_s = sD + buf * kBrT;
    const bool need_mask = (k0 + kKeysT > seq_k) || (p.causal && k0 + kKeysT - 1 > q0 + off);

    // S = Q K^T and dP = dO V^T, 32 x kKw per warp: element (mt, nt, e) is query row
    // 32 wm + 16 mt + g + 8 (e / 2), key column kKw wn + 8 nt + 2t + e % 2 of the tile.
    float s[2][kSn][4], dp[2][kSn][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = dp[mt][nt][e] = 0.0f;
    rows_times_keys<T, D, kSn>(s, q_a, k_b, swz);    // S = Q K^T
    rows_times_keys<T, D, kSn>(dp, do_a, v_b, swz);  // dP = dO V^T

    // P = exp(scale S - L), masked where needed; dS = P (dP - D). L and D belong to the query,
    // the row. Both into shared memory, 16-bit, for the products that follow.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 32 * wm + 16 * mt + g + 8 * h;
        const float l2 = l_s[row], dd = d_s[row];
#pragma unroll
        for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int e = 2 * h + c;
            float pv = ex2_ftz(fmaf(s[mt][nt][e], p.scale_log2, -l2));
            if (need_mask) {
              const int64_t key = k0 + kKw * wn + 8 * nt + 2 * t + c;
              if (key >= seq_k || (p.causal && key > q0 + row + off)) pv = 0.0f;
            }
            s[mt][nt][e] = pv;
            dp[mt][nt][e] = pv * (dp[mt][nt][e] - dd);
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int o = (16 * mt + 8 * h) * kPitchP + 8 * nt;
          *reinterpret_cast<uint32_t*>(p_st + o) =
              fa::mma::pack2<T>(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]);
          *reinterpret_cast<uint32_t*>(ds_st + o) =
              fa::mma::pack2<T>(dp[mt][nt][2 * h], dp[mt][nt][2 * h + 1]);
        }
      }
    }
    __syncthreads();  // P and dS complete

    // dV += P^T dO and dK += dS^T Q: 32 keys (two m16 tiles) x kHalf columns per warp; k runs
    // over the tile's queries, 16 at a time.
    keys_times_cols<T, D, kBrT, kHalf, true, kPitchP>(dv, p_at, do_x, swz);  // dV += P^T dO
    keys_times_cols<T, D, kBrT, kHalf, true, kPitchP>(dk, ds_at, q_x, swz);  // dK += dS^T Q

    // t18: this tile's last reads of Q and dO were the two products above; once every warp is
    // past them, the next tile's copies go into the one buffer, under dQ and its atomics.
    if (!kDoubleBuffered && has_next) {  // block-uniform: the barrier is safe
      __syncthreads();
      const int64_t q1 = q0 + kBrT;
      if (!Steps::kRowsOfD && q1 + kBrT <= seq_q) {  // a whole tile of rows of D
        copy.full(sq_addr, Q + q1 * D);
        copy.full(sdo_addr, dO + q1 * D);
      } else {
        load_tile<T, D, kBrT, Steps>(sQ, Q, q1, seq_q, d, tid);
        load_tile<T, D, kBrT, Steps>(sdO, dO, q1, seq_q, d, tid);
      }
      fa::mma::cp_async_commit();
    }

    // dQaccum_i += dS K_j: 32 queries x kQuarter columns per warp, k over the kKeysT keys.
    if (q0 + 32 * wq < seq_q) {  // else every row of this warp lies past seq_q
      float acc[2][kQuarter / 8][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < kQuarter / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      keys_times_cols<T, D, kKeysT, kQuarter, false, kPitchP>(acc, ds_a, k_x,
                                                              swz);  // dQ_i = dS K_j
      // Element (mt, nt, e): query row 32 wq + 16 mt + g + 8 (e / 2), column kQuarter wc + 8 nt
      // + 2t + e % 2; the two columns of a thread are adjacent, one float2 atomic (add_dq).
      const int64_t row0 = q0 + 32 * wq + g;
      float* const dst0 = dQacc + row0 * ld + kQuarter * wc + 2 * t;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (row0 + 16 * mt + 8 * h >= seq_q) continue;
#pragma unroll
          for (int nt = 0; nt < kQuarter / 8; ++nt) {
            if constexpr (Steps::kAnyRowLength) {
              if (d % 8 != 0) {  // t21: rows not 8-byte aligned: one float at a time, below d
                float* const dst = dst0 + (16 * mt + 8 * h) * d + 8 * nt;
                const int col = kQuarter * wc + 8 * nt + 2 * t;
                if (col < d) atomicAdd(dst, acc[mt][nt][2 * h]);
                if (col + 1 < d) atomicAdd(dst + 1, acc[mt][nt][2 * h + 1]);
                continue;
              }
            }
            if (!Steps::kRowsOfD || kQuarter * wc + 8 * nt < d)  // t19: columns below d
              add_dq(dst0 + (16 * mt + 8 * h) * d + 8 * nt, acc[mt][nt][2 * h],
                     acc[mt][nt][2 * h + 1]);
          }
        }
    }

    if (has_next) {  // L, D of the next tile into the other buffer
      if (tid < kBrT)
        sL[(buf ^ 1) * kBrT + tid] = next_ld;
      else if (tid < 2 * kBrT)
        sD[(buf ^ 1) * kBrT + tid - kBrT] = next_ld;
    }
    if constexpr (!Steps::kOneBarrierFewer)
      __syncthreads();  // t11: done with `buf`, P and dS before the next tile overwrites them
  }
  fa::mma::cp_async_wait<0>();

  // Keys that no query sees (causal) leave here with dK = dV = 0, as they must.
  T* dK = static_cast<T*>(p.dk) + bh * seq_k * ld;
  T* dV = static_cast<T*>(p.dv) + bh * seq_k * ld;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    const int64_t r0 = k0 + 32 * wk + 16 * mt;
    if constexpr (Steps::kRowsOfD) {  // t19: rows of d, the columns past it not stored
      constexpr bool kAny = Steps::kAnyRowLength;
      store_rows_of_d<T, kHalf, kAny>(dK, dk[mt], r0, kHalf * wd, seq_k, p.scale, d, lane);
      store_rows_of_d<T, kHalf, kAny>(dV, dv[mt], r0, kHalf * wd, seq_k, 1.0f, d, lane);
    } else {
      store_rows<T, D, kHalf>(dK, dk[mt], r0, kHalf * wd, seq_k, p.scale, lane);
      store_rows<T, D, kHalf>(dV, dv[mt], r0, kHalf * wd, seq_k, 1.0f, lane);
    }
  }
}

// The host side of a step with this kernel (ch06_kv128.cuh's launcher asks for both): D 32 and
// 96, whose rows are not whole 128-byte groups, run kv128_kernel with every switch on
// (06/v4_bc128_tuned's kernel there) and its layout.
template <class Steps>
struct WarpTilesStep {
  template <class T, int D>
  static auto kernel() {
    if constexpr (D == 64 || D == 128)
      return warp_tiles_kernel<T, D, Steps>;
    else
      return kv128_kernel<T, D, KvAllSteps>;
  }
  template <int D>
  static constexpr int smem_bytes() {
    return D == 64 || D == 128 ? warp_tiles_smem_bytes<D>() : dkdv_smem_bytes<D>();
  }
  template <int D>
  static constexpr int keys() {
    return kBc;
  }
};

}  // namespace
