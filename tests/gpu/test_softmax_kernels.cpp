// Every registered row-softmax kernel (chapters 01 and 02), on the lengths that catch tail bugs,
// with large offsets, -inf entries, all -inf rows, and fresh inputs on every run.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace {

class SoftmaxKernels : public VariantTest {
 protected:
  const fa::SoftmaxKernel& kernel() { return *fa::find_entry<fa::SoftmaxKernel>(GetParam()); }
};

fa::RunOptions check_only(uint64_t seed) {
  fa::RunOptions o;
  o.seed = seed;
  o.time = false;
  return o;
}

TEST_P(SoftmaxKernels, RaggedLengths) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (int64_t cols : {1, 31, 32, 33, 1000, 4097, 100000})
    for (int64_t rows : {1, 7, 130})
      FA_EXPECT_PASS(fa::run_softmax(kernel(), {rows, cols}, check_only(cols + rows)));
}

TEST_P(SoftmaxKernels, InputsOffsetBy1e4) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  fa::RunOptions o = check_only(5);
  o.input_mean = 1e4f;
  FA_EXPECT_PASS(fa::run_softmax(kernel(), {64, 1000}, o));
}

TEST_P(SoftmaxKernels, MinusInfinityEntriesAndWholeRows) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  fa::RunOptions o = check_only(6);
  o.softmax_input_hook = [](std::vector<float>& x, fa::SoftmaxShape s) {
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) {
        if (r % 3 == 1 && c % 5 == 0) x[r * s.cols + c] = ninf;  // some entries
        if (r % 7 == 3) x[r * s.cols + c] = ninf;                // whole rows: defined as 0
      }
  };
  for (int64_t cols : {1, 33, 1000, 4097}) FA_EXPECT_PASS(fa::run_softmax(kernel(), {21, cols}, o));
}

TEST_P(SoftmaxKernels, FreshInputsEveryRun) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (uint64_t seed = 100; seed < 104; ++seed)
    FA_EXPECT_PASS(fa::run_softmax(kernel(), {257, 2049}, check_only(seed)));
}

TEST_P(SoftmaxKernels, LongRowsOfAMillion) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  FA_EXPECT_PASS(fa::run_softmax(kernel(), {3, 1 << 20}, check_only(7)));
}

INSTANTIATE_TEST_SUITE_P(Registered, SoftmaxKernels,
                         ::testing::ValuesIn(fa::entry_names<fa::SoftmaxKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SoftmaxKernels);

}  // namespace
