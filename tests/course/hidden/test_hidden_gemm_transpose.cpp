// Hidden tests of the GEMM (03) and transpose (04) exercises, and of the assignments of those
// chapters: shapes of other odd sizes, exact tile multiples beside one-past tails, thin and tall.
#include "grade_util.h"

namespace {

using fa::grade::check_only;
using fa::grade::Tally;
class HiddenGemm : public GradedKernel<fa::GemmKernel> {};
class HiddenTranspose : public GradedKernel<fa::TransposeKernel> {};

void gemm_shapes(const fa::GemmKernel& k, const std::vector<fa::GemmShape>& shapes) {
  Tally tally;
  for (fa::DType t : k.dtypes)
    for (const fa::GemmShape& s : shapes) {
      SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
      tally.add(fa::run_gemm(k, s, t, check_only(9500 + s.M + s.N + s.K)));
    }
  tally.finish();
}

TEST_P(HiddenGemm, OddShapes) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  gemm_shapes(kernel(), {{2, 3, 5}, {31, 17, 64}, {65, 63, 129}, {257, 33, 511}, {33, 513, 1000}});
}

TEST_P(HiddenGemm, TileMultiplesAndTails) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  gemm_shapes(kernel(), {{64, 64, 64},
                         {128, 128, 8},
                         {129, 128, 16},
                         {128, 129, 24},
                         {256, 256, 257},
                         {512, 384, 136},
                         {1024, 8, 1024}});
}

INSTANTIATE_TEST_SUITE_P(Hidden, HiddenGemm,
                         ::testing::ValuesIn(fa::grade::graded_names<fa::GemmKernel>()),
                         GradeNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HiddenGemm);

TEST_P(HiddenTranspose, OddShapes) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  for (fa::TransposeShape s :
       {fa::TransposeShape{2, 3}, fa::TransposeShape{31, 32}, fa::TransposeShape{32, 31},
        fa::TransposeShape{33, 65}, fa::TransposeShape{64, 64}, fa::TransposeShape{511, 257}})
    tally.add(fa::run_transpose(kernel(), s, check_only(9600)));
  tally.finish();
}

TEST_P(HiddenTranspose, ThinAndTall) {
  FA_GRADE_SKIP_WITHOUT_GPU(kernel().min_sm);
  Tally tally;
  for (fa::TransposeShape s : {fa::TransposeShape{1, 4097}, fa::TransposeShape{5000, 3},
                               fa::TransposeShape{2049, 17}, fa::TransposeShape{3, 70001}})
    tally.add(fa::run_transpose(kernel(), s, check_only(9700)));
  tally.finish();
}

INSTANTIATE_TEST_SUITE_P(Hidden, HiddenTranspose,
                         ::testing::ValuesIn(fa::grade::graded_names<fa::TransposeKernel>()),
                         GradeNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HiddenTranspose);

}  // namespace
