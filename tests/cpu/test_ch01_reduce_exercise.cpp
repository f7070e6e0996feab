// Chapter 01's CPU exercise (notes/coursework.md): the butterfly reduction of a warp and the
// block reduction built on it (01/v3_warp_shuffle_vec4's warp_max, warp_sum and block_reduce),
// lane by lane in ch01_reduce_model.cpp. Every lane, then every thread of blocks of 1 to 32 warps,
// must end with the result: maxima of all-negative and -inf values (no 0 sneaking in, no NaN),
// sums equal in every lane to the bit, and five exchanges per warp reduction.
// Suite CpuExercise* (label exercise).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ch01_reduce_model.h"
#include "random.h"

namespace {

using fa::ch01::WarpRegs;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

WarpRegs regs(const std::vector<float>& v, size_t first = 0) {
  WarpRegs r;
  for (int l = 0; l < fa::ch01::kLanes; ++l) r[l] = v[first + l];
  return r;
}

TEST(CpuExerciseCh01Reduce, ButterflyLeavesTheMaxInEveryLane) {
  std::vector<float> x = fa::random_normal(32, 11);
  for (float& v : x) v = -std::fabs(v) - 1.0f;  // all negative: a 0 from nowhere would win
  x[7] = kNegInf;
  x[19] = -0.5f;  // the maximum, in a lane that is neither first nor last
  const WarpRegs m = fa::ch01::warp_all_reduce(regs(x), true);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(m[l], -0.5f) << "lane " << l;
  WarpRegs all_inf;
  all_inf.fill(kNegInf);
  for (float v : fa::ch01::warp_all_reduce(all_inf, true)) EXPECT_EQ(v, kNegInf);
}

TEST(CpuExerciseCh01Reduce, ButterflySumIsTheSameInEveryLane) {
  const std::vector<float> x = fa::random_normal(32, 12);
  double want = 0.0;
  for (float v : x) want += v;
  const WarpRegs s = fa::ch01::warp_all_reduce(regs(x), false);
  EXPECT_NEAR(s[0], want, 1e-5 * (1.0 + std::fabs(want)));
  // Partners add the same two numbers (a + b = b + a exactly), so every lane ends with the same
  // bits: the kernel's threads all normalise by the same l.
  for (int l = 1; l < 32; ++l) EXPECT_EQ(s[l], s[0]) << "lane " << l;
}

TEST(CpuExerciseCh01Reduce, ButterflyTakesFiveExchanges) {
  const std::vector<float> x = fa::random_normal(32, 13);
  const int64_t before = fa::ch01::shuffles_issued();
  fa::ch01::warp_all_reduce(regs(x), false);
  EXPECT_EQ(fa::ch01::shuffles_issued() - before, 5) << "log2(32) steps, one exchange each";
}

TEST(CpuExerciseCh01Reduce, BlockReduceGivesEveryThreadTheResult) {
  for (int threads : {32, 64, 96, 256, 1024}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<float> x = fa::random_normal(threads, 100 + threads);
    for (float& v : x) v = -std::fabs(v) - 2.0f;
    x[threads - 1] = -1.0f;  // the maximum, in the last warp
    double sum = 0.0;
    for (float v : x) sum += v;
    const std::vector<float> m = fa::ch01::block_all_reduce(x, true);
    const std::vector<float> s = fa::ch01::block_all_reduce(x, false);
    ASSERT_EQ(m.size(), x.size());
    ASSERT_EQ(s.size(), x.size());
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(m[t], -1.0f) << "thread " << t;
      EXPECT_EQ(s[t], s[0]) << "thread " << t;
    }
    EXPECT_NEAR(s[0], sum, 1e-5 * std::fabs(sum));
  }
  const std::vector<float> all_inf(128, kNegInf);
  for (float v : fa::ch01::block_all_reduce(all_inf, true)) EXPECT_EQ(v, kNegInf);
}

}  // namespace
