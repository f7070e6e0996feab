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

#include "ch08_split_kv.h"
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

// =================================================================================================
// Chapters 07 and 08: the rung mutants' mistakes (tests/mutants/CMakeLists.txt) on the CPU models.
// Each is judged as the harness judges fp32 (allclose 1e-4 on O, 1e-4 / 1e-5 on L), and each is
// invisible on some shapes: the tests pin down which shapes a GPU test needs to catch it.
// =================================================================================================
enum class MergeBug { None, NoRescale, LseInLog2 };

// 08/v1_split_kv's arithmetic for one head: each row's keys cut into splits of split_len keys,
// partials merged left to right (ch08_split_kv.h); with one split the kernel writes O and L itself.
//   NoRescale  (mutant/08_merge_no_rescale): the merge adds the splits' o without e^(m_s - M)
//   LseInLog2  (mutant/08_lse_in_log2): the one-split L written as m log2(e) + log2 l
// The pair merge of ch08_split_kv.h, spelled out here: fa::ch08::merge is a CPU exercise, which
// the exercise build replaces by a stand-in that throws, and these tests check the mutants, not it.
fa::ch08::Partial merge_partials(const fa::ch08::Partial& a, const fa::ch08::Partial& b) {
  fa::ch08::Partial r;
  r.m = std::max(a.m, b.m);
  auto factor = [&](double m) { return m == r.m ? 1.0 : std::exp(m - r.m); };
  r.l = a.l * factor(a.m) + b.l * factor(b.m);
  r.o.resize(a.o.size());
  for (size_t d = 0; d < a.o.size(); ++d) r.o[d] = a.o[d] * factor(a.m) + b.o[d] * factor(b.m);
  return r;
}

void split_kv_model(const fa::HeadView& h, int64_t split_len, MergeBug bug, float* O, float* L) {
  const int64_t splits = fa::ceil_div(h.seq_k, split_len);
  for (int64_t i = 0; i < h.seq_q; ++i) {
    fa::ch08::Partial acc = fa::ch08::partial_over_keys(h, i, 0, 0);  // the identity
    for (int64_t k0 = 0; k0 < h.seq_k; k0 += split_len) {
      const fa::ch08::Partial part = fa::ch08::partial_over_keys(h, i, k0, k0 + split_len);
      fa::ch08::Partial merged = merge_partials(acc, part);
      if (bug == MergeBug::NoRescale)
        for (int64_t d = 0; d < h.d; ++d) merged.o[d] = acc.o[d] + part.o[d];
      acc = merged;
    }
    for (int64_t d = 0; d < h.d; ++d) O[i * h.d + d] = float(acc.l > 0 ? acc.o[d] / acc.l : 0.0);
    double lse = acc.l > 0 ? acc.m + std::log(acc.l) : -INFINITY;
    if (bug == MergeBug::LseInLog2 && splits == 1) lse /= std::log(2.0);
    L[i] = float(lse);
  }
}

// The whole tensor through split_kv_model; `kv_of(bh)` is the K/V head query head bh reads
// (mutant/08_gqa_wrong_kv_head: bh's head h reads h % H_kv instead of h / group).
template <class KvOf>
std::pair<CompareResult, CompareResult> judge_decode(const AttentionShape& s, int64_t split_len,
                                                     MergeBug bug, KvOf kv_of) {
  AttnInputs in = draw_attention(s, DType::F32, 29);
  std::vector<float> O(s.q_numel()), L(s.lse_numel());
  std::vector<double> rO(s.q_numel()), rL(s.lse_numel());
  for (int64_t bh = 0; bh < s.bh(); ++bh) {
    fa::HeadView h = fa::head_view(s, in.q.data(), in.k.data(), in.v.data(), bh);
    fa::attention_forward_ref_head(h, {}, rO.data() + bh * s.seq_q * s.head_dim,
                                   rL.data() + bh * s.seq_q);
    h.k = in.k.data() + kv_of(bh) * s.seq_k * s.head_dim;
    h.v = in.v.data() + kv_of(bh) * s.seq_k * s.head_dim;
    split_kv_model(h, split_len, bug, O.data() + bh * s.seq_q * s.head_dim,
                   L.data() + bh * s.seq_q);
  }
  CompareResult cO = fa::compare_allclose("O", O.data(), rO.data(), O.size(), 1e-4, 1e-4);
  CompareResult cL = fa::compare_allclose("L", L.data(), rL.data(), L.size(), 1e-4, 1e-5);
  cO.dims = {s.batch, s.heads, s.seq_q, s.head_dim};
  cO.names = {"b", "h", "i", "d"};
  cL.dims = {s.batch, s.heads, s.seq_q};
  cL.names = {"b", "h", "i"};
  return {cO, cL};
}

const AttentionShape kDecode{1, 4, 2, 1000, 32, true, 0.0f, 2};

TEST(MutantsCpu, Ch08SplitKvTwinAccepted) {
  for (int64_t split_len : {int64_t(64), int64_t(1000)}) {
    auto [cO, cL] = judge_decode(kDecode, split_len, MergeBug::None,
                                 [&](int64_t bh) { return kDecode.kv_index(bh); });
    EXPECT_TRUE(cO.ok) << cO.report();
    EXPECT_TRUE(cL.ok) << cL.report();
  }
}

// mutant/08_merge_no_rescale: caught once a row has two splits with different maxima; with one
// split there is nothing to merge, and the mistake is invisible.
TEST(MutantsCpu, Ch08MergeWithoutRescaleRejectedWithSeveralSplits) {
  auto kv = [&](int64_t bh) { return kDecode.kv_index(bh); };
  auto [cO, cL] = judge_decode(kDecode, 64, MergeBug::NoRescale, kv);
  EXPECT_FALSE(cO.ok);
  EXPECT_TRUE(cL.ok) << "l is merged correctly; only O is wrong\n" << cL.report();
  std::cout << cO.report();
  auto [oneO, oneL] = judge_decode(kDecode, 1000, MergeBug::NoRescale, kv);
  EXPECT_TRUE(oneO.ok && oneL.ok) << "one split: the merge never runs";
}

// mutant/08_lse_in_log2: caught where the split kernel writes L itself (one split); with several
// splits the merge writes L and the mistake is invisible.
TEST(MutantsCpu, Ch08LseInLog2RejectedWithOneSplit) {
  auto kv = [&](int64_t bh) { return kDecode.kv_index(bh); };
  auto [cO, cL] = judge_decode(kDecode, 1000, MergeBug::LseInLog2, kv);
  EXPECT_TRUE(cO.ok) << cO.report();
  EXPECT_FALSE(cL.ok);
  EXPECT_TRUE(contains(cL.report(), "first mismatch at [b=0, h=0, i=0")) << cL.report();
  std::cout << cL.report();
  auto [sO, sL] = judge_decode(kDecode, 64, MergeBug::LseInLog2, kv);
  EXPECT_TRUE(sO.ok && sL.ok) << "several splits: the merge writes L";
}

// mutant/08_gqa_wrong_kv_head: caught with 2 or more K/V heads and groups of 2 or more; with one
// K/V head (h % 1 = h / H = 0) or no grouping (h % H = h / 1 = h) the two maps agree.
TEST(MutantsCpu, Ch08GqaWrongKvHeadRejectedOnlyOnGroupedShapes) {
  auto wrong = [](const AttentionShape& s) {
    return
        [s](int64_t bh) { return (bh / s.heads) * s.kv_heads() + (bh % s.heads) % s.kv_heads(); };
  };
  auto [cO, cL] = judge_decode(kDecode, 64, MergeBug::None, wrong(kDecode));
  EXPECT_FALSE(cO.ok);
  std::cout << cO.report();
  for (int64_t hkv : {int64_t(1), int64_t(4)}) {
    AttentionShape s = kDecode;
    s.heads_kv = hkv;
    auto [gO, gL] = judge_decode(s, 64, MergeBug::None, wrong(s));
    EXPECT_TRUE(gO.ok && gL.ok) << "H_kv " << hkv << ": the wrong map is the right one here";
  }
}

// mutant/07_o_not_rescaled: 07/v1's online softmax over key tiles of Bc = 128 with O not rescaled
// by alpha when the row max moves. Caught from the second key tile on; with one tile alpha only
// ever multiplies zeros.
FwdOut tiled_no_rescale_model(const AttnInputs& in, const AttentionShape& s, bool rescale_o) {
  constexpr int64_t kBc = 128;
  const int64_t D = s.head_dim;
  FwdOut out;
  out.O.assign(s.q_numel(), 0.0f);
  out.L.assign(s.lse_numel(), 0.0f);
  for (int64_t bh = 0; bh < s.bh(); ++bh) {
    const fa::HeadView h = fa::head_view(s, in.q.data(), in.k.data(), in.v.data(), bh);
    for (int64_t i = 0; i < s.seq_q; ++i) {
      const int64_t last = s.causal ? fa::causal_last_key(i, s.seq_q, s.seq_k) : s.seq_k - 1;
      double m = -INFINITY, l = 0;
      std::vector<double> o(D, 0.0);
      for (int64_t j0 = 0; j0 <= last; j0 += kBc) {
        const int64_t j1 = std::min(last + 1, j0 + kBc);
        std::vector<double> sc(j1 - j0);
        double m_new = m;
        for (int64_t j = j0; j < j1; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(h.q[i * D + d]) * h.k[j * D + d];
          sc[j - j0] = dot * h.scale;
          m_new = std::max(m_new, sc[j - j0]);
        }
        const double alpha = m == -INFINITY ? 0.0 : std::exp(m - m_new);
        l *= alpha;
        if (rescale_o)
          for (double& x : o) x *= alpha;
        for (int64_t j = j0; j < j1; ++j) {
          const double p = std::exp(sc[j - j0] - m_new);
          l += p;
          for (int64_t d = 0; d < D; ++d) o[d] += p * h.v[j * D + d];
        }
        m = m_new;
      }
      for (int64_t d = 0; d < D; ++d)
        out.O[(bh * s.seq_q + i) * D + d] = float(l > 0 ? o[d] / l : 0.0);
      out.L[bh * s.seq_q + i] = float(l > 0 ? m + std::log(l) : -INFINITY);
    }
  }
  return out;
}

TEST(MutantsCpu, Ch07ONotRescaledRejectedFromTheSecondKeyTile) {
  for (int64_t seq_k : {int64_t(128), int64_t(517)}) {
    const AttentionShape s{1, 2, 65, seq_k, 32, false, 0.0f};
    AttnInputs in = draw_attention(s, DType::F32, 31);
    fa::AttentionFwdRef ref = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
    auto [tO, tL] = judge_fp32(tiled_no_rescale_model(in, s, true), ref, s);
    EXPECT_TRUE(tO.ok && tL.ok) << "the twin, seq_k " << seq_k << "\n" << tO.report();
    auto [cO, cL] = judge_fp32(tiled_no_rescale_model(in, s, false), ref, s);
    EXPECT_TRUE(cL.ok) << "l is rescaled inside the softmax; only O is wrong";
    if (seq_k <= 128) {
      EXPECT_TRUE(cO.ok) << "one key tile: the mistake is invisible";
    } else {
      EXPECT_FALSE(cO.ok);
      std::cout << cO.report();
    }
  }
}

// mutant/07_wrong_barrier_parity: a model of 07/v1's K/V ring. An mbarrier counts completed
// phases; try_wait.parity(P) returns once the phase of parity P before the current one has
// completed, i.e. when (completed & 1) != P (a fresh barrier: P = 1 returns at once). Tile j uses
// stage j % kStages for the (j / kStages)-th time; when the consumer waits, that fill is in flight
// (completed = round) or landed (round + 1), and the next fill is requested only after tile j.
enum class WaitOutcome { Correct, Race, Hang };
WaitOutcome ring_wait(int64_t round, bool landed, int parity) {
  int64_t completed = landed ? round + 1 : round;
  auto returns = [&] { return (completed & 1) != parity; };
  if (returns()) return landed ? WaitOutcome::Correct : WaitOutcome::Race;
  if (!landed) {
    completed = round + 1;  // the fill lands while the consumer waits
    if (returns()) return WaitOutcome::Correct;
  }
  return WaitOutcome::Hang;  // waits for a fill that is requested only after this tile
}

TEST(MutantsCpu, Ch07WrongBarrierParityRacesOrHangsFromTheSecondTile) {
  constexpr int64_t kStages = 2;  // 07/v1's ring
  for (int64_t j = 0; j < 16; ++j) {
    const int64_t round = j / kStages;
    for (bool landed : {false, true}) {
      EXPECT_EQ(ring_wait(round, landed, int(round & 1)), WaitOutcome::Correct) << j;
      const WaitOutcome mutant = ring_wait(round, landed, int(j & 1));
      if ((j & 1) == (round & 1))
        EXPECT_EQ(mutant, WaitOutcome::Correct) << j;
      else  // j = 1, 2, 5, 6, ...: before the data (a race) or never (a hang)
        EXPECT_EQ(mutant, landed ? WaitOutcome::Hang : WaitOutcome::Race) << j;
    }
  }
}

// mutant/07_missing_turn_handover: a model of 07/v3's ping-pong token. Named barrier b completes
// when two warpgroups have come (the giver's bar.arrive and the taker's bar.sync); consumer c syncs
// on barrier c before each turn and (the hand-over) arrives on barrier 1 - c after it. Returns the
// order of the turns taken and whether both consumers finished (false: a deadlock).
struct PingPong {
  bool finished = false;
  std::vector<int> order;  // the consumer of each turn taken, in order
};
PingPong pingpong_turns(int n_tiles, bool handover) {
  const int n_turns = n_tiles > 0 ? n_tiles + 1 : 0;
  enum Op { Arrive, Sync, Turn };
  std::vector<std::pair<Op, int>> prog[2];
  if (n_turns > 0) prog[1].push_back({Arrive, 0});  // consumer 1 hands consumer 0 the first token
  for (int c = 0; c < 2; ++c)
    for (int j = 0; j < n_turns; ++j) {
      prog[c].push_back({Sync, c});
      prog[c].push_back({Turn, j});
      if (handover && (c == 0 || j + 1 < n_turns)) prog[c].push_back({Arrive, 1 - c});
    }
  int count[2] = {0, 0};
  size_t pc[2] = {0, 0};
  bool waiting[2] = {false, false};
  PingPong r;
  auto come = [&](int b) {
    if (++count[b] < 2) return;
    count[b] = 0;
    for (int c = 0; c < 2; ++c)
      if (waiting[c] && prog[c][pc[c]].second == b) waiting[c] = false, ++pc[c];
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int c = 0; c < 2; ++c) {
      if (waiting[c] || pc[c] == prog[c].size()) continue;
      const auto [op, arg] = prog[c][pc[c]];
      progress = true;
      if (op == Turn) {
        r.order.push_back(c);
        ++pc[c];
      } else if (op == Arrive) {
        ++pc[c];
        come(arg);
      } else {
        waiting[c] = true;
        come(arg);
      }
    }
  }
  r.finished = pc[0] == prog[0].size() && pc[1] == prog[1].size();
  return r;
}

TEST(MutantsCpu, Ch07MissingTurnHandoverDeadlocks) {
  for (int n_tiles : {1, 2, 5}) {
    const PingPong twin = pingpong_turns(n_tiles, true);
    EXPECT_TRUE(twin.finished);
    ASSERT_EQ(twin.order.size(), size_t(2 * (n_tiles + 1)));
    for (size_t t = 0; t < twin.order.size(); ++t)
      EXPECT_EQ(twin.order[t], int(t % 2)) << "turns alternate 0, 1, 0, 1, ...";
    const PingPong mutant = pingpong_turns(n_tiles, false);
    EXPECT_FALSE(mutant.finished) << "without the hand-over: a deadlock";
    EXPECT_EQ(mutant.order, std::vector<int>({0})) << "after consumer 0's first turn";
  }
  EXPECT_TRUE(pingpong_turns(0, false).finished);  // no key tile, no turn: nothing to hand over
}

}  // namespace
