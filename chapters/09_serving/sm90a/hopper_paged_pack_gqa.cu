// 09/hopper_paged_pack_gqa: 09/hopper_paged_prefill with a group's query heads packed into one Q
// tile, FlashAttention-3's "pack GQA": each K/V tile a block loads serves every query head of its
// group, so a K/V byte is loaded once per group instead of once per query head. Read
// hopper_paged_prefill.cu first: the producer, the table, the turns and the epilogue are its own.
//
// What changed vs 09/hopper_paged_prefill, and why
//   One idea: a block is a tile of the group's rows, not of one head's. Q is [batch, heads, seq_q,
//   d] and the group of K/V head g is query heads g * group .. g * group + group - 1, adjacent:
//   for one sequence their seq_q rows each lie one after the other, group * seq_q rows of d that
//   are contiguous in memory. So Q (and O, and L) is described as [batch * heads_kv][group *
//   seq_q][d] instead of [batch * heads][seq_q][d]: the same bytes, the same tensor map code,
//   and packed row r is query position r % seq_q of query head g * group + r / seq_q. The block
//   (Q tile, sequence, K/V head) loads K/V head g's tiles once for all of its rows.
//
//   What depends on a row's position and not its index: the causal mask. Each thread's two rows
//   find their last visible key from r % seq_q (two remainders, once); the block's tile range
//   is taken over the positions its rows hold (packed_kv_tiles, ch09_pack_gqa.h, checked on the
//   CPU against a brute-force definition): [q0 % seq_q, last % seq_q] when the tile lies in one
//   head's rows, and every position when it crosses into the next head's, which then holds
//   position seq_q - 1 and position 0 both. Without the
//   mask (causal false) every row sees every key, as before. The epilogue stores the group's rows
//   as the rows of one [group * seq_q] problem: the stores are 07's, predicated on the packed row
//   count.
//
//   Why it pays, and where. A decoding step (seq_q = 1) of hopper_paged_prefill gives each query
//   head a block whose 128-row Q tile holds one row: the tensor cores compute 128 rows for one,
//   and the group's blocks each stream the same K/V head (once from memory, the rest from L2, at
//   best). Packed, a block's tile holds the group's rows (4 at H 32, H_kv 8) and the blocks are
//   group times fewer: the same useful work in a quarter of the tensor-core work and K/V loads.
//   A chunk of 128 queries or more per sequence fills whole tiles either way (a tile is one
//   head's rows when 128 divides seq_q): the same blocks, in another order.
//   Decoding runs chapter 09's split-KV kernels (09/paged_v1_decode, up to D 128, and
//   09/paged_v5_decode_d256), which pack the group too and split the keys over blocks; the
//   dispatch runs this rung for chunks of queries at D 256 with pages of 256 keys, where its
//   64-key tile is one TMA box a strip (09/hopper_paged_prefill_persistent's 80-key tile: 3 to 5).
//
// Map of the kernel: 09/hopper_paged_prefill's, blocks (Q tile of the group's rows, sequence, K/V
// head).
// Speed: measured in chapters/09_serving/README.md
#include <cuda.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "ch09_pack_gqa.h"
#include "hopper_attention.cuh"
#include "hopper_v4_block.cuh"
#include "gpu.h"

namespace fa::ch09 {
namespace {

using namespace fa::ch07;      // Tiles, descriptors, mask, online softmax, epilogue, tensor maps
using namespace fa::ch07::v4;  // 07/v4's block: its shape, ring and consumers

// hopper_paged_prefill's Params; rows is the packed row count of a block's problem.
struct PagedParams {
  void* o;
  float* lse;
  const int32_t* block_table;  // [batch, max_pages]: key j of sequence b in page [b][j >> shift]
  const int32_t* seqlens_k;    // [batch]: keys per sequence, on the device
  int64_t seq_q;
  int64_t rows;       // group * seq_q: the packed rows of one (sequence, K/V head)
  int64_t max_pages;  // the table's width
  int d;              // the real head dim, O's row length (D rounds it up)
  int heads_kv;
  int page_shift;  // log2(page_size)
  int box_shift;   // log2(rows of one box): min(log2 Bc, page_shift)
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
  const int64_t bh = blockIdx.x / p.num_q_tiles;  // sequence * heads_kv + K/V head
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const int64_t b = bh / p.heads_kv;
  const int h_kv = int(bh % p.heads_kv);
  const int seq_k = p.seqlens_k[b];
  // The K/V tiles of the positions the tile's rows hold (every position once it crosses into the
  // next query head's rows; ch09_pack_gqa.h).
  const KvTiles range = packed_kv_tiles(q0, kBr, p.rows, p.seq_q, seq_k, kBc, p.causal);
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
                              key & in_page, page * p.heads_kv + h_kv);
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
  const int64_t last_key[2] = {last_visible_key(row0 % p.seq_q, p.seq_q, seq_k, p.causal),
                               last_visible_key((row0 + 8) % p.seq_q, p.seq_q, seq_k, p.causal)};
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

  store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + bh * p.rows * p.d, p.lse + bh * p.rows,
                  wg_row0, p.rows, t, p.d);
}

// ---- Host side: 07's maps and checks (ch07_launch.cuh), for the paged layout.
constexpr const char* kName = "09/hopper_paged_pack_gqa";
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
  const int64_t rows = s.heads / s.kv_heads() * s.seq_q;  // a group's rows, packed
  const int64_t num_q_tiles = ceil_div(rows, kBr);
  const int64_t blocks = num_q_tiles * s.batch() * s.kv_heads();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  set_smem_limit_once<kKernel, kSmemBytes>();
  // Q as [batch * heads_kv][group * seq_q][d] (the group's rows, packed); the pools as
  // [num_pages * heads_kv][page_size][d], read in boxes of min(Bc, page_size) rows. d <= D: the
  // boxes' columns past it arrive as zeros.
  const int d = int(s.head_dim);
  const int box_rows = int(std::min<int64_t>(kBc, s.page_size));
  const CUtensorMap tm_q = make_tmap(a.q, s.batch() * s.kv_heads(), rows, d, kBr, a.dtype);
  CUtensorMap tm_k = tm_q, tm_v = tm_q;  // no page: no sequence has a key, nothing reads K or V
  if (s.num_pages > 0) {
    tm_k = make_tmap(a.k_pages, s.num_pages * s.kv_heads(), s.page_size, d, box_rows, a.dtype);
    tm_v = make_tmap(a.v_pages, s.num_pages * s.kv_heads(), s.page_size, d, box_rows, a.dtype);
  }
  PagedParams p;
  p.o = a.o;
  p.lse = a.lse;
  p.block_table = a.block_table;
  p.seqlens_k = a.seqlens_k;
  p.seq_q = s.seq_q;
  p.rows = rows;
  p.max_pages = s.max_pages;
  p.d = d;
  p.heads_kv = int(s.kv_heads());
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

// hopper_paged_prefill's refusals (a group's packed rows within int32 TMA coordinates).
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
  FA_UNSUPPORTED_IF(s.seq_q * (s.heads / s.kv_heads()) > INT_MAX - kMargin ||
                        s.max_seq_k() > INT_MAX - kMargin || s.num_pages * s.kv_heads() > INT_MAX ||
                        s.batch() * s.heads > INT_MAX,
                    std::string(kName) +
                        ": lengths, pages x heads_kv and batch x heads must fit int32 TMA "
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
             "09/hopper_paged_prefill with a group's query heads packed into one Q tile "
             "(FlashAttention-3's pack GQA): Q, O and L as [batch * heads_kv, group * seq_q, d], "
             "each K/V tile loaded once per group; causal masks by a row's position r % seq_q",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             {16, 64, 256},
             /*min_sm=*/90,
             /*gqa=*/true,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch09
