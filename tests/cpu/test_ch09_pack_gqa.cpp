// The tile range of a tile of packed query rows (ch09_pack_gqa.h, 09/hopper_paged_pack_gqa)
// against its definition, row by row: packed row r is query position r % seq_q, and a K/V tile is
// visited when some real row of the Q tile sees some key in it, unmasked when every real row sees
// every one of its keys and so did every tile before it. Group sizes 1 (no packing: chapter 07's
// kv_tiles) to 8, positions that wrap inside a tile once or many times (seq_q below the tile
// height), tiles that cross from one head's rows into the next, seq_q above and below seq_k,
// empty caches, causal and not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "ch09_pack_gqa.h"

namespace {

fa::ch07::KvTiles packed_brute_force(int64_t q0, int64_t rows, int64_t packed_rows, int64_t seq_q,
                                     int64_t seq_k, int64_t bc, bool causal) {
  fa::ch07::KvTiles t{0, 0};
  bool prefix = true;
  for (int64_t k0 = 0; k0 < seq_k; k0 += bc) {
    bool any = false, all = true;
    for (int64_t r = q0; r < q0 + rows && r < packed_rows; ++r) {
      const int64_t pos = r % seq_q;
      for (int64_t j = k0; j < k0 + bc; ++j) {
        const bool seen = j < seq_k && (!causal || j <= pos + seq_k - seq_q);
        any = any || seen;
        all = all && seen;
      }
    }
    if (any) t.visit = k0 / bc + 1;
    prefix = prefix && all;
    if (prefix) t.unmasked = k0 / bc + 1;
  }
  return t;
}

TEST(Ch09PackGqa, TileRangeMatchesBruteForce) {
  constexpr int64_t kBr = 128;  // the kernel's Q tile
  int64_t checked = 0, crossing = 0;
  for (bool causal : {false, true})
    for (int64_t group : {1, 2, 4, 8})
      for (int64_t seq_q : {1, 2, 3, 17, 37, 64, 100, 127, 128, 129, 200})
        for (int64_t seq_k : {0, 1, 17, 64, 128, 129, 300})
          for (int64_t bc : {64, 128}) {
            const int64_t packed = group * seq_q;
            for (int64_t q0 = 0; q0 < packed; q0 += kBr) {
              const fa::ch07::KvTiles got =
                  fa::ch09::packed_kv_tiles(q0, kBr, packed, seq_q, seq_k, bc, causal);
              const fa::ch07::KvTiles want =
                  packed_brute_force(q0, kBr, packed, seq_q, seq_k, bc, causal);
              const int64_t last = std::min(q0 + kBr, packed) - 1;
              crossing += q0 / seq_q != last / seq_q;
              ++checked;
              ASSERT_EQ(got.visit, want.visit)
                  << "group " << group << " seq_q " << seq_q << " seq_k " << seq_k << " Bc " << bc
                  << " q0 " << q0 << " causal " << causal;
              ASSERT_EQ(got.unmasked, want.unmasked)
                  << "group " << group << " seq_q " << seq_q << " seq_k " << seq_k << " Bc " << bc
                  << " q0 " << q0 << " causal " << causal;
            }
          }
  // The cases the packing adds are there: tiles that cross from one head's rows into the next.
  EXPECT_GT(crossing, checked / 4) << checked << " tiles checked";
}

// Without packing (a group of one) the range is chapter 07's, tile for tile.
TEST(Ch09PackGqa, GroupOfOneIsChapter07sRange) {
  for (bool causal : {false, true})
    for (int64_t seq_q : {1, 17, 128, 300})
      for (int64_t seq_k : {1, 129, 1000})
        for (int64_t q0 = 0; q0 < seq_q; q0 += 128) {
          const fa::ch07::KvTiles a =
              fa::ch09::packed_kv_tiles(q0, 128, seq_q, seq_q, seq_k, 128, causal);
          const fa::ch07::KvTiles b = fa::ch07::kv_tiles(q0, 128, seq_q, seq_k, 128, causal);
          EXPECT_EQ(a.visit, b.visit);
          EXPECT_EQ(a.unmasked, b.unmasked);
        }
}

}  // namespace
