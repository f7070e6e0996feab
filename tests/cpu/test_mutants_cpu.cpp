// CPU models of the classic mistakes that tests/mutants/ makes on the GPU, judged by the same
// comparison rules the harness uses (compare.h) against the float64 references (reference.h).
// Every mistake must be rejected, its correct twin accepted, and the rejection must teach: the
// report names the first mismatching element (and it really is the first), the max abs and rel
// errors, the tolerance, and for the FlashAttention rule the naive implementation's error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "compare.h"
#include "dtype.h"
#include "random.h"
#include "reference.h"
#include "shapes.h"

namespace {

using fa::AttentionShape;
using fa::CompareResult;
using fa::DType;
using fa::SoftmaxShape;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A rejection that teaches. For allclose, also check independently that first_bad is the FIRST
// element outside |x - ref| <= atol + rtol |ref| (or non-finite), so the index the report prints
// is the one to look at.
void expect_teaching_rejection(const CompareResult& c, const float* got, const double* ref) {
  EXPECT_FALSE(c.ok);
  const std::string r = c.report();
  EXPECT_TRUE(contains(r, c.what + ": FAIL")) << r;
  EXPECT_TRUE(contains(r, "first mismatch at [")) << r;
  EXPECT_TRUE(contains(r, "max abs error")) << r;
  EXPECT_TRUE(contains(r, "max rel error")) << r;
  EXPECT_TRUE(contains(r, "tolerance")) << r;
  EXPECT_TRUE(contains(r, "elements out of tolerance")) << r;
  if (!c.names.empty()) EXPECT_TRUE(contains(r, "first mismatch at [" + c.names[0] + "=")) << r;
  ASSERT_GE(c.first_bad, 0);
  auto bad = [&](int64_t i) {
    if (!std::isfinite(ref[i])) return !(double(got[i]) == ref[i]);
    if (!std::isfinite(got[i])) return true;
    if (c.tol.rule == fa::Tolerance::Rule::AllClose)
      return !(std::fabs(got[i] - ref[i]) <= c.tol.atol + c.tol.rtol * std::fabs(ref[i]));
    return !(std::fabs(got[i] - ref[i]) <= c.bound);
  };
  EXPECT_TRUE(bad(c.first_bad)) << "the reported first mismatch is within tolerance";
  for (int64_t i = 0; i < c.first_bad; ++i)
    if (bad(i)) {
      ADD_FAILURE() << "element " << i << " is out of tolerance before the reported first "
                    << c.first_bad;
      break;
    }
  if (c.tol.rule == fa::Tolerance::Rule::FlashRule)
    EXPECT_TRUE(contains(r, "naive same-precision implementation's max error")) << r;
  std::cout << r;  // what a student would see
}

// =================================================================================================
// Softmax
// =================================================================================================
enum class SoftmaxBug { None, NoMaxSubtraction, NoRescale };

std::vector<float> softmax_model(const std::vector<float>& x, SoftmaxShape s, SoftmaxBug bug) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* xr = x.data() + r * s.cols;
    float* yr = y.data() + r * s.cols;
    if (bug == SoftmaxBug::NoMaxSubtraction) {
      float l = 0.0f;
      for (int64_t c = 0; c < s.cols; ++c) l += std::exp(xr[c]);
      for (int64_t c = 0; c < s.cols; ++c) yr[c] = std::exp(xr[c]) / l;
      continue;
    }
    float m = kNegInf, l = 0.0f;
    for (int64_t c = 0; c < s.cols; ++c) {
      const float m_new = std::max(m, xr[c]);
      if (m_new == kNegInf) continue;
      l = (bug == SoftmaxBug::NoRescale ? l : l * std::exp(m - m_new)) + std::exp(xr[c] - m_new);
      m = m_new;
    }
    for (int64_t c = 0; c < s.cols; ++c) yr[c] = l > 0.0f ? std::exp(xr[c] - m) / l : 0.0f;
  }
  return y;
}

CompareResult judge_softmax(const std::vector<float>& x, const std::vector<float>& y,
                            SoftmaxShape s, std::vector<double>* ref_out = nullptr) {
  std::vector<double> ref = fa::softmax_rows_ref(x.data(), s);
  CompareResult c =
      fa::compare_allclose("y", y.data(), ref.data(), s.numel(), 1e-9, 2e-5);  // harness
  c.dims = {s.rows, s.cols};
  c.names = {"row", "col"};
  if (ref_out) *ref_out = ref;
  return c;
}

const SoftmaxShape kSoftmax{113, 203};

TEST(MutantsCpu, SoftmaxCorrectTwinAccepted) {
  for (float mean : {fa::kDefaultInputMean, 1e4f}) {
    std::vector<float> x = fa::random_normal(kSoftmax.numel(), 1, mean, 1.0f);
    CompareResult c = judge_softmax(x, softmax_model(x, kSoftmax, SoftmaxBug::None), kSoftmax);
    EXPECT_TRUE(c.ok) << c.report();
  }
}

// (a) Invisible on friendly inputs, NaN on inputs offset by 1e4: why the tests offset inputs.
TEST(MutantsCpu, SoftmaxWithoutMaxSubtractionRejectedOnOffsetInputs) {
  std::vector<float> friendly = fa::random_normal(kSoftmax.numel(), 2);
  CompareResult ok = judge_softmax(
      friendly, softmax_model(friendly, kSoftmax, SoftmaxBug::NoMaxSubtraction), kSoftmax);
  EXPECT_TRUE(ok.ok) << "the bug hides on small inputs; this is the lesson\n" << ok.report();

  std::vector<float> x = fa::random_normal(kSoftmax.numel(), 2, 1e4f, 1.0f);
  std::vector<float> y = softmax_model(x, kSoftmax, SoftmaxBug::NoMaxSubtraction);
  std::vector<double> ref;
  CompareResult c = judge_softmax(x, y, kSoftmax, &ref);
  expect_teaching_rejection(c, y.data(), ref.data());
  EXPECT_EQ(c.first_bad, 0);  // every element is inf/inf = NaN
  EXPECT_EQ(c.nonfinite, kSoftmax.numel());
  EXPECT_TRUE(contains(c.report(), "first mismatch at [row=0, col=0]")) << c.report();
}

// (b) Wrong wherever the running max grows after the first element.
TEST(MutantsCpu, OnlineSoftmaxWithoutRescaleRejected) {
  std::vector<float> x = fa::random_normal(kSoftmax.numel(), 3);
  std::vector<float> y = softmax_model(x, kSoftmax, SoftmaxBug::NoRescale);
  std::vector<double> ref;
  CompareResult c = judge_softmax(x, y, kSoftmax, &ref);
  expect_teaching_rejection(c, y.data(), ref.data());
  EXPECT_GT(c.max_rel, 1e-3);  // not rounding: percent-level errors
}

// =================================================================================================
// Attention forward: one query row at a time, online softmax, as the GPU mutants do.
// =================================================================================================
enum class FwdBug { None, CausalOffByOne, HalfAccumulator, SkipTailRows };
constexpr int64_t kTile = 64;  // rows per block in the GPU mutant

struct FwdOut {
  std::vector<float> O, L;
};

// Rows `rows` (all when empty) of every head; outputs stored as `t` (O) and fp32 (L). Unwritten
// elements stay NaN, like the harness's poison.
FwdOut attention_model(const std::vector<float>& q, const std::vector<float>& k,
                       const std::vector<float>& v, const AttentionShape& s, DType t, FwdBug bug,
                       const std::vector<int64_t>& rows = {}) {
  const int64_t D = s.head_dim;
  const int64_t nrows = rows.empty() ? s.seq_q : int64_t(rows.size());
  FwdOut out{std::vector<float>(s.bh() * nrows * D, kNaN),
             std::vector<float>(s.bh() * nrows, kNaN)};
  const int64_t rows_done = bug == FwdBug::SkipTailRows ? (s.seq_q / kTile) * kTile : s.seq_q;
  const float scale = s.softmax_scale();
  for (int64_t bh = 0; bh < s.bh(); ++bh)
    for (int64_t r = 0; r < nrows; ++r) {
      const int64_t i = rows.empty() ? r : rows[r];
      if (i >= rows_done) continue;  // (f) never launched
      int64_t last = s.causal ? fa::causal_last_key(i, s.seq_q, s.seq_k) : s.seq_k - 1;
      if (bug == FwdBug::CausalOffByOne && s.causal) last += 1;  // (c)
      last = std::min(last, s.seq_k - 1);
      const float* qi = q.data() + (bh * s.seq_q + i) * D;
      std::vector<float> acc(D, 0.0f);
      float m = kNegInf, l = 0.0f;
      for (int64_t j = 0; j <= last; ++j) {
        const float* kj = k.data() + (bh * s.seq_k + j) * D;
        const float* vj = v.data() + (bh * s.seq_k + j) * D;
        float sc = 0.0f;
        for (int64_t d = 0; d < D; ++d) sc += qi[d] * kj[d];
        sc *= scale;
        const float m_new = std::max(m, sc);
        const float alpha = std::exp(m - m_new);
        const float p = std::exp(sc - m_new);
        l = l * alpha + p;
        for (int64_t d = 0; d < D; ++d) {
          acc[d] = acc[d] * alpha + p * vj[d];
          if (bug == FwdBug::HalfAccumulator) acc[d] = fa::round_to(DType::F16, acc[d]);  // (e)
        }
        m = m_new;
      }
      float* o = out.O.data() + (bh * nrows + r) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = fa::round_to(t, l > 0.0f ? acc[d] / l : 0.0f);
      out.L[bh * nrows + r] = l > 0.0f ? m + std::log(l) : kNegInf;
    }
  return out;
}

struct AttnInputs {
  std::vector<float> q, k, v;
};
AttnInputs draw_attention(const AttentionShape& s, DType t, uint64_t seed) {
  AttnInputs in{fa::random_normal(s.q_numel(), fa::derive_seed(seed, 1)),
                fa::random_normal(s.k_numel(), fa::derive_seed(seed, 2)),
                fa::random_normal(s.k_numel(), fa::derive_seed(seed, 3))};
  fa::round_in_place(t, in.q);
  fa::round_in_place(t, in.k);
  fa::round_in_place(t, in.v);
  return in;
}

const AttentionShape kRaggedCausal{1, 2, 113, 203, 64, true, 0.0f};

// fp32 checks with the harness's tolerances; O named [b, h, i, d], L named [b, h, i].
std::pair<CompareResult, CompareResult> judge_fp32(const FwdOut& got,
                                                   const fa::AttentionFwdRef& ref,
                                                   const AttentionShape& s) {
  CompareResult cO = fa::compare_allclose("O", got.O.data(), ref.O.data(), s.q_numel(), 1e-4, 1e-4);
  CompareResult cL =
      fa::compare_allclose("L", got.L.data(), ref.L.data(), s.lse_numel(), 1e-4, 1e-5);
  cO.dims = {s.batch, s.heads, s.seq_q, s.head_dim};
  cO.names = {"b", "h", "i", "d"};
  cL.dims = {s.batch, s.heads, s.seq_q};
  cL.names = {"b", "h", "i"};
  return {cO, cL};
}

TEST(MutantsCpu, AttentionCorrectTwinAccepted) {
  for (AttentionShape s : {kRaggedCausal, AttentionShape{1, 2, 203, 113, 64, true, 0.0f},
                           AttentionShape{1, 2, 113, 203, 64, false, 0.0f}}) {
    AttnInputs in = draw_attention(s, DType::F32, 4);
    fa::AttentionFwdRef ref = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
    auto [cO, cL] =
        judge_fp32(attention_model(in.q, in.k, in.v, s, DType::F32, FwdBug::None), ref, s);
    EXPECT_TRUE(cO.ok) << s.str() << "\n" << cO.report();
    EXPECT_TRUE(cL.ok) << s.str() << "\n" << cL.report();
  }
}

// (c) One key too many on every row below the diagonal's end.
TEST(MutantsCpu, CausalOffByOneRejected) {
  const AttentionShape s = kRaggedCausal;
  AttnInputs in = draw_attention(s, DType::F32, 5);
  fa::AttentionFwdRef ref = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
  FwdOut got = attention_model(in.q, in.k, in.v, s, DType::F32, FwdBug::CausalOffByOne);
  auto [cO, cL] = judge_fp32(got, ref, s);
  expect_teaching_rejection(cO, got.O.data(), ref.O.data());
  expect_teaching_rejection(cL, got.L.data(), ref.L.data());
  // Only the last row (i = 112, last visible key = 202 = seq_k - 1) has no extra key to see.
  EXPECT_GE(cL.bad, 2 * (s.seq_q - 1) - 2) << cL.report();
}

// (f) The unwritten tail stays NaN (the poison); the report's first mismatch is row 64.
TEST(MutantsCpu, SkippedTailRowsRejectedAsPoison) {
  const AttentionShape s = kRaggedCausal;
  AttnInputs in = draw_attention(s, DType::F32, 6);
  fa::AttentionFwdRef ref = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
  FwdOut got = attention_model(in.q, in.k, in.v, s, DType::F32, FwdBug::SkipTailRows);
  auto [cO, cL] = judge_fp32(got, ref, s);
  expect_teaching_rejection(cO, got.O.data(), ref.O.data());
  EXPECT_EQ(cO.nonfinite, 2 * (113 - 64) * 64);
  EXPECT_TRUE(contains(cO.report(), "first mismatch at [b=0, h=0, i=64, d=0]")) << cO.report();
  EXPECT_TRUE(contains(cO.report(), "poisoned with NaN")) << cO.report();
  EXPECT_TRUE(contains(cL.report(), "first mismatch at [b=0, h=0, i=64]")) << cL.report();
}

// (e) fp16 inputs with an fp16 accumulator, against the FlashAttention rule (2x the naive fp16
// implementation's error + 1e-4), on a long sequence. Rows checked: the first, middle and last 32.
TEST(MutantsCpu, Fp16AccumulatorRejectedByFlashRule) {
  const AttentionShape s{1, 1, 2048, 2048, 64, false, 0.0f};
  AttnInputs in = draw_attention(s, DType::F16, 7);
  std::vector<int64_t> rows;
  for (int64_t from : {int64_t(0), s.seq_q / 2, s.seq_q - 32})
    for (int64_t i = from; i < from + 32; ++i) rows.push_back(i);
  fa::HeadView h = fa::head_view(s, in.q.data(), in.k.data(), in.v.data(), 0);
  const int64_t n = int64_t(rows.size()) * s.head_dim;
  std::vector<double> refO(n), refL(rows.size());
  fa::attention_forward_ref_head(h, rows, refO.data(), refL.data());
  std::vector<float> naiveO(n), naiveL(rows.size());
  fa::attention_forward_lowp_head(h, DType::F16, rows, naiveO.data(), naiveL.data());

  auto judge = [&](const FwdOut& got) {
    CompareResult c =
        fa::compare_flash_rule("O", got.O.data(), refO.data(), naiveO.data(), n, 2.0, 1e-4);
    c.dims = {int64_t(rows.size()), s.head_dim};
    c.names = {"checked-row#", "d"};
    return c;
  };
  FwdOut good = attention_model(in.q, in.k, in.v, s, DType::F16, FwdBug::None, rows);
  CompareResult cg = judge(good);
  EXPECT_TRUE(cg.ok) << "fp16 inputs with an fp32 accumulator must pass\n" << cg.report();
  CompareResult cL = fa::compare_flash_rule("L", good.L.data(), refL.data(), naiveL.data(),
                                            int64_t(rows.size()), 2.0, 1e-4);
  EXPECT_TRUE(cL.ok) << cL.report();

  FwdOut bad = attention_model(in.q, in.k, in.v, s, DType::F16, FwdBug::HalfAccumulator, rows);
  CompareResult cb = judge(bad);
  expect_teaching_rejection(cb, bad.O.data(), refO.data());
  EXPECT_GT(cb.max_abs, 5 * cb.naive_err) << cb.report();  // far outside, not a near miss
  EXPECT_TRUE(contains(cb.report(), "2 x naive-low-precision error")) << cb.report();
}

// =================================================================================================
// Attention backward: D = rowsum(dO * O), and dQ computed from it.
// =================================================================================================
// dQ of one problem given D (rows with no visible key have none), fp32 like the GPU mutant.
std::vector<float> dq_model(const AttnInputs& in, const std::vector<float>& dO,
                            const std::vector<double>& L, const std::vector<float>& D,
                            const AttentionShape& s) {
  const int64_t Dh = s.head_dim;
  const float scale = s.softmax_scale();
  std::vector<float> dQ(s.q_numel(), 0.0f);
  for (int64_t bh = 0; bh < s.bh(); ++bh)
    for (int64_t i = 0; i < s.seq_q; ++i) {
      const int64_t row = (bh * s.seq_q + i) * Dh;
      int64_t last = s.causal ? fa::causal_last_key(i, s.seq_q, s.seq_k) : s.seq_k - 1;
      last = std::min(last, s.seq_k - 1);
      for (int64_t j = 0; j <= last; ++j) {
        const float* kj = in.k.data() + (bh * s.seq_k + j) * Dh;
        const float* vj = in.v.data() + (bh * s.seq_k + j) * Dh;
        float sc = 0.0f, dp = 0.0f;
        for (int64_t d = 0; d < Dh; ++d) {
          sc += in.q[row + d] * kj[d];
          dp += dO[row + d] * vj[d];
        }
        const float p = std::exp(sc * scale - float(L[bh * s.seq_q + i]));
        const float ds = p * (dp - D[bh * s.seq_q + i]);
        for (int64_t d = 0; d < Dh; ++d) dQ[row + d] += scale * ds * kj[d];
      }
    }
  return dQ;
}

TEST(MutantsCpu, DeltaFromWrongTensorRejected) {
  const AttentionShape s = kRaggedCausal;
  AttnInputs in = draw_attention(s, DType::F32, 8);
  std::vector<float> dO = fa::random_normal(s.q_numel(), fa::derive_seed(8, 4));
  fa::AttentionFwdRef fwd = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
  fa::AttentionBwdRef ref =
      fa::attention_backward_ref(in.q.data(), in.k.data(), in.v.data(), dO.data(), s);

  std::vector<float> D_right(s.lse_numel(), 0.0f), D_wrong(s.lse_numel(), 0.0f);
  for (int64_t r = 0; r < s.lse_numel(); ++r)
    for (int64_t d = 0; d < s.head_dim; ++d) {
      const float o = float(fwd.O[r * s.head_dim + d]), g = dO[r * s.head_dim + d];
      D_right[r] += g * o;  // rowsum(dO * O)
      D_wrong[r] += g * g;  // (g) rowsum(dO * dO)
    }
  auto judge = [&](const std::string& what, const std::vector<float>& got,
                   const std::vector<double>& want, double atol, double rtol, bool per_row) {
    CompareResult c =
        fa::compare_allclose(what, got.data(), want.data(), int64_t(got.size()), atol, rtol);
    c.dims = per_row ? std::vector<int64_t>{s.batch, s.heads, s.seq_q}
                     : std::vector<int64_t>{s.batch, s.heads, s.seq_q, s.head_dim};
    c.names = {"b", "h", "i", "d"};
    return c;
  };
  // The harness's backward tolerances: D 1e-4/1e-4, gradients 2e-4/1e-3.
  CompareResult good_D = judge("D", D_right, ref.D, 1e-4, 1e-4, true);
  EXPECT_TRUE(good_D.ok) << good_D.report();
  CompareResult good_dQ =
      judge("dQ", dq_model(in, dO, fwd.L, D_right, s), ref.dQ, 2e-4, 1e-3, false);
  EXPECT_TRUE(good_dQ.ok) << good_dQ.report();

  CompareResult bad_D = judge("D", D_wrong, ref.D, 1e-4, 1e-4, true);
  expect_teaching_rejection(bad_D, D_wrong.data(), ref.D.data());
  std::vector<float> bad_dq = dq_model(in, dO, fwd.L, D_wrong, s);
  CompareResult bad_dQ = judge("dQ", bad_dq, ref.dQ, 2e-4, 1e-3, false);
  expect_teaching_rejection(bad_dQ, bad_dq.data(), ref.dQ.data());
}

// Reports of a PASS still say how close it was (max abs/rel and the tolerance), and a flash-rule
// report always shows the naive error it was judged against.
TEST(MutantsCpu, PassingReportsStillShowErrorsAndTolerance) {
  const double ref[3] = {1.0, 2.0, 3.0};
  const float got[3] = {1.0f, 2.0f, 3.0001f};
  const float naive[3] = {1.001f, 2.0f, 3.0f};
  CompareResult a = fa::compare_allclose("x", got, ref, 3, 1e-3, 0.0);
  EXPECT_TRUE(a.ok);
  EXPECT_TRUE(contains(a.report(), "x: PASS")) << a.report();
  EXPECT_TRUE(contains(a.report(), "max abs error")) << a.report();
  EXPECT_TRUE(contains(a.report(), "tolerance |x-ref| <= ")) << a.report();
  CompareResult f = fa::compare_flash_rule("x", got, ref, naive, 3, 2.0, 0.0);
  EXPECT_TRUE(f.ok) << f.report();
  EXPECT_NEAR(f.naive_err, 1e-3, 1e-6);
  EXPECT_TRUE(contains(f.report(), "naive same-precision implementation's max error"))
      << f.report();
}

}  // namespace
