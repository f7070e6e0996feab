// The checking machinery itself: the comparison rules, dtype conversion and the registry (the
// command line: test_cli.cpp). If these are wrong, every "PASS" in the repository means nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <vector>

#include "check.h"
#include "compare.h"
#include "dtype.h"
#include "last_reference.h"
#include "random.h"
#include "reference_cache.h"
#include "registry.h"

namespace {

TEST(Compare, NaNFailsEvenWhenEverythingElseMatches) {
  std::vector<double> ref = {1, 2, 3};
  std::vector<float> got = {1, std::nanf(""), 3};
  fa::CompareResult r = fa::compare_allclose("y", got.data(), ref.data(), 3, 1e9, 1e9);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.nonfinite, 1);
  EXPECT_EQ(r.first_bad, 1);
  EXPECT_NE(r.report().find("poison"), std::string::npos) << r.report();
}

TEST(Compare, InfiniteReferenceMustBeMatchedExactly) {
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> ref = {ninf, 0.5};
  std::vector<float> ok = {-std::numeric_limits<float>::infinity(), 0.5f};
  std::vector<float> bad = {-1e30f, 0.5f};
  EXPECT_TRUE(fa::compare_allclose("L", ok.data(), ref.data(), 2, 1e-6, 0).ok);
  EXPECT_FALSE(fa::compare_allclose("L", bad.data(), ref.data(), 2, 1e-6, 0).ok);
}

TEST(Compare, AllCloseUsesAtolPlusRtol) {
  std::vector<double> ref = {100.0, 0.0};
  std::vector<float> got = {100.05f, 0.0f};
  EXPECT_TRUE(fa::compare_allclose("x", got.data(), ref.data(), 2, 0.0, 1e-3).ok);
  EXPECT_FALSE(fa::compare_allclose("x", got.data(), ref.data(), 2, 0.0, 1e-4).ok);
}

TEST(Compare, FlashRuleScalesWithTheNaiveError) {
  std::vector<double> ref = {1.0, 2.0, 3.0};
  std::vector<float> naive = {1.01f, 2.0f, 3.0f};  // naive error 0.01
  std::vector<float> good = {1.0f, 2.015f, 3.0f};  // 0.015 <= 2 * 0.01
  std::vector<float> bad = {1.0f, 2.03f, 3.0f};    // 0.03 > 2 * 0.01
  EXPECT_TRUE(fa::compare_flash_rule("O", good.data(), ref.data(), naive.data(), 3, 2.0, 1e-6).ok);
  fa::CompareResult r =
      fa::compare_flash_rule("O", bad.data(), ref.data(), naive.data(), 3, 2.0, 1e-6);
  EXPECT_FALSE(r.ok);
  EXPECT_NEAR(r.naive_err, 0.01, 1e-6);
  EXPECT_EQ(r.first_bad, 1);
}

TEST(Compare, ReportNamesTheMultiDimensionalIndex) {
  EXPECT_EQ(fa::format_index(7, {2, 2, 2}, {"b", "i", "d"}), "[b=1, i=1, d=1]");
  EXPECT_EQ(fa::format_index(5, {2, 3}, {"row", "col"}), "[row=1, col=2]");
}

TEST(DType, RoundTripsAndRounding) {
  EXPECT_EQ(fa::round_to(fa::DType::BF16, 1.0f), 1.0f);
  EXPECT_EQ(fa::round_to(fa::DType::F16, 65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(fa::round_to(fa::DType::F16, 70000.0f)));
  EXPECT_EQ(fa::round_to(fa::DType::F16, 1.0f + 1.0f / 4096), 1.0f);  // ties to even
  EXPECT_EQ(fa::round_to(fa::DType::BF16, 1.0f + 1.0f / 256), 1.0f);
  EXPECT_EQ(fa::round_to(fa::DType::F16, 5.9604645e-08f), 5.9604645e-08f);  // smallest subnormal
  EXPECT_TRUE(std::isnan(fa::half_bits_to_float(0xFFFF))) << "0xFFFF (the poison) is NaN";
  EXPECT_TRUE(std::isnan(fa::bf16_bits_to_float(0xFFFF)));
  std::vector<float> v = fa::random_normal(1000, 1);
  for (fa::DType t : {fa::DType::F16, fa::DType::BF16}) {
    std::vector<float> r = v;
    fa::round_in_place(t, r);
    std::vector<float> back = fa::decode(t, fa::encode(t, r).data(), r.size());
    EXPECT_EQ(back, r);
  }
}

TEST(Random, SeededReproducibleAndOffset) {
  std::vector<float> a = fa::random_normal(10000, 42), b = fa::random_normal(10000, 42),
                     c = fa::random_normal(10000, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0;
  for (float x : a) mean += x;
  mean /= a.size();
  EXPECT_NEAR(mean, fa::kDefaultInputMean, 0.05) << "inputs must not be zero-mean";
  for (float x : a) EXPECT_NE(x, 0.0f);
}

TEST(Registry, EveryRegisteredNameHasAChapterPrefix) {
  auto check = [](const std::vector<std::string>& names) {
    for (const std::string& n : names)
      EXPECT_NE(n.find('/'), std::string::npos) << n << " should be <chapter>/<version>";
  };
  check(fa::entry_names<fa::SoftmaxKernel>());
  check(fa::entry_names<fa::GemmKernel>());
  check(fa::entry_names<fa::TransposeKernel>());
  check(fa::entry_names<fa::AttentionFwdKernel>());
  check(fa::entry_names<fa::AttentionBwdKernel>());
  EXPECT_NE(fa::find_entry<fa::GemmKernel>("ref/cublas"), nullptr);
}

// A chapter lists its rungs in ladder order: v9 before v10, v1 before v1_fp32_atomic_dq, a
// tuning step t09 before t11.
TEST(Registry, NamesInNaturalOrder) {
  EXPECT_TRUE(fa::natural_less("05/v9_x", "05/v10_y"));
  EXPECT_FALSE(fa::natural_less("05/v10_y", "05/v9_x"));
  EXPECT_TRUE(fa::natural_less("06/v1_fp32", "06/v1_fp32_atomic_dq"));
  EXPECT_TRUE(fa::natural_less("06/v1_fp32_atomic_dq", "06/v2_mma"));
  EXPECT_TRUE(fa::natural_less("05/v2", "05/v02x"));  // equal value: the shorter run first
  EXPECT_FALSE(fa::natural_less("05/v3", "05/v3"));
  EXPECT_TRUE(fa::natural_less("a", "b"));
  EXPECT_TRUE(fa::natural_less("", "0"));
  const std::vector<std::string> names = fa::entry_names<fa::AttentionBwdKernel>("06/");
  for (size_t i = 1; i < names.size(); ++i)
    EXPECT_TRUE(fa::natural_less(names[i - 1], names[i])) << names[i - 1] << " then " << names[i];
  const auto t09 = std::find(names.begin(), names.end(), "06/t09_dq_two_mtiles");
  const auto t11 = std::find(names.begin(), names.end(), "06/t11_warp_tiles");
  const auto v5 = std::find(names.begin(), names.end(), "06/v5_warp_tiles");
  ASSERT_NE(t09, names.end());
  ASSERT_NE(t11, names.end());
  ASSERT_NE(v5, names.end());
  EXPECT_LT(t09 - names.begin(), t11 - names.begin());
}

// The reference kept across a ladder's kernels (last_reference.h) is reused only for the same
// inputs: any changed scalar or input byte computes it again, and a failed computation is not kept.
TEST(LastReference, ReusedOnlyForTheSameBytes) {
  fa::LastReference<std::vector<double>> last;
  int computed = 0;
  auto reference_of = [&](const fa::RefInputs& in) {
    return last.get(in, [&] {
      ++computed;
      return std::vector<double>{double(in.data[0][0]), double(in.scalars.size())};
    });
  };
  const fa::RefInputs a{"B1 H2 N17 causal 1 bf16", {{1.0f, 2.0f}, {3.0f}}};
  EXPECT_EQ(reference_of(a), (std::vector<double>{1.0, 23.0}));
  EXPECT_EQ(reference_of(a), (std::vector<double>{1.0, 23.0}));
  EXPECT_EQ(computed, 1) << "the same inputs must reuse the reference";

  fa::RefInputs b = a;
  b.data[1][0] = std::nextafter(3.0f, 4.0f);  // one bit of one input
  reference_of(b);
  EXPECT_EQ(computed, 2);
  fa::RefInputs c = b;
  c.scalars = "B1 H2 N17 causal 0 bf16";  // the mask
  reference_of(c);
  EXPECT_EQ(computed, 3);
  fa::RefInputs d = c;
  d.data[0].push_back(0.0f);  // a longer tensor
  reference_of(d);
  EXPECT_EQ(computed, 4);
  d.data[0][0] = 0.0f;
  reference_of(d);
  EXPECT_EQ(computed, 5);
  fa::RefInputs e = d;
  e.data[0][0] = -0.0f;  // equal to 0.0 as a float, not as bytes
  reference_of(e);
  EXPECT_EQ(computed, 6);

  EXPECT_THROW(last.get(a, []() -> std::vector<double> { throw std::runtime_error("x"); }),
               std::runtime_error);
  reference_of(e);  // the failed computation left nothing behind to reuse
  EXPECT_EQ(computed, 7);
}

// A reference shared between processes (reference_cache.h): the GPU test processes of one ctest
// run compute each attention reference once. Another process (here: another LastReference, as a
// new process starts with) reads it back for the same bytes and computes again for any other.
struct TwoVectors {
  std::vector<double> exact;
  std::vector<float> naive;
  static constexpr bool kShared = true;
  template <class F>
  void each(F&& f) {
    f(exact), f(naive);
  }
};

TEST(LastReference, SharedBetweenProcessesOnlyForTheSameBytes) {
  char dir[] = "/tmp/fa_shared_refs_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  fa::share_references_in(dir);
  int computed = 0;
  auto in_a_new_process = [&](const fa::RefInputs& in) {
    fa::LastReference<TwoVectors> fresh;
    return fresh.get(in, [&] {
      ++computed;
      return TwoVectors{{in.data[0][0], 1.0 / 3.0}, {float(in.scalars.size())}};
    });
  };
  const fa::RefInputs a{"B2 H3 N1025 causal 1 bf16", {{1.5f, 2.0f}, {3.0f}}};
  const TwoVectors first = in_a_new_process(a);
  const TwoVectors second = in_a_new_process(a);
  EXPECT_EQ(computed, 1) << "the second process must read the first one's reference";
  EXPECT_EQ(second.exact, first.exact);
  EXPECT_EQ(second.naive, first.naive);
  EXPECT_EQ(second.exact[1], 1.0 / 3.0) << "float64 values come back bit for bit";

  fa::RefInputs b = a;
  b.data[1][0] = std::nextafter(3.0f, 4.0f);  // one bit of one input
  in_a_new_process(b);
  EXPECT_EQ(computed, 2);
  fa::RefInputs c = a;
  c.scalars = "B2 H3 N1025 causal 0 bf16";
  in_a_new_process(c);
  EXPECT_EQ(computed, 3);
  fa::share_references_in("");  // the other tests of this process share nothing
  in_a_new_process(a);
  EXPECT_EQ(computed, 4);
  std::filesystem::remove_all(dir);
}

}  // namespace

// A failed check names its file relative to the repository, as a reader finds it there, not by
// the path of the machine that built the library (a pip-installed library was built elsewhere).
TEST(Check, MessagesNameFilesRelativeToTheRepository) {
  try {
    FA_UNSUPPORTED_IF(true, "no version for this");
    FAIL() << "FA_UNSUPPORTED_IF(true, ...) did not throw";
  } catch (const fa::Unsupported& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(tests/cpu/test_harness_pieces.cpp:"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(FA_SOURCE_DIR), std::string::npos) << msg;
  }
  try {
    FA_REQUIRE(1 + 1 == 3, "arithmetic");
    FAIL() << "FA_REQUIRE(false, ...) did not throw";
  } catch (const fa::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("tests/cpu/test_harness_pieces.cpp:", 0), 0u) << e.what();
  }
}
