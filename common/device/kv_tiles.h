// kv_tiles.h: which K/V tiles one Q tile visits, and which of those need a mask. Plain integer
// arithmetic shared by the Hopper kernels of chapters 07 and 09 (device) and the CPU test that
// checks it against a brute-force definition (tests/cpu/test_ch07_tiles.cpp), for every seq_q,
// seq_k, causal or not. Chapter 07 introduces it (notes/07_flash_hopper.md).
//
// Causal masking is aligned bottom-right (notes/conventions.md): query row i sees key j when
// j <= i + (seq_k - seq_q). A Q tile of rows [q0, q0 + rows) therefore
//   * visits K/V tiles 0 .. visit-1, where the last one holds the last key its last real row sees;
//     tiles entirely above the diagonal are never loaded (skipped, not masked);
//   * needs no mask on tiles 0 .. unmasked-1: every key of those is seen by every row of the tile
//     (the first row sees the fewest keys) and lies before seq_k.
// Tiles unmasked .. visit-1 are the diagonal tiles and the ragged end of K: those are masked
// element by element, a key past a row's last visible key becoming -inf.
#pragma once
#include <cstdint>

#include "shapes.h"  // FA_HD

namespace fa::ch07 {

// The last key row `row` may see (-1: none).
FA_HD int64_t last_visible_key(int64_t row, int64_t seq_q, int64_t seq_k, bool causal) {
  int64_t lk = seq_k - 1;
  if (causal && row + seq_k - seq_q < lk) lk = row + seq_k - seq_q;
  return lk < -1 ? -1 : lk;
}

struct KvTiles {
  int64_t visit;     // K/V tiles 0 .. visit-1 are loaded and computed
  int64_t unmasked;  // of those, tiles 0 .. unmasked-1 need no mask (unmasked <= visit)
};

// q0: the Q tile's first row (q0 < seq_q); rows: its height (Br); bc: keys per K/V tile (Bc).
FA_HD KvTiles kv_tiles(int64_t q0, int64_t rows, int64_t seq_q, int64_t seq_k, int64_t bc,
                       bool causal) {
  const int64_t all = (seq_k + bc - 1) / bc;
  const int64_t last_row = (q0 + rows < seq_q ? q0 + rows : seq_q) - 1;
  const int64_t lk_last = last_visible_key(last_row, seq_q, seq_k, causal);
  const int64_t lk_first = last_visible_key(q0, seq_q, seq_k, causal);
  KvTiles t;
  t.visit = lk_last < 0 ? 0 : (lk_last / bc + 1 < all ? lk_last / bc + 1 : all);
  t.unmasked = lk_first < 0 ? 0 : ((lk_first + 1) / bc < t.visit ? (lk_first + 1) / bc : t.visit);
  return t;
}

// Whether the rows [row0, row0 + rows) of a work tile that visits `visit` >= 1 K/V tiles leave the
// second half of the last one unseen: no real row sees any of its keys from (visit - 1) bc + bc / 2
// on (past its causal diagonal, or at or past seq_k). 07/t68_half_last_key_tile computes that
// tile's S and P V over its first bc / 2 keys then. Rows at or past seq_q are not real: a
// consumer without any (the last query tile's) needs nothing of the tile.
FA_HD bool half_last_tile(int64_t row0, int64_t rows, int64_t seq_q, int64_t seq_k, int64_t bc,
                          bool causal, int64_t visit) {
  if (row0 >= seq_q) return true;
  const int64_t last_row = (row0 + rows < seq_q ? row0 + rows : seq_q) - 1;
  return last_visible_key(last_row, seq_q, seq_k, causal) < (visit - 1) * bc + bc / 2;
}

// The same two numbers from their definition, element by element: the slow check that kv_tiles
// is measured against (chapter 07's program, its CPU tier, and tests/cpu/test_ch07_tiles.cpp).
// A tile is visited when some real row sees some key in it; it needs no mask when every real row
// sees every one of its keys and so did every tile before it.
inline KvTiles kv_tiles_brute_force(int64_t q0, int64_t rows, int64_t seq_q, int64_t seq_k,
                                    int64_t bc, bool causal) {
  KvTiles t{0, 0};
  bool prefix = true;
  for (int64_t k0 = 0; k0 < seq_k; k0 += bc) {
    bool any = false, all = true;
    for (int64_t i = q0; i < q0 + rows && i < seq_q; ++i)
      for (int64_t j = k0; j < k0 + bc; ++j) {
        const bool seen = j < seq_k && (!causal || j <= i + seq_k - seq_q);
        any = any || seen;
        all = all && seen;
      }
    if (any) t.visit = k0 / bc + 1;
    prefix = prefix && all;
    if (prefix) t.unmasked = k0 / bc + 1;
  }
  return t;
}

// ---- The launch order of the backward's dK/dV blocks (07/bwd_v6_head_groups) -------------
// A dK/dV block is a (unit, key tile) pair, a unit being a (K/V head, part); causally a block's
// work falls with its key tile. The grid is n_units x n_kt blocks, handed out in launch order to
// whichever SM frees first. Head-group order: groups of `units` units one after the other, and
// inside a group key tile by key tile (key tile 0 of each of its units, then key tile 1, ...):
// each group starts with its heaviest blocks, and the blocks running at once read the Q and dO of
// one or two groups only (the L2). units = 1 is head by head, the main path's order.

// How many units a group holds: about two waves of work, so that a group's heavy blocks start
// while the previous group's light ones still run. Work is counted in blocks of one query head:
// a unit that walks h query heads (grouped K/V heads, heads_per_unit = h) weighs h of them, so a
// group holds 2 x slots / (n_kt x h) units, and its Q and dO, h heads' each, stay the same size.
// A power of two, so that it divides batch x heads in the usual shapes (a last, smaller group is
// handed out the same way, but ends later); at least 1, at most n_units. slots: the blocks the GPU
// holds at once.
FA_HD int64_t head_group_units(int64_t n_kt, int64_t slots, int64_t n_units,
                               int64_t heads_per_unit = 1) {
  const int64_t per_unit = (n_kt > 1 ? n_kt : 1) * (heads_per_unit > 1 ? heads_per_unit : 1);
  const int64_t want = 2 * slots / per_unit;
  int64_t g = 1;
  while (2 * g <= want && 2 * g <= n_units) g *= 2;
  return g;
}

// Block b of the grid as (unit, key tile). Block b is in group b / (units x n_kt), which holds
// units first .. first + here - 1 (here < units only for a last, smaller group); inside it, block
// r = b - first x n_kt is key tile r / here of unit first + r % here.
struct BlockPlace {
  int64_t unit, kt;
};
FA_HD BlockPlace head_group_place(int64_t b, int64_t n_kt, int64_t n_units, int64_t units) {
  const int64_t first = b / (units * n_kt) * units;
  const int64_t here = n_units - first < units ? n_units - first : units;
  const int64_t r = b - first * n_kt;
  return {first + r % here, r / here};
}

}  // namespace fa::ch07
