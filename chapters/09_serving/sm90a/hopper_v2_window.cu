// 09/hopper_v2_window: 09/hopper_v1_varlen with a sliding window (local attention), in the
// window's FlashAttention meaning (AttentionShape, common/shapes.h): query i of a sequence sees
// keys d(i) - window_left .. d(i) + window_right, d(i) = i + seq_k - seq_q its bottom-right
// diagonal, -1 leaving a side unlimited; causal is window_right = 0. Read v1 first
// (hopper_v1_varlen.cu): the offset table, the producer, the ring, the turns and the epilogue are
// its own, unchanged.
//
// What changed vs v1, and why
//   One idea: the band of ch09_band.h in place of chapter 07's causal diagonal. 07 (and v1) let a
//   Q tile visit key tiles 0 .. visit - 1 (kv_tiles, kv_tiles.h): everything left of the
//   diagonal, nothing right of it. A window also cuts on the left, so a Q tile of rows
//   [q0, q0 + Br) visits the key tiles [begin, end) of fa::ch09::key_tiles: from the tile of the
//   first row's first key to the tile of the last row's last key (both ends of a row's keys grow
//   by one per row, so the keys of consecutive rows are one interval). The tile loop is v1's,
//   its j counting visited tiles from 0 so that the ring's stages and phases stay v1's: turn j
//   loads and masks key tile begin + j. Tiles left of the band are skipped, not masked: a window
//   of W keys costs O(W) per row, whatever seq_k.
//
//   The mask generalises 07's diagonal: there a tile needed a mask from the first tile the
//   diagonal (or seq_k) crosses to the end; here the band has two edges, so masked tiles sit at
//   both ends of the range. The tiles that need none (fa::ch09::tile_needs_mask false) are one
//   interval between them, worked out once, so a turn compares its j with two ints as 07
//   compares it with one (n_unmasked). Its rows are the real ones, [q0, min(q0 + Br, seq_q)):
//   rows past seq_q belong to the next sequence and are never stored (v1's header), as 07's
//   kv_tiles counts only real rows. A masked tile keeps, of each row, keys first_key ..
//   last_key of its Band (the band clipped to 0 .. seq_k - 1): exactly Band::visible, written
//   as two bounds per row so the loop over a thread's accumulators compares ints, as 07's
//   mask_tile does with one. Keys past seq_k, read by boxes that run into the next sequence, are
//   outside every row's last_key, so v1's argument stands: masked in S, and their V rows meet
//   P = 0.
//
//   A row whose keys all lie outside a tile that other rows need (the tile is left or right of
//   its band) gets a row of -inf: online_softmax keeps m and multiplies O by 1, and a row that
//   has seen no key yet keeps m = -inf without a NaN (hopper_attention.cuh). A row that sees no
//   key at all (seq_k = 0, or the first rows when seq_q > seq_k) ends with O = 0 and L = -inf, as
//   before.
//
//   Registers: one more pair of row bounds (first_key) than v1, kept in 32 bits by counting keys
//   from the block's first key tile, and the two ends of the unmasked interval. Holding the
//   band's 64-bit values across the loop instead (tile_needs_mask per turn, or these bounds in
//   64 bits) costs registers that D = 256 does not have: 24 bytes of spills in one form tried.
//   Every instantiation fits setmaxnreg's 240 without spills (-Xptxas -v, CUDA 13.0); lowering
//   kConsumerRegs shows D = 256 needs 225..232, as v1 and 07/v4.
//
// Map of the kernel (as v1 and 07/v4)
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
#include "../ch09_band.h"
#include "gpu.h"

namespace fa::ch09 {
namespace {

using namespace fa::ch07;      // Tiles, descriptors, online softmax, epilogue, tensor maps
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
  int64_t window_left, window_right;  // -1: unlimited (shapes.h)
  float scale_log2;  // softmax_scale * log2(e); its absolute value is used (see negate_if)
};

// 07's mask_tile with the band's left edge as well: of the tile of keys k0 .. k0 + 2N - 1, row h
// of this thread keeps keys first_key[h] .. last_key[h] (Band::visible), the rest become -inf.
// All three are counted from the block's first key tile, in 32 bits (the consumers' setup).
template <int N>
__device__ __forceinline__ void mask_band(float (&s)[N], int k0, const int (&first_key)[2],
                                          const int (&last_key)[2], int q) {
  int lo[2], hi[2];  // first and last visible column of each row, relative to the tile, clamped
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int f = first_key[h] - k0, r = last_key[h] - k0;
    lo[h] = int(f < 0 ? 0 : (f > 2 * N ? 2 * N : f));
    hi[h] = int(r < -1 ? -1 : (r > 2 * N ? 2 * N : r));
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int col = 8 * (i / 4) + 2 * q + (i % 2), h = (i / 2) % 2;
    if (col < lo[h] || col > hi[h]) s[i] = -INFINITY;
  }
}

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
  // The band's key tiles: tile j of the loop is key tile first_tile + j.
  const Band band = Band::make(seq_q, seq_k, p.causal, p.window_left, p.window_right);
  const int64_t q1 = q0 + kBr < seq_q ? q0 + kBr : seq_q;  // past the real rows: not stored
  const TileRange range = key_tiles(band, q0, q1, kBc);
  const int first_tile = int(range.begin);
  const int n_tiles = range.end > range.begin ? int(range.end - range.begin) : 0;

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
                              k_start + (first_tile + j) * kBc, h);
        if (use > 0) hopper::mbar_wait(&r.empty_v[s], (use - 1) & 1);  // freed a turn after K
        hopper::mbar_arrive_expect_tx(&r.full_v[s], Sm::kKVBytes);
        for (int c = 0; c < Tl::kStrips; ++c)
          hopper::tma_load_3d(r.v(s) + c * kBc * 128, &tm_v, &r.full_v[s], c * kSwizzleCols,
                              k_start + (first_tile + j) * kBc, h);
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then run 07/v4's turns (consume) on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows (of this sequence) and the first and last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
  // Counted from the first key tile's first key, so that they fit in 32 bits: a row's first key
  // is at or past it (0 .. seq_k - 1 from there); its last key, below it for a row that sees
  // nothing (down to -seq_q), is clamped at -1, which hides the same keys.
  const int64_t k_base = int64_t(first_tile) * kBc;
  int first_key[2], last_key[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    first_key[h] = int(band.first_key(row0 + 8 * h) - k_base);
    const int64_t last = band.last_key(row0 + 8 * h) - k_base;
    last_key[h] = int(last < -1 ? -1 : last);
  }
  // The key tiles no row of the block needs masked (tile_needs_mask false) are one interval, kept
  // as its two ends (turns j of the loop): a tile is free of the mask iff its first key is at or
  // after the last row's first key and its last key at or before the first row's last key (at
  // most seq_k - 1). As in 09/v2_window, the ends rather than the band, whose 64-bit values held
  // across the loop would cost registers.
  const int64_t free_first_key = band.first_key(q1 - 1), free_last_key = band.last_key(q0);
  const int free_first_tile = int((free_first_key + kBc - 1) / kBc) - first_tile;
  const int free_end_tile = max(int((free_last_key + 1) / kBc) - first_tile, free_first_tile);
  const float c = fabsf(p.scale_log2);

  float o[Tl::kOAcc], m[2], l[2];  // O's accumulators and the rows' running max and sum

  // The band's edges, and keys past seq_k (the next sequence's, read by the box), fall in the
  // masked tiles.
  auto mask = [&](auto& sc, int j) {
    if (j < free_first_tile || j >= free_end_tile) mask_band(sc, j * kBc, first_key, last_key, q);
  };
  consume<T, D>(r, consumer, t, n_tiles, p.scale_log2, c, o, m, l, mask);

  // Rows 0 .. seq_q - 1 of this sequence and head only: store_o_l skips rows at or past seq_q,
  // which belong to the next sequence.
  const int64_t first_row = int64_t(h) * p.total_q + q_start;  // in the [heads, total_q] slabs
  store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + first_row * p.d, p.lse + first_row, wg_row0,
                  seq_q, t, p.d);
}

// ---- Host side: 07's checks and launch (ch07_launch.cuh), for the packed layout.
constexpr const char* kName = "09/hopper_v2_window";

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
  p.window_left = s.window_left;
  p.window_right = s.window_right;
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
  FA_UNSUPPORTED_IF(s.kv_heads() != s.heads,
                    std::string(kName) +
                        ": one K/V head per query head (09/hopper_v5_window_single_units takes "
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
             "v1 + a sliding window: the Q tile visits the band's key tiles (ch09_band.h), both "
             "of the band's edges masked, tiles outside it skipped",
             {DType::F16, DType::BF16},
             {64, 128, 256},
             /*min_sm=*/90,
             /*gqa=*/false,
             /*window=*/true,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch09
