// Chapter 02's CPU model: the online recurrence and the pair merge (chapters/02_online_softmax/
// ch02_online_cpu.h). The merge is the reduction operator of every GPU softmax kernel in chapter
// 02 and of FlashAttention's tiles; a reduction tree is only correct if it is associative and
// commutative, so those are checked numerically here. The merge is a CPU exercise: every test here
// is in a CpuExercise* suite (label exercise, notes/coursework.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ch02_online_cpu.h"
#include "random.h"
#include "reference.h"

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

// A random state as a piece of a row would produce: m anywhere in [-50, 50], l in [1, 1000]
// (l >= 1 because the maximum contributes e^0), sometimes the empty state.
ch02::MaxSum random_state(std::mt19937_64& rng, bool allow_empty = true) {
  std::uniform_real_distribution<double> m(-50, 50), l(1, 1000);
  if (allow_empty && rng() % 8 == 0) return ch02::empty_state();
  return {m(rng), l(rng)};
}

bool same(ch02::MaxSum a, ch02::MaxSum b, double rtol = 1e-12) {
  if (a.m != b.m) return false;
  return std::abs(a.l - b.l) <= rtol * std::max(std::abs(a.l), std::abs(b.l));
}

TEST(CpuExerciseCh02Merge, IsCommutative) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 10000; ++i) {
    const ch02::MaxSum a = random_state(rng), b = random_state(rng);
    EXPECT_TRUE(same(ch02::merge(a, b), ch02::merge(b, a)));
  }
}

TEST(CpuExerciseCh02Merge, IsAssociative) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 10000; ++i) {
    const ch02::MaxSum a = random_state(rng), b = random_state(rng), c = random_state(rng);
    const ch02::MaxSum left = ch02::merge(ch02::merge(a, b), c);
    const ch02::MaxSum right = ch02::merge(a, ch02::merge(b, c));
    EXPECT_TRUE(same(left, right)) << "l: " << left.l << " vs " << right.l;
  }
}

TEST(CpuExerciseCh02Merge, AnyOrderOfManyStatesAgrees) {
  // Sequential left fold, a shuffled fold, and a butterfly-like pairwise tree over 64 states.
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<ch02::MaxSum> v(64);
    for (auto& s : v) s = random_state(rng);
    ch02::MaxSum seq = ch02::empty_state();
    for (const auto& s : v) seq = ch02::merge(seq, s);
    std::vector<ch02::MaxSum> shuffled = v;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    ch02::MaxSum shuf = ch02::empty_state();
    for (const auto& s : shuffled) shuf = ch02::merge(s, shuf);
    std::vector<ch02::MaxSum> tree = v;
    for (size_t width = tree.size(); width > 1; width /= 2)
      for (size_t i = 0; i < width / 2; ++i) tree[i] = ch02::merge(tree[i], tree[i + width / 2]);
    EXPECT_TRUE(same(seq, shuf));
    EXPECT_TRUE(same(seq, tree[0]));
  }
}

TEST(CpuExerciseCh02Merge, EmptyStateIsTheIdentityAndNeverMakesNaN) {
  std::mt19937_64 rng(4);
  const ch02::MaxSum e = ch02::empty_state();
  EXPECT_EQ(e.m, -kInf);
  EXPECT_EQ(e.l, 0.0);
  for (int i = 0; i < 1000; ++i) {
    const ch02::MaxSum a = random_state(rng, false);
    EXPECT_TRUE(same(ch02::merge(a, e), a));
    EXPECT_TRUE(same(ch02::merge(e, a), a));
  }
  const ch02::MaxSum ee = ch02::merge(e, e);  // -inf - -inf must not appear
  EXPECT_EQ(ee.m, -kInf);
  EXPECT_EQ(ee.l, 0.0);
  EXPECT_FALSE(std::isnan(ee.l));
}

TEST(CpuExerciseCh02OnlineSoftmax, WalkThroughOf3251) {
  const std::vector<float> x = {3, 2, 5, 1};
  std::vector<ch02::MaxSum> trace;
  const std::vector<double> y = ch02::online_softmax(x.data(), 4, &trace);
  ASSERT_EQ(trace.size(), 4u);
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), e3 = std::exp(-3.0), e4 = std::exp(-4.0);
  EXPECT_EQ(trace[0].m, 3.0);
  EXPECT_NEAR(trace[0].l, 1.0, 1e-15);
  EXPECT_EQ(trace[1].m, 3.0);
  EXPECT_NEAR(trace[1].l, 1.0 + e1, 1e-15);
  EXPECT_EQ(trace[2].m, 5.0);  // the new maximum rescales the old sum by e^(3 - 5)
  EXPECT_NEAR(trace[2].l, (1.0 + e1) * e2 + 1.0, 1e-15);
  EXPECT_EQ(trace[3].m, 5.0);
  EXPECT_NEAR(trace[3].l, 1.0 + e2 + e3 + e4, 1e-15);
  const double l = 1.0 + e2 + e3 + e4;
  const std::vector<double> expect = {e2 / l, e3 / l, 1.0 / l, e4 / l};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], expect[i], 1e-15);
  const std::vector<double> safe = ch02::safe_softmax(x.data(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], safe[i], 1e-15);
}

TEST(CpuExerciseCh02OnlineSoftmax, MatchesTheFloat64Reference) {
  for (int64_t n : {1, 2, 17, 1000, 100000}) {
    for (float mean : {0.5f, 1e4f, -1e4f}) {
      std::vector<float> x = fa::random_normal(n, uint64_t(n) * 7 + 1, mean, 4.0f);
      const std::vector<double> ref = fa::softmax_rows_ref(x.data(), {1, n});
      const std::vector<double> y = ch02::online_softmax(x.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(y[i], ref[i], 1e-12 * (1 + ref[i])) << n << " " << i;
    }
  }
}

TEST(CpuExerciseCh02OnlineSoftmax, PiecesMergedEqualTheSequentialPass) {
  std::vector<float> x = fa::random_normal(4099, 9, 0.5f, 3.0f);
  std::vector<ch02::MaxSum> trace;
  ch02::online_softmax(x.data(), int64_t(x.size()), &trace);
  for (int64_t pieces : {1, 2, 3, 32, 1000, 4099})
    EXPECT_TRUE(same(ch02::reduce_in_pieces(x.data(), int64_t(x.size()), pieces), trace.back()))
        << pieces << " pieces";
}

TEST(CpuExerciseCh02OnlineSoftmax, MinusInfinity) {
  // -inf entries get 0; the first element may be -inf; a row of only -inf is all zeros.
  const std::vector<float> x = {-kInfF, 3, -kInfF, 5, 1, -kInfF};
  std::vector<ch02::MaxSum> trace;
  const std::vector<double> y = ch02::online_softmax(x.data(), int64_t(x.size()), &trace);
  EXPECT_EQ(trace[0].m, -kInf);
  EXPECT_EQ(trace[0].l, 0.0);
  const std::vector<double> ref = fa::softmax_rows_ref(x.data(), {1, int64_t(x.size())});
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_FALSE(std::isnan(y[i]));
    EXPECT_NEAR(y[i], ref[i], 1e-15);
  }
  EXPECT_EQ(y[0], 0.0);
  const std::vector<float> dead(7, -kInfF);
  const std::vector<double> z = ch02::online_softmax(dead.data(), 7);
  for (double v : z) EXPECT_EQ(v, 0.0);
  const ch02::MaxSum s = ch02::reduce_in_pieces(dead.data(), 7, 3);
  EXPECT_EQ(s.m, -kInf);
  EXPECT_EQ(s.l, 0.0);
}

}  // namespace
