// Chapter 05's CPU model of the tiled FlashAttention-2 forward pass (ch05_cpu_model.h) against the
// float64 reference: ragged lengths, tiles that divide nothing, seq_q != seq_k both ways, causal
// bottom-right alignment with rows that see no key, a non-default scale. In double the tiling and
// the online softmax must be exact up to rounding (1e-12); in float, what a GPU kernel would do.
// The model is a CPU exercise: the tests that run it are in CpuExercise* suites (label
// exercise, notes/coursework.md).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ch05_cpu_model.h"
#include "cpu_inputs.h"
#include "random.h"
#include "reference.h"

namespace {

using fa::AttentionShape;

using fa_test::draw;
using fa_test::Inputs;

// Element-wise |got - ref| <= tol, with matching infinities (L = -inf) accepted and NaN rejected.
void expect_close(const std::vector<double>& got, const std::vector<double>& ref, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(ref[i])) {
      ASSERT_EQ(got[i], ref[i]) << what << "[" << i << "]";
      continue;
    }
    ASSERT_LE(std::fabs(got[i] - ref[i]), tol)
        << what << "[" << i << "] got " << got[i] << " ref " << ref[i];
  }
}

struct ModelCase {
  int64_t seq_q, seq_k, Br, Bc;
};
const std::vector<ModelCase> kCases = {
    {1, 1, 16, 16},     {17, 17, 16, 16},   {17, 17, 4, 5},     {113, 203, 32, 48},
    {203, 113, 32, 48}, {129, 129, 64, 64}, {129, 129, 7, 128}, {64, 256, 64, 64},
    {100, 1, 8, 8},     {1, 100, 8, 8},
};

TEST(CpuExerciseCh05Model, DoubleMatchesReferenceOnRaggedShapes) {
  for (const ModelCase& c : kCases)
    for (bool causal : {false, true})
      for (int64_t d : {16, 32}) {
        AttentionShape s{2, 2, c.seq_q, c.seq_k, d, causal, 0.0f};
        SCOPED_TRACE(s.str() + " Br=" + std::to_string(c.Br) + " Bc=" + std::to_string(c.Bc));
        Inputs in = draw(s, uint64_t(c.seq_q * 31 + c.seq_k));
        fa::AttentionFwdRef ref =
            fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
        fa::ch05::TiledForward got = fa::ch05::flash_forward_model<double>(
            in.q.data(), in.k.data(), in.v.data(), s, c.Br, c.Bc);
        expect_close(got.O, ref.O, 1e-12, "O");
        expect_close(got.L, ref.L, 1e-12, "L");
      }
}

TEST(CpuExerciseCh05Model, FloatMatchesReferenceLikeAKernelWould) {
  for (const ModelCase& c : kCases)
    for (bool causal : {false, true}) {
      AttentionShape s{1, 3, c.seq_q, c.seq_k, 64, causal, 0.0f};
      SCOPED_TRACE(s.str());
      Inputs in = draw(s, 7);
      fa::AttentionFwdRef ref = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
      fa::ch05::TiledForward got = fa::ch05::flash_forward_model<float>(in.q.data(), in.k.data(),
                                                                        in.v.data(), s, c.Br, c.Bc);
      expect_close(got.O, ref.O, 1e-4, "O");
      expect_close(got.L, ref.L, 1e-4, "L");
    }
}

TEST(CpuExerciseCh05Model, NonDefaultScaleAndLargeScores) {
  AttentionShape s{1, 2, 300, 257, 32, true, 0.37f};
  Inputs in = draw(s, 11);
  for (float& x : in.q) x *= 5.0f;  // scores ~25x larger: without the running max, exp overflows
  fa::AttentionFwdRef ref = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
  fa::ch05::TiledForward got =
      fa::ch05::flash_forward_model<double>(in.q.data(), in.k.data(), in.v.data(), s, 64, 32);
  expect_close(got.O, ref.O, 1e-11, "O");
  expect_close(got.L, ref.L, 1e-11, "L");
}

TEST(CpuExerciseCh05Model, RowsThatSeeNoKeyGiveZeroAndMinusInfinity) {
  // seq_q > seq_k, causal bottom-right: the first seq_q - seq_k queries see no key.
  AttentionShape s{1, 1, 50, 20, 16, true, 0.0f};
  Inputs in = draw(s, 3);
  fa::ch05::TiledForward got =
      fa::ch05::flash_forward_model<float>(in.q.data(), in.k.data(), in.v.data(), s, 16, 8);
  for (int64_t i = 0; i < 30; ++i) {
    EXPECT_EQ(got.L[i], -std::numeric_limits<double>::infinity()) << i;
    for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(got.O[i * 16 + d], 0.0) << i;
  }
  for (int64_t i = 30; i < 50; ++i) EXPECT_TRUE(std::isfinite(got.L[i])) << i;
}

TEST(CpuExerciseCh05Model, CausalTileClassification) {
  // Square, tiles of 64 over N = 256: 4 Q tiles x 4 K tiles. Diagonal tiles: 4 (masked); below:
  // 6 (full); above: 6 (skipped, never visited).
  AttentionShape s{1, 1, 256, 256, 16, true, 0.0f};
  Inputs in = draw(s, 5);
  fa::ch05::TiledForward got =
      fa::ch05::flash_forward_model<float>(in.q.data(), in.k.data(), in.v.data(), s, 64, 64);
  EXPECT_EQ(got.tiles.masked, 4);
  EXPECT_EQ(got.tiles.full, 6);
  EXPECT_EQ(got.tiles.skipped, 6);
  // Not causal: every tile is full.
  s.causal = false;
  got = fa::ch05::flash_forward_model<float>(in.q.data(), in.k.data(), in.v.data(), s, 64, 64);
  EXPECT_EQ(got.tiles.full, 16);
  EXPECT_EQ(got.tiles.masked + got.tiles.skipped, 0);
  // Bottom-right with seq_k = 2 * seq_q: the first 128 keys are visible to every query.
  AttentionShape r{1, 1, 128, 256, 16, true, 0.0f};
  Inputs in2 = draw(r, 6);
  got = fa::ch05::flash_forward_model<float>(in2.q.data(), in2.k.data(), in2.v.data(), r, 64, 64);
  EXPECT_EQ(got.tiles.full, 2 + 3);  // Q tile 0: keys 0-127; Q tile 1: keys 0-191
  EXPECT_EQ(got.tiles.masked, 2);    // each Q tile's diagonal tile
  EXPECT_EQ(got.tiles.skipped, 1);   // Q tile 0 never visits keys 192-255
}

TEST(Ch05CpuModel, PerBlockSoftmaxIsWrongWithSeveralTilesRightWithOne) {
  AttentionShape s{1, 1, 32, 128, 16, false, 0.0f};
  Inputs in = draw(s, 9);
  fa::AttentionFwdRef ref = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
  fa::HeadView h = fa::head_view(s, in.q.data(), in.k.data(), in.v.data(), 0);
  std::vector<double> O(s.q_numel());
  fa::ch05::per_block_softmax_wrong_head(h, 128, O.data());  // one tile: plain softmax
  expect_close(O, ref.O, 1e-12, "O (one tile)");
  fa::ch05::per_block_softmax_wrong_head(h, 32, O.data());  // four tiles: wrong
  double worst = 0;
  for (size_t i = 0; i < O.size(); ++i) worst = std::max(worst, std::fabs(O[i] - ref.O[i]));
  EXPECT_GT(worst, 1e-2);
}

}  // namespace
