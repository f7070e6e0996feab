// The worked example of chapters/user/ ("bring your own kernel"): it is registered under the name
// that puts it in chapter 01's program, the GPU tests and the benchmarks, and its arithmetic (the
// same functions the kernel calls, example_softmax.cuh) matches the float64 reference on the
// inputs that break softmax kernels. Its GPU run is tested by tests/gpu/test_softmax_kernels.cpp
// like every registered kernel: `ctest -R user_example` runs both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compare.h"
#include "random.h"
#include "reference.h"
#include "registry.h"

#ifdef FA_HAVE_USER_EXAMPLE
#include "example_softmax.cuh"

namespace {

const char* kName = "01/user_example_warp_online";

TEST(UserKernels, user_example_registered_for_chapter_01) {
  const fa::SoftmaxKernel* k = fa::find_entry<fa::SoftmaxKernel>(kName);
  ASSERT_NE(k, nullptr) << kName << " is not registered: is chapters/user/ linked in?";
  EXPECT_NE(k->run, nullptr);
  EXPECT_EQ(k->reads, 2);  // two passes over x: the harness reports 3 passes with the write
  EXPECT_EQ(k->min_sm, 70);
  EXPECT_EQ(k->about.rfind("worked example", 0), 0u) << k->about;
  // The "01/" prefix is what puts it in chapter 01's ladder (select_kernels uses this list).
  std::vector<std::string> ch01 = fa::entry_names<fa::SoftmaxKernel>("01/");
  EXPECT_NE(std::find(ch01.begin(), ch01.end(), kName), ch01.end());
}

// What the kernel does, lane by lane: 32 strided partial (m, l) pairs, a butterfly merge, then
// the normalisation pass.
std::vector<float> warp_online_model(const std::vector<float>& x, fa::SoftmaxShape s) {
  constexpr int kWarp = 32;
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* xr = x.data() + r * s.cols;
    user_example::MaxSum lane[kWarp];
    for (int l = 0; l < kWarp; ++l) {
      lane[l] = user_example::empty_max_sum();
      for (int64_t c = l; c < s.cols; c += kWarp) lane[l] = user_example::push(lane[l], xr[c]);
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      user_example::MaxSum next[kWarp];
      for (int l = 0; l < kWarp; ++l) next[l] = user_example::merge(lane[l], lane[l ^ offset]);
      std::copy(next, next + kWarp, lane);
    }
    for (int l = 1; l < kWarp; ++l) {  // every lane ends with the same summary
      EXPECT_EQ(lane[l].m, lane[0].m);
      EXPECT_EQ(lane[l].l, lane[0].l);
    }
    for (int64_t c = 0; c < s.cols; ++c)
      y[r * s.cols + c] = user_example::normalise(lane[c % kWarp], xr[c]);
  }
  return y;
}

void expect_matches_reference(const std::vector<float>& x, fa::SoftmaxShape s) {
  std::vector<float> y = warp_online_model(x, s);
  std::vector<double> ref = fa::softmax_rows_ref(x.data(), s);
  fa::CompareResult c = fa::compare_allclose("y", y.data(), ref.data(), s.numel(), 1e-9, 2e-5);
  c.dims = {s.rows, s.cols};
  c.names = {"row", "col"};
  EXPECT_TRUE(c.ok) << s.str() << "\n" << c.report();
}

TEST(UserKernels, user_example_arithmetic_on_cpu) {
  for (int64_t cols : {1, 31, 32, 33, 1000, 4097}) {
    fa::SoftmaxShape s{5, cols};
    expect_matches_reference(fa::random_normal(s.numel(), 1 + cols), s);
    expect_matches_reference(fa::random_normal(s.numel(), 2 + cols, 1e4f, 1.0f), s);  // offset
    std::vector<float> x = fa::random_normal(s.numel(), 3 + cols);
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < cols; ++c) {
      if (c % 3 == 0) x[1 * cols + c] = ninf;  // some -inf entries
      x[2 * cols + c] = ninf;                  // a whole -inf row: zeros
    }
    x[3 * cols] = ninf;  // -inf first: the running max starts at -inf and must not give NaN
    expect_matches_reference(x, s);
  }
}

}  // namespace

#else
TEST(UserKernels, user_example_absent) {
  GTEST_SKIP() << "chapters/user/example_softmax.cu was removed: nothing to check";
}
#endif
