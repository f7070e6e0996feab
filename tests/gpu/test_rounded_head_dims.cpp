// Head dims between a kernel's instances (rounds_head_dim, registry.h): a kernel that rounds runs
// D 40, 80, 96, 160, 192 and 224 (those below its largest instance) at the next instance, the
// columns past the real head dim zero inside the kernel and never stored. Every such kernel,
// forward and backward, runs them on ragged shapes, causal and not, fp16 and bf16, grouped K/V
// heads where it takes them, checked as every other run (the poisoned outputs catch a column
// stored past d, a wrong row length shows as wrong values); a refusal here FAILS, since the
// registration says the kernel takes these head dims. A head dim that is no multiple of 8 (59,
// 111, 201) must be refused with the reason, never run, unless the kernel rounds every head dim
// (head_dim_step 1: chapter 05's t15 and t17, chapter 06's t17 and t21), which runs those it takes
// as the others. (The packed-batch kernels of chapter 09 that round are tested in
// test_serving.cpp, RoundedHeadDims.)
#include "test_util.h"

namespace {

using fa::AttentionShape;

const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1}, {17, 17}, {113, 203}, {203, 113}, {127, 129}};

fa::RunOptions check_only(uint64_t seed) {
  fa::RunOptions o;
  o.seed = seed;
  o.time = false;
  return o;
}

template <class K>
std::vector<std::string> names_that_round() {
  std::vector<std::string> out;
  for (const K* k : fa::entries_with_prefix<K>(""))
    if (k->rounds_head_dim) out.push_back(k->name);
  return out;
}

void expect_pass(const fa::RunResult& r) {
  if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message << FA_SKIP_NOTE;
  EXPECT_EQ(r.status, fa::Status::Pass) << r.report();
}

template <class K, class Run>
void every_rounded_head_dim(const K& k, Run run) {
  FA_SKIP_WITHOUT_GPU(k.min_sm);
  const std::vector<int> dims = rounded_dims(k);
  ASSERT_FALSE(dims.empty()) << k.name << " rounds head dims but takes none of the test's";
  for (fa::DType t : k.dtypes)
    for (int d : dims)
      for (auto [nq, nk] : kShapes)
        for (bool causal : {false, true}) {
          const AttentionShape s{2, 3, nq, nk, d, causal, 0.0f};
          SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
          expect_pass(run(k, s, t, check_only(uint64_t(d * 13 + nq * 7 + nk))));
          if (::testing::Test::HasFatalFailure() || ::testing::Test::IsSkipped()) return;
        }
  // Off the step of 8 the tensors' element counts need not be multiples of 4, and the shapes above
  // (an even batch x heads) leave 0 or 2 past the last group of four: one head of 17 queries and
  // three of 113 leave 1 and 3 at D 59, 111 and 201 (a dQ conversion's tail: 06/t17, 06/t21).
  for (int d : dims)
    if (d % 8 != 0)
      for (const AttentionShape& s : {AttentionShape{1, 1, 17, 33, d, true, 0.0f},
                                      AttentionShape{1, 3, 113, 203, d, false, 0.0f}}) {
        SCOPED_TRACE(s.str());
        expect_pass(run(k, s, k.dtypes.front(), check_only(uint64_t(d + s.heads))));
        if (::testing::Test::HasFatalFailure() || ::testing::Test::IsSkipped()) return;
      }
  if (!k.gqa) return;
  for (fa::DType t : k.dtypes)
    for (int d : dims)
      for (int64_t hkv : {2, 1}) {
        const AttentionShape s{2, 8, 113, 203, d, true, 0.0f, hkv};
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        expect_pass(run(k, s, t, check_only(uint64_t(d + hkv))));
      }
}

template <class K, class Run>
void refuses_head_dims_off_the_step(const K& k, Run run) {
  FA_SKIP_WITHOUT_GPU(k.min_sm);
  if (fa::head_dim_step(k) == 1) {  // takes kOffTheStep (above); refuses past its largest instance
    const int d = k.head_dims.back() + 1;
    const fa::RunResult r =
        run(k, AttentionShape{1, 2, 33, 47, d, true, 0.0f}, k.dtypes.front(), check_only(3));
    if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message << FA_SKIP_NOTE;
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    return;
  }
  for (int d : {59, 111}) {
    const fa::RunResult r =
        run(k, AttentionShape{1, 2, 33, 47, d, true, 0.0f}, k.dtypes.front(), check_only(3));
    if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message << FA_SKIP_NOTE;
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    EXPECT_NE(r.message.find("multiples of 8"), std::string::npos) << r.message;
  }
}

class RoundedFwdHeadDims : public ::testing::TestWithParam<std::string> {
 protected:
  const fa::AttentionFwdKernel& kernel() {
    return *fa::find_entry<fa::AttentionFwdKernel>(GetParam());
  }
};
class RoundedBwdHeadDims : public ::testing::TestWithParam<std::string> {
 protected:
  const fa::AttentionBwdKernel& kernel() {
    return *fa::find_entry<fa::AttentionBwdKernel>(GetParam());
  }
};

TEST_P(RoundedFwdHeadDims, RaggedShapesCausalAndNot) {
  every_rounded_head_dim(kernel(),
                         [](const fa::AttentionFwdKernel& k, AttentionShape s, fa::DType t,
                            const fa::RunOptions& o) { return fa::run_attention_fwd(k, s, t, o); });
}

TEST_P(RoundedFwdHeadDims, RefusesHeadDimsOffTheStep) {
  refuses_head_dims_off_the_step(
      kernel(), [](const fa::AttentionFwdKernel& k, AttentionShape s, fa::DType t,
                   const fa::RunOptions& o) { return fa::run_attention_fwd(k, s, t, o); });
}

TEST_P(RoundedBwdHeadDims, RaggedShapesCausalAndNot) {
  every_rounded_head_dim(kernel(),
                         [](const fa::AttentionBwdKernel& k, AttentionShape s, fa::DType t,
                            const fa::RunOptions& o) { return fa::run_attention_bwd(k, s, t, o); });
}

TEST_P(RoundedBwdHeadDims, RefusesHeadDimsOffTheStep) {
  refuses_head_dims_off_the_step(
      kernel(), [](const fa::AttentionBwdKernel& k, AttentionShape s, fa::DType t,
                   const fa::RunOptions& o) { return fa::run_attention_bwd(k, s, t, o); });
}

INSTANTIATE_TEST_SUITE_P(Registered, RoundedFwdHeadDims,
                         ::testing::ValuesIn(names_that_round<fa::AttentionFwdKernel>()),
                         RegistryNamePrinter());
INSTANTIATE_TEST_SUITE_P(Registered, RoundedBwdHeadDims,
                         ::testing::ValuesIn(names_that_round<fa::AttentionBwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RoundedFwdHeadDims);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RoundedBwdHeadDims);

}  // namespace
