// ch09_band.h: which tiles of S a sliding window touches, for the forward (a block of query rows
// walks key tiles) and the backward (a block of keys walks query tiles). Host and device: the
// kernels, the CPU model and the tests call these same functions.
//
// The window of shapes.h, per sequence: with the bottom-right diagonal d(i) = i + seq_k - seq_q,
// query i sees keys j with d(i) - left <= j <= d(i) + right (causal: right = 0), clipped to
// 0..seq_k-1. Both ends grow by one per row, so the keys a block of consecutive rows sees are one
// interval (from the first row's first key to the last row's last key), and the rows that see a
// block of consecutive keys are one interval too. That is why a window costs nothing but a
// different start and end of the same tile loop, and a mask on the tiles the band's edges cross.
#pragma once
#include <cstdint>

#include "shapes.h"

namespace fa::ch09 {

// The window of one sequence, with "unlimited" written as a distance no sequence reaches, so the
// arithmetic below needs no branch per side.
struct Band {
  int64_t seq_q = 0, seq_k = 0;
  int64_t left = 0, right = 0;  // keys before / after the diagonal, kUnlimited when -1
  static constexpr int64_t kUnlimited = int64_t(1) << 40;

  static FA_HD Band make(int64_t seq_q, int64_t seq_k, bool causal, int64_t window_left,
                         int64_t window_right) {
    Band b;
    b.seq_q = seq_q;
    b.seq_k = seq_k;
    b.left = window_left >= 0 ? window_left : kUnlimited;
    const int64_t r = causal ? 0 : window_right;
    b.right = r >= 0 ? r : kUnlimited;
    return b;
  }
  FA_HD int64_t diagonal(int64_t i) const { return i + seq_k - seq_q; }
  // Keys query row i sees, clipped to the sequence (empty when last < first).
  FA_HD int64_t first_key(int64_t i) const {
    const int64_t f = diagonal(i) - left;
    return f > 0 ? f : 0;
  }
  FA_HD int64_t last_key(int64_t i) const {
    const int64_t l = diagonal(i) + right;
    return l < seq_k - 1 ? l : seq_k - 1;
  }
  FA_HD bool visible(int64_t i, int64_t j) const {
    return j >= diagonal(i) - left && j <= diagonal(i) + right && j >= 0 && j < seq_k;
  }
  // Rows that see key j: d(i) - left <= j <= d(i) + right, i.e. j - right <= d(i) <= j + left.
  FA_HD int64_t first_row(int64_t j) const {
    const int64_t f = j - right - (seq_k - seq_q);
    return f > 0 ? f : 0;
  }
  FA_HD int64_t last_row(int64_t j) const {
    const int64_t l = j + left - (seq_k - seq_q);
    return l < seq_q - 1 ? l : seq_q - 1;
  }
};

// A half-open range of tiles [begin, end): empty when end <= begin.
struct TileRange {
  int64_t begin = 0, end = 0;
};

// Forward: the key tiles (of Bc keys) that query rows [i0, i1) visit, i1 clipped to seq_q. Rows
// of the block that see nothing (before the first row that sees a key) do not widen it.
FA_HD TileRange key_tiles(const Band& b, int64_t i0, int64_t i1, int64_t Bc) {
  if (i1 > b.seq_q) i1 = b.seq_q;
  if (i0 >= i1 || b.seq_k <= 0) return {0, 0};
  const int64_t first = b.first_key(i0), last = b.last_key(i1 - 1);
  if (last < first || last < 0 || first >= b.seq_k) return {0, 0};
  return {first / Bc, last / Bc + 1};
}

// Backward: the query tiles (of Br rows) that keys [j0, j1) are seen by, j1 clipped to seq_k.
FA_HD TileRange query_tiles(const Band& b, int64_t j0, int64_t j1, int64_t Br) {
  if (j1 > b.seq_k) j1 = b.seq_k;
  if (j0 >= j1 || b.seq_q <= 0) return {0, 0};
  const int64_t first = b.first_row(j0), last = b.last_row(j1 - 1);
  if (last < first || last < 0 || first >= b.seq_q) return {0, 0};
  return {first / Br, last / Br + 1};
}

// True when some pair of the tile rows [i0, i1) x keys [j0, j1) is hidden, by the window or by
// the end of the sequence: only such tiles pay for a mask. Every pair is visible exactly when the
// last row's first key is at most j0, the first row's last key is at least j1 - 1, and the tile
// lies inside the sequence.
FA_HD bool tile_needs_mask(const Band& b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (i1 > b.seq_q || j1 > b.seq_k) return true;
  return b.diagonal(i1 - 1) - b.left > j0 || b.diagonal(i0) + b.right < j1 - 1;
}

}  // namespace fa::ch09
