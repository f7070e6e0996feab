// Every registered transpose (chapter 04) at ragged sizes: exact equality is required.
#include "test_util.h"

namespace {

class TransposeKernels : public VariantTest {
 protected:
  const fa::TransposeKernel& kernel() { return *fa::find_entry<fa::TransposeKernel>(GetParam()); }
};

TEST_P(TransposeKernels, RaggedShapes) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  fa::RunOptions o;
  o.time = false;
  for (fa::TransposeShape s :
       {fa::TransposeShape{1, 1}, fa::TransposeShape{1, 1000}, fa::TransposeShape{17, 33},
        fa::TransposeShape{127, 129}, fa::TransposeShape{1000, 1023}, fa::TransposeShape{4097, 31}})
    FA_EXPECT_PASS(fa::run_transpose(kernel(), s, o));
}

INSTANTIATE_TEST_SUITE_P(Registered, TransposeKernels,
                         ::testing::ValuesIn(fa::entry_names<fa::TransposeKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransposeKernels);

}  // namespace
