// Chapter 07's tile-range arithmetic (ch07_tiles.h) against a brute-force definition: a Q tile
// visits exactly the K/V tiles in which some real row sees some key, and skips the mask exactly on
// the tiles whose every key is seen by every real row; both sets are prefixes. Bottom-right
// causal alignment, seq_q != seq_k both ways, ragged lengths, the tile sizes the kernels use.
#include <gtest/gtest.h>

#include <cstdint>

#include "ch07_tiles.h"

namespace {

struct Brute {
  int64_t visit = 0, unmasked = 0;
};

Brute brute_force(int64_t q0, int64_t br, int64_t seq_q, int64_t seq_k, int64_t bc, bool causal) {
  Brute b;
  bool prefix = true;
  for (int64_t k0 = 0; k0 < seq_k; k0 += bc) {
    bool any = false, all = true;
    for (int64_t i = q0; i < q0 + br && i < seq_q; ++i)
      for (int64_t j = k0; j < k0 + bc; ++j) {
        const bool seen = j < seq_k && (!causal || j <= i + seq_k - seq_q);
        any = any || seen;
        all = all && seen;
      }
    if (any) b.visit = k0 / bc + 1;
    prefix = prefix && all;
    if (prefix) b.unmasked = k0 / bc + 1;
  }
  return b;
}

TEST(Ch07Tiles, MatchesBruteForce) {
  for (bool causal : {false, true})
    for (int64_t seq_q : {1, 2, 17, 63, 64, 65, 127, 128, 129, 255, 300})
      for (int64_t seq_k : {1, 2, 17, 63, 64, 65, 127, 128, 129, 255, 300})
        for (int64_t br : {64, 128})
          for (int64_t bc : {64, 128})
            for (int64_t q0 = 0; q0 < seq_q; q0 += br) {
              const fa::ch07::KvTiles got = fa::ch07::kv_tiles(q0, br, seq_q, seq_k, bc, causal);
              const Brute want = brute_force(q0, br, seq_q, seq_k, bc, causal);
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
