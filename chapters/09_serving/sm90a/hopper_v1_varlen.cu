// 09/hopper_v1_varlen: chapter 07's final forward (07/v4_intra_overlap: TMA producer, two
// ping-pong consumer warpgroups, the softmax of S_j overlapped with P_{j-1} V_{j-1}) on a
// variable-length batch. Read 07/v4 first (chapters/07_flash_hopper/sm90a/v4_intra_overlap.cu):
// the producer, the ring, the turns, the named barriers and the inside of a turn are its own,
// unchanged; only where a block's rows and keys come from changed. The ring and the consumers'
// turns are called from common/device/hopper_v4_block.cuh (Ring, consume: 07/v4's code, compiled
// to the same machine code) instead of written out again; this file holds the producer, the mask
// and the epilogue, where the idea lies.
//
// What changed vs 07/v4, and why
//   One idea: an offset table in front of the tile loop. The batch is packed without padding,
//   head-major (VarlenShape, common/shapes.h): Q is [heads, total_q, D], K and V are
//   [heads_kv, total_k, D], and sequence b owns rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 of
//   every head's slab (K: cu_seqlens_k). A block reads its sequence's two offsets and two lengths
//   from cu_seqlens (device memory, as FlashAttention's varlen functions get them) and from then
//   on is 07/v4 on a problem of seq_q x seq_k whose row 0 lies at that offset.
//
//   The grid: 07's blocks were (Q tile, batch * head) with ceil(seq_q / Br) tiles per head; here
//   (Q tile, head, sequence) with ceil(max_seq_q / Br) tiles for every sequence, the host knowing
//   only the longest one. A block whose tile starts at or past its sequence's seq_q returns at
//   once (a zero-length sequence returns every block), before any barrier exists, so nothing
//   waits for it.
//
//   The tensor maps stay 07's three-dimensional ones, now [heads][total][D] instead of
//   [batch * heads][seq][D]; a tile's row coordinate is the sequence's offset plus the tile's
//   first row. TMA's zero fill now happens only at the end of the whole packed slab: a box that
//   runs past the end of one sequence reads the next sequence's rows, not zeros. Each place that
//   reads such rows, and why it stays correct:
//   * K past seq_k: 07 already masks every key at or past seq_k to -inf by comparison (it never
//     counted on zeros there: a zero key gives a score of 0, not -inf). A tile that reaches past
//     seq_k is never one of the unmasked tiles (kv_tiles, kv_tiles.h) and mask_tile cuts each
//     row at last_visible_key <= seq_k - 1; the mask overwrites whatever S the foreign keys gave.
//   * V past seq_k: multiplied by P = 2^-inf = +0 exactly. 0 * v = 0 when v is finite, and it is:
//     another sequence's values (the inputs are finite, as for any attention problem) or TMA's
//     zeros past the slab's end. An Inf or NaN planted in another sequence's V would leak in as
//     NaN; dense 07 had zeros there, so that assumption is new.
//   * Q past seq_q: the next sequence's queries become extra rows of this tile. Each row's
//     softmax is its own (wgmma rows and the quad shuffles never mix rows), and their O and L are
//     never stored, so they cost work but change nothing.
//   * The O and L store: 07 stores O with plain predicated stores (store_o_l,
//     hopper_attention.cuh), not TMA, and skips rows at or past seq_q. Handed this sequence's base and length it writes
//     exactly rows 0 .. seq_q - 1 of it, none of the next sequence's: nothing to change. (A TMA
//     store would write whole boxes; FlashAttention-3 stores varlen O without TMA as well.)
//   Coordinates are int32 for TMA; cu_seqlens are int32 already, and the launcher checks that a
//   box starting at a sequence's last tile (offset + up to 128 rows) still fits.
//
//   Head dims 64, 128 and 256 as 07/v4, and the multiples of 8 between them rounded up to the
//   next as 07 does (head_dim_instance, hopper_attention.cuh: the maps' rows are d long, TMA
//   zero-fills the columns past d, O stores d of them); the few extra registers (the offsets, read
//   once, and the epilogue's base) leave every instantiation within setmaxnreg's 240 without
//   spills (-Xptxas -v, CUDA 13.0), D = 256 needing 225..232 as in 07/v4. Like 07/v4 it takes
//   one K/V head per query head: grouped heads (query head h reading K/V head h / group, one
//   division in the TMA coordinate) come with 07/v5's persistent blocks, the instances at 96
//   and 192 with 07/t52's, and the packed batch enters t52 in hopper_v3_varlen_persistent.cu,
//   the kernel that serves packed batches on Hopper.

//   A zero-length K (seq_k = 0) visits no tile: the consumers store O = 0 and L = -inf, as 07's
//   epilogue does for a row that saw no key. A batch whose every K is empty (total_k = 0) has no
//   K tensor to describe: the launch hands the kernel Q's map for K and V, never read.
//
//   07's timeline marks (FA_TL_*) are left out: only chapter 07's timeline program records them.
//
// Map of the kernel (as 07/v4)
//   block       3 warpgroups (384 threads): producer + 2 consumers; Br = 128
//   tiles       Bc = 128 for D = 64, 128; 64 for D = 256
//   pipeline    kStages K slots and kStages V slots (4 / 2 / 2 for D = 64 / 128 / 256)
//   smem        D 64: 144 KiB, D 128: 160 KiB, D 256: 192 KiB
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168), no spills
// Speed: measured in chapters/09_serving/README.md
#include <cuda.h>

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

// 07's Params with the lengths replaced by the offset table: they are per sequence now.
struct VarlenParams {
  void* o;
  float* lse;
  const int32_t* cu_seqlens_q;  // batch + 1 offsets into the packed rows, on the device
  const int32_t* cu_seqlens_k;
  int64_t total_q;  // rows of one head's slab of Q, O and L
  int d;            // the real head dim, O's row length (D rounds it up)
  int heads;        // query heads, each with its own K/V head
  int num_q_tiles;  // ceil(max_seq_q / Br): Q tiles per (sequence, head)
  bool causal;
  float scale_log2;  // softmax_scale * log2(e); its absolute value is used (see negate_if)
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_varlen_fwd_kernel(const __grid_constant__ CUtensorMap tm_q,
                            const __grid_constant__ CUtensorMap tm_k,
                            const __grid_constant__ CUtensorMap tm_v, const VarlenParams p) {
  using Tl = Tiles<D>;
  using Sm = V4Smem<D>;
  constexpr int kBc = Tl::kBc;
  constexpr int kStages = Sm::kStages;

  // ---- The offset table: which sequence, head and Q tile this block is, and where they lie.
  const int64_t seq_head = blockIdx.x / p.num_q_tiles;  // sequence * heads + head
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int b = int(seq_head / p.heads), h = int(seq_head % p.heads);
  const int q_start = p.cu_seqlens_q[b], k_start = p.cu_seqlens_k[b];  // first packed row
  const int64_t seq_q = p.cu_seqlens_q[b + 1] - q_start, seq_k = p.cu_seqlens_k[b + 1] - k_start;
  const int64_t q0 = int64_t(q_tile) * kBr;
  if (q0 >= seq_q) return;  // past this sequence's queries: the whole block, before any barrier
  const KvTiles range = kv_tiles(q0, kBr, seq_q, seq_k, kBc, p.causal);
  const int n_tiles = int(range.visit), n_unmasked = int(range.unmasked);

  extern __shared__ unsigned char smem_raw[];
  const Ring<D> r(smem_raw);
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128, q = t % 4;

  r.init();

  if (warpgroup == 0) {
    // ---- Producer: gives its registers away, then one thread keeps the ring full. Rows are
    // packed rows: the sequence's offset plus the tile's first row (boxes may run into the next
    // sequence, see the header).
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      hopper::mbar_arrive_expect_tx(r.q_full, Sm::kQBytes);
      for (int c = 0; c < Tl::kStrips; ++c)
        hopper::tma_load_3d(r.q() + c * kBr * 128, &tm_q, r.q_full, c * kSwizzleCols,
                            q_start + int(q0), h);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        if (use > 0) hopper::mbar_wait(&r.empty_k[s], (use - 1) & 1);  // both consumers freed it
        hopper::mbar_arrive_expect_tx(&r.full_k[s], Sm::kKVBytes);
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(r.k(s) + c * kBc * 128, &tm_k, &r.full_k[s], c * kSwizzleCols,
                              k_start + j * kBc, h);
        if (use > 0) hopper::mbar_wait(&r.empty_v[s], (use - 1) & 1);  // freed a turn after K
        hopper::mbar_arrive_expect_tx(&r.full_v[s], Sm::kKVBytes);
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(r.v(s) + c * kBc * 128, &tm_v, &r.full_v[s], c * kSwizzleCols,
                              k_start + j * kBc, h);
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then run 07/v4's turns (consume) on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows (of this sequence) and the last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
  const int64_t last_key[2] = {last_visible_key(row0, seq_q, seq_k, p.causal),
                               last_visible_key(row0 + 8, seq_q, seq_k, p.causal)};
  const float c = fabsf(p.scale_log2);

  float o[Tl::kOAcc], m[2], l[2];  // O's accumulators and the rows' running max and sum

  // Keys past seq_k (the next sequence's, read by the box) fall in the masked tiles.
  auto mask = [&](auto& sc, int j) {
    if (j >= n_unmasked) mask_tile(sc, int64_t(j) * kBc, last_key, q);
  };
  consume<T, D>(r, consumer, t, n_tiles, p.scale_log2, c, o, m, l, mask);

  // Rows 0 .. seq_q - 1 of this sequence and head only: store_o_l skips rows at or past seq_q,
  // which belong to the next sequence.
  const int64_t first_row = int64_t(h) * p.total_q + q_start;  // in the [heads, total_q] slabs
  store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + first_row * p.d, p.lse + first_row, wg_row0,
                  seq_q, t, p.d);
}

// ---- Host side: 07's checks and launch (ch07_launch.cuh), for the packed layout.
constexpr const char* kName = "09/hopper_v1_varlen";

template <class T, int D>
void launch(const VarlenFwdArgs& a, cudaStream_t stream) {
  constexpr auto kKernel = flash_varlen_fwd_kernel<T, D>;
  constexpr int kSmemBytes = V4Smem<D>::kBytes;
  const VarlenShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.max_seq_q(), kBr);
  const int64_t blocks = num_q_tiles * s.batch() * s.heads;
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  set_smem_limit_once<kKernel, kSmemBytes>();
  // [heads][total][d]: a head's slab is the 07 map's [seq] axis; the packed offsets select rows.
  // d <= D: the boxes' columns past it arrive as zeros (head_dim_instance).
  const int d = int(s.head_dim);
  const CUtensorMap tm_q = make_tmap(a.q, s.heads, s.total_q(), d, kBr, a.dtype);
  CUtensorMap tm_k = tm_q, tm_v = tm_q;  // every K empty: no block loads a K/V tile (header)
  if (s.total_k() > 0) {
    tm_k = make_tmap(a.k, s.heads, s.total_k(), d, Tiles<D>::kBc, a.dtype);
    tm_v = make_tmap(a.v, s.heads, s.total_k(), d, Tiles<D>::kBc, a.dtype);
  }
  VarlenParams p;
  p.o = a.o;
  p.lse = a.lse;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.total_q = s.total_q();
  p.d = d;
  p.heads = int(s.heads);
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.scale_log2 = s.sequence(0).softmax_scale() * 1.4426950408889634f;  // log2(e)
  kKernel<<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(tm_q, tm_k, tm_v, p);
  FA_CHECK_LAUNCH();
}

template <class T>
void dispatch_head_dim(const VarlenFwdArgs& a, cudaStream_t stream) {
  launch_head_dim_instance<false>(kName, a.shape.head_dim,
                                  [&](auto d) { launch<T, decltype(d)::value>(a, stream); });
}

// 07's refusals (run_fwd_rung), less its fallback: a misaligned tensor is refused, not rerouted
// (no varlen kernel of another chapter to hand it to).
void varlen_fwd(const VarlenFwdArgs& a, cudaStream_t stream) {
  const VarlenShape& s = a.shape;
  FA_REQUIRE(s.heads >= 0 && s.heads_kv >= 0, "negative head count");
  FA_REQUIRE(s.seqlens_k.size() == s.seqlens_q.size(), "seqlens_q and seqlens_k differ in length");
  for (size_t b = 0; b < s.seqlens_q.size(); ++b)
    FA_REQUIRE(s.seqlens_q[b] >= 0 && s.seqlens_k[b] >= 0, "negative sequence length");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(s.has_window(),
                    std::string(kName) + ": no sliding window (09/hopper_v2_window takes one)");
  FA_UNSUPPORTED_IF(s.kv_heads() != s.heads,
                    std::string(kName) +
                        ": one K/V head per query head (09/hopper_v3_varlen_persistent takes "
                        "grouped heads)");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  if (s.batch() == 0 || s.heads == 0 || s.total_q() == 0) return;  // nothing to write
  FA_REQUIRE(a.cu_seqlens_q != nullptr && a.cu_seqlens_k != nullptr, "cu_seqlens on the device");
  // TMA's rules (hopper_attention.cuh, tma_can_load) and int32 box coordinates: a sequence's last
  // box starts below total and reaches at most 128 rows past it.
  FA_UNSUPPORTED_IF(!aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.v, 16) || !aligned(a.o, 4),
                    std::string(kName) + ": TMA needs 16-byte aligned Q, K, V (O: 4 bytes)");
  FA_UNSUPPORTED_IF(
      s.total_q() >= INT_MAX - 512 || s.total_k() >= INT_MAX - 512 || s.heads >= INT_MAX,
      std::string(kName) + ": packed rows or heads past int32 TMA coordinates");
  if (a.dtype == DType::BF16)
    dispatch_head_dim<__nv_bfloat16>(a, stream);
  else
    dispatch_head_dim<__half>(a, stream);
}

}  // namespace

FA_REGISTER(VarlenFwdKernel,
            {kName,
             varlen_fwd,
             "07/v4 on a packed variable-length batch: an offset table (cu_seqlens) in front of "
             "the tile loop, TMA boxes at packed rows, keys past seq_k masked, O stored per row",
             {DType::F16, DType::BF16},
             {64, 128, 256},
             /*min_sm=*/90,
             /*gqa=*/false,
             /*window=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch09
