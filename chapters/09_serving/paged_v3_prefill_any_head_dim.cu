// paged_v3_prefill_any_head_dim.cu: chapter 05's forward at every head dim up to 256 with grouped
// K/V heads (05/t17_grouped_any_head_dim, chapter 05's tuning appendix) over a paged KV cache: a
// chunk of queries per sequence against its pages, for the head dims paged_v2_prefill (05/v5: D 64
// and 128) and paged_v1_decode (multiples of 8 up to 128) lack, on any GPU from sm_80; on Hopper
// the paged rungs round the multiples of 8 up to 256, but TMA, like cp.async, copies rows of whole
// 16-byte chunks, so a head dim that is no multiple of 8 (59, 111, ...) had no paged kernel. It is
// correct for every chunk length, decoding (one query per sequence) included.
//
// The problem (shapes.h, PagedShape) is paged_v2_prefill's: Q, O [batch, heads, seq_q, d] and L
// [batch, heads, seq_q]; K and V pools of pages [num_pages, heads_kv, page_size, d]; key j of
// sequence b is row j % page_size of page block_table[b * max_pages + j / page_size]; sequence b
// holds seqlens_k[b] keys, the last seq_q of them the chunk's own (causal masking is bottom-right
// per sequence); table entries past a sequence's last page are -1 and never read.
//
// What changed vs 05/t17, and why. One idea: a K/V row is found through the block table. t17's
// loader copies row key0 + r of a [seq_k, d] matrix at (key0 + r) * d; here (load_kv_tile) the
// same chunk of the same row comes from
//   ((page * heads_kv + kvh) * page_size + key % page_size) * d,  page = table[key / page_size],
// one table entry per chunk a thread copies (2 to 8 per tile; the entries of a tile's rows are a
// few consecutive words of the sequence's row of the table, L1 hits after the first), the same
// offset for K and for V. Rows at or past the sequence's seq_k are zero-filled without a table
// read (no -1 entry is ever read). paged_v2_prefill plans its copies in runs of keys that lie in
// one page (one entry per run, a base plus constants per pass): that is a speed step on 05/v5's
// fixed copy plan, which t17's loader, a chunk at a time with the element path beside it, does
// not have. The rest is t17's with the sequence's own seq_k (read on the device, seqlens_k[b]),
// its query head's K/V head kvh = h / group, and page sizes powers of two from 16 (a shift and a
// mask, as in the other paged rungs).
//
// 05/t17's pieces (its tiles, layout, lane addresses, row loader, the two products on m16 tiles,
// the epilogue) are called from common/device/mma_fwd_t17.cuh, t17's code, compiled to the machine
// code a copy had; this file holds the parameters, the K/V copies, the kernel and the launch.
//
// Speed (H200, 2026-12-05, the chapter README): 512 new queries over 32768 cached keys, D 80
// 219.1 TFLOP/s (2.39x paged_v1_decode), D 59 117.4-118.0, D 128 0.74-0.75x paged_v2_prefill; decoding
// one row 7.8-8.9x slower than paged_v1_decode, which keeps decoding at multiples of 8.
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
#include "mma_fwd_t17.cuh"
#include "registry.h"

namespace fa {
namespace {

using namespace fa::ch05::t17;  // 05/t17's tiles, loader, products, epilogue (mma_fwd_t17.cuh)

constexpr const char* kName = "09/paged_v3_prefill_any_head_dim";  // the registered name

constexpr int kMinPageSize = 16;  // the smallest page size taken (as the other paged rungs)

struct Params {
  const void* q;
  const void* k;  // the K page pool [num_pages, heads_kv, page_size, d]
  const void* v;  // the V page pool, laid out alike
  void* o;
  float* lse;
  const int32_t* block_table;  // [batch, max_pages]: key j of sequence b in page [b][j >> shift]
  const int32_t* seqlens_k;    // [batch]: keys per sequence
  int64_t seq_q;
  int64_t max_pages;      // the table's width
  int64_t rows_per_page;  // heads_kv * page_size: rows of d from one page to the next
  int page_shift;         // log2(page_size)
  int num_q_tiles;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e)
  int d;             // t14: the real head dim, the length of a row in global memory (<= D)
  int64_t heads;     // t17: query heads
  int64_t group;     // t17: query heads per K/V head (heads / heads_kv)
};

// K/V tile j into buffer buf, each row through the block table: the paged form of
// load_tile_async (the header says why), one table entry and one 64-bit row offset per chunk,
// used for K and for V. `table` is the sequence's row of the block table, `head_rows` the K/V
// head's first row in a page (kvh * page_size).
template <class T, int D>
__device__ __forceinline__ void load_kv_tile(T* sK, T* sV, const Params& p, const int32_t* table,
                                             int64_t head_rows, int j, int buf, int64_t seq_k,
                                             int d, int tid) {
  using Sm = SmemLayout<D>;
  constexpr int kBc = Tiles<D>::kBc;
  constexpr int kThreads = Tiles<D>::kThreads;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert((kBc * kChunks) % kThreads == 0, "the tile must split evenly over the block");
  const T* K = static_cast<const T*>(p.k);
  const T* V = static_cast<const T*>(p.v);
  const int64_t in_page = (int64_t(1) << p.page_shift) - 1;
#pragma unroll
  for (int i = 0; i < kBc * kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t key = int64_t(j) * kBc + r;
    const bool valid = key < seq_k && ch * 8 < d;
    int64_t off = 0;  // an in-range offset (the pools' first element) where nothing is read
    if (valid) {
      const int64_t page = __ldg(table + (key >> p.page_shift));
      off = (page * p.rows_per_page + head_rows + (key & in_page)) * d + ch * 8;
    }
    int at;  // the chunk's element offset in a buffer
    if constexpr (Sm::kSwizzle)
      at = swizzled_offset<D>(r, ch);
    else
      at = r * Sm::kPitch + ch * 8;
    T* const k_dst = sK + buf * Sm::kKVElems + at;
    T* const v_dst = sV + buf * Sm::kKVElems + at;
    if (d % 8 == 0) {
      mma::cp_async_16(k_dst, K + off, valid);
      mma::cp_async_16(v_dst, V + off, valid);
    } else {  // t15: rows not 16-byte aligned, element by element, zeros past d
      tiles::copy_chunk_by_elements(k_dst, valid ? K + off : nullptr, d - ch * 8);
      tiles::copy_chunk_by_elements(v_dst, valid ? V + off : nullptr, d - ch * 8);
    }
  }
}

template <class T, int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads, 2) paged_prefill_kernel(const Params p) {
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

  // ---- Which (batch*head) and which Q tile: both on blockIdx.x (gridDim.y/z stop at 65535).
  // Q tiles of one head are consecutive blocks (K/V of that head stay hot in L2), last tile first
  // (under causal masking the last Q tiles have the most work; starting them first evens the tail).
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  // Sequence b, query head bh % heads, which reads K/V head kvh (t17: h / group); the sequence's
  // keys and its row of the block table.
  const int64_t b = bh / p.heads, kvh = bh % p.heads / p.group;
  const int64_t seq_q = p.seq_q, seq_k = __ldg(p.seqlens_k + b);
  const int32_t* table = p.block_table + b * p.max_pages;
  const int64_t head_rows = kvh << p.page_shift;  // K/V head kvh's first row in a page

  const int d = p.d;  // rows of d elements in global memory
  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * d;

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
  load_tile_async<D, kBr>(sQ, Q, q0, seq_q, d, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) load_kv_tile<T, D>(sK, sV, p, table, head_rows, 0, 0, seq_k, d, tid);
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

  // Per-lane row/column offsets of the ldmatrix addresses for K (v2's kernel explains the
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
      load_kv_tile<T, D>(sK, sV, p, table, head_rows, j + 1, buf ^ 1, seq_k, d, tid);
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

  // ---- Epilogue, per m16 tile: finish the row sums (each thread summed only its own columns),
  // O through the tile's own 16 rows of sQ, then L. The O and L pointers are formed only here.
  T* O = static_cast<T*>(p.o) + bh * seq_q * d;
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
    store_o_tile<T, D>(O, o_acc[m], inv_l, sQ, kM * warp + m, lane, warp_row0 + 16 * m, seq_q, d);
    write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
  }
}

template <class T, int D>
void launch(const PagedFwdArgs& a, cudaStream_t stream) {
  const PagedShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.batch() * s.heads;
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  // 32-bit key indices: k0 + Bc and q0 + Br must not overflow; 256 = 2 x the largest Br.
  constexpr int64_t kSeqMargin = 256;
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.max_seq_k() > INT_MAX - kSeqMargin,
                    std::string(kName) + ": sequence lengths must stay below 2^31 - 256");
  Params p;
  p.q = a.q;
  p.k = a.k_pages;
  p.v = a.v_pages;
  p.o = a.o;
  p.lse = a.lse;
  p.block_table = a.block_table;
  p.seqlens_k = a.seqlens_k;
  p.seq_q = s.seq_q;
  p.max_pages = s.max_pages;
  p.rows_per_page = s.kv_heads() * s.page_size;
  p.page_shift = 0;
  while ((int64_t(1) << p.page_shift) < s.page_size) ++p.page_shift;
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.scale_log2 = softmax_scale(s.scale, s.head_dim) * 1.4426950408889634f;  // log2(e)
  p.d = int(s.head_dim);
  p.heads = s.heads;
  p.group = s.heads / s.kv_heads();

  constexpr size_t smem = SmemLayout<D>::kBytes;
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = paged_prefill_kernel<T, D>;
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
void dispatch_head_dim(const PagedFwdArgs& a, cudaStream_t stream) {
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

void paged_prefill(const PagedFwdArgs& a, cudaStream_t stream) {
  const PagedShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.heads >= 0 && s.heads_kv >= 0, "negative size");
  if (s.seq_q == 0 || s.batch() == 0 || s.heads == 0) return;  // nothing to write
  FA_UNSUPPORTED_IF(s.heads % s.kv_heads() != 0,
                    std::string(kName) + ": heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(s.page_size < kMinPageSize || (s.page_size & (s.page_size - 1)) != 0,
                    std::string(kName) + ": page sizes are powers of two from " +
                        std::to_string(kMinPageSize) + " up, not " + std::to_string(s.page_size));
  FA_REQUIRE(s.max_pages * s.page_size >= s.max_seq_k(),
             "the block table is narrower than the longest sequence");
  FA_UNSUPPORTED_IF(s.head_dim % 8 == 0 && (reinterpret_cast<uintptr_t>(a.q) % 16 != 0 ||
                                            reinterpret_cast<uintptr_t>(a.o) % 16 != 0 ||
                                            reinterpret_cast<uintptr_t>(a.k_pages) % 16 != 0 ||
                                            reinterpret_cast<uintptr_t>(a.v_pages) % 16 != 0),
                    std::string(kName) +
                        ": at a head dim that is a multiple of 8, Q, O and the pools are copied "
                        "16 bytes at a time and must be 16-byte aligned");
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

FA_REGISTER(PagedFwdKernel,
            {fa::kName,
             fa::paged_prefill,
             "05/t17 (every head dim up to 256, grouped K/V heads) over a paged cache: each K/V "
             "row of a tile found through the block table; any chunk length, decoding included",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             {16, 64, 256},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/false,
             /*rounds_head_dim=*/true,
             /*head_dim_step=*/1});
FA_REGISTER_SMEM(fa::kName, [](int d) {
  return fa::smem_at<32, 64, 96, 128, 256>(
      d, [](auto D) { return fa::SmemLayout<decltype(D)::value>::kBytes; });
});
