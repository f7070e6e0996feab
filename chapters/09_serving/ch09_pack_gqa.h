// ch09_pack_gqa.h: which K/V tiles a tile of packed query rows visits (09/hopper_paged_pack_gqa).
// Host and device: the kernel and the CPU test (tests/cpu/test_ch09_pack_gqa.cpp, against a
// brute-force definition) call the same function.
//
// Packing a group (FlashAttention-3's "pack GQA"): the query heads of one K/V head are adjacent in
// [batch, heads, seq_q, d], so for one sequence their rows are group * seq_q consecutive rows, and
// packed row r is query position r % seq_q of the group's head r / seq_q. A row's keys depend on
// its position only (causal masking is bottom-right per position), so a tile of packed rows needs
// the K/V tiles of the positions it holds. Which K/V tiles a set of positions visits, and which of
// them need no mask, depend on its smallest and largest position only (kv_tiles.h: the last row
// decides how far the tiles go, the first whether a tile is seen whole). A tile of packed rows
// [q0, q0 + rows) that stays inside one head's rows holds the positions q0 % seq_q .. last %
// seq_q; one that crosses into the next head's rows holds position seq_q - 1 (the end of the
// first head's rows) and position 0 (the start of the next), so its range is every position.
#pragma once
#include <cstdint>

#include "kv_tiles.h"
#include "shapes.h"

namespace fa::ch09 {

// The K/V tiles of packed rows [q0, min(q0 + rows, packed_rows)) of a group of packed_rows =
// group * seq_q rows (q0 < packed_rows).
FA_HD ch07::KvTiles packed_kv_tiles(int64_t q0, int64_t rows, int64_t packed_rows, int64_t seq_q,
                                    int64_t seq_k, int64_t bc, bool causal) {
  const int64_t last = (q0 + rows < packed_rows ? q0 + rows : packed_rows) - 1;
  const bool crosses = q0 / seq_q != last / seq_q;
  const int64_t lo = crosses ? 0 : q0 % seq_q, hi = crosses ? seq_q - 1 : last % seq_q;
  return ch07::kv_tiles(lo, hi - lo + 1, seq_q, seq_k, bc, causal);
}

}  // namespace fa::ch09
