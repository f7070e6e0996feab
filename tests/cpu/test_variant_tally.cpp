// The GPU tests' per-variant skip (tests/test_util.h), without a GPU: an UNSUPPORTED variant is
// skipped alone, the variants after it still run and are checked, and a test is skipped only when
// none of its variants ran.
#include "test_util.h"

namespace {

fa::RunResult result(fa::Status s, const std::string& message = "") {
  fa::RunResult r;
  r.kernel = "05/v9_imaginary";
  r.shape = "B1 H2 Nq33 Nk47 D64";
  r.dtype = "bf16";
  r.status = s;
  r.message = message;
  return r;
}

const std::string kSmem =
    "head_dim 64 needs 180224 bytes of shared memory per block, more than "
    "this GPU allows";

TEST(VariantTally, CountsRunsAndGroupsTheReasons) {
  VariantTally t;
  EXPECT_FALSE(t.ran(result(fa::Status::Unsupported, kSmem)));
  EXPECT_TRUE(t.ran(result(fa::Status::Pass)));
  EXPECT_FALSE(t.ran(result(fa::Status::Unsupported, kSmem)));
  EXPECT_TRUE(t.ran(result(fa::Status::Fail, "max error 3")));  // ran, and the test fails on it
  EXPECT_EQ(t.finish("VariantTally.Counts"), "");               // two ran: not skipped
}

TEST(VariantTally, NoneRanIsASkipWithEveryReason) {
  VariantTally t;
  t.ran(result(fa::Status::Unsupported, kSmem));
  t.ran(result(fa::Status::Unsupported, kSmem));
  t.ran(result(fa::Status::Unsupported, "takes fp16 or bf16 inputs only"));
  const std::string why = t.finish("VariantTally.NoneRan");
  EXPECT_NE(why.find("ran none of its 3 variants"), std::string::npos) << why;
  EXPECT_NE(why.find("2 x head_dim 64"), std::string::npos) << why;
  EXPECT_NE(why.find("1 x takes fp16"), std::string::npos) << why;
}

// In a VariantTest an UNSUPPORTED run no longer ends the test: the passing run after it is counted
// (this test passes, where before it was skipped at the first line).
class VariantTestFixture : public VariantTest {};
TEST_P(VariantTestFixture, UnsupportedVariantDoesNotEndTheTest) {
  int reached = 0;
  for (fa::Status s : {fa::Status::Unsupported, fa::Status::Pass, fa::Status::Pass}) {
    FA_EXPECT_PASS(result(s, s == fa::Status::Unsupported ? kSmem : ""));
    ++reached;
  }
  EXPECT_EQ(reached, 3);
}
INSTANTIATE_TEST_SUITE_P(Fake, VariantTestFixture, ::testing::Values("05/v9_imaginary"),
                         RegistryNamePrinter());

}  // namespace
