// 09/paged_v2_prefill: 05/v5_fewer_instructions (chapter 05's final forward) over a paged KV
// cache: a chunked prefill. One idea: the K/V tile copies find each key row through the block
// table instead of at K + j * D. fp16 and bf16, D 64 and 128, grouped-query attention, page sizes
// 16, 64 and 256 (any power of two from 16 up), one length per sequence.
//
// The problem (shapes.h, PagedShape). Each sequence b brings a chunk of seq_q new queries (Q, O
// [batch, heads, seq_q, D], L [batch, heads, seq_q], as in chapter 05) and attends to its whole
// cache of seqlens_k[b] keys, the last seq_q of which are the chunk's own (09/append_kv wrote
// them): causal masking is bottom-right per sequence, query i sees keys j <= i + seq_k - seq_q.
// K and V are pools of pages [num_pages, heads_kv, page_size, D] (FlashInfer's HND layout: one
// head's keys of one page are page_size contiguous rows), and key j of sequence b is row
// j % page_size of page block_table[b * max_pages + j / page_size]; the entries past a sequence's
// last page are -1 and are never read. A server prefills long prompts in chunks like this so that
// one step of its batch mixes a chunk of prefill with many decoding sequences (09/paged_v1_decode)
// and no prompt holds the GPU for long.
//
// What changed vs 05/v5, and why
//   1. The K/V copies (PagedKVCopyPlan, was KVCopyPlan). 05/v5's thread copies chunk tid % kChunks
//      of rows tid / kChunks + kRowsPerPass i of each 64-key tile, every pass a compile-time offset
//      from one pointer (K + j kBc D + src). Here a tile's 64 keys are cut into runs of kRun keys
//      that lie in one page (tile j starts at key 64 j, and a page holds a power of two keys):
//      kRun = 64 when pages hold 64 keys or more (at 64 and 256 the tile lies in one page: one
//      base, 05/v5's copies), 16 at page size 16 (the tile spans 4 pages: 4 bases). kRun is a
//      template parameter and a multiple of kRowsPerPass (16 at D 64, 8 at D 128), so each pass's
//      run and its row in the run are constants and a copy is still a base plus a constant. The
//      plan is still two registers (dst; src now also holds the K/V head's rows of a page).
//   2. The table, read per tile: one entry per run (1, or 4 at page 16), by every thread (a
//      thread's rows are kRowsPerPass apart, so it copies rows of every run), all lanes of a warp
//      the same entry (one transaction, an L1 hit for all but the first tile of each 128-byte
//      line of the table). The entries of tile j + 1 are loaded at the top of iteration j, before
//      the wait and the barrier, so that their latency overlaps the barrier's, and live only until
//      the copies are issued: held across the loop, 4 entries (or one 64-bit pointer per run)
//      would cost registers 05/v5 at D 128 does not have (255 and 8 bytes of spills already). A
//      table in shared memory would need a barrier between its writer and its readers; one load
//      per row would be 8 entries and 64-bit offsets per tile and thread at D 128 where 1 or 4 do.
//   3. What the indirection costs against 05/v5, per tile and thread: kRuns table loads (a
//      dependent load before the copies can go out) and kRuns 64-bit offsets (multiply-add), where
//      05/v5 adds one constant; at page 16 the tile's K and V are four 2-4 KB pieces at unrelated
//      addresses instead of one 8-16 KB piece. Against a tile's 64 x 128 x D x 4 FLOPs that is
//      little: prefill is compute-bound, unlike decoding. Registers (ptxas, CUDA 13.0, sm_90),
//      every page size: 255 and 8 bytes of spills at D 128, as 05/v5; 254 and none at D 64
//      (05/v5: 250).
//   4. The tail. Rows past a sequence's end in its last tile are zero-filled (cp.async with
//      src-size 0) from a row of the pool that always exists (src in page 0), and the entry
//      fetched for a run that starts past the end is the one of the sequence's last key: no -1
//      entry is ever read. The mask is 05/v5's with the sequence's own seq_k.
//   5. Lengths per sequence: seqlens_k[b] is read on the device; the grid (Q tiles x batch x
//      heads) does not depend on it, and a sequence with fewer keys simply loops over fewer tiles.
//      A sequence with no key writes O = 0 and L = -inf.
//   6. GQA: query head h of sequence b reads K/V head h / (heads / heads_kv) (05/v5 took none);
//      each block still reads its own K/V tiles, nothing is shared across the group.
//   7. Page sizes are powers of two: j / page_size and j % page_size are a shift and a mask,
//      where a division by a number known only at run time is ~20 instructions per use.
// Dropped from 05/v5: the D 32, 96 and 256 code (the padded tile layout, load_tile_async for
// K/V); Q is still loaded by load_tile_async, swizzled.
//
// Map of the kernel: 05/v5's (v3's header), with the K/V copies through PagedKVCopyPlan and the
// table entries of tile j + 1 read at the top of iteration j.
//
// 05/v5's pieces (its tiles, layout, Q copy, the two products on m16 tiles, the epilogue) are
// called from common/device/mma_fwd_v5.cuh, 05/v5's code at D 64 and 128, compiled to the machine
// code a copy had; this file holds the parameters, the K/V copy plan, the kernel and the launch.
//
// Speed: measured in chapters/09_serving/README.md.
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

constexpr const char* kName = "09/paged_v2_prefill";  // the registered name

constexpr int kSmallRun = 16;  // keys of a K/V tile in one page at page size 16 (the header's kRun)

struct Params {
  const void* q;
  const void* k;  // the K page pool [num_pages, heads_kv, page_size, D]
  const void* v;  // the V page pool, laid out alike
  void* o;
  float* lse;
  const int32_t* block_table;  // [batch, max_pages]: key j of sequence b in page [b][j >> shift]
  const int32_t* seqlens_k;    // [batch]: keys per sequence
  int64_t seq_q;
  int64_t heads, group;  // query heads, and query heads per K/V head
  int64_t max_pages;     // the table's width
  int64_t page_elems;    // heads_kv * page_size * D: elements from one page to the next
  int page_shift;        // log2(page_size)
  int num_q_tiles;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e)
};

// The copies of K/V tile j, planned once per thread, through the block table. 05/v5's plan: with
// kChunks = D / 8 chunks per row, thread tid copies chunk tid % kChunks of rows tid / kChunks +
// kRowsPerPass * i, i < kPasses, pass i's destination a compile-time offset from the thread's
// first one (dst), buffer b's b tiles further. What is new is where a row comes from. Tile j's
// keys 64 j .. 64 j + 63 are kRuns runs of kRun keys, each inside one page; run u starts at row
//   (page_u * heads_kv + kvh) * page_size + (64 j + u kRun) % page_size
// of the pool (rows of D elements), page_u its table entry (fetch). Pass i's row
// tid / kChunks + kRowsPerPass i is row (kRowsPerPass i) % kRun + tid / kChunks of run
// (kRowsPerPass i) / kRun (tid / kChunks < kRowsPerPass, which divides kRun): both constants, so
// pass i's source is its run's base plus a constant, and a tile costs kRuns 64-bit offsets
// (issue). The plan stays two registers: dst, and src, the element offset of the thread's chunk
// in its row of K/V head kvh of a page, kvh's part of the row included (below 2^31: the launcher
// checks a page's elements). Only a tile that ends past seq_k (the sequence's last, when seq_k %
// kBc != 0) tests its rows; the rows past the end are zero-filled (cp.async with src-size 0) from
// src in page 0, a row every pool has.
template <class T, int D, int kRun>
struct PagedKVCopyPlan {
  using Sm = SmemLayout<D>;
  using Tl = Tiles<D>;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = Tl::kThreads / kChunks;  // 16 at D 64, 8 at D 128
  static constexpr int kPasses = Tl::kBc / kRowsPerPass;
  static constexpr int kRuns = Tl::kBc / kRun;  // pages one tile spans
  static_assert(Tl::kThreads % kChunks == 0 && Tl::kBc % kRowsPerPass == 0 &&
                    kRowsPerPass % kSwizzleRows == 0,
                "whole rows per pass, and one swizzle for all passes");
  static_assert(Tl::kBc % kRun == 0 && kRun % kRowsPerPass == 0, "a pass's rows lie in one run");
  static constexpr uint32_t kTileBytes = Sm::kKVElems * 2;  // one K (or V) buffer
  static constexpr uint32_t kVBytes = 2 * kTileBytes;       // V buffer 0 from K buffer 0
  static constexpr uint32_t kPassBytes = kRowsPerPass * Sm::kPitch * 2;  // pass i to i + 1

  // The table entries of one tile's runs.
  struct Pages {
    int32_t page[kRuns];
  };

  uint32_t dst;  // this thread's first chunk in K buffer 0 (32-bit shared address)
  uint32_t src;  // ... and its element offset in a page of K or V: (kvh page_size + row) D + 8 ch

  __device__ __forceinline__ PagedKVCopyPlan(T* sK, int64_t kvh, int page_shift, int tid) {
    const int row = tid / kChunks, chunk = tid % kChunks;
    dst = mma::smem_addr(sK) + uint32_t(chunk_at<D>(row, chunk)) * 2;
    src = uint32_t(((kvh << page_shift) + row) * D + 8 * chunk);
  }

  // The entries of tile j's runs from the sequence's row of the table. A run that starts past the
  // sequence's end (in its last tile only) takes the entry of the sequence's last key: its rows
  // are zero-filled, and no entry past the sequence (-1) is ever read. The whole warp reads the
  // same entries (one transaction each).
  static __device__ __forceinline__ Pages fetch(const int32_t* table, int j, int seq_k,
                                                int page_shift) {
    Pages pg;
#pragma unroll
    for (int u = 0; u < kRuns; ++u)
      pg.page[u] = __ldg(table + (min(j * Tl::kBc + u * kRun, seq_k - 1) >> page_shift));
    return pg;
  }

  // Tile j of K and V, whose runs' pages are pg, into buffer buf. A tile that ends past seq_k
  // (rows_left = seq_k - j Bc < Bc) zero-fills the rows past the end.
  __device__ __forceinline__ void issue(const Params& p, const Pages& pg, int j, int buf,
                                        int rows_left, int tid) const {
    const uint32_t d = dst + uint32_t(buf) * kTileBytes;
    const int in_page = (1 << p.page_shift) - 1;
    int64_t off[kRuns];  // each run's first row, plus src, in elements (K and V alike)
#pragma unroll
    for (int u = 0; u < kRuns; ++u)
      off[u] = int64_t(pg.page[u]) * p.page_elems +
               int64_t(((j * Tl::kBc + u * kRun) & in_page) * D) + src;
    const T* K = static_cast<const T*>(p.k);
    const T* V = static_cast<const T*>(p.v);
    if (rows_left >= Tl::kBc) {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int u = i * kRowsPerPass / kRun, r = i * kRowsPerPass % kRun;
        mma::cp_async_16(d + i * kPassBytes, K + off[u] + r * D);
      }
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int u = i * kRowsPerPass / kRun, r = i * kRowsPerPass % kRun;
        mma::cp_async_16(d + kVBytes + i * kPassBytes, V + off[u] + r * D);
      }
    } else {
      const int row = tid / kChunks;
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int u = i * kRowsPerPass / kRun, r = i * kRowsPerPass % kRun;
        const bool in = row + i * kRowsPerPass < rows_left;
        mma::cp_async_16(d + i * kPassBytes, in ? K + off[u] + r * D : K + src, in);
        mma::cp_async_16(d + kVBytes + i * kPassBytes, in ? V + off[u] + r * D : V + src, in);
      }
    }
  }
};

template <class T, int D, int kRun>
__global__ void __launch_bounds__(Tiles<D>::kThreads, 2) paged_prefill_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Sm = SmemLayout<D>;
  constexpr int kM = Tiles<D>::kM;            // m16 tiles per warp
  constexpr int kBr = Tiles<D>::kBr;          // query rows per block
  constexpr int kBc = Tiles<D>::kBc;          // keys per K/V tile
  constexpr int kSTiles = Tiles<D>::kSTiles;  // n8 tiles of S per m16 tile
  constexpr int kOTiles = D / 8;              // n8 tiles of O
  constexpr float kNegInf = -INFINITY;

  // Swizzled tiles must start at 128-byte boundaries; so must the block's shared memory.
  extern __shared__ __align__(128) unsigned char smem_swizzled[];
  T* sQ = reinterpret_cast<T*>(smem_swizzled);
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
  // Sequence b, query head bh % heads, which reads K/V head kvh (GQA); the sequence's keys, its
  // row of the block table.
  const int64_t b = bh / p.heads, kvh = (bh % p.heads) / p.group;
  const int64_t seq_q = p.seq_q, seq_k = __ldg(p.seqlens_k + b);
  const int32_t* table = p.block_table + b * p.max_pages;

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;

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

  // This thread's K/V copies, planned once; the pages of a tile are looked up per tile.
  using Plan = PagedKVCopyPlan<T, D, kRun>;
  const Plan plan(sK, kvh, p.page_shift, tid);
  const int seq_k32 = int(seq_k);  // the launcher keeps lengths below 2^31 - 256

  // ---- Prologue: Q tile (group 0) and K/V tile 0 (group 1) in flight together.
  load_tile_async<D, kBr>(sQ, Q, q0, seq_q, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) plan.issue(p, Plan::fetch(table, 0, seq_k32, p.page_shift), 0, 0, seq_k32, tid);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q: m16 tile m of this warp is the 16-row slab kM * warp + m of sQ. Fragments kept in
  // registers at D <= 64 only.
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
    // The pages of tile j + 1, loaded before the wait and the barrier so that the loads' latency
    // overlaps them (PagedKVCopyPlan: live only until the copies below are issued).
    typename Plan::Pages next{};
    if (j + 1 < n_tiles32) next = Plan::fetch(table, j + 1, seq_k32, p.page_shift);
    if (j > 0) {
      // Tile j (the only group in flight) has landed for this thread; the barrier makes it
      // visible to all, and also guarantees every warp is done with tile j-1, whose buffer the
      // next cp.async overwrites.
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < n_tiles32) {
      plan.issue(p, next, j + 1, buf ^ 1, seq_k32 - (j + 1) * kBc, tid);
      mma::cp_async_commit();
    }
    const int k0 = j * kBc;
    if (k0 > warp_max_key) continue;  // no row of this warp sees any key of tile j

    // ---- (1) S = Q K_j^T: 32 x Bc per warp (kM m16 tiles).
    float s[kM][kSTiles][4];
    const typename Sm::Lane k_addr(k_addr0, buf * kKVBytes);
    compute_s_m<T, D>(s, q_frag, q_addr, k_addr);

    if (p.scale_log2 < 0.0f) negate_s_m<D>(s);  // c * s = |c| * (-s): the max stays a max

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
          int lk = seq_k32 - 1;
          if (p.causal) lk = min(lk, row + (seq_k32 - int(p.seq_q)));
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
  // GPUs store each m16 tile through its own 16 rows of sQ), then L.
  T* O = static_cast<T*>(p.o) + bh * seq_q * D;
  float* Lse = p.lse + bh * seq_q;
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

template <class T, int D, int kRun>
void launch(const PagedFwdArgs& a, cudaStream_t stream) {
  const PagedShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.batch() * s.heads;
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  // 32-bit key indices: k0 + Bc and q0 + Br must not overflow; 256 = 2 x Br.
  constexpr int64_t kSeqMargin = 256;
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.max_seq_k() > INT_MAX - kSeqMargin,
                    std::string(kName) + ": sequence lengths must stay below 2^31 - 256");
  // The copy plan's src: an element offset inside one page of the pool, in 32 bits.
  const int64_t page_elems = s.kv_heads() * s.page_size * D;
  FA_UNSUPPORTED_IF(page_elems > INT_MAX,
                    std::string(kName) + ": heads_kv * page_size * head_dim must stay below 2^31");
  Params p;
  p.q = a.q;
  p.k = a.k_pages;
  p.v = a.v_pages;
  p.o = a.o;
  p.lse = a.lse;
  p.block_table = a.block_table;
  p.seqlens_k = a.seqlens_k;
  p.seq_q = s.seq_q;
  p.heads = s.heads;
  p.group = s.heads / s.kv_heads();
  p.max_pages = s.max_pages;
  p.page_elems = page_elems;
  p.page_shift = 0;
  while ((int64_t(1) << p.page_shift) < s.page_size) ++p.page_shift;
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  const float scale = softmax_scale(s.scale, s.head_dim);
  p.scale_log2 = scale * 1.4426950408889634f;  // log2(e)

  constexpr size_t smem = SmemLayout<D>::kBytes;
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = paged_prefill_kernel<T, D, kRun>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; also ask for the largest
  // shared-memory carveout so that two blocks fit per SM.
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(blocks), Tiles<D>::kThreads, smem, stream>>>(p);
  FA_CHECK_LAUNCH();
}

// The page size picks the copy plan's run: pages of 64 keys or more hold a whole K/V tile; smaller
// ones (16, and 32, which the same code takes) runs of 16.
template <class T, int D>
void dispatch_page_size(const PagedFwdArgs& a, cudaStream_t stream) {
  if (a.shape.page_size >= Tiles<D>::kBc) return launch<T, D, Tiles<D>::kBc>(a, stream);
  return launch<T, D, kSmallRun>(a, stream);
}

template <class T>
void dispatch_head_dim(const PagedFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 64:
      return dispatch_page_size<T, 64>(a, stream);
    case 128:
      return dispatch_page_size<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) + " not instantiated (64, 128)");
  }
}

void paged_prefill(const PagedFwdArgs& a, cudaStream_t stream) {
  const PagedShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.heads >= 0 && s.heads_kv >= 0, "negative size");
  if (s.seq_q == 0 || s.batch() == 0 || s.heads == 0) return;  // nothing to write
  FA_UNSUPPORTED_IF(s.heads % s.kv_heads() != 0, "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(s.page_size < kSmallRun || (s.page_size & (s.page_size - 1)) != 0,
                    std::string(kName) + ": page sizes are powers of two from " +
                        std::to_string(kSmallRun) + " up, not " + std::to_string(s.page_size));
  FA_REQUIRE(s.max_pages * s.page_size >= s.max_seq_k(),
             "the block table is narrower than the longest sequence");
  FA_UNSUPPORTED_IF(reinterpret_cast<uintptr_t>(a.q) % 16 != 0 ||
                        reinterpret_cast<uintptr_t>(a.o) % 16 != 0 ||
                        reinterpret_cast<uintptr_t>(a.k_pages) % 16 != 0 ||
                        reinterpret_cast<uintptr_t>(a.v_pages) % 16 != 0,
                    std::string(kName) +
                        ": Q, O and the pools are copied 16 bytes at a time and "
                        "must be 16-byte aligned");
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
             "05/v5 over a paged cache (chunked prefill): the K/V tile copies go through the block "
             "table (one entry per page a tile spans), each sequence its own length, GQA",
             {fa::DType::BF16, fa::DType::F16},
             {64, 128},
             {16, 64, 256},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/false});
FA_REGISTER_SMEM(fa::kName, [](int d) {
  return fa::smem_at<64, 128>(d, [](auto D) { return fa::SmemLayout<decltype(D)::value>::kBytes; });
});
