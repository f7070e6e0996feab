// 09/hopper_paged_prefill: chapter 07's final forward (07/v4_intra_overlap: TMA producer, two
// ping-pong consumer warpgroups, the softmax of S_j overlapped with P_{j-1} V_{j-1}) over a paged
// KV cache: the chunked prefill of 09/paged_v2_prefill on wgmma. Read 07/v4 first
// (chapters/07_flash_hopper/sm90a/v4_intra_overlap.cu): the ring, the turns, the named barriers
// and the inside of a turn are its own, unchanged; only where a K/V tile comes from changed. The
// ring and the turns are called from common/device/hopper_v4_block.cuh (Ring, consume: 07/v4's
// code), with this rung's mask and its last turn's V rows as hooks.
//
// The problem is 09/paged_v2_prefill's (shapes.h, PagedShape): sequence b brings seq_q new
// queries (Q, O [batch, heads, seq_q, d], as in chapter 07) and attends to its cache of
// seqlens_k[b] keys, causal bottom-right; K and V are pools of pages [num_pages, heads,
// page_size, d], key j of sequence b being row j % page_size of page
// block_table[b * max_pages + j / page_size].
//
// What changed vs 07/v4, and why
//   One idea: the producer finds each K/V tile through the block table. 07's K and V maps are
//   [batch * heads][seq_k][d] and a tile is one box per 64-column strip at row j Bc. Here the maps
//   describe the pools as [num_pages * heads][page_size][d] (make_tmap, unchanged: a page's
//   rows of one K/V head are contiguous, one "head" of the map), and a tile's Bc keys are cut into
//   boxes of min(Bc, page_size) rows, each inside one page (both are powers of two): one box per
//   strip when a page holds a whole tile (page 256, or 128 at Bc 128), Bc / page_size boxes when
//   it does not (page 16: 8 boxes per strip at D 64 and 128, 4 at D 256). Box u of tile j starts
//   at key j Bc + u rows, which is row (j Bc + u rows) % page_size of page
//   block_table[(j Bc + u rows) / page_size]; it lands u rows further down each strip. Every box
//   is rows x 128 bytes with rows >= 16, a whole number of 1024-byte swizzle atoms, so the boxes
//   of one strip together are exactly 07's tile, swizzled the same way, and the consumers read
//   it with 07's descriptors. The K/V head is page * heads + h, the map's third coordinate. The producer is a warp instead of 07's one thread: lane u reads box u's entry
//   and issues box u, so a tile's entries (up to 8) are one load, not one dependent load per box
//   before each issue; with one thread, pages of 16 ran 0.61x pages of 64 (H200, D 128).
//
//   What the table takes away is TMA's zero fill at seq_k. In 07 a box past seq_k read zeros; here
//   it reads the rest of the sequence's last page, rows no key was ever written to (the harness
//   fills them with NaN). Each place that reads them, and why it stays right:
//   * the table: a box that starts at or past seq_k takes the page of the sequence's last key
//     (the entries past it are -1 and are never read), as 09/paged_v2_prefill does;
//   * K past seq_k: masked to -inf by comparison, as in 07 (mask_tile selects, it never adds), on
//     the tile that reaches past seq_k, which is never one of the unmasked tiles (kv_tiles.h);
//   * V past seq_k: P is exactly 0 there, but 0 x NaN is NaN. Consumer 0 zeroes those rows of the
//     last tile's V slot in the last turn, before its P V, and fences them for wgmma (which reads
//     through the async proxy); its turn barrier orders them before its own wgmma and before
//     consumer 1's turn, and the producer cannot refill the slot before both consumers release
//     it. One tile per block, at most Bc rows: a few stores, against 07's zeros for free.
//   Q, O and L are 07's: dense per sequence, Q's map zero-fills past seq_q, O and L are stored
//   with 07's predicated stores.
//
//   Per sequence: seqlens_k[b] is read on the device, and kv_tiles gets this sequence's seq_k;
//   the grid (Q tiles x batch x heads) does not depend on it, and a sequence with no key writes
//   O = 0 and L = -inf (07's epilogue for a row that saw no key).
//   07/v4's head dims (64, 128, 256, and the multiples of 8 between them rounded up as 07 does:
//   head_dim_instance, hopper_attention.cuh; the pools' rows are d long, TMA zero-fills the
//   columns past d) and one K/V head per query head, as 07/v4: grouped heads and the instances at
//   96 and 192 are 07/t52's, and 09/hopper_paged_prefill_persistent puts the table into t52.
//   Page sizes: powers of two from 16 up.
//
//   07's timeline marks (FA_TL_*) are left out: only chapter 07's timeline program records them.
//
// Map of the kernel (as 07/v4)
//   block       3 warpgroups (384 threads): producer + 2 consumers; Br = 128
//   tiles       Bc = 128 for D = 64, 128; 64 for D = 256; Bc / min(Bc, page_size) boxes a strip
//   pipeline    kStages K slots and kStages V slots (4 / 2 / 2 for D = 64 / 128 / 256)
//   smem        D 64: 144 KiB, D 128: 160 KiB, D 256: 192 KiB
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168), no spills
// Speed: measured in chapters/09_serving/README.md
#include <cuda.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "hopper_attention.cuh"
#include "hopper_v4_block.cuh"
#include "gpu.h"

namespace fa::ch09 {
namespace {

using namespace fa::ch07;      // Tiles, descriptors, mask, online softmax, epilogue, tensor maps
using namespace fa::ch07::v4;  // 07/v4's block: its shape, ring and consumers

// 07's Params with seq_k replaced by the paged cache: the lengths are per sequence now.
struct PagedParams {
  void* o;
  float* lse;
  const int32_t* block_table;  // [batch, max_pages]: key j of sequence b in page [b][j >> shift]
  const int32_t* seqlens_k;    // [batch]: keys per sequence, on the device
  int64_t seq_q;
  int64_t max_pages;  // the table's width
  int d;              // the real head dim, O's row length (D rounds it up)
  int heads;          // query heads, and K/V heads (one each)
  int page_shift;     // log2(page_size)
  int box_shift;      // log2(rows of one box): min(log2 Bc, page_shift)
  int num_q_tiles;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e); its absolute value is used (see negate_if)
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_paged_fwd_kernel(const __grid_constant__ CUtensorMap tm_q,
                           const __grid_constant__ CUtensorMap tm_k,
                           const __grid_constant__ CUtensorMap tm_v, const PagedParams p) {
  using Tl = Tiles<D>;
  using Sm = V4Smem<D>;
  constexpr int kBc = Tl::kBc;
  constexpr int kStages = Sm::kStages;
  extern __shared__ unsigned char smem_raw[];
  const Ring<D> r(smem_raw);
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128, q = t % 4;
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const int64_t b = bh / p.heads;
  const int h = int(bh % p.heads);
  const int seq_k = p.seqlens_k[b];
  const KvTiles range = kv_tiles(q0, kBr, p.seq_q, seq_k, kBc, p.causal);
  const int n_tiles = int(range.visit), n_unmasked = int(range.unmasked);

  r.init();

  if (warpgroup == 0) {
    // ---- Producer: gives its registers away, then one thread keeps the ring full.
    hopper::setmaxnreg_dec<kProducerRegs>();
    // Tile j of K or V through the table: boxes of 2^box_shift rows, each inside one page; lane u
    // of the producer's first warp reads box u's entry and issues box u (u rows further down
    // every strip), so that a tile's entries are one load, not one dependent load per box. A box
    // starting past seq_k takes the last key's page. Lane 0 announces the tile's bytes first.
    const int32_t* table = p.block_table + b * p.max_pages;
    const int in_page = (1 << p.page_shift) - 1;
    auto load_paged_tile = [&](unsigned char* slot, const CUtensorMap* tm, uint64_t* full, int j) {
      if (t == 0) hopper::mbar_arrive_expect_tx(full, Sm::kKVBytes);
      __syncwarp();
      const int row = t << p.box_shift, key = j * kBc + row;  // this lane's box
      if (row < kBc) {
        const int page = __ldg(table + (min(key, seq_k - 1) >> p.page_shift));
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(slot + c * kBc * 128 + row * 128, tm, full, c * kSwizzleCols,
                              key & in_page, page * p.heads + h);
      }
    };
    if (t < 32) {
      if (t == 0) {
        hopper::mbar_arrive_expect_tx(r.q_full, Sm::kQBytes);
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(r.q() + c * kBr * 128, &tm_q, r.q_full, c * kSwizzleCols, int(q0),
                              int(bh));
      }
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        if (use > 0) hopper::mbar_wait(&r.empty_k[s], (use - 1) & 1);  // both consumers freed it
        load_paged_tile(r.k(s), &tm_k, &r.full_k[s], j);
        if (use > 0) hopper::mbar_wait(&r.empty_v[s], (use - 1) & 1);  // freed a turn after K
        load_paged_tile(r.v(s), &tm_v, &r.full_v[s], j);
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then run 07/v4's turns (consume) on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows and the last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
  const int64_t last_key[2] = {last_visible_key(row0, p.seq_q, seq_k, p.causal),
                               last_visible_key(row0 + 8, p.seq_q, seq_k, p.causal)};
  const float c = fabsf(p.scale_log2);

  float o[Tl::kOAcc], m[2], l[2];  // O's accumulators and the rows' running max and sum

  // The last turn (P V only): V_{j-1} is the last tile; its rows past seq_k (unwritten rows of
  // the last page) become zeros, by consumer 0, before its turn (the header says why that is
  // enough).
  auto last_turn = [&](int j, int sp) {
    if (consumer == 0 && int64_t(j) * kBc > seq_k) {
      const int first = seq_k - (j - 1) * kBc;  // the tile's first row past seq_k
      for (int i = t; i < Tl::kStrips * (kBc - first) * 8; i += 128) {
        const int c = i / ((kBc - first) * 8), row = first + (i / 8) % (kBc - first);
        *reinterpret_cast<uint4*>(r.v(sp) + c * kBc * 128 + row * 128 + (i % 8) * 16) = uint4{};
      }
      hopper::fence_proxy_async_smem();  // for the wgmma's reads (the async proxy)
    }
  };
  // Keys past seq_k (unwritten rows of the last page) fall in the masked tiles.
  auto mask = [&](auto& sc, int j) {
    if (j >= n_unmasked) mask_tile(sc, int64_t(j) * kBc, last_key, q);
  };
  consume<T, D>(r, consumer, t, n_tiles, p.scale_log2, c, o, m, l, mask, last_turn);

  store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + bh * p.seq_q * p.d, p.lse + bh * p.seq_q,
                  wg_row0, p.seq_q, t, p.d);
}

// ---- Host side: 07's maps and checks (ch07_launch.cuh), for the paged layout.
constexpr const char* kName = "09/hopper_paged_prefill";
constexpr int kMinPage = 16;  // the smallest box: 16 rows, two swizzle atoms

int log2_of(int64_t x) {
  int s = 0;
  while ((int64_t(1) << s) < x) ++s;
  return s;
}

template <class T, int D>
void launch(const PagedFwdArgs& a, cudaStream_t stream) {
  constexpr auto kKernel = flash_paged_fwd_kernel<T, D>;
  constexpr int kSmemBytes = V4Smem<D>::kBytes;
  constexpr int kBc = Tiles<D>::kBc;
  const PagedShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, kBr);
  const int64_t blocks = num_q_tiles * s.batch() * s.heads;
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  set_smem_limit_once<kKernel, kSmemBytes>();
  // Q as 07's [batch * heads][seq_q][d]; the pools as [num_pages * heads][page_size][d], read
  // in boxes of min(Bc, page_size) rows. d <= D: the boxes' columns past it arrive as zeros.
  const int d = int(s.head_dim);
  const int box_rows = int(std::min<int64_t>(kBc, s.page_size));
  const CUtensorMap tm_q = make_tmap(a.q, s.batch() * s.heads, s.seq_q, d, kBr, a.dtype);
  CUtensorMap tm_k = tm_q, tm_v = tm_q;  // no page: no sequence has a key, nothing reads K or V
  if (s.num_pages > 0) {
    tm_k = make_tmap(a.k_pages, s.num_pages * s.heads, s.page_size, d, box_rows, a.dtype);
    tm_v = make_tmap(a.v_pages, s.num_pages * s.heads, s.page_size, d, box_rows, a.dtype);
  }
  PagedParams p;
  p.o = a.o;
  p.lse = a.lse;
  p.block_table = a.block_table;
  p.seqlens_k = a.seqlens_k;
  p.seq_q = s.seq_q;
  p.max_pages = s.max_pages;
  p.d = d;
  p.heads = int(s.heads);
  p.page_shift = log2_of(s.page_size);
  p.box_shift = log2_of(box_rows);
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.scale_log2 = softmax_scale(s.scale, s.head_dim) * 1.4426950408889634f;  // log2(e)
  kKernel<<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(tm_q, tm_k, tm_v, p);
  FA_CHECK_LAUNCH();
}

template <class T>
void dispatch_head_dim(const PagedFwdArgs& a, cudaStream_t stream) {
  launch_head_dim_instance<false>(kName, a.shape.head_dim,
                                  [&](auto d) { launch<T, decltype(d)::value>(a, stream); });
}

// 09/paged_v2_prefill's refusals, and TMA's (hopper_attention.cuh, tma_can_load): no fallback,
// a tensor TMA cannot describe is refused.
void paged_prefill(const PagedFwdArgs& a, cudaStream_t stream) {
  const PagedShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.heads >= 0 && s.heads_kv >= 0 && s.num_pages >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  if (s.seq_q == 0 || s.batch() == 0 || s.heads == 0) return;  // nothing to write
  FA_UNSUPPORTED_IF(s.heads % s.kv_heads() != 0, "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(s.kv_heads() != s.heads,
                    std::string(kName) +
                        ": one K/V head per query head (09/hopper_paged_prefill_persistent takes "
                        "grouped heads)");
  FA_UNSUPPORTED_IF(s.page_size < kMinPage || (s.page_size & (s.page_size - 1)) != 0,
                    std::string(kName) + ": page sizes are powers of two from " +
                        std::to_string(kMinPage) + " up, not " + std::to_string(s.page_size));
  FA_REQUIRE(s.max_pages * s.page_size >= s.max_seq_k(),
             "the block table is narrower than the longest sequence");
  FA_UNSUPPORTED_IF(reinterpret_cast<uintptr_t>(a.q) % 16 != 0 ||
                        reinterpret_cast<uintptr_t>(a.k_pages) % 16 != 0 ||
                        reinterpret_cast<uintptr_t>(a.v_pages) % 16 != 0 ||
                        reinterpret_cast<uintptr_t>(a.o) % 4 != 0,
                    std::string(kName) + ": TMA needs 16-byte aligned Q and pools (O: 4 bytes)");
  // int32 TMA coordinates and key indices (a tile's last key is j Bc + Bc - 1).
  constexpr int64_t kMargin = 512;
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kMargin || s.max_seq_k() > INT_MAX - kMargin ||
                        s.num_pages * s.heads > INT_MAX || s.batch() * s.heads > INT_MAX,
                    std::string(kName) +
                        ": lengths, pages x heads and batch x heads must fit int32 TMA "
                        "coordinates");
  if (a.dtype == DType::BF16)
    dispatch_head_dim<__nv_bfloat16>(a, stream);
  else
    dispatch_head_dim<__half>(a, stream);
}

}  // namespace

FA_REGISTER(PagedFwdKernel,
            {kName,
             paged_prefill,
             "07/v4 over a paged cache (chunked prefill on wgmma): each K/V tile loaded as TMA "
             "boxes through the block table (one per page a tile spans), the last tile's unwritten "
             "V rows zeroed, each sequence its own length",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             {16, 64, 256},
             /*min_sm=*/90,
             /*gqa=*/false,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch09
