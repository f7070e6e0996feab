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
//   Decoding at head dims up to 128 runs chapter 09's split-KV kernel (09/paged_v1_decode), which
//   packs the group too and splits the keys over blocks; this rung is what the dispatch can run
//   for head dims 136 to 256 and for short chunks.
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
#include "gpu.h"

namespace fa::ch09 {
namespace {

using namespace fa::ch07;  // Tiles, descriptors, mask, online softmax, epilogue, tensor maps

constexpr int kConsumers = 2;                           // warpgroups that compute
constexpr int kThreads = 128 * (1 + kConsumers);        // + the producer warpgroup
constexpr int kBr = kConsumers * kRowsPerWarpgroup;     // 128 query rows per block
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 24 + 2 x 240 = 3 x 168
constexpr int kTurnBar = 1;            // named barriers 1, 2: consumer 0's, 1's turn
constexpr int kTurnThreads = 2 * 128;  // the giver's arrive + the taker's sync
template <int D>
constexpr int stages() {
  return D == 64 ? 4 : 2;
}

template <int D>
struct V4Smem {
  static constexpr int kStages = stages<D>();
  static constexpr int kQBytes = kBr * D * 2;
  static constexpr int kKVBytes = Tiles<D>::kKVBytes;
  static constexpr int kKOffset = kQBytes;                       // K stage s at + s * kKVBytes
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;  // V stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (1 + 4 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
};

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
  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume atoms start there.
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sQ = smem;
  auto sK = [&](int s) { return smem + Sm::kKOffset + s * Sm::kKVBytes; };
  auto sV = [&](int s) { return smem + Sm::kVOffset + s * Sm::kKVBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* full_k = q_full + 1;          // per stage: the K tile has landed
  uint64_t* full_v = full_k + kStages;    // per stage: the V tile has landed
  uint64_t* empty_k = full_v + kStages;   // per stage: both consumers are done reading K
  uint64_t* empty_v = empty_k + kStages;  // per stage: both consumers are done reading V

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

  if (threadIdx.x == 0) {
    hopper::mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&full_k[s], 1);  // the producer's expect_tx arrival
      hopper::mbar_init(&full_v[s], 1);
      hopper::mbar_init(&empty_k[s], 128 * kConsumers);  // every consumer thread, once per use
      hopper::mbar_init(&empty_v[s], 128 * kConsumers);
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

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
        hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols, int(q0),
                              int(bh));
      }
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        if (use > 0) hopper::mbar_wait(&empty_k[s], (use - 1) & 1);  // both consumers freed it
        load_paged_tile(sK(s), &tm_k, &full_k[s], j);
        if (use > 0) hopper::mbar_wait(&empty_v[s], (use - 1) & 1);  // freed a turn after K
        load_paged_tile(sV(s), &tm_v, &full_v[s], j);
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then compute exactly as v1 on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const unsigned char* sQc = sQ + consumer * kRowsPerWarpgroup * 128;  // its rows in each strip
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows and the last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
  const int64_t last_key[2] = {last_visible_key(row0 % p.seq_q, p.seq_q, seq_k, p.causal),
                               last_visible_key((row0 + 8) % p.seq_q, p.seq_q, seq_k, p.causal)};
  const float c = fabsf(p.scale_log2);

  float o[Tl::kOAcc];
#pragma unroll
  for (int i = 0; i < Tl::kOAcc; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  uint32_t pf[Tl::kPSlices][4];  // P_{j-1}: written by the softmax of turn j - 1, read in turn j
  const int n_turns = n_tiles > 0 ? n_tiles + 1 : 0;

  // Turn j. kS: it has an S (j < n_tiles), kPV: it has a P V (j > 0); compile-time, so that no
  // wgmma sits on a run-time branch (ptxas would serialise them).
  auto turn = [&](int j, auto k_s, auto k_pv) {
    constexpr bool kS = decltype(k_s)::value, kPV = decltype(k_pv)::value;
    const int s = j % kStages, sp = (j + kStages - 1) % kStages;  // stages of tile j and j - 1
    if constexpr (kS) hopper::mbar_wait(&full_k[s], (j / kStages) & 1);
    if constexpr (kPV) hopper::mbar_wait(&full_v[sp], ((j - 1) / kStages) & 1);
    // The last turn: V_{j-1} is the last tile; its rows past seq_k (unwritten rows of the last
    // page) become zeros, by consumer 0, before its turn (the header says why that is enough).
    if constexpr (!kS) {
      if (consumer == 0 && int64_t(j) * kBc > seq_k) {
        const int first = seq_k - (j - 1) * kBc;  // the tile's first row past seq_k
        for (int i = t; i < Tl::kStrips * (kBc - first) * 8; i += 128) {
          const int c = i / ((kBc - first) * 8), r = first + (i / 8) % (kBc - first);
          *reinterpret_cast<uint4*>(sV(sp) + c * kBc * 128 + r * 128 + (i % 8) * 16) = uint4{};
        }
        hopper::fence_proxy_async_smem();  // for the wgmma's reads (the async proxy)
      }
    }

    // ---- This consumer's turn: S_j = Q K_j^T, then O += P_{j-1} V_{j-1}, two commit groups.
    hopper::named_bar_sync(kTurnBar + consumer, kTurnThreads);
    float sc[Tl::kSAcc];
    hopper::fence_registers(o);
    hopper::wgmma_fence();
    if constexpr (kS) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        hopper::wgmma_ss<kBc, T, 0>(sc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(sK(s), kk),
                                    kk > 0);
      hopper::wgmma_commit();  // the older group: S_j
    }
    if constexpr (kPV) {
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk)
        hopper::wgmma_rs<D, T, 1>(o, pf[kk], desc_v<D>(sV(sp), kk), 1);
      hopper::wgmma_commit();  // the newer group: P_{j-1} V_{j-1}
    }
    // ---- The other consumer's turn may start now (consumer 1 hands over nothing after its last).
    if (consumer == 0 || j + 1 < n_turns)
      hopper::named_bar_arrive(kTurnBar + 1 - consumer, kTurnThreads);

    // ---- Softmax of S_j as soon as S_j is done, while P_{j-1} V_{j-1} still runs: it touches
    // neither O nor P_{j-1}, which that wgmma reads and writes.
    float alpha[2];
    if constexpr (kS) {
      if constexpr (kPV)
        hopper::wgmma_wait<1>();  // all but the newest group done: S_j is
      else
        hopper::wgmma_wait<0>();
      hopper::fence_registers(sc);
      hopper::mbar_arrive(&empty_k[s]);  // done with K_j
      negate_if(sc, p.scale_log2 < 0.0f);
      // Keys past seq_k (unwritten rows of the last page) fall in these tiles: masked here.
      if (j >= n_unmasked) mask_tile(sc, int64_t(j) * kBc, last_key, q);
      online_softmax(sc, m, l, c, alpha);
      hopper::fence_registers(sc);  // the exponentials are computed before the wait below
    }
    if constexpr (kPV) {
      hopper::wgmma_wait<0>();
      hopper::fence_registers(o);
#pragma unroll
      for (int kk = 0; kk < Tl::kPSlices; ++kk) hopper::fence_registers(pf[kk]);
      hopper::mbar_arrive(&empty_v[sp]);  // done with V_{j-1}
    }
    // ---- O now holds P_{j-1} V_{j-1}: rescale it for tile j, and P_j replaces P_{j-1}.
    if constexpr (kS) {
      rescale(o, alpha);
      pack_p<T>(sc, pf);
    }
  };
  using Yes = std::true_type;
  using No = std::false_type;

  hopper::mbar_wait(q_full, 0);
  // Consumer 0 takes the first turn. Every bar.arrive meets exactly one bar.sync (header).
  if (consumer == 1 && n_turns > 0) hopper::named_bar_arrive(kTurnBar, kTurnThreads);
  if (n_turns > 0) {
    turn(0, Yes{}, No{});  // S_0 only
    for (int j = 1; j < n_tiles; ++j) turn(j, Yes{}, Yes{});
    turn(n_tiles, No{}, Yes{});  // P_{n-1} V_{n-1} only
  }

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
  switch (head_dim_instance_with_192(a.shape.head_dim)) {
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    case 192:
      return launch<T, 192>(a, stream);
    case 256:
      return launch<T, 256>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) +
                                  " not instantiated (64, 128, 192, 256, and the multiples of 8 "
                                  "between them, rounded up)");
  }
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
             {64, 128, 192, 256},
             {16, 64, 256},
             /*min_sm=*/90,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch09
