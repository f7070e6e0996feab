// Chapter 07's online softmax, one row, in float32 on the CPU: why the rescale factor of a tile
// whose max did not move must be exactly 1 (common/device/hopper_attention.cuh, online_softmax;
// chapter 07's README, lesson 10).
//
// Per key tile the kernels compute base = c m_new (c = |scale| log2 e) and rescale the running sum
// by alpha = 2^(c m_old - c m_new). Written as 2^fmaf(m_old, c, -base), the exponent is not 0 when
// m_old = m_new: the FMA keeps the exact product, so it returns the rounding error of base, and
// alpha is 1 + a few 1e-7. l is multiplied by that once per tile; O too, which is why O / l (and
// every check of O) never sees it, while L = c m + log2 l drifts with the number of tiles.
// The row here has its max at key 0, so m never moves after the first tile, and 1023 more tiles
// follow: the model of seq_k 131072 with Bc 128, where the GPU showed L off by 1.2e-4 to 1.8e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

constexpr int kBc = 128;      // keys per tile (07/v1's Bc at D 128)
constexpr int kTiles = 1024;  // seq_k 131072
constexpr double kLn2 = 0.6931471805599453;

struct Row {
  std::vector<float> s;  // raw scores
  float c;               // |scale| log2 e
};

// D 128 with inputs N(0.5, 1): raw scores about 32 +- 13; the max is key 0 and chosen so that
// c m is not a float (its rounding error is what the FMA exposes).
Row make_row() {
  Row r;
  r.c = static_cast<float>((1.0 / std::sqrt(128.0)) * 1.4426950408889634);
  std::mt19937_64 rng(20261202);
  std::normal_distribution<float> score(32.0f, 13.0f);
  r.s.resize(size_t(kBc) * kTiles);
  r.s[0] = 97.3f;
  for (size_t j = 1; j < r.s.size(); ++j) r.s[j] = std::fmin(score(rng), 90.0f);
  return r;
}

// L in natural-log units as the kernels compute it; exact_one: alpha = 1 when the max held. As on
// the GPU, the row's sum is four partial sums (the quad's threads: thread q holds keys 8k + 2q
// and 8k + 2q + 1 of a tile, added as a pair), added together at the end.
double kernel_L(const Row& r, bool exact_one) {
  float m = -INFINITY, l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int t = 0; t < kTiles; ++t) {
    const float* s = r.s.data() + size_t(t) * kBc;
    float m_new = m;
    for (int j = 0; j < kBc; ++j) m_new = std::fmax(m_new, s[j]);
    const float base = m_new * r.c;
    const float alpha = (exact_one && m_new == m) ? 1.0f : std::exp2(std::fma(m, r.c, -base));
    for (int q = 0; q < 4; ++q) {
      l[q] *= alpha;
      for (int k = 0; k < kBc / 8; ++k)
        l[q] += std::exp2(std::fma(s[8 * k + 2 * q], r.c, -base)) +
                std::exp2(std::fma(s[8 * k + 2 * q + 1], r.c, -base));
    }
    m = m_new;
  }
  const float sum = (l[0] + l[1]) + (l[2] + l[3]);
  return (double(m * r.c) + std::log2(double(sum))) * kLn2;
}

double reference_L(const Row& r) {
  double m = -INFINITY, sum = 0.0;
  for (float x : r.s) m = std::fmax(m, double(x));
  const double scale = 1.0 / std::sqrt(128.0);
  for (float x : r.s) sum += std::exp(scale * (double(x) - m));
  return scale * m + std::log(sum);
}

TEST(Ch07RescaleDrift, AnUnmovedMaxGivesAlphaExactlyOne) {
  const Row r = make_row();
  const float base = r.s[0] * r.c;
  const float exponent = std::fma(r.s[0], r.c, -base);
  ASSERT_NE(exponent, 0.0f) << "c m happens to be a float: the row shows nothing";
  ASSERT_NE(std::exp2(exponent), 1.0f) << "2^(rounding error) rounds to 1: the row shows nothing";
  const double ref = reference_L(r);
  const double with_fma = std::fabs(kernel_L(r, false) - ref);
  const double exact = std::fabs(kernel_L(r, true) - ref);
  std::printf(
      "  L error over %d tiles: %.3g with alpha = 2^fmaf(m, c, -c m), %.3g with alpha = 1\n",
      kTiles, with_fma, exact);
  EXPECT_LT(exact, 5e-6);           // float sums of 32768 terms per thread: about 2e-6 here
  EXPECT_GT(with_fma, 20 * exact);  // the drift the lesson is about: about 1.2e-4 here
}

}  // namespace
