// Mutation tests: the harness must catch wrong kernels. Each mutant in tests/mutants/ makes one
// classic mistake; wrapped in an ad-hoc registry struct (never registered) and handed straight to
// the harness, it must come back FAIL with a report that names the first mismatching element.
// Each mutant has a correct twin, built the same way, that must PASS: so a rejection is caused by
// the mistake, not by the wrapping. Shapes are ragged (113 x 203), causal where it matters.
#include <iostream>
#include <string>

#include "mutants.h"
#include "test_util.h"

namespace {

using fa::AttentionShape;
using fa::DType;

fa::RunOptions check_only(uint64_t seed = 20261121) {
  fa::RunOptions o;
  o.seed = seed;
  o.time = false;
  return o;
}

fa::SoftmaxKernel softmax(const std::string& name, fa::SoftmaxFn fn) {
  return fa::SoftmaxKernel{"mutant/" + name, fn, "deliberately wrong (or its twin)", 2, 70};
}
fa::AttentionFwdKernel fwd(const std::string& name, fa::AttentionFwdFn fn,
                           std::vector<DType> dtypes = {DType::F32}) {
  return fa::AttentionFwdKernel{"mutant/" + name,    fn, "deliberately wrong (or its twin)", dtypes,
                                {mutants::kHeadDim}, 70};
}
fa::AttentionBwdKernel bwd(const std::string& name, fa::AttentionBwdFn fn) {
  return fa::AttentionBwdKernel{"mutant/" + name,
                                fn,
                                "deliberately wrong (or its twin)",
                                {DType::F32},
                                {mutants::kHeadDim},
                                70,
                                false};
}

// A run that could not happen (UNSUPPORTED, e.g. no forward kernel registered to feed the
// backward) skips the test instead of counting as a rejection.
#define FA_SKIP_IF_NOT_RUN(r)                                                     \
  do {                                                                            \
    if ((r).status == fa::Status::Unsupported || (r).status == fa::Status::NoGpu) \
      GTEST_SKIP() << (r).message;                                                \
  } while (0)

// The harness rejected the run, and its report says where and by how much.
void expect_rejected(const fa::RunResult& r) {
  EXPECT_EQ(r.status, fa::Status::Fail) << "the harness ACCEPTED a wrong kernel:\n" << r.report();
  const std::string rep = r.report();
  EXPECT_FALSE(rep.empty());
  EXPECT_NE(rep.find("first mismatch at ["), std::string::npos) << rep;
  EXPECT_NE(rep.find("max abs error"), std::string::npos) << rep;
  EXPECT_NE(rep.find("tolerance"), std::string::npos) << rep;
  std::cout << "[ rejected ] as it should be:\n" << rep;
}

const AttentionShape kRaggedCausal{1, 2, 113, 203, mutants::kHeadDim, true, 0.0f};

// ---- softmax -------------------------------------------------------------------------------------
TEST(MutantSoftmax, CorrectTwinPasses) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::SoftmaxKernel k = softmax("softmax_online_correct", mutants::softmax_online_correct);
  FA_EXPECT_PASS(fa::run_softmax(k, {113, 203}, check_only()));
  fa::RunOptions big = check_only(5);
  big.input_mean = 1e4f;
  FA_EXPECT_PASS(fa::run_softmax(k, {113, 203}, big));
}

// (a) Lesson: exp(x) overflows past 88.7; subtracting the row max costs nothing and fixes it.
TEST(MutantSoftmax, NoMaxSubtractionIsRejectedOnOffsetInputs) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::RunOptions big = check_only(5);
  big.input_mean = 1e4f;  // the generic tests' InputsOffsetBy1e4 case
  fa::RunResult r = fa::run_softmax(
      softmax("softmax_no_max_subtraction", mutants::softmax_no_max_subtraction), {113, 203}, big);
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
}

// (b) Lesson: when the running max grows, the sum so far must be rescaled by exp(m_old - m_new).
TEST(MutantSoftmax, OnlineWithoutRescaleIsRejected) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::RunResult r =
      fa::run_softmax(softmax("softmax_online_no_rescale", mutants::softmax_online_no_rescale),
                      {113, 203}, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
}

// ---- attention forward ----------------------------------------------------------------------------
TEST(MutantAttentionFwd, CorrectTwinPasses) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::AttentionFwdKernel k =
      fwd("attn_fwd_correct", mutants::attn_fwd_correct, {DType::F32, DType::F16});
  for (bool causal : {false, true}) {
    AttentionShape s = kRaggedCausal;
    s.causal = causal;
    FA_EXPECT_PASS(fa::run_attention_fwd(k, s, DType::F32, check_only()));
    AttentionShape wide{1, 1, 203, 113, mutants::kHeadDim, causal, 0.0f};  // rows with no key
    FA_EXPECT_PASS(fa::run_attention_fwd(k, wide, DType::F32, check_only()));
  }
}

// (c) Lesson: with bottom-right alignment query i sees keys j <= i + seq_k - seq_q, not one more.
TEST(MutantAttentionFwd, CausalOffByOneIsRejected) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::RunResult r =
      fa::run_attention_fwd(fwd("attn_fwd_causal_off_by_one", mutants::attn_fwd_causal_off_by_one),
                            kRaggedCausal, DType::F32, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
}

// (e) Lesson: fp16 inputs are fine, an fp16 accumulator is not. The twin (fp32 accumulator, same
// fp16 inputs) passes the FlashAttention 2x rule; the mutant's error grows with the sequence.
const AttentionShape kLongF16{1, 2, 2048, 2048, mutants::kHeadDim, false, 0.0f};

TEST(MutantAttentionFwd, Fp16InputsWithFp32AccumulatorPass) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_EXPECT_PASS(
      fa::run_attention_fwd(fwd("attn_fwd_correct", mutants::attn_fwd_correct, {DType::F16}),
                            kLongF16, DType::F16, check_only()));
}

TEST(MutantAttentionFwd, HalfAccumulatorIsRejectedOnLongSequences) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::RunResult r = fa::run_attention_fwd(
      fwd("attn_fwd_half_accumulator", mutants::attn_fwd_half_accumulator, {DType::F16}), kLongF16,
      DType::F16, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
  EXPECT_NE(r.report().find("naive same-precision"), std::string::npos) << r.report();
}

// (f) Lesson: launch ceil(n / tile) blocks and guard the tail, never floor(n / tile).
TEST(MutantAttentionFwd, SkippedTailRowsAreRejectedAsPoison) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::RunResult r =
      fa::run_attention_fwd(fwd("attn_fwd_skips_tail_rows", mutants::attn_fwd_skips_tail_rows),
                            kRaggedCausal, DType::F32, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
  // Rows 64..112 of the first head are the first ones left unwritten.
  EXPECT_NE(r.report().find("[b=0, h=0, i=64"), std::string::npos) << r.report();
  EXPECT_NE(r.report().find("poison"), std::string::npos) << r.report();
}

TEST(MutantAttentionFwd, TiledWithBothBarriersPasses) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::AttentionFwdKernel k = fwd("attn_fwd_tiled_synced", mutants::attn_fwd_tiled_synced);
  FA_EXPECT_PASS(fa::run_attention_fwd(k, kRaggedCausal, DType::F32, check_only()));
  AttentionShape full = kRaggedCausal;
  full.causal = false;
  FA_EXPECT_PASS(fa::run_attention_fwd(k, full, DType::F32, check_only()));
}

// (d) Lesson: a race may give the right answer on the run you test. The ctest test
// sanitize_racecheck_finds_missing_syncthreads runs this under compute-sanitizer --tool racecheck,
// which must report the hazard; here we only note whether the race showed up in the numbers.
TEST(MutantRace, MissingSyncthreadsIsRejectedOrNoted) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::AttentionFwdKernel k =
      fwd("attn_fwd_tiled_missing_sync", mutants::attn_fwd_tiled_missing_sync);
  int rejected = 0;
  const int runs = 3;
  for (int run = 0; run < runs; ++run) {
    fa::RunResult r = fa::run_attention_fwd(k, kRaggedCausal, DType::F32, check_only(100 + run));
    ASSERT_NE(r.status, fa::Status::Unsupported) << r.message;
    if (r.status == fa::Status::Fail) {
      ++rejected;
      EXPECT_NE(r.report().find("first mismatch at ["), std::string::npos) << r.report();
    }
  }
  if (rejected == 0)
    std::cout << "[   note   ] the racy kernel passed " << runs << " checked runs: the race did "
              << "not corrupt these results. Races are nondeterministic; the real check is "
              << "`ctest -L sanitize -R racecheck_finds` (compute-sanitizer --tool racecheck).\n";
  else
    std::cout << "[ rejected ] the race corrupted " << rejected << " of " << runs << " runs\n";
}

// ---- attention backward ----------------------------------------------------------------------------
// O and L come from the best registered forward kernel (chapter 05): without one, these skip.
TEST(MutantAttentionBwd, CorrectTwinPasses) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::AttentionBwdKernel k = bwd("attn_bwd_correct", mutants::attn_bwd_correct);
  FA_EXPECT_PASS(fa::run_attention_bwd(k, kRaggedCausal, DType::F32, check_only()));
  AttentionShape wide{1, 1, 203, 113, mutants::kHeadDim, true, 0.0f};
  FA_EXPECT_PASS(fa::run_attention_bwd(k, wide, DType::F32, check_only()));
}

// (g) Lesson: D = rowsum(dO * O); the backward's preprocessing step reads O, the forward's output.
TEST(MutantAttentionBwd, DeltaFromWrongTensorIsRejected) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::RunResult r =
      fa::run_attention_bwd(bwd("attn_bwd_delta_from_dout", mutants::attn_bwd_delta_from_dout),
                            kRaggedCausal, DType::F32, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
  EXPECT_NE(r.report().find("D: FAIL"), std::string::npos) << r.report();
}

}  // namespace
