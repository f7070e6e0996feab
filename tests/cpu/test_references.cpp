// The float64 references are what every kernel is judged by, so they are checked first: against
// independent plain loops, against the invariants of softmax, and (the backward) against central
// finite differences of the forward.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "random.h"
#include "reference.h"

namespace {

using fa::AttentionShape;

// ---- plain-loop versions, written independently of reference.cpp ----------------------------
std::vector<double> naive_attention_O(const std::vector<float>& q, const std::vector<float>& k,
                                      const std::vector<float>& v, const AttentionShape& s,
                                      std::vector<double>* L) {
  std::vector<double> O(s.q_numel(), 0.0);
  L->assign(s.lse_numel(), -std::numeric_limits<double>::infinity());
  const int64_t D = s.head_dim;
  for (int64_t bh = 0; bh < s.bh(); ++bh)
    for (int64_t i = 0; i < s.seq_q; ++i) {
      std::vector<double> sc;
      for (int64_t j = 0; j < s.seq_k; ++j) {
        if (s.causal && j > i + s.seq_k - s.seq_q) break;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += double(q[(bh * s.seq_q + i) * D + d]) * k[(bh * s.seq_k + j) * D + d];
        sc.push_back(dot * s.softmax_scale());
      }
      if (sc.empty()) continue;
      double m = -1e300, l = 0;
      for (double x : sc) m = std::max(m, x);
      for (double x : sc) l += std::exp(x - m);
      (*L)[bh * s.seq_q + i] = m + std::log(l);
      for (size_t j = 0; j < sc.size(); ++j)
        for (int64_t d = 0; d < D; ++d)
          O[(bh * s.seq_q + i) * D + d] +=
              std::exp(sc[j] - m) / l * v[(bh * s.seq_k + int64_t(j)) * D + d];
    }
  return O;
}

double loss_of(const std::vector<double>& O, const std::vector<float>& W) {
  double s = 0;
  for (size_t i = 0; i < O.size(); ++i) s += O[i] * W[i];
  return s;
}

TEST(SoftmaxReference, MatchesPlainLoops) {
  fa::SoftmaxShape s{7, 33};
  std::vector<float> x = fa::random_normal(s.numel(), 1);
  std::vector<double> y = fa::softmax_rows_ref(x.data(), s);
  for (int64_t r = 0; r < s.rows; ++r) {
    double m = -1e300, l = 0;
    for (int64_t c = 0; c < s.cols; ++c) m = std::max(m, double(x[r * s.cols + c]));
    for (int64_t c = 0; c < s.cols; ++c) l += std::exp(x[r * s.cols + c] - m);
    for (int64_t c = 0; c < s.cols; ++c)
      EXPECT_NEAR(y[r * s.cols + c], std::exp(x[r * s.cols + c] - m) / l, 1e-15);
  }
}

TEST(SoftmaxReference, RowsSumToOneAndAreShiftInvariant) {
  fa::SoftmaxShape s{5, 1000};
  std::vector<float> x = fa::random_normal(s.numel(), 2);
  std::vector<float> shifted = x;
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c) shifted[r * s.cols + c] += float(r * 3);  // exact shift
  std::vector<double> a = fa::softmax_rows_ref(x.data(), s);
  std::vector<double> b = fa::softmax_rows_ref(shifted.data(), s);
  for (int64_t r = 0; r < s.rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < s.cols; ++c) {
      sum += a[r * s.cols + c];
      EXPECT_GE(a[r * s.cols + c], 0.0);
      EXPECT_NEAR(a[r * s.cols + c], b[r * s.cols + c], 1e-6 * a[r * s.cols + c] + 1e-15);
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
}

TEST(SoftmaxReference, DoesNotOverflowAtLargeInputs) {
  fa::SoftmaxShape s{2, 64};
  std::vector<float> x = fa::random_normal(s.numel(), 3, 1e4f, 1.0f);  // exp(1e4) is inf
  std::vector<double> y = fa::softmax_rows_ref(x.data(), s);
  double sum = 0;
  for (int64_t c = 0; c < s.cols; ++c) {
    ASSERT_TRUE(std::isfinite(y[c]));
    sum += y[c];
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(SoftmaxReference, MinusInfinityEntriesAndRows) {
  const float ninf = -std::numeric_limits<float>::infinity();
  fa::SoftmaxShape s{2, 4};
  std::vector<float> x = {1, ninf, 3, ninf, ninf, ninf, ninf, ninf};
  std::vector<double> y = fa::softmax_rows_ref(x.data(), s);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[3], 0.0);
  EXPECT_NEAR(y[0] + y[2], 1.0, 1e-15);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(y[4 + c], 0.0) << "an all -inf row is defined as zeros";
}

TEST(GemmReference, MatchesPlainLoops) {
  fa::GemmShape s{17, 33, 65};
  std::vector<float> A = fa::random_normal(s.M * s.K, 4), B = fa::random_normal(s.K * s.N, 5);
  std::vector<double> C = fa::gemm_ref(A.data(), B.data(), s);
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < s.N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < s.K; ++k) acc += double(A[i * s.K + k]) * B[k * s.N + j];
      EXPECT_NEAR(C[i * s.N + j], acc, 1e-12 * (1 + std::fabs(acc)));
    }
}

struct AttnCase {
  int64_t seq_q, seq_k, d;
  bool causal;
};
// How gtest (and ctest's test list) prints a case: its numbers, not its bytes.
void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "seq_q=" << c.seq_q << " seq_k=" << c.seq_k << " d=" << c.d << (c.causal ? " causal" : "");
}

class AttentionReference : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionReference, ForwardMatchesPlainLoops) {
  AttnCase c = GetParam();
  AttentionShape s{2, 3, c.seq_q, c.seq_k, c.d, c.causal, 0.0f};
  std::vector<float> q = fa::random_normal(s.q_numel(), 6), k = fa::random_normal(s.k_numel(), 7),
                     v = fa::random_normal(s.k_numel(), 8);
  fa::AttentionFwdRef r = fa::attention_forward_ref(q.data(), k.data(), v.data(), s);
  std::vector<double> L;
  std::vector<double> O = naive_attention_O(q, k, v, s, &L);
  for (size_t i = 0; i < O.size(); ++i) ASSERT_NEAR(r.O[i], O[i], 1e-12) << "O at " << i;
  for (size_t i = 0; i < L.size(); ++i) {
    if (std::isinf(L[i])) {
      EXPECT_TRUE(std::isinf(r.L[i]) && r.L[i] < 0) << "a row with no visible key has L = -inf";
    } else {
      ASSERT_NEAR(r.L[i], L[i], 1e-12) << "L at " << i;
    }
  }
}

// Central differences of loss = sum(O * W) in float64 against the hand-written backward. W plays
// dO. A perturbed backward (try flipping a sign in reference.cpp) fails this test.
TEST_P(AttentionReference, BackwardMatchesFiniteDifferences) {
  AttnCase c = GetParam();
  AttentionShape s{1, 2, c.seq_q, c.seq_k, c.d, c.causal, 0.0f};
  std::vector<float> q = fa::random_normal(s.q_numel(), 9, 0.3f, 0.5f),
                     k = fa::random_normal(s.k_numel(), 10, 0.3f, 0.5f),
                     v = fa::random_normal(s.k_numel(), 11, 0.3f, 0.5f),
                     W = fa::random_normal(s.q_numel(), 12, 0.3f, 1.0f);
  fa::AttentionBwdRef g = fa::attention_backward_ref(q.data(), k.data(), v.data(), W.data(), s);

  // The forward reference takes float inputs, so perturb with steps that floats represent
  // exactly and evaluate in double: h = 2^-10 keeps the truncation error ~h^2 below 1e-6.
  const float h = 1.0f / 1024.0f;
  auto check = [&](std::vector<float>& x, const std::vector<double>& grad, const char* name) {
    for (size_t i = 0; i < x.size(); i += 1 + x.size() / 23) {  // a spread of entries
      float keep = x[i];
      x[i] = keep + h;
      double lp = loss_of(fa::attention_forward_ref(q.data(), k.data(), v.data(), s).O, W);
      x[i] = keep - h;
      double lm = loss_of(fa::attention_forward_ref(q.data(), k.data(), v.data(), s).O, W);
      x[i] = keep;
      double fd = (lp - lm) / (2.0 * h);
      EXPECT_NEAR(grad[i], fd, 2e-5 * (1 + std::fabs(fd))) << name << " at " << i;
    }
  };
  check(q, g.dQ, "dQ");
  check(k, g.dK, "dK");
  check(v, g.dV, "dV");

  // D_i = rowsum(dO * O): with dO = W.
  fa::AttentionFwdRef f = fa::attention_forward_ref(q.data(), k.data(), v.data(), s);
  for (int64_t i = 0; i < s.lse_numel(); ++i) {
    double d = 0;
    for (int64_t j = 0; j < s.head_dim; ++j) d += W[i * s.head_dim + j] * f.O[i * s.head_dim + j];
    EXPECT_NEAR(g.D[i], d, 1e-12);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionReference,
                         ::testing::Values(AttnCase{1, 1, 8, false}, AttnCase{5, 5, 8, true},
                                           AttnCase{7, 4, 8, true},   // seq_q > seq_k: empty rows
                                           AttnCase{4, 9, 16, true},  // seq_q < seq_k
                                           AttnCase{6, 11, 8, false}),
                         // Readable, stable test names (the default prints the struct's bytes,
                         // padding included, so names changed from build to build).
                         [](const ::testing::TestParamInfo<AttnCase>& info) {
                           const AttnCase& c = info.param;
                           return "q" + std::to_string(c.seq_q) + "_k" + std::to_string(c.seq_k) +
                                  "_d" + std::to_string(c.d) + (c.causal ? "_causal" : "");
                         });

TEST(AttentionReference, LowPrecisionNaiveIsCloseButNotExact) {
  AttentionShape s{1, 1, 33, 47, 64, false, 0.0f};
  std::vector<float> q = fa::random_normal(s.q_numel(), 13), k = fa::random_normal(s.k_numel(), 14),
                     v = fa::random_normal(s.k_numel(), 15);
  for (auto* t : {&q, &k, &v}) fa::round_in_place(fa::DType::BF16, *t);
  fa::AttentionFwdRef r = fa::attention_forward_ref(q.data(), k.data(), v.data(), s);
  std::vector<float> O(s.q_numel()), L(s.lse_numel());
  fa::attention_forward_lowp_head(fa::head_view(s, q.data(), k.data(), v.data(), 0),
                                  fa::DType::BF16, {}, O.data(), L.data());
  double err = 0;
  for (size_t i = 0; i < O.size(); ++i) err = std::max(err, std::fabs(O[i] - r.O[i]));
  EXPECT_GT(err, 1e-5) << "bf16 rounding must show up in the naive implementation";
  EXPECT_LT(err, 5e-2);
}

}  // namespace
