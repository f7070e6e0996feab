// v4_window_any_head_dim.cu: v3 (v3_varlen_any_head_dim.cu, chapter 05's forward at every head
// dim up to 256 over a packed batch) with a sliding window: v2's idea (v2_window.cu) on v3, for the
// head dims v2 lacks (all but 64 and 128, and on any GPU those that are no multiple of 8, as 59 and
// 111, which TMA cannot copy either: 09/hopper_v2_window takes the multiples of 8).
//
// What changed vs v3, and why (the lines of v1 -> v2, on v3)
//   Query i sees keys j with d(i) - left <= j <= d(i) + right, d(i) = i + seq_k - seq_q the
//   bottom-right diagonal (shapes.h; -1 leaves a side unlimited; causal is right = 0). The keys of
//   consecutive rows form one interval, and so do the tiles (ch09_band.h):
//     * the key loop runs over key_tiles(band, q0, q0 + Br, Bc) and nothing else: tiles before or
//       after it are never loaded (the first tile goes into buffer first_tile % 2, as every tile
//       j into buffer j % 2);
//     * a warp skips a tile outside key_tiles of its own rows;
//     * a tile is masked only where some pair of it is hidden (the window's left or right edge, or
//       the end of seq_k, crosses it); the tiles inside every row's window are one interval whose
//       two ends the warp works out once, and a masked element is tested in 32 bits against the
//       window's edges of the thread's first row (v2's header says why).
//   A row that sees no key at all is masked in every tile it meets, or meets none: l = 0, so O = 0
//   and L = -inf. The rest (offset table, rows of d, copies, softmax, epilogue) is v3's.
//
// 05/t17's pieces (its tiles, layout, lane addresses, row loader, the two products on m16 tiles,
// the epilogue) are called from common/device/mma_fwd_t17.cuh, t17's code, compiled to the machine
// code a copy had; this file holds the parameters, the K/V copies, the kernel and the launch.
//
// Speed (H200, 2026-12-05, the chapter README): D 59 60.7-92.1 TFLOP/s, D 256 156.2-202.7; at
// D 128 0.79-0.81x v2_window, which keeps 64 and 128.
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
#include "attention_tiles.cuh"
#include "ch09_band.h"
#include "mma_fwd_t17.cuh"
#include "registry.h"

namespace fa {
namespace {

using namespace fa::ch05::t17;  // 05/t17's tiles, loader, products, epilogue (mma_fwd_t17.cuh)

constexpr const char* kName = "09/v4_window_any_head_dim";  // the registered name

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  const int32_t* cu_seqlens_q;  // batch + 1 offsets: sequence b is rows cu[b] .. cu[b + 1] - 1
  const int32_t* cu_seqlens_k;
  int64_t total_q, total_k;  // rows of one head's slab of Q (O) and of K (V)
  int num_q_tiles;           // Q tiles per (sequence, head): ceil(max_seq_q / Br)
  bool causal;
  int64_t window_left, window_right;  // the window of shapes.h, -1: unlimited
  float scale_log2;                   // softmax_scale * log2(e)
  int d;          // t14: the real head dim, the length of a row in global memory (<= D)
  int64_t heads;  // t17: query heads
  int64_t group;  // t17: query heads per K/V head (heads / heads_kv)
};

// K/V tile j into buffer buf.
template <class T, int D>
__device__ __forceinline__ void load_kv_tile(T* sK, T* sV, const T* K, const T* V, int j, int buf,
                                             int64_t seq_k, int d, int tid) {
  using Sm = SmemLayout<D>;
  constexpr int kBc = Tiles<D>::kBc;
  load_tile_async<D, kBc>(sK + buf * Sm::kKVElems, K, int64_t(j) * kBc, seq_k, d, tid);
  load_tile_async<D, kBc>(sV + buf * Sm::kKVElems, V, int64_t(j) * kBc, seq_k, d, tid);
}

template <class T, int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads, 2) flash_fwd_varlen_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Sm = SmemLayout<D>;
  constexpr int kM = Tiles<D>::kM;            // m16 tiles per warp
  constexpr int kBr = Tiles<D>::kBr;          // query rows per block
  constexpr int kBc = Tiles<D>::kBc;          // keys per K/V tile
  constexpr int kSTiles = Tiles<D>::kSTiles;  // n8 tiles of S per m16 tile
  constexpr int kOTiles = D / 8;              // n8 tiles of O
  constexpr float kNegInf = -INFINITY;

  // Swizzled tiles must start at 128-byte boundaries; so must the block's shared memory. Two arrays,
  // one per alignment: one name declared with both (D 32/96 padded and D 64/128/256 swizzled in
  // one translation unit) is one array with the first alignment (nvcc warning 1886), and the PTX
  // of the swizzled kernels would not ask for the 128-byte base they rely on.
  extern __shared__ __align__(16) unsigned char smem_padded[];
  extern __shared__ __align__(128) unsigned char smem_swizzled[];
  T* sQ = reinterpret_cast<T*>(Sm::kSwizzle ? smem_swizzled : smem_padded);
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
  const int64_t bh = blockIdx.x / p.num_q_tiles;  // b * heads + head
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t b = bh / p.heads, head = bh % p.heads;
  const int64_t q0 = int64_t(q_tile) * kBr;

  // ---- The offset table: sequence b's lengths, and where its rows start in the packed tensors.
  // A tile at or past the end of the sequence is padding: no work, nothing to write.
  const int64_t q_start = p.cu_seqlens_q[b], k_start = p.cu_seqlens_k[b];
  const int64_t seq_q = p.cu_seqlens_q[b + 1] - q_start;
  const int64_t seq_k = p.cu_seqlens_k[b + 1] - k_start;
  if (q0 >= seq_q) return;  // the whole block: before any barrier

  const int d = p.d;  // rows of d elements in global memory
  const T* Q = static_cast<const T*>(p.q) + (head * p.total_q + q_start) * d;
  // t17: the block's K/V head, h / group (on the packed layout: one slab per K/V head).
  const int64_t kv_head = head / p.group;
  const T* K = static_cast<const T*>(p.k) + (kv_head * p.total_k + k_start) * d;
  const T* V = static_cast<const T*>(p.v) + (kv_head * p.total_k + k_start) * d;

  // ---- The window of this sequence, and the K/V tiles this Q tile needs: from its first row's
  // first key to its last real row's last key (ch09_band.h). Tiles outside are never loaded.
  const ch09::Band band = ch09::Band::make(seq_q, seq_k, p.causal, p.window_left, p.window_right);
  const ch09::TileRange tiles = ch09::key_tiles(band, q0, q0 + kBr, kBc);

  // This thread's rows are g and g + 8 of each of the warp's kM m16 tiles: rows warp_row0 + 16 m +
  // g + 8 h.
  const int64_t warp_row0 = q0 + warp * Tiles<D>::kRowsPerWarp;
  // The warp's real rows end at warp_row1: the rows past seq_q are never stored, so they need no
  // mask, and a warp with none skips every tile.
  const int64_t warp_row1 =
      warp_row0 + Tiles<D>::kRowsPerWarp < seq_q ? warp_row0 + Tiles<D>::kRowsPerWarp : seq_q;
  // The key tiles some row of the warp sees: a tile outside them is invisible to the whole warp,
  // which then skips it.
  const ch09::TileRange warp_tiles = ch09::key_tiles(band, warp_row0, warp_row1, kBc);
  const int warp_first_tile = int(warp_tiles.begin), warp_end_tile = int(warp_tiles.end);
  // The tiles that need no mask for any row of the warp (tile_needs_mask false) are one interval:
  // tile j is free of the mask iff its first key is at or after the last row's first key and its
  // last key at or before the first row's last key (which is at most seq_k - 1).
  const int64_t free_first_key = band.first_key(warp_row1 - 1),
                free_last_key = band.last_key(warp_row0);
  const int free_first_tile = int((free_first_key + kBc - 1) / kBc);
  const int free_end_tile = max(int((free_last_key + 1) / kBc), free_first_tile);  // empty: none
  // The window's edges of this thread's first row (row warp_row0 + g), unclipped, in 32 bits: the
  // thread's row warp_row0 + g + o (o = 16 m + 8 h <= 24) sees key j iff
  // row_first + o <= j <= row_last + o and j < seq_k (band.visible, clipped to keys >= 0 by
  // j itself). Clamping both to [-32, seq_k] changes no answer for keys 0 .. seq_k - 1 (an edge
  // below -32 stays below 0 after + 24, one past seq_k stays past every key), and keeps them, and
  // the arithmetic on them, in 32 bits (an unlimited side is a distance of 2^40).
  const int64_t diagonal0 = band.diagonal(warp_row0 + g);
  const int64_t edge_first = diagonal0 - band.left, edge_last = diagonal0 + band.right;
  const int row_first = int(edge_first < -32 ? -32 : (edge_first > seq_k ? seq_k : edge_first));
  const int row_last = int(edge_last < -32 ? -32 : (edge_last > seq_k ? seq_k : edge_last));

  // ---- Prologue: Q tile (group 0) and the first K/V tile (group 1) in flight together.
  load_tile_async<D, kBr>(sQ, Q, q0, seq_q, d, tid);
  mma::cp_async_commit();
  const int first_tile = int(tiles.begin), end_tile = int(tiles.end);
  if (end_tile > first_tile)
    load_kv_tile<T, D>(sK, sV, K, V, first_tile, first_tile & 1, seq_k, d, tid);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q: m16 tile m of this warp is the 16-row slab kM * warp + m of sQ. Fragments kept in
  // registers at D <= 64 only.
  constexpr int kRowBytes = Sm::kPitch * 2;
  // Every ldmatrix row of this lane is lane % 8 modulo 8: one XOR pattern for all of its reads
  // where the tiles are swizzled (LaneAddr; unused with padded rows).
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

  for (int j = first_tile; j < end_tile; ++j) {
    const int buf = int(j & 1);
    if (j > first_tile) {
      // Tile j (the only group in flight) has landed for this thread; the barrier makes it
      // visible to all, and also guarantees every warp is done with tile j-1, whose buffer the
      // next cp.async overwrites.
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < end_tile) {
      load_kv_tile<T, D>(sK, sV, K, V, j + 1, buf ^ 1, seq_k, d, tid);
      mma::cp_async_commit();
    }
    const int k0 = j * kBc;
    // j outside [first, end) as one unsigned comparison (j - first wraps around below first).
    if (unsigned(j - warp_first_tile) >= unsigned(warp_end_tile - warp_first_tile))
      continue;  // no row of this warp sees tile j

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

    // ---- (2) Mask: keys outside a row's window, and keys past seq_k (the next sequence's rows,
    // zero-filled in shared memory). Uniform per warp, so only the tiles the window's edges or the
    // ragged end cross pay for it.
    if (unsigned(j - free_first_tile) >= unsigned(free_end_tile - free_first_tile)) {
      // Element (m, nt, e) is key k0 + 2 t + col of row warp_row0 + g + o, with col and o
      // compile-time constants: the tests against row_first, row_last and seq_k become tests of
      // col - o and col against three numbers per thread and tile.
      const int lo = row_first - k0 - 2 * t, hi = row_last - k0 - 2 * t;
      const int last = int(seq_k) - 1 - k0 - 2 * t;
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = nt * 8 + (e & 1), o = 16 * m + 8 * (e >> 1);
            if (col - o < lo || col - o > hi || col > last) s[m][nt][e] = kNegInf;
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

  // ---- Epilogue, per m16 tile: finish the row sums (each thread summed only its own columns),
  // O through the tile's own 16 rows of sQ, then L. The O and L pointers are formed only here.
  T* O = static_cast<T*>(p.o) + (head * p.total_q + q_start) * d;
  float* Lse = p.lse + head * p.total_q + q_start;
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
    store_o_tile<T, D>(O, o_acc[m], inv_l, sQ, kM * warp + m, lane, warp_row0 + 16 * m, seq_q, d);
    write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
  }
}

template <class T, int D>
void launch(const VarlenFwdArgs& a, cudaStream_t stream) {
  const VarlenShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.max_seq_q(), Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.heads * s.batch();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  // 32-bit key indices: k0 + Bc and q0 + Br must not overflow; 256 = 2 x the largest Br. Every
  // sequence is at most its total.
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
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.window_left = s.window_left;
  p.window_right = s.window_right;
  p.scale_log2 = s.sequence(0).softmax_scale() * 1.4426950408889634f;  // log2(e)
  p.d = int(s.head_dim);
  p.heads = s.heads;
  p.group = s.heads / s.kv_heads();

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

// t15: every head dim up to 256, at the next instance.
template <class T>
void dispatch_head_dim(const VarlenFwdArgs& a, cudaStream_t stream) {
  const int64_t d = a.shape.head_dim;
  FA_UNSUPPORTED_IF(d <= 0 || d > 256, std::string(kName) +
                                           ": takes every head dim from 1 to 256 (rounded up "
                                           "to 32, 64, 96, 128 or 256); not " +
                                           std::to_string(d));
  if (d <= 32) return launch<T, 32>(a, stream);
  if (d <= 64) return launch<T, 64>(a, stream);
  if (d <= 96) return launch<T, 96>(a, stream);
  if (d <= 128) return launch<T, 128>(a, stream);
  return launch<T, 256>(a, stream);
}

void varlen_fwd(const VarlenFwdArgs& a, cudaStream_t stream) {
  const VarlenShape& s = a.shape;
  FA_REQUIRE(s.seqlens_k.size() == s.seqlens_q.size(), "one key length per sequence");
  for (size_t b = 0; b < s.seqlens_q.size(); ++b)
    FA_REQUIRE(s.seqlens_q[b] >= 0 && s.seqlens_k[b] >= 0, "negative sequence length");
  FA_REQUIRE(s.heads >= 0 && s.heads_kv >= 0, "negative size");
  if (s.batch() == 0 || s.heads == 0 || s.total_q() == 0) return;  // nothing to write
  FA_UNSUPPORTED_IF(s.heads % s.kv_heads() != 0,
                    std::string(kName) + ": heads must be a multiple of heads_kv");
  FA_REQUIRE(a.cu_seqlens_q != nullptr && a.cu_seqlens_k != nullptr, "cu_seqlens on the device");
  FA_UNSUPPORTED_IF(s.head_dim % 8 == 0 && (reinterpret_cast<uintptr_t>(a.q) % 16 != 0 ||
                                            reinterpret_cast<uintptr_t>(a.k) % 16 != 0 ||
                                            reinterpret_cast<uintptr_t>(a.v) % 16 != 0 ||
                                            reinterpret_cast<uintptr_t>(a.o) % 16 != 0),
                    std::string(kName) +
                        ": at a head dim that is a multiple of 8, Q, K, V and O are copied 16 "
                        "bytes at a time and must be 16-byte aligned");
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
             "v3 with a sliding window: each Q tile loops over the key tiles its rows' windows "
             "reach, and masks only the tiles the window's edges cross (v2's idea, at every head "
             "dim up to 256)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*window=*/true,
             /*rounds_head_dim=*/true,
             /*head_dim_step=*/1});
FA_REGISTER_SMEM(fa::kName, [](int d) {
  return fa::smem_at<32, 64, 96, 128, 256>(
      d, [](auto D) { return fa::SmemLayout<decltype(D)::value>::kBytes; });
});
