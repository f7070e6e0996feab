// ch05_mma_fwd_mtiles.cuh: what the tuning steps with kM m16 tiles per warp (t04 to t11, t13)
// share: their shared-memory layout and the two matmuls, S = Q K^T and O = alpha O + P V, in which
// every K or V fragment loaded from shared memory is used by all kM m16 tiles of the warp (the
// header of v3_fa2_warp_layout.cu says why). Each step's tile struct (ch05_tuning_tiles.cuh) comes
// here as Tl, with the members
//   kM (m16 tiles per warp), kBr, kBc, kSTiles (= kBc / 8), kQInRegs, kQRegSlices, kUnrollK
//   (how far the k16 loop of S = Q K^T is unrolled), kSwizzle (t07), kOneLaneAddr (t08),
//   kPipelineLoads (t09), kHoistCopies (t10, KVCopyPlan) and kThreads.
// Device code; the rest of what they use (Params, ex2_approx, q_lane_ptr, store_o_tile) is t03's,
// in ch05_mma_fwd.cuh.
#pragma once
#include <cstddef>
#include <cstdint>

#include "attention_tiles.cuh"
#include "mma.cuh"

namespace fa::fwd_mma {

// The Q tile (Tl::kBr rows), then K and V double-buffered (Tl::kBc rows each), padded rows of
// D + 8 elements (common/device/attention_tiles.cuh), 16-bit elements. Tl::kSwizzle (t07):
// swizzled rows of D elements instead (the same file), every tile at a 128-byte boundary.
template <class Tl, int D>
struct SmemFor {
  static constexpr bool kSwizzle = Tl::kSwizzle;
  static constexpr int kPitch = kSwizzle ? D : tiles::kPitch<D>;
  static constexpr int kQElems = Tl::kBr * kPitch;
  static constexpr int kKVElems = Tl::kBc * kPitch;  // one K (or V) buffer
  static constexpr size_t kBytes = size_t(kQElems + 4 * kKVElems) * 2;
  static_assert(!kSwizzle || (kQElems * 2) % 128 == 0 && (kKVElems * 2) % 128 == 0,
                "swizzled tiles start at 128-byte boundaries");

  // Row r of a tile, where a lane's ldmatrix address starts (unswizzled: tiles::LaneAddr makes
  // the lane's read addresses from it).
  template <class T>
  __device__ __forceinline__ static T* row(T* tile, int r) {
    return tile + r * kPitch;
  }
  // Element offset of 16-byte chunk ch (8 elements) of row r in a tile, where the copies of t10's
  // plan write.
  __device__ __forceinline__ static int chunk_at(int r, int ch) {
    if constexpr (kSwizzle)
      return tiles::swizzled_offset<D>(r, ch);
    else
      return r * kPitch + 8 * ch;
  }
  // A lane's ldmatrix addresses into a tile (every row a lane reads in these kernels is lane % 8
  // modulo 8: tiles of 16 rows, each lane at row lane % 8 of an 8-row matrix).
  using Lane = tiles::LaneAddr<kSwizzle>;
};

// t10: the copies of K/V tile j + 1, planned once per thread. tiles::load_tile_async works out
// every 16-byte chunk's row, column, 64-bit source, bounds test and destination from scratch:
// about 100 instructions per tile and warp at D 128, between the barrier and the first ldmatrix of
// each step. The plan is fixed: with kChunks = D / 8 chunks per row, thread tid copies chunk
// tid % kChunks of rows tid / kChunks + kRowsPerPass * i, i < kPasses. Pass i's source and
// destination are the thread's first ones plus compile-time constants (folded into the cp.async),
// tile j's source is kBc * D * j elements further, buffer b's destination b tiles further. The
// plan is two registers (a shared address and an offset into a tile; K and V are laid out alike),
// since D 64 and 128 have none to spare. Only a tile that ends past seq_k (the last one, when
// seq_k % kBc != 0) tests its rows, one comparison per pass. kPlanned is false where the chunks do
// not tile the block in whole rows (D 96: 12 chunks a row, 128 threads) or the swizzle would differ
// between passes (D 256 with 128 threads: 4 rows a pass, fewer than the swizzle's 8; t13's 256
// threads make 8); those keep load_tile_async.
template <class T, int D, class Tl>
struct KVCopyPlan {
  using Sm = SmemFor<Tl, D>;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = Tl::kThreads / kChunks;
  static constexpr bool kPlanned = Tl::kThreads % kChunks == 0 && Tl::kBc % kRowsPerPass == 0 &&
                                   (!Sm::kSwizzle || kRowsPerPass % tiles::kSwizzleRows == 0);
  static constexpr int kPasses = kPlanned ? Tl::kBc / kRowsPerPass : 0;
  static constexpr uint32_t kTileBytes = Sm::kKVElems * 2;  // one K (or V) buffer
  static constexpr uint32_t kVBytes = 2 * kTileBytes;       // V buffer 0 from K buffer 0
  static constexpr uint32_t kPassBytes = kRowsPerPass * Sm::kPitch * 2;  // pass i to i + 1

  uint32_t dst;  // this thread's first chunk in K buffer 0 (32-bit shared address)
  uint32_t src;  // ... and its element offset in a tile of K or V (below 2^31: Bc x D)

  __device__ __forceinline__ KVCopyPlan(T* sK, int tid) {
    const int row = tid / kChunks, chunk = tid % kChunks;
    dst = mma::smem_addr(sK) + uint32_t(Sm::chunk_at(row, chunk)) * 2;
    src = uint32_t(row * D + 8 * chunk);
  }

  // Tile j of K and V (rows j Bc ... of the head's [seq_k, D] matrices) into buffer buf. A tile
  // that ends past seq_k (rows_left = seq_k - j Bc < Bc) zero-fills the rows past the end:
  // cp.async with src-size 0, from the tile's first row (in range) rather than past the end.
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

// S = 0 for the warp's kM m16 tiles (the accumulators of S = Q K_j^T).
template <class Tl>
__device__ __forceinline__ void zero_s_m(float (&s)[Tl::kM][Tl::kSTiles][4]) {
#pragma unroll
  for (int m = 0; m < Tl::kM; ++m)
#pragma unroll
    for (int nt = 0; nt < Tl::kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = 0.0f;
}

// S = Q K_j^T for the warp's kM m16 tiles. Each K fragment (ldmatrix.x4: two n8 tiles, one k16
// slice) is loaded once and used by every m16 tile. Q comes from q_frag where Tl::kQInRegs, else
// from shared memory at q (m16 tile m is 16 rows further per m); k: this lane's ldmatrix address
// in the K buffer. Addresses are 32-bit shared-memory addresses, so each fragment is a base plus
// a compile-time offset (tiles::LaneAddr).
template <class T, int D, class Tl>
__device__ __forceinline__ void compute_s_m(float (&s)[Tl::kM][Tl::kSTiles][4],
                                            const uint32_t (&q_frag)[Tl::kM][Tl::kQRegSlices][4],
                                            const typename SmemFor<Tl, D>::Lane& q,
                                            const typename SmemFor<Tl, D>::Lane& k) {
  using Sm = SmemFor<Tl, D>;
  constexpr int kRowBytes = Sm::kPitch * 2;
  zero_s_m<Tl>(s);
#pragma unroll(Tl::kUnrollK)
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t qa[Tl::kM][4];
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      if constexpr (Tl::kQInRegs) {
#pragma unroll
        for (int r = 0; r < 4; ++r) qa[m][r] = q_frag[m][kk][r];
      } else {
        mma::ldmatrix_x4(qa[m], q.at(16 * kRowBytes * m, kk));
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

// compute_s_m with its fragment loads software-pipelined (t09, Tl::kPipelineLoads): the Q and K
// fragments of k16 slice kk + 1 are loaded into a second set of registers before the MMAs of slice
// kk are issued, so that those MMAs never wait for a load issued just before them. The loop must
// be unrolled in full (the two register sets are indexed by kk % 2 at compile time).
template <class T, int D, class Tl>
__device__ __forceinline__ void compute_s_m_pipelined(
    float (&s)[Tl::kM][Tl::kSTiles][4], const uint32_t (&q_frag)[Tl::kM][Tl::kQRegSlices][4],
    const typename SmemFor<Tl, D>::Lane& q, const typename SmemFor<Tl, D>::Lane& k) {
  using Sm = SmemFor<Tl, D>;
  constexpr int kRowBytes = Sm::kPitch * 2;
  constexpr int kSlices = D / 16;
  constexpr int kPairs = Tl::kSTiles / 2;
  static_assert(Tl::kUnrollK == kSlices, "the pipelined loop is unrolled in full");
  uint32_t qa[2][Tl::kM][4], kb[2][kPairs][4];  // slice kk lives in set kk % 2
  auto load_slice = [&](int kk, int set) {
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      if constexpr (Tl::kQInRegs) {
#pragma unroll
        for (int r = 0; r < 4; ++r) qa[set][m][r] = q_frag[m][kk][r];
      } else {
        mma::ldmatrix_x4(qa[set][m], q.at(16 * kRowBytes * m, kk));
      }
    }
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma::ldmatrix_x4(kb[set][np], k.at(16 * kRowBytes * np, kk));
  };
  zero_s_m<Tl>(s);
  load_slice(0, 0);
#pragma unroll
  for (int kk = 0; kk < kSlices; ++kk) {
    const int cur = kk % 2;
    if (kk + 1 < kSlices) load_slice(kk + 1, cur ^ 1);
#pragma unroll
    for (int np = 0; np < kPairs; ++np) {
      const uint32_t b_lo[2] = {kb[cur][np][0], kb[cur][np][1]};
      const uint32_t b_hi[2] = {kb[cur][np][2], kb[cur][np][3]};
#pragma unroll
      for (int m = 0; m < Tl::kM; ++m) {
        mma::mma_16816<T>(s[m][2 * np], qa[cur][m], b_lo);
        mma::mma_16816<T>(s[m][2 * np + 1], qa[cur][m], b_hi);
      }
    }
  }
}

// O *= alpha for the m16 tiles m where rescale[m] (t06 skips a tile when every alpha of it is
// exactly 1).
template <int D, class Tl>
__device__ __forceinline__ void rescale_o_m(float (&o_acc)[Tl::kM][D / 8][4],
                                            const float (&alpha)[Tl::kM][2],
                                            const bool (&rescale)[Tl::kM]) {
#pragma unroll
  for (int m = 0; m < Tl::kM; ++m) {
    if (!rescale[m]) continue;  // warp-uniform where it is used (t06's vote)
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
// The rescale of m16 tile m runs only where rescale[m] (t06 skips it when every alpha of the tile
// is exactly 1); v: this lane's ldmatrix .trans address in the V buffer.
template <class T, int D, class Tl>
__device__ __forceinline__ void rescale_o_add_pv_m(float (&o_acc)[Tl::kM][D / 8][4],
                                                   const float (&s)[Tl::kM][Tl::kSTiles][4],
                                                   const float (&alpha)[Tl::kM][2],
                                                   const bool (&rescale)[Tl::kM],
                                                   const typename SmemFor<Tl, D>::Lane& v) {
  using Sm = SmemFor<Tl, D>;
  constexpr int kRowBytes = Sm::kPitch * 2;
  rescale_o_m<D, Tl>(o_acc, alpha, rescale);
#pragma unroll
  for (int kk = 0; kk < Tl::kBc / 16; ++kk) {
    uint32_t p_frag[Tl::kM]
                   [4];  // two S tiles of one m16 tile are one A fragment (v2_mma.cu's header)
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

// rescale_o_add_pv_m with its V fragment loads software-pipelined (t09, Tl::kPipelineLoads): the
// Bc / 16 x D / 16 fragments of the tile are one sequence, and fragment i + 1 is loaded into a
// second set of registers before the MMAs of fragment i are issued (as in S above). The P
// fragments of every k16 slice are packed first.
template <class T, int D, class Tl>
__device__ __forceinline__ void rescale_o_add_pv_m_pipelined(
    float (&o_acc)[Tl::kM][D / 8][4], const float (&s)[Tl::kM][Tl::kSTiles][4],
    const float (&alpha)[Tl::kM][2], const bool (&rescale)[Tl::kM],
    const typename SmemFor<Tl, D>::Lane& v) {
  using Sm = SmemFor<Tl, D>;
  constexpr int kRowBytes = Sm::kPitch * 2;
  constexpr int kSlices = Tl::kBc / 16, kPairs = D / 16, kSteps = kSlices * kPairs;
  uint32_t vb[2][4];  // fragment i lives in set i % 2
  mma::ldmatrix_x4_trans(vb[0], v.at(0, 0));
  rescale_o_m<D, Tl>(o_acc, alpha, rescale);
  uint32_t p_frag[kSlices][Tl::kM][4];  // two S tiles of one m16 tile are one A fragment
#pragma unroll
  for (int kk = 0; kk < kSlices; ++kk)
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      p_frag[kk][m][0] = mma::pack2<T>(s[m][2 * kk][0], s[m][2 * kk][1]);
      p_frag[kk][m][1] = mma::pack2<T>(s[m][2 * kk][2], s[m][2 * kk][3]);
      p_frag[kk][m][2] = mma::pack2<T>(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
      p_frag[kk][m][3] = mma::pack2<T>(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
    }
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int kk = i / kPairs, dp = i % kPairs, cur = i % 2;
    if (i + 1 < kSteps)
      mma::ldmatrix_x4_trans(vb[cur ^ 1],
                             v.at(16 * kRowBytes * ((i + 1) / kPairs), (i + 1) % kPairs));
    const uint32_t b_lo[2] = {vb[cur][0], vb[cur][1]};
    const uint32_t b_hi[2] = {vb[cur][2], vb[cur][3]};
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      mma::mma_16816<T>(o_acc[m][2 * dp], p_frag[kk][m], b_lo);
      mma::mma_16816<T>(o_acc[m][2 * dp + 1], p_frag[kk][m], b_hi);
    }
  }
}

// The same, rescaling every m16 tile (t04, t05).
template <class T, int D, class Tl>
__device__ __forceinline__ void rescale_o_add_pv_m(float (&o_acc)[Tl::kM][D / 8][4],
                                                   const float (&s)[Tl::kM][Tl::kSTiles][4],
                                                   const float (&alpha)[Tl::kM][2],
                                                   const typename SmemFor<Tl, D>::Lane& v) {
  bool all[Tl::kM];
#pragma unroll
  for (int m = 0; m < Tl::kM; ++m) all[m] = true;
  rescale_o_add_pv_m<T, D, Tl>(o_acc, s, alpha, all, v);
}

}  // namespace fa::fwd_mma
