// Chapter 03, CPU tier: the block-matrix model against the float64 reference, its load counts,
// and the wave-quantization arithmetic of the "matmul mystery".
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ch03_block_cpu.h"
#include "ch03_waves.h"
#include "check.h"
#include "random.h"
#include "reference.h"

namespace {

using fa::ch03::BlockTiles;

double max_abs_diff(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::abs(double(got[i]) - ref[i]));
  return e;
}

TEST(Ch03BlockMatmul, MatchesReferenceOnRaggedShapes) {
  for (fa::GemmShape s : {fa::GemmShape{1, 1, 1}, fa::GemmShape{17, 33, 65},
                          fa::GemmShape{64, 64, 64}, fa::GemmShape{100, 37, 255}}) {
    std::vector<float> A = fa::random_normal(s.M * s.K, 1), B = fa::random_normal(s.K * s.N, 2);
    for (BlockTiles t : {BlockTiles{32, 32, 32}, BlockTiles{16, 8, 4}, BlockTiles{7, 5, 3}}) {
      fa::ch03::BlockMatmulResult r =
          fa::ch03::block_matmul(A.data(), B.data(), s.M, s.N, s.K, false, t);
      std::vector<double> ref = fa::gemm_ref(A.data(), B.data(), s);
      EXPECT_LT(max_abs_diff(r.C, ref), 1e-4 * std::sqrt(double(s.K)) + 1e-5) << s.str();
    }
  }
}

TEST(Ch03BlockMatmul, TransposedBIsQKt) {
  const int64_t n_q = 19, n_k = 45, d = 24;
  std::vector<float> Q = fa::random_normal(n_q * d, 3), K = fa::random_normal(n_k * d, 4);
  std::vector<float> Kt(static_cast<size_t>(d * n_k));
  for (int64_t j = 0; j < n_k; ++j)
    for (int64_t c = 0; c < d; ++c) Kt[c * n_k + j] = K[j * d + c];
  auto r = fa::ch03::block_matmul(Q.data(), K.data(), n_q, n_k, d, true, BlockTiles{8, 16, 8});
  std::vector<double> ref = fa::gemm_ref(Q.data(), Kt.data(), fa::GemmShape{n_q, n_k, d});
  EXPECT_LT(max_abs_diff(r.C, ref), 1e-4);
}

TEST(Ch03BlockMatmul, QkvThroughBlocks) {
  const int64_t n_q = 33, n_k = 70, d = 16;
  std::vector<float> Q = fa::random_normal(n_q * d, 5), K = fa::random_normal(n_k * d, 6),
                     V = fa::random_normal(n_k * d, 7);
  std::vector<float> S;
  std::vector<float> O =
      fa::ch03::block_qkv(Q.data(), K.data(), V.data(), n_q, n_k, d, BlockTiles{16, 16, 16}, &S);
  ASSERT_EQ(S.size(), size_t(n_q * n_k));
  std::vector<double> O_ref = fa::gemm_ref(S.data(), V.data(), fa::GemmShape{n_q, d, n_k});
  EXPECT_LT(max_abs_diff(O, O_ref), 1e-3);
}

TEST(Ch03BlockMatmul, LoadCountsShowReuse) {
  // Divisible sizes: each of the (M/bm)(N/bn) output blocks loads a bm x K strip of A and a K x bn
  // strip of B, so loads = M*N*K*(1/bn + 1/bm).
  const int64_t M = 64, N = 96, K = 40;
  std::vector<float> A(M * K, 1.0f), B(K * N, 1.0f);
  auto r = fa::ch03::block_matmul(A.data(), B.data(), M, N, K, false, BlockTiles{32, 16, 8});
  EXPECT_EQ(r.elements_loaded, M * N * K / 16 + M * N * K / 32);
  EXPECT_EQ(r.tile_products, (M / 32) * (N / 16) * (K / 8));
  EXPECT_FLOAT_EQ(r.C[5 * N + 7], float(K));
  EXPECT_EQ(fa::ch03::naive_elements_loaded(M, N, K), 2 * M * N * K);
}

TEST(Ch03Waves, LectureExample1792vs1793) {
  // 256x128 tiles on an A100 (108 SMs, one block each).
  auto a = fa::ch03::wave_info(1792, 1792, 256, 128, 108, 1);
  EXPECT_EQ(a.tiles, 7 * 14);
  EXPECT_EQ(a.waves_launched, 1);
  EXPECT_EQ(a.last_wave_tiles, 98);
  auto b = fa::ch03::wave_info(1793, 1793, 256, 128, 108, 1);
  EXPECT_EQ(b.tiles_m, 8);
  EXPECT_EQ(b.tiles_n, 15);
  EXPECT_EQ(b.tiles, 120);
  EXPECT_EQ(b.waves_launched, 2);
  EXPECT_EQ(b.last_wave_tiles, 12);
  EXPECT_NEAR(b.last_wave_occupancy, 12.0 / 108.0, 1e-12);
  EXPECT_LT(b.useful_fraction, 0.6 * a.useful_fraction);
}

TEST(Ch03Waves, OurTileOnAnH100) {
  // 128x128 tiles, 132 SMs x 2 blocks = 264 slots.
  auto a = fa::ch03::wave_info(2048, 2048, 128, 128, 132, 2);
  EXPECT_EQ(a.tiles, 256);
  EXPECT_EQ(a.waves_launched, 1);
  EXPECT_DOUBLE_EQ(a.useful_fraction, 256.0 / 264.0);
  auto b = fa::ch03::wave_info(2049, 2049, 128, 128, 132, 2);
  EXPECT_EQ(b.tiles, 17 * 17);
  EXPECT_EQ(b.waves_launched, 2);
  EXPECT_EQ(b.last_wave_tiles, 289 - 264);
}

TEST(Ch03Waves, ParseSweep) {
  auto r = fa::ch03::parse_sweep("1536:2304:8");
  EXPECT_EQ(r.start, 1536);
  EXPECT_EQ(r.stop, 2304);
  EXPECT_EQ(r.step, 8);
  EXPECT_EQ(fa::ch03::parse_sweep("10:20").step, 1);
  for (const char* bad : {"", "10", "20:10", "1:2:0", "a:b", "1:2:3:4", "0:5"})
    EXPECT_THROW(fa::ch03::parse_sweep(bad), fa::Error) << bad;
}

}  // namespace
