// Chapter 07's tile-range arithmetic (kv_tiles.h) against a brute-force definition: a Q tile
// visits exactly the K/V tiles in which some real row sees some key, and skips the mask exactly on
// the tiles whose every key is seen by every real row; both sets are prefixes. Bottom-right
// causal alignment, seq_q != seq_k both ways, ragged lengths, the tile sizes the kernels use.
#include <gtest/gtest.h>

#include <cstdint>

#include "kv_tiles.h"

namespace {

TEST(Ch07Tiles, MatchesBruteForce) {
  for (bool causal : {false, true})
    for (int64_t seq_q : {1, 2, 17, 63, 64, 65, 127, 128, 129, 255, 300})
      for (int64_t seq_k : {1, 2, 17, 63, 64, 65, 127, 128, 129, 255, 300})
        for (int64_t br : {64, 128})
          for (int64_t bc : {64, 128})
            for (int64_t q0 = 0; q0 < seq_q; q0 += br) {
              const fa::ch07::KvTiles got = fa::ch07::kv_tiles(q0, br, seq_q, seq_k, bc, causal);
              const fa::ch07::KvTiles want =
                  fa::ch07::kv_tiles_brute_force(q0, br, seq_q, seq_k, bc, causal);
              ASSERT_EQ(got.visit, want.visit)
                  << "seq_q " << seq_q << " seq_k " << seq_k << " Br " << br << " Bc " << bc
                  << " q0 " << q0 << " causal " << causal;
              ASSERT_EQ(got.unmasked, want.unmasked)
                  << "seq_q " << seq_q << " seq_k " << seq_k << " Br " << br << " Bc " << bc
                  << " q0 " << q0 << " causal " << causal;
            }
}

TEST(Ch07Tiles, RowsThatSeeNoKey) {
  // Causal with seq_q > seq_k: the first seq_q - seq_k rows see nothing.
  EXPECT_EQ(fa::ch07::last_visible_key(0, 300, 100, true), -1);
  EXPECT_EQ(fa::ch07::last_visible_key(199, 300, 100, true), -1);
  EXPECT_EQ(fa::ch07::last_visible_key(200, 300, 100, true), 0);
  EXPECT_EQ(fa::ch07::last_visible_key(299, 300, 100, true), 99);
  // A whole Q tile of such rows loads nothing (the kernel writes O = 0, L = -inf).
  const fa::ch07::KvTiles none = fa::ch07::kv_tiles(64, 64, 300, 100, 128, true);
  EXPECT_EQ(none.visit, 0);
  EXPECT_EQ(none.unmasked, 0);
  // Non-causal: every tile, the last one masked when seq_k is ragged.
  const fa::ch07::KvTiles all = fa::ch07::kv_tiles(0, 64, 10, 1000, 128, false);
  EXPECT_EQ(all.visit, 8);
  EXPECT_EQ(all.unmasked, 7);
}

}  // namespace
