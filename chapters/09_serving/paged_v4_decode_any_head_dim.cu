// 09/paged_v4_decode_any_head_dim: chapter 08's decoding kernel at every head dim up to 128 over
// a paged KV cache. It is built on 08/t08_any_head_dim: 08/t07_rounded_head_dims (v6, the
// chapter's last rung, taking every multiple of 8 up to 128) taking the head dims off the step of 8
// too, each 16-byte chunk of such a row copied element by element. One idea: the ring's loader
// finds each key row through the block table instead of at kbase + j * d, as 09/paged_v1_decode
// does for t07. fp16 and bf16, every head dim from 1 to 128 (computed at 64 or 128), grouped-query
// attention, page sizes 16, 64 and 256 (any power of two from 16 up), one length per sequence.
// paged_v1_decode keeps the multiples of 8, where this file's kernels are
// paged_v1_decode's machine code (below); this rung is for the head dims between them.
//
// The paged cache (shapes.h, PagedShape). K and V are pools of pages [num_pages, heads_kv,
// page_size, d] (FlashInfer's HND layout: one head's keys of one page are page_size contiguous
// rows of d elements), and key j of sequence b is row j % page_size of page
//   page = block_table[b * max_pages + j / page_size],
// at element ((page * heads_kv + kvh) * page_size + j % page_size) * d of the pool, in 64 bits. A
// server hands out pages as sequences grow and takes them back when they end, so one sequence's
// pages lie anywhere in the pool, in any order; the table is the only way to them. Sequence b
// holds seqlens_k[b] keys; its table entries past its last page are -1 and are never read.
//
// What changed vs t08, and why (09/paged_v1_decode made the same change to t07)
//   1. The loader (PagedRingCopy, was RingCopy). In t08 a thread copies rows cp_row +
//      kRowsPerPass i (8 i at D 128, 16 i at D 64) of every 64-key step, each a fixed offset from
//      one base. Here a step's 64 keys are cut into runs of kRun keys that lie in one page: a
//      split starts at a multiple of 64 keys (whole steps) and a page holds a power of two keys,
//      so kRun = 64 where pages hold 64 keys or more (the step lies in one page: one base, and
//      every copy is t07's), and kRun = 16 at page size 16 (four pages, four bases). kRun is a
//      template parameter and a multiple of kRowsPerPass, so each pass's run and its row in the
//      run are constants, and a copy is still a base plus an offset. New per step and thread: one
//      table entry and one 64-bit offset per run (PagedRingCopy::issue).
//   2. Where the table is read. A thread's rows are kRowsPerPass apart, so every thread copies
//      rows of every run of a step and needs all of the step's pages: 1 at page 64 and 256, 4 at
//      page 16. Each thread loads them itself (__ldg) one step ahead, into registers (page[]):
//      the 32 lanes of a warp read the same entry (one transaction; a 128-byte line of the table
//      holds the pages of 32 steps at page 64, of 8 at page 16, so most are L1 hits), the load's
//      latency hides behind a step of arithmetic, and the next step's copies go out right after
//      the barrier, as in t07. A table in shared memory would save nothing: someone still loads
//      each entry from global memory, a barrier must come between that and the reads (the ring's
//      one barrier per step could carry it, a step early), and every thread still reads kRuns
//      entries. One load per row (per pass) would be kPasses entries and 64-bit offsets per step
//      and thread (8 at D 128) where kRuns (1 or 4) do.
//   3. What page size 16 costs against 64. At 64 and 256 a step reads K (and V) as one piece of
//      64 rows, 16 KB at D 128, exactly as t07 reads a contiguous cache: 1 entry and 1 offset per
//      step. At 16 the step is four pieces of 16 rows (4 KB at D 128, 2 KB at D 64) at unrelated
//      addresses, with 4 entries and 4 offsets; each piece is still whole 128-byte lines (the
//      .L2::128B hint stays right). Registers (ptxas, CUDA 13.0, sm_90) where d is no multiple of
//      8: 255 at D 128 and 184 at D 64 for pages of 64 and more, 255 and 189 at page 16, no spills
//      (t08: 255 and 184); at the multiples of 8 paged_v1_decode's.
//      Chapter 08's lesson 7 found 16 KB bursts faster than 4 KB ones: whether the smaller pieces
//      cost bandwidth here is what the README measures.
//   4. Lengths per sequence. Each block reads seqlens_k[b] on the device; mma_rows and mma_keys
//      take it where they took p.seq_k (causal bottom-right per sequence). The split plan is made
//      on the host for the longest sequence (make_params sets p.seq_k to it, and the kernel no
//      longer reads it); a split past a sequence's end has no step, and its block still writes
//      its rows' partials as (m, l, o) = (-inf, 0, 0) (merge_warps of four empty states) and
//      counts itself in; the last block's merge folds that partial in with factor 0, exactly (o
//      is 0, not garbage). A row that sees no key in any split ends with O = 0 and L = -inf, as
//      in t07. What a ragged batch costs: the grid is the longest sequence's, so in a batch of
//      one long and many short sequences most of the short ones' blocks only write empty
//      partials, and the merge reads every split of every row.
//   5. Why page sizes are powers of two: j / page_size and j % page_size become a shift and a
//      mask (page_shift). A division by a number known only at run time is a sequence of ~20
//      instructions on the GPU (there is no divide unit; 64-bit division is a call), and it would
//      sit in every step's address work.
//   6. The element copies (kAnyLength, where d % 8 != 0) are t08's, each from its run's base: a
//      thread copies its chunk of each row element by element, synchronously, zeros past d and
//      past the split's end. Without kAnyLength the kernels are paged_v1_decode's machine code,
//      byte for byte (bench/sass_identical.py --subset, sm_80 and sm_90): that rung keeps the
//      multiples of 8, and this one is for the head dims between them.
// Unchanged, and called from common/device/mma_decode_t07.cuh (t07's pieces with t08's kAnyLength,
// which t08 itself carries written out): the block's tile (mma_tile) and each lane's rows and Q
// fragments (mma_rows, mma_keys, given the sequence's length), the ring and its swizzle (Ring), the
// zeroed columns past d, the step (mma_step), the epilogue (quad_sum, merge_warps), the last
// block's merge (merge_splits) and its counters (tile_counters). The block's grid, its (sequence,
// K/V head, row tile, split) and the plan are t07's, as t08's are.
//
// The file, top to bottom: PagedTable (the cache's kernel parameters); PagedRingCopy (the copies
// into the ring, through the table); mma_split_kernel; as_attention, launch_split_kv; forward and
// the dtype / head-dim / page-size dispatch; the registration.
//
// Speed: measured in chapters/09_serving/README.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "online_softmax.cuh"   // Stats, merge, rescale: the pair merge
#include "attention_tiles.cuh"  // swizzled tiles and their cp.async loader
#include "split_kv.cuh"         // Params, Traits, the workspace, the occupancy, make_params
#include "mma_decode_t07.cuh"   // 08/t07's tile, step, epilogue and merge
#include "split_kv_plan.h"      // the split plan
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace {

using namespace fa::ch08::t07;  // 08/t07's block, step, epilogue, merge (mma_decode_t07.cuh)

constexpr const char* kName = "09/paged_v4_decode_any_head_dim";

constexpr int kSmallRun = 16;  // keys of a step in one page at page size 16 (the header's kRun)

// The paged cache's side of the kernel parameters; Params (split_kv.cuh) carries the rest, with
// k and v the page pools and seq_k the longest sequence (the plan's length, not read here).
struct PagedTable {
  const int32_t* block_table;  // [batch, max_pages]: key j of sequence b is in page [b][j >> shift]
  const int32_t* seqlens_k;    // [batch]: keys per sequence
  int64_t max_pages;           // the table's width
  int64_t rows_per_page;       // heads_kv * page_size: rows of D from one page to the next
  int page_shift;              // log2(page_size)
};

// The copies, planned once per thread, through the block table (the header tells why). A step's K
// (and V) is kRows rows of kChunks 16-byte chunks of shared memory; thread tid of kThreads copies
// chunk cp_col / 8 of rows cp_row + kRowsPerPass * i, i < kPasses, as in t07. The step's keys
// k0 .. k0 + kRows - 1 are kRuns runs of kRun keys, each inside one page: run u starts at row
//   (page[u] * heads_kv + kvh) * page_size + (k0 + u kRun) % page_size
// of the pool (rows of d elements); off[u] is that times d without kvh's part, which k_src and
// v_src hold with the thread's own row and column. Pass i's row cp_row + kRowsPerPass i is row
// (kRowsPerPass i) % kRun + cp_row of run (kRowsPerPass i) / kRun (cp_row < kRowsPerPass, which
// divides kRun): both constants, so a copy is a run's base plus a row offset, and only kRuns
// offsets are computed per step. page[] holds the next step's pages, loaded a step ahead. A
// thread whose chunk starts at or past d (`active` false) zeroes its chunks of every stage once
// and copies nothing after, as in t07. Only the split's last step, which may hold fewer than
// kRows keys, tests each row: rows past k_end are zero-filled (cp.async with src-size 0, from
// k_src, a row of the pool, so no table entry past the sequence is ever read and no pointer
// leaves the pool). t08: with kAnyLength each chunk is copied element by element
// (copy_chunk_by_elements: the elements below d, zeros past it), synchronously, into the same
// place, and a row past k_end is written as zeros without a read.
template <class T, int D, int kRows, int kStages, int kThreads, int kRun, bool kAnyLength>
struct PagedRingCopy {
  using R = Ring<D, kRows, kStages>;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kPasses = kRows / kRowsPerPass;
  static constexpr int kRuns = kRows / kRun;  // pages one step spans
  static_assert(kThreads % kChunks == 0 && kRows % kRowsPerPass == 0, "chunks must tile");
  static_assert(kRows % kRun == 0 && kRun % kRowsPerPass == 0, "a pass's rows lie in one run");

  const T *k_src, *v_src;  // this thread's chunk in row cp_row of K/V head kvh of page 0
  const int32_t* table;    // the sequence's row of the block table
  int64_t rows_per_page;   // heads_kv * page_size
  int64_t k_begin, k_end, nsteps;
  int page_shift;
  int cp_row;
  int d;                // the real head dim: the pool's rows are d elements long
  bool active;          // this thread's chunk lies inside the real head dim
  uint32_t dst;         // this thread's first chunk in stage 0 (32-bit shared address)
  int32_t page[kRuns];  // the pages of the runs of the next step to issue
  T* first;             // t08: this thread's first chunk in stage 0, as a pointer
  int cols;             // t08: the chunk's elements below d (8, or fewer in the row's last chunk)

  __device__ __forceinline__ PagedRingCopy(T* stages, const T* k_pool, const T* v_pool,
                                           const PagedTable& pt, const MmaTile& t, int64_t k_begin_,
                                           int64_t k_end_, int64_t nsteps_, int d_, int tid)
      : table(pt.block_table + t.b * pt.max_pages),
        rows_per_page(pt.rows_per_page),
        k_begin(k_begin_),
        k_end(k_end_),
        nsteps(nsteps_),
        page_shift(pt.page_shift),
        d(d_) {
    cp_row = tid / kChunks;
    const int cp_col = (tid % kChunks) * 8;
    active = cp_col < d;
    // The chunk moves within its row by cp_row % 8, the same for every pass (kRowsPerPass is a
    // multiple of 8), so the per-pass offsets stay constants.
    static_assert(kRowsPerPass % fa::tiles::kSwizzleRows == 0, "one XOR for all passes");
    const int cp_at = fa::tiles::swizzled_offset<D>(cp_row, cp_col / 8);
    dst = fa::mma::smem_addr(stages) + uint32_t(cp_at) * 2;
    first = stages + cp_at;
    cols = d - cp_col;
    // Row cp_row (< kRowsPerPass <= 16 <= page_size) of K/V head kvh of page 0: inside the pool.
    const int64_t head_row = (t.kvh << page_shift) + cp_row;
    k_src = k_pool + head_row * d + cp_col;
    v_src = v_pool + head_row * d + cp_col;
    if (!active) {  // columns past d: zero in every stage, for good (no copy ever lands there)
      uint4* const chunk = reinterpret_cast<uint4*>(stages + cp_at);
#pragma unroll
      for (int st = 0; st < kStages; ++st)
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int at = (st * R::kStageElems + i * kRowsPerPass * R::kPitch) / 8;  // in chunks
          chunk[at] = make_uint4(0u, 0u, 0u, 0u);
          chunk[at + R::kVBytes / 16] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
    if (nsteps > 0) fetch(k_begin);
  }

  // The pages of the step starting at key k0: one table entry per run, every lane of the warp
  // reading the same one. A run past the split's end (its last step only) takes the page of the
  // split's last key instead (its rows are zero-filled, but its offset is still computed): the
  // entry read is always one of the sequence's, never a -1 past its end.
  __device__ __forceinline__ void fetch(int64_t k0) {
#pragma unroll
    for (int u = 0; u < kRuns; ++u)
      page[u] = __ldg(table + (imin(k0 + u * kRun, k_end - 1) >> page_shift));
  }

  // Step `st` into stage st % kStages; one commit group per step, an empty one past the last
  // step, so that "wait until kStages - 1 groups are pending" always means "step st has landed".
  // Steps are issued in order (0, 1, 2, ...): page[] holds step st's pages on entry, st + 1's on
  // return.
  __device__ __forceinline__ void issue(int64_t st) {
    if (st < nsteps && active) {
      const uint32_t at = dst + uint32_t(st % kStages) * R::kStageBytes;
      const int64_t k0 = k_begin + st * kRows;  // a multiple of kRows, so of kRun
      const int64_t in_page = (int64_t(1) << page_shift) - 1;
      int64_t off[kRuns];  // each run's first row in the pool, in elements (K and V alike)
#pragma unroll
      for (int u = 0; u < kRuns; ++u)
        off[u] = (int64_t(page[u]) * rows_per_page + ((k0 + u * kRun) & in_page)) * d;
      if (st + 1 < nsteps) fetch(k0 + kRows);  // in flight while this step is computed
      const int64_t left = k_end - k0;         // keys of the split from this step on
      if constexpr (kAnyLength) {
        T* const to = first + int(st % kStages) * R::kStageElems;
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int u = i * kRowsPerPass / kRun, r = i * kRowsPerPass % kRun;
          const bool in = cp_row + i * kRowsPerPass < left;  // rows past k_end: zeros
          const int at = i * kRowsPerPass * R::kPitch;       // elements from the stage's chunk
          fa::tiles::copy_chunk_by_elements(to + at, in ? k_src + off[u] + r * d : nullptr, cols);
          fa::tiles::copy_chunk_by_elements(to + R::kVBytes / 2 + at,
                                            in ? v_src + off[u] + r * d : nullptr, cols);
        }
      } else if (left >= kRows) {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int u = i * kRowsPerPass / kRun, r = i * kRowsPerPass % kRun;
          fa::mma::cp_async_16_l2_128(at + i * kRowsPerPass * R::kPitch * 2,
                                      k_src + off[u] + r * d);
          fa::mma::cp_async_16_l2_128(at + R::kVBytes + i * kRowsPerPass * R::kPitch * 2,
                                      v_src + off[u] + r * d);
        }
      } else {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int u = i * kRowsPerPass / kRun, r = i * kRowsPerPass % kRun;
          const bool in = cp_row + i * kRowsPerPass < left;
          fa::mma::cp_async_16(at + i * kRowsPerPass * R::kPitch * 2,
                               in ? k_src + off[u] + r * d : k_src, in);
          fa::mma::cp_async_16(at + R::kVBytes + i * kRowsPerPass * R::kPitch * 2,
                               in ? v_src + off[u] + r * d : v_src, in);
        }
      }
    }
    fa::mma::cp_async_commit();
  }
};

// v6: `done` holds one counter per row tile (the block's index / num_splits), zero at launch.
template <class T, int D, int kRun, bool kAnyLength>
__global__ void __launch_bounds__(kThreads, 2)
    mma_split_kernel(Params p, PagedTable pt, unsigned* done, int d) {
  using Lay = MmaLayout<D>;
  constexpr int kPitch = Lay::kPitch;
  constexpr float kNegInf = -INFINITY;
  // Swizzled rows must start at 128-byte boundaries (fa::tiles::swizzled_offset).
  extern __shared__ __align__(128) unsigned char smem[];
  T* const stages = reinterpret_cast<T*>(smem);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, t4 = lane % 4;  // this lane holds rows g and g + 8 of every fragment

  // Which (sequence, K/V head), row tile and split this block owns; the sequence's length; this
  // lane's two rows and Q fragments; the block's keys (none for a split past the sequence's end:
  // the block then writes empty partials, and still counts itself in).
  const MmaTile t = mma_tile(p, blockIdx.x);
  const int64_t seq_k = __ldg(pt.seqlens_k + t.b);
  int64_t out_row[2], last[2];
  uint32_t qf[D / 16][4];
  mma_rows<T, D, kAnyLength>(p, t, seq_k, d, g, t4, out_row, last, qf);
  int64_t k_begin, k_end;
  mma_keys(p, t, seq_k, k_begin, k_end);
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kTile - 1) / kTile : 0;

  // The copies, planned once per thread (PagedRingCopy), by the whole block: kTile rows per step,
  // found through the sequence's row of the block table.
  PagedRingCopy<T, D, kTile, kStages, kThreads, kRun, kAnyLength> copy(
      stages, static_cast<const T*>(p.k), static_cast<const T*>(p.v), pt, t, k_begin, k_end, nsteps,
      d, tid);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) copy.issue(st);

  // ldmatrix lane offsets, as in chapter 05. K: x4 = keys 0-7 / 8-15 times
  // columns 0-7 / 8-15 of a k16 slice (b of n8 tiles 0 and 1). V (.trans): x4 = keys 0-7 / 8-15
  // times columns 0-7 / 8-15 of a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1).
  // As 32-bit shared addresses of stage 0, in bytes: a step adds its stage's offset, a fragment a
  // compile-time constant. Warp w reads keys [w * kKeys, (w + 1) * kKeys) of each tile.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16), k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1), v_ld_col = 8 * (lane / 16);
  const uint32_t k_ld =
      fa::mma::smem_addr(stages) + uint32_t((warp * kKeys + k_ld_row) * kPitch + k_ld_col) * 2;
  const uint32_t v_ld = fa::mma::smem_addr(stages) + Lay::kVBytes +
                        uint32_t((warp * kKeys + v_ld_row) * kPitch + v_ld_col) * 2;
  // Those are the unswizzled addresses; every row this lane reads is lane % 8 modulo 8.
  const uint32_t swz = fa::tiles::swizzle_xor(lane);

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  float m[2] = {kNegInf, kNegInf};  // running max, log2 units (rows g, g + 8)
  float l[2] = {0.0f, 0.0f};        // this lane's share of the running sum (its columns)

  for (int64_t st = 0; st < nsteps; ++st) {
    fa::mma::cp_async_wait<kStages - 2>();  // this thread's copies of step st have landed
    __syncthreads();  // everyone's have, and every warp is done with the stage of step st - 1
    copy.issue(st + kStages - 1);  // into that stage: in flight while step st is computed
    const uint32_t stage = uint32_t(st % kStages) * Lay::kStageBytes;

    const int64_t k0 = k_begin + st * kTile + warp * kKeys;  // this warp's first key
    mma_step<T, D>(qf, k_ld + stage, v_ld + stage, k0, k_end, last, p.scale_log2, t4, m, l, o, swz);
  }
  fa::mma::cp_async_wait<0>();  // nothing of this thread's left in flight (empty groups only)

  // Epilogue. Each warp holds the state (m, l, o) of the 16 rows over its quarter of the block's
  // keys; chapter 02's pair merge folds the four into one per row, through shared memory (the ring
  // is free now), and the block writes one partial per row and split, as v3 did, or with a single
  // split O and L (merge_warps).
  quad_sum(l);
  static_assert(kWarps * kTileRows * (D + 2) * 4 <= Lay::kSmem, "the fold fits in the ring");
  merge_warps<T, D, kWarps, kAnyLength>(p, t, smem, d, tid, g, t4, m, l, o);
  if (p.num_splits == 1) return;  // O and L are written

  // v6: count this block's partial in; the tile's last block merges every split (header).
  __shared__ unsigned arrived;
  __threadfence();  // this thread's partial, visible to the GPU before the count says it is there
  __syncthreads();  // every thread's
  const int64_t tile = int64_t(blockIdx.x) / p.num_splits;
  if (tid == 0) arrived = atomicAdd(done + tile, 1u);
  __syncthreads();
  if (arrived != unsigned(p.num_splits - 1)) return;  // another split block is still running
  __threadfence();  // the other blocks' partials, seen after the count that said they are there
  merge_splits<T, D, kAnyLength>(p, t, d, tid);
  if (tid == 0) done[tile] = 0;  // every split block of the tile has counted: zero for the next
}

// The paged problem as the attention problem the split plan and make_params know: the pools as K
// and V, and every sequence as long as the longest (the kernel reads each one's own length).
AttentionFwdArgs as_attention(const fa::PagedFwdArgs& a) {
  const fa::PagedShape& s = a.shape;
  AttentionFwdArgs f;
  f.q = a.q;
  f.k = a.k_pages;
  f.v = a.v_pages;
  f.o = a.o;
  f.lse = a.lse;
  f.dtype = a.dtype;
  f.shape.batch = s.batch();
  f.shape.heads = s.heads;
  f.shape.heads_kv = s.heads_kv;
  f.shape.seq_q = s.seq_q;
  f.shape.seq_k = s.max_seq_k();
  f.shape.head_dim = s.head_dim;
  f.shape.causal = s.causal;
  f.shape.scale = s.scale;
  return f;
}

// Opts in to the shared memory, plans the splits for kTile-key steps and the kernel's residency
// (2 blocks per SM on an H100: registers) for the longest sequence, launches the split kernel with
// the tile counters when there is more than one split (it merges them too).
template <class T, int D, int kRun, bool kAnyLength>
void launch_split_kv(const fa::PagedFwdArgs& a, cudaStream_t stream) {
  using Lay = MmaLayout<D>;
  auto kernel = mma_split_kernel<T, D, kRun, kAnyLength>;
  FA_CUDA_CHECK(cudaFuncSetAttribute((const void*)kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(Lay::kSmem)));
  const AttentionFwdArgs f = as_attention(a);
  const fa::ch08::SplitPlan plan = fa::ch08::plan_split_kv(
      f.shape, kTile, resident_blocks((const void*)kernel, kThreads, Lay::kSmem));
  // The plan tiles group * seq_q rows by at most 16 (kMaxRows): one m16 tile per tile.
  FA_REQUIRE(plan.row_tiles == fa::ceil_div(f.shape.group() * f.shape.seq_q, kTileRows),
             "internal: the plan's row tiles and the kernel's m16 tiles disagree");
  // Splits are whole steps, so a step's first key is a multiple of kTile, hence of kRun.
  FA_REQUIRE(plan.split_len % kTile == 0, "internal: a split that is not whole steps");
  FA_UNSUPPORTED_IF(plan.blocks > 0x7fffffff, "more than 2^31 - 1 blocks");
  const Params p = make_params(f, plan);
  PagedTable pt;
  pt.block_table = a.block_table;
  pt.seqlens_k = a.seqlens_k;
  pt.max_pages = a.shape.max_pages;
  pt.rows_per_page = a.shape.kv_heads() * a.shape.page_size;
  pt.page_shift = 0;
  while ((int64_t(1) << pt.page_shift) < a.shape.page_size) ++pt.page_shift;
  unsigned* done = p.num_splits > 1 ? tile_counters(plan.base_blocks) : nullptr;
  kernel<<<unsigned(plan.blocks), kThreads, Lay::kSmem, stream>>>(p, pt, done,
                                                                  int(a.shape.head_dim));
  FA_CHECK_LAUNCH();
}

// The forward for the dtype, the instance D (64, 128) that computes the head dim, and the page
// size: the split kernel, which merges too. Pages of 64 keys or more hold a whole step (kRun =
// kTile); smaller ones (16, and 32, which the same code takes) hold runs of 16. t08: the instance
// with element copies where d is no multiple of 8.
template <class T, int D, int kRun>
void forward_run(const fa::PagedFwdArgs& a, cudaStream_t stream) {
  if (a.shape.head_dim % fa::kHeadDimStep != 0) return launch_split_kv<T, D, kRun, true>(a, stream);
  launch_split_kv<T, D, kRun, false>(a, stream);
}
template <class T, int D>
void forward(const fa::PagedFwdArgs& a, cudaStream_t stream) {
  if (a.shape.page_size >= kTile)
    forward_run<T, D, kTile>(a, stream);
  else
    forward_run<T, D, kSmallRun>(a, stream);
}

// t08: every head dim up to 128, at the next instance.
template <class T>
void dispatch_dim(const fa::PagedFwdArgs& a, cudaStream_t stream) {
  const int64_t d = a.shape.head_dim;
  FA_UNSUPPORTED_IF(
      d <= 0 || d > 128,
      std::string(kName) + " takes every head dim from 1 to 128; not " + std::to_string(d));
  if (d <= 64) return forward<T, 64>(a, stream);
  return forward<T, 128>(a, stream);
}

void paged_decode_forward(const fa::PagedFwdArgs& a, cudaStream_t stream) {
  const fa::PagedShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.heads >= 0 && s.heads_kv >= 0, "negative size");
  if (s.batch() == 0 || s.seq_q == 0 || s.heads == 0) return;  // no row to write
  FA_UNSUPPORTED_IF(s.heads % s.kv_heads() != 0, "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(s.page_size < kSmallRun || (s.page_size & (s.page_size - 1)) != 0,
                    std::string(kName) + " takes page sizes that are powers of two from " +
                        std::to_string(kSmallRun) + " up, not " + std::to_string(s.page_size));
  FA_REQUIRE(s.max_pages * s.page_size >= s.max_seq_k(),
             "the block table is narrower than the longest sequence");
  // t08: off the step of 8 every row is read and written element by element, and the elements'
  // own alignment is all the kernel needs.
  const bool whole_chunks = s.head_dim % fa::kHeadDimStep == 0;
  FA_UNSUPPORTED_IF(
      whole_chunks && (!ch02::gpu::aligned16(a.k_pages) || !ch02::gpu::aligned16(a.v_pages)),
      std::string(kName) + " copies K and V 16 bytes at a time: they must be 16-byte aligned");
  FA_UNSUPPORTED_IF(whole_chunks && (!aligned4(a.q) || !aligned4(a.o)),
                    std::string(kName) +
                        " reads Q and writes O two elements at a time: they must be 4-byte "
                        "aligned");
  switch (a.dtype) {
    case DType::F32:
      FA_UNSUPPORTED_IF(true, std::string(kName) + " runs on tensor cores: fp16 and bf16 only");
      return;
    case DType::F16:
      return dispatch_dim<__half>(a, stream);
    case DType::BF16:
      return dispatch_dim<__nv_bfloat16>(a, stream);
  }
}

}  // namespace

FA_REGISTER(PagedFwdKernel,
            {kName,
             paged_decode_forward,
             "08/t08 (v6 at every head dim up to 128, off the step of 8 too) over a paged cache: "
             "the ring's copies go through the block table (one entry per page a step spans, "
             "read a step ahead), each sequence its own length",
             {DType::F16, DType::BF16},
             {64, 128},
             {16, 64, 256},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true,
             /*rounds_head_dim=*/true,
             /*head_dim_step=*/1});
