// The attention FLOP count: AttentionShape::visible_pairs() (a closed form) against a brute-force
// count of the (query, key) pairs that bottom-right causal masking leaves visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "shapes.h"

namespace {

// Every (i, j) with 0 <= i < seq_q, 0 <= j < seq_k that the mask keeps, written from the rule of
// notes/conventions.md: query i sees key j when j <= i + (seq_k - seq_q).
int64_t brute_force_pairs(int64_t seq_q, int64_t seq_k, bool causal) {
  int64_t n = 0;
  for (int64_t i = 0; i < seq_q; ++i)
    for (int64_t j = 0; j < seq_k; ++j)
      if (!causal || j <= i + (seq_k - seq_q)) ++n;
  return n;
}

fa::AttentionShape shape(int64_t seq_q, int64_t seq_k, bool causal) {
  return fa::AttentionShape{2, 3, seq_q, seq_k, 64, causal, 0.0f};
}

TEST(AttentionFlops, VisiblePairsMatchBruteForceOnRaggedShapes) {
  const int64_t lengths[] = {0, 1, 2, 17, 113, 203, 1000};
  for (int64_t sq : lengths)
    for (int64_t sk : lengths)
      for (bool causal : {false, true}) {
        const fa::AttentionShape s = shape(sq, sk, causal);
        EXPECT_EQ(s.visible_pairs(), brute_force_pairs(sq, sk, causal)) << s.str();
      }
}

TEST(AttentionFlops, SquareCausalIsTheTriangleWithItsDiagonal) {
  for (int64_t n : {1, 17, 1000, 8192}) {
    EXPECT_EQ(shape(n, n, true).visible_pairs(), n * (n + 1) / 2) << n;
    EXPECT_EQ(shape(n, n, false).visible_pairs(), n * n) << n;
  }
}

TEST(AttentionFlops, RaggedCausalIsNotHalf) {
  // seq_q > seq_k: the first seq_q - seq_k rows see nothing, the rest a triangle of seq_k rows.
  EXPECT_EQ(shape(1000, 17, true).visible_pairs(), 17 * 18 / 2);
  // seq_q < seq_k: every row sees the seq_k - seq_q keys before the diagonal as well.
  EXPECT_EQ(shape(17, 1000, true).visible_pairs(), 17 * (1000 - 17) + 17 * 18 / 2);
  // One query (decoding): it sees every key, causal or not.
  EXPECT_EQ(shape(1, 1000, true).visible_pairs(), 1000);
  // One key: only the last query row sees it.
  EXPECT_EQ(shape(1000, 1, true).visible_pairs(), 1);
}

TEST(AttentionFlops, ForwardIsFourDPerPairAndBackwardTwoAndAHalfTimesThat) {
  for (bool causal : {false, true}) {
    const fa::AttentionShape s = shape(113, 203, causal);
    const double pairs = double(brute_force_pairs(113, 203, causal));
    EXPECT_DOUBLE_EQ(s.fwd_flops(), 4.0 * 2 * 3 * 64 * pairs) << s.str();
    EXPECT_DOUBLE_EQ(s.bwd_flops(), 2.5 * s.fwd_flops()) << s.str();
  }
}

TEST(AttentionFlops, NoOverflowAtLongSequences) {
  // 2^32 - 1 queries and keys (odd): rows * (first + last) would pass 2^63 before halving.
  const int64_t n = (int64_t(1) << 32) - 1;
  EXPECT_EQ(shape(n, n, true).visible_pairs(), n * ((n + 1) / 2));
}

}  // namespace
