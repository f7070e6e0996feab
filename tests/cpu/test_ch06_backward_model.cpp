// test_ch06_backward_model.cpp: chapter 06's CPU tier. The tiled FlashAttention-2 backward
// (ch06_cpu_model.cpp) against the float64 reference on ragged shapes, the D_i identity, and a
// few steps of gradient descent driven by each. (The reference itself is checked against finite
// differences in test_references.cpp.) The tiled backward's D_i and dS are a CPU exercise: the
// tests that run it are in a CpuExercise* suite (label exercise, notes/coursework.md).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ch06_cpu_model.h"
#include "random.h"
#include "reference.h"

namespace {

using fa::AttentionShape;

struct Inputs {
  std::vector<float> q, k, v, dO;
};
Inputs draw(const AttentionShape& s, uint64_t seed) {
  return {fa::random_normal(s.q_numel(), fa::derive_seed(seed, 1)),
          fa::random_normal(s.k_numel(), fa::derive_seed(seed, 2)),
          fa::random_normal(s.k_numel(), fa::derive_seed(seed, 3)),
          fa::random_normal(s.q_numel(), fa::derive_seed(seed, 4))};
}

// Largest |a - b| / (1 + |b|), failing on a NaN.
double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t x = 0; x < a.size() && x < b.size(); ++x) {
    if (!std::isfinite(a[x])) return INFINITY;
    worst = std::max(worst, std::abs(a[x] - b[x]) / (1.0 + std::abs(b[x])));
  }
  return worst;
}

constexpr double kTol = 1e-10;  // float64 arithmetic in a different order

struct ShapeCase {
  int64_t nq, nk;
};
const ShapeCase kShapes[] = {{1, 1},     {17, 17}, {113, 203}, {203, 113},
                             {129, 129}, {1, 40},  {40, 1}};
// The kernels' own tiles (06/v2, v3: 64 x 64; 06/v4, v5: 64 x 128) and odd ones.
const ch06::TileSizes kTiles[] = {{16, 16}, {7, 13}, {32, 8}, {1, 1}, {64, 64}, {64, 128}};

TEST(Ch06Model, ForwardMatchesReference) {
  for (bool causal : {false, true})
    for (ShapeCase c : kShapes) {
      AttentionShape s{1, 2, c.nq, c.nk, 16, causal, 0.0f};
      SCOPED_TRACE(s.str());
      Inputs in = draw(s, 1);
      std::vector<double> O, L;
      ch06::forward(in.q.data(), in.k.data(), in.v.data(), s, O, L);
      fa::AttentionFwdRef r = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
      EXPECT_LT(max_rel(O, r.O), kTol);
      for (size_t x = 0; x < L.size(); ++x) {
        if (std::isinf(r.L[x])) {
          EXPECT_EQ(L[x], r.L[x]) << "row " << x;
        } else {
          EXPECT_NEAR(L[x], r.L[x], kTol * (1 + std::abs(r.L[x]))) << "row " << x;
        }
      }
    }
}

TEST(Ch06Model, StandardBackwardMatchesReference) {
  for (bool causal : {false, true})
    for (ShapeCase c : kShapes) {
      AttentionShape s{1, 2, c.nq, c.nk, 16, causal, 0.0f};
      SCOPED_TRACE(s.str());
      Inputs in = draw(s, 2);
      ch06::Grads g =
          ch06::standard_backward(in.q.data(), in.k.data(), in.v.data(), in.dO.data(), s);
      fa::AttentionBwdRef r =
          fa::attention_backward_ref(in.q.data(), in.k.data(), in.v.data(), in.dO.data(), s);
      EXPECT_LT(max_rel(g.dQ, r.dQ), kTol);
      EXPECT_LT(max_rel(g.dK, r.dK), kTol);
      EXPECT_LT(max_rel(g.dV, r.dV), kTol);
      EXPECT_LT(max_rel(g.D, r.D), kTol);
    }
}

TEST(CpuExerciseCh06Tiled, TiledBackwardMatchesReferenceOnRaggedShapes) {
  for (bool causal : {false, true})
    for (ShapeCase c : kShapes)
      for (ch06::TileSizes t : kTiles) {
        if (t.Br == 1 && c.nq * c.nk > 20000) continue;  // 1x1 tiles: keep the test quick
        AttentionShape s{2, 1, c.nq, c.nk, 8, causal, 0.0f};
        SCOPED_TRACE(s.str() + " Br=" + std::to_string(t.Br) + " Bc=" + std::to_string(t.Bc));
        Inputs in = draw(s, uint64_t(c.nq * 1000 + c.nk));
        std::vector<double> O, L;
        ch06::forward(in.q.data(), in.k.data(), in.v.data(), s, O, L);
        ch06::Grads g = ch06::flash_backward_tiled(in.q.data(), in.k.data(), in.v.data(),
                                                   in.dO.data(), O.data(), L.data(), s, t);
        fa::AttentionBwdRef r =
            fa::attention_backward_ref(in.q.data(), in.k.data(), in.v.data(), in.dO.data(), s);
        EXPECT_LT(max_rel(g.dQ, r.dQ), kTol);
        EXPECT_LT(max_rel(g.dK, r.dK), kTol);
        EXPECT_LT(max_rel(g.dV, r.dV), kTol);
        EXPECT_LT(max_rel(g.D, r.D), kTol);
      }
}

TEST(CpuExerciseCh06Tiled, NonDefaultScale) {
  AttentionShape s{1, 3, 45, 70, 32, true, 0.71f};
  Inputs in = draw(s, 3);
  std::vector<double> O, L;
  ch06::forward(in.q.data(), in.k.data(), in.v.data(), s, O, L);
  ch06::Grads g = ch06::flash_backward_tiled(in.q.data(), in.k.data(), in.v.data(), in.dO.data(),
                                             O.data(), L.data(), s, {16, 32});
  fa::AttentionBwdRef r =
      fa::attention_backward_ref(in.q.data(), in.k.data(), in.v.data(), in.dO.data(), s);
  EXPECT_LT(max_rel(g.dQ, r.dQ), kTol);
  EXPECT_LT(max_rel(g.dK, r.dK), kTol);
  EXPECT_LT(max_rel(g.dV, r.dV), kTol);
}

// Causal with seq_q > seq_k: the first seq_q - seq_k queries see no key (L = -inf). Their P must
// be 0, not NaN: their dQ and D are exactly 0 and they add nothing to dK, dV.
TEST(CpuExerciseCh06Tiled, RowsWithNoKeyGiveZeroNotNaN) {
  AttentionShape s{1, 1, 37, 9, 8, true, 0.0f};
  Inputs in = draw(s, 4);
  std::vector<double> O, L;
  ch06::forward(in.q.data(), in.k.data(), in.v.data(), s, O, L);
  for (int64_t i = 0; i < s.seq_q - s.seq_k; ++i) ASSERT_TRUE(std::isinf(L[i]) && L[i] < 0);
  ch06::Grads g = ch06::flash_backward_tiled(in.q.data(), in.k.data(), in.v.data(), in.dO.data(),
                                             O.data(), L.data(), s, {8, 4});
  for (int64_t i = 0; i < s.seq_q - s.seq_k; ++i) {
    EXPECT_EQ(g.D[i], 0.0);
    for (int64_t x = 0; x < s.head_dim; ++x) EXPECT_EQ(g.dQ[i * s.head_dim + x], 0.0);
  }
  fa::AttentionBwdRef r =
      fa::attention_backward_ref(in.q.data(), in.k.data(), in.v.data(), in.dO.data(), s);
  EXPECT_LT(max_rel(g.dQ, r.dQ), kTol);
  EXPECT_LT(max_rel(g.dK, r.dK), kTol);
  EXPECT_LT(max_rel(g.dV, r.dV), kTol);
}

// D_i = rowsum(dO_i o O_i) = rowsum(P_i o dP_i): the identity the preprocess relies on.
TEST(Ch06Model, DeltaIdentityRowsumDoOEqualsRowsumPdP) {
  for (bool causal : {false, true})
    for (ShapeCase c : kShapes) {
      AttentionShape s{1, 2, c.nq, c.nk, 16, causal, 0.0f};
      SCOPED_TRACE(s.str());
      Inputs in = draw(s, 5);
      std::vector<double> via_p =
          ch06::rowsum_p_dp(in.q.data(), in.k.data(), in.v.data(), in.dO.data(), s);
      std::vector<double> O, L;
      ch06::forward(in.q.data(), in.k.data(), in.v.data(), s, O, L);
      std::vector<double> via_o(size_t(s.lse_numel()), 0.0);
      for (int64_t row = 0; row < s.lse_numel(); ++row)
        for (int64_t x = 0; x < s.head_dim; ++x)
          via_o[row] += double(in.dO[row * s.head_dim + x]) * O[row * s.head_dim + x];
      EXPECT_LT(max_rel(via_o, via_p), kTol);
    }
}

// A training step: learn one head's Q, K, V to fit a target output, with gradients from the tiled
// model and from the reference. The two loss trajectories must agree, and the loss must fall.
TEST(CpuExerciseCh06Tiled, TrainingStepsWithTiledGradientsMatchReference) {
  ch06::ToyProblem p;  // N = 8, D = 4, 20 steps
  std::vector<double> tiled = ch06::train_toy(p, ch06::grads_from_tiled);
  std::vector<double> ref = ch06::train_toy(p, ch06::grads_from_reference);
  ASSERT_EQ(tiled.size(), size_t(p.steps + 1));
  ASSERT_EQ(ref.size(), tiled.size());
  for (size_t t = 0; t < tiled.size(); ++t)
    EXPECT_NEAR(tiled[t], ref[t], 1e-9 * (1 + ref[t])) << "step " << t;
  int rises = 0;
  for (size_t t = 1; t < tiled.size(); ++t) rises += tiled[t] > tiled[t - 1] ? 1 : 0;
  EXPECT_LE(rises, 2) << "gradient descent should lower the loss at almost every step";
  EXPECT_LT(tiled.back(), 0.5 * tiled.front()) << "20 steps should at least halve the loss";
}

}  // namespace
