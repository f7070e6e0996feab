// ch09_cpu_model.h: chapter 09's arithmetic on the CPU, in double: what the kernels do, without the
// GPU in the way, so the program and the tests can hold it against the float64 reference.
//
//  (a) The varlen forward. Q, K, V packed head-major (VarlenShape in shapes.h): the rows of query
//      head h of sequence b start at (h * total_q + cu_q[b]) * D, the keys of its K/V head at
//      (h_kv * total_k + cu_k[b]) * D. Each sequence is then chapter 05's tiled online softmax,
//      except that a block of Br rows walks only the key tiles ch09_band.h's key_tiles gives it,
//      and masks only the tiles tile_needs_mask names: a tile it does not mask is used whole.
//  (b) The paged KV cache (PagedShape): key j of sequence b is row j % page_size of page
//      block_table[b][j / page_size]. The model builds a cache with the pages of every sequence
//      in a shuffled order (spare pages and the unused rows of each last page hold NaN, so a read
//      of the wrong row poisons the result), and decodes from it with split-KV: the keys of a
//      row cut into ranges of split_len, a partial state (m, l, o) per range, the partials merged
//      left to right with chapter 02's pair merge, as chapter 08's kernels do.
#pragma once
#include <cstdint>
#include <vector>

#include "ch09_band.h"
#include "reference.h"
#include "shapes.h"

namespace fa::ch09 {

// How the key tiles of a run were classified, summed over every row block, head and sequence.
struct TileCounts {
  int64_t full = 0;     // every pair of the tile visible: used without a mask
  int64_t masked = 0;   // the window, the causal diagonal or a sequence's end crosses it
  int64_t skipped = 0;  // outside the band: never loaded
};

// One sequence of one head (HeadView: q [seq_q, d], k and v [seq_k, d], the window in it), tiled
// Br x Bc. O is [seq_q, d], L [seq_q] (-inf for a row that sees no key, O = 0 there).
void band_forward_head(const HeadView& h, int64_t Br, int64_t Bc, double* O, double* L,
                       TileCounts* counts = nullptr);

// The whole varlen batch: q [heads, total_q, d], k and v [kv_heads, total_k, d] (floats), O
// [heads, total_q, d] and L [heads, total_q] in double. The offsets come from the cumulative
// lengths, as the kernels compute them from cu_seqlens.
struct VarlenForward {
  std::vector<double> O, L;
  TileCounts tiles;
};
VarlenForward varlen_forward_model(const float* q, const float* k, const float* v,
                                   const VarlenShape& s, int64_t Br, int64_t Bc);

// The view of query head h of sequence b inside the packed tensors (the reference's input).
HeadView varlen_head_view(const VarlenShape& s, const float* q, const float* k, const float* v,
                          int64_t b, int64_t h);

// ---- The paged cache ------------------------------------------------------------------------
// The block table's width (max_pages) and the pool (num_pages: every sequence's pages plus
// `spare` unused ones) for s.seqlens_k and s.page_size; the other fields are kept.
PagedShape with_page_counts(PagedShape s, int64_t spare);

// A cache built from contiguous K and V: k and v hold sequence after sequence, each
// [kv_heads, seqlens_k[b], d] (sequence b starts at contiguous_offset(s, b)).
struct PagedCache {
  std::vector<float> k_pages, v_pages;  // [num_pages, kv_heads, page_size, d]
  std::vector<int32_t> block_table;     // [batch, max_pages]; -1 where a sequence has no page
};
int64_t contiguous_offset(const PagedShape& s, int64_t b);  // elements before sequence b
PagedCache build_paged_cache(const PagedShape& s, const float* k, const float* v, uint64_t seed);

// Row j of K/V head kv_head of sequence b, found through the block table (the kernels' gather).
const float* paged_row(const PagedShape& s, const std::vector<float>& pages,
                       const std::vector<int32_t>& block_table, int64_t b, int64_t kv_head,
                       int64_t j);

// The split-KV forward over the pages: q [batch, heads, seq_q, d]; O like q and L [batch, heads,
// seq_q], in double. Returns the number of partial states merged (a row's splits, summed).
int64_t paged_split_forward(const PagedShape& s, const float* q, const PagedCache& cache,
                            int64_t split_len, double* O, double* L);

// Lengths for a mixed batch: a 0 and a 1 first (the ragged extremes), then lengths drawn
// log-uniformly between 16 and max_len (seeded) until about `total` tokens are there; the last
// one is cut so the sum is exactly `total` (when total >= 1).
std::vector<int64_t> mixed_lengths(uint64_t seed, int64_t total, int64_t max_len);

}  // namespace fa::ch09
