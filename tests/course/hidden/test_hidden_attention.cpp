// Hidden tests of the attention exercises (05 forward, 06 backward, 07 Hopper forward, 08
// split-KV decoding) and of the assignments of those chapters: (seq_q, seq_k) pairs and batch x
// heads the public tests (tests/gpu/test_attention_kernels.cpp, test_decoding.cpp) do not use,
// causal rows that see no key, other scales and input spreads, other seeds, many K/V splits with
// ragged tails, and grouped K/V heads in groups of 2, 4 and 12.
#include "grade_util.h"

namespace {

using fa::AttentionShape;
using fa::grade::check_only;
using fa::grade::Tally;
using fa::grade::variants;

class HiddenAttentionFwd : public GradedKernel<fa::AttentionFwdKernel> {};
class HiddenDecoding : public GradedKernel<fa::AttentionFwdKernel> {};
class HiddenAttentionBwd : public GradedKernel<fa::AttentionBwdKernel> {};

// fp32 scores of large inputs round to ~1e-5 and the softmax passes that on (see the public
// NonDefaultScaleAndLargeInputs): the fp32 tolerance is widened for large inputs only.
fa::RunOptions large_inputs(uint64_t seed, fa::DType t) {
  fa::RunOptions o = check_only(seed);
  o.input_std = 4.0f;
  o.input_mean = -2.0f;
  if (t == fa::DType::F32) {
    o.has_tolerance = true;
    o.tolerance = fa::Tolerance::allclose(1e-3, 1e-3);
  }
  return o;
}

// ---- forward -----------------------------------------------------------------------------------
TEST_P(HiddenAttentionFwd, RaggedPairs) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  const std::vector<std::pair<int64_t, int64_t>> pairs = {
      {2, 2}, {31, 65}, {65, 31}, {64, 64}, {129, 1}, {1, 300}, {257, 511}, {640, 700}};
  for (auto [t, d] : variants(kernel()))
    for (auto [nq, nk] : pairs)
      for (bool causal : {false, true}) {
        AttentionShape s{3, 2, nq, nk, d, causal, 0.0f};
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        tally.add(fa::run_attention_fwd(kernel(), s, t, check_only(9800 + nq * 3 + nk)));
      }
  tally.finish();
}

TEST_P(HiddenAttentionFwd, CausalRowsThatSeeNoKey) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  for (auto [t, d] : variants(kernel()))
    for (auto [nq, nk] :
         std::vector<std::pair<int64_t, int64_t>>{{300, 17}, {129, 64}, {1000, 999}}) {
      AttentionShape s{2, 2, nq, nk, d, true, 0.0f};
      SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
      tally.add(fa::run_attention_fwd(kernel(), s, t, check_only(9850 + nq)));
    }
  tally.finish();
}

TEST_P(HiddenAttentionFwd, ScaleAndLargeInputs) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  for (auto [t, d] : variants(kernel())) {
    SCOPED_TRACE(std::string(fa::dtype_name(t)) + " D" + std::to_string(d));
    for (float scale : {0.11f, 0.9f})
      tally.add(fa::run_attention_fwd(kernel(), {2, 3, 333, 222, d, scale > 0.5f, scale}, t,
                                      check_only(9870)));
    tally.add(
        fa::run_attention_fwd(kernel(), {1, 2, 517, 700, d, true, 0.0f}, t, large_inputs(9871, t)));
  }
  tally.finish();
}

TEST_P(HiddenAttentionFwd, NewSeedsLongSequences) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  auto all = variants(kernel());
  for (auto [t, d] : all)
    for (uint64_t seed = 9880; seed < 9882; ++seed)
      tally.add(fa::run_attention_fwd(kernel(), {1, 2, 2049, 2049, d, seed % 2 == 1, 0.0f}, t,
                                      check_only(seed)));
  fa::RunOptions o = check_only(9883);
  o.check_heads = 2;
  tally.add(fa::run_attention_fwd(kernel(), {1, 3, 3000, 5000, all.front().second, true, 0.0f},
                                  all.front().first, o));
  tally.add(fa::run_attention_fwd(kernel(), {1, 2, 6143, 6143, all.back().second, false, 0.0f},
                                  all.back().first, o));
  tally.finish();
}

INSTANTIATE_TEST_SUITE_P(Hidden, HiddenAttentionFwd,
                         ::testing::ValuesIn(fa::grade::graded_names<fa::AttentionFwdKernel>()),
                         GradeNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HiddenAttentionFwd);

// ---- decoding (the kernels that declare gqa or decoding) ---------------------------------------
bool decodes(const fa::AttentionFwdKernel& k) {
  return k.gqa || k.decoding;
}

fa::DType decode_dtype(const fa::AttentionFwdKernel& k) {
  return fa::supports(k.dtypes, fa::DType::BF16) ? fa::DType::BF16 : k.dtypes.front();
}

TEST_P(HiddenDecoding, SplitsAndTails) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  const fa::DType t = decode_dtype(kernel());
  for (int d : kernel().head_dims)
    for (int64_t nq : {1, 3, 16})
      for (int64_t nk : {2, 129, 4097, 50001})
        for (bool causal : {false, true}) {
          AttentionShape s{2, 4, nq, nk, d, causal, 0.0f};
          SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
          fa::RunOptions o = check_only(9900 + nq * 11 + nk);
          o.check_heads = 3;
          tally.add(fa::run_attention_fwd(kernel(), s, t, o));
        }
  tally.finish();
}

TEST_P(HiddenDecoding, GroupedHeads) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  const std::vector<int64_t> kv =
      kernel().gqa ? std::vector<int64_t>{6, 3, 1} : std::vector<int64_t>{12};
  for (fa::DType t : kernel().dtypes)
    for (int64_t hkv : kv)
      for (int64_t nq : {1, 5})
        for (int64_t nk : {777, 20000}) {
          AttentionShape s{2, 12, nq, nk, kernel().head_dims.back(), nq == 5, 0.0f, hkv};
          SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
          // Every head is checked: a wrong K/V head for one query head must not hide.
          tally.add(fa::run_attention_fwd(kernel(), s, t, check_only(9950 + hkv * 7 + nk)));
        }
  tally.finish();
}

INSTANTIATE_TEST_SUITE_P(
    Hidden, HiddenDecoding,
    ::testing::ValuesIn(fa::grade::graded_names<fa::AttentionFwdKernel>(&decodes)),
    GradeNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HiddenDecoding);

// ---- backward ----------------------------------------------------------------------------------
TEST_P(HiddenAttentionBwd, RaggedPairs) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  const std::vector<std::pair<int64_t, int64_t>> pairs = {{2, 2},    {31, 65},  {65, 31},
                                                          {129, 64}, {300, 17}, {257, 511}};
  for (auto [t, d] : variants(kernel()))
    for (auto [nq, nk] : pairs)
      for (bool causal : {false, true}) {
        AttentionShape s{2, 2, nq, nk, d, causal, 0.0f};
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        tally.add(fa::run_attention_bwd(kernel(), s, t, check_only(10000 + nq * 3 + nk)));
      }
  tally.finish();
}

TEST_P(HiddenAttentionBwd, ScaleAndNewSeeds) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  for (auto [t, d] : variants(kernel())) {
    SCOPED_TRACE(std::string(fa::dtype_name(t)) + " D" + std::to_string(d));
    tally.add(
        fa::run_attention_bwd(kernel(), {1, 3, 400, 257, d, true, 0.19f}, t, check_only(10100)));
    for (uint64_t seed = 10101; seed < 10103; ++seed)
      tally.add(fa::run_attention_bwd(kernel(), {1, 2, 513, 513, d, seed % 2 == 0, 0.0f}, t,
                                      check_only(seed)));
  }
  tally.finish();
}

INSTANTIATE_TEST_SUITE_P(Hidden, HiddenAttentionBwd,
                         ::testing::ValuesIn(fa::grade::graded_names<fa::AttentionBwdKernel>()),
                         GradeNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HiddenAttentionBwd);

}  // namespace
