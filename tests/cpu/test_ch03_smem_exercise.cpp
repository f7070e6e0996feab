// Chapter 03's CPU exercise (notes/coursework.md): 03/v2_smem_tiled's loads and tile products,
// thread by thread in ch03_smem_model.cpp. The product must equal a float64 GEMM at ragged shapes
// (edges that are not multiples of 32 in M, N and K, a K shorter than one tile); each element of A
// must be read once per block column of C and each element of B once per block row (the reuse
// the tiles exist for); and the 32 threads of a warp (consecutive tx) must read consecutive
// addresses of A and of B. Suite CpuExercise* (label exercise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ch03_smem_model.h"
#include "random.h"
#include "shapes.h"

namespace {

std::vector<double> gemm64(const std::vector<float>& A, const std::vector<float>& B, int64_t M,
                           int64_t N, int64_t K) {
  std::vector<double> C(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) C[i * N + j] += double(A[i * K + k]) * B[k * N + j];
  return C;
}

struct Shape {
  int64_t M, N, K;
};

TEST(CpuExerciseCh03Smem, EqualsTheFloat64ProductAtRaggedShapes) {
  for (const Shape s : {Shape{1, 1, 1}, Shape{32, 32, 32}, Shape{33, 31, 65}, Shape{100, 7, 3},
                        Shape{64, 96, 200}}) {
    SCOPED_TRACE(std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K));
    const std::vector<float> A = fa::random_normal(s.M * s.K, 31),
                             B = fa::random_normal(s.K * s.N, 32);
    const std::vector<float> C = fa::ch03::smem_tiled_gemm(A.data(), B.data(), s.M, s.N, s.K);
    const std::vector<double> want = gemm64(A, B, s.M, s.N, s.K);
    ASSERT_EQ(C.size(), want.size());
    for (size_t e = 0; e < C.size(); ++e)
      ASSERT_NEAR(C[e], want[e], 1e-4 * (1.0 + std::sqrt(double(s.K)) + std::fabs(want[e])))
          << "element " << e;
  }
}

TEST(CpuExerciseCh03Smem, EachElementIsReadOncePerBlockOfC) {
  const int64_t M = 70, N = 100, K = 45;
  const std::vector<float> A = fa::random_normal(M * K, 33), B = fa::random_normal(K * N, 34);
  std::vector<int> ra, rb;
  fa::ch03::smem_tiled_gemm(A.data(), B.data(), M, N, K, &ra, &rb);
  // A row block of A is staged by every block of that row of C: ceil(N / 32) times; B likewise.
  const int want_a = int(fa::ceil_div(N, fa::ch03::kSmemTile));
  const int want_b = int(fa::ceil_div(M, fa::ch03::kSmemTile));
  EXPECT_TRUE(std::all_of(ra.begin(), ra.end(), [&](int r) { return r == want_a; }));
  EXPECT_TRUE(std::all_of(rb.begin(), rb.end(), [&](int r) { return r == want_b; }));
}

TEST(CpuExerciseCh03Smem, AWarpsLoadsAreConsecutive) {
  const int64_t M = 100, N = 100, K = 100;
  for (int ty : {0, 5, 31}) {
    const fa::ch03::TileLoad first = fa::ch03::smem_tile_load(1, 2, ty, 0, 32, M, N, K);
    ASSERT_GE(first.a, 0);
    ASSERT_GE(first.b, 0);
    for (int tx = 1; tx < 32; ++tx) {
      const fa::ch03::TileLoad l = fa::ch03::smem_tile_load(1, 2, ty, tx, 32, M, N, K);
      EXPECT_EQ(l.a, first.a + tx) << "A, lane " << tx;
      EXPECT_EQ(l.b, first.b + tx) << "B, lane " << tx;
    }
  }
  // Past the edges: the last K step of a K = 100 matrix holds 4 columns of A; the rest is zeros.
  EXPECT_EQ(fa::ch03::smem_tile_load(0, 0, 0, 4, 96, M, N, K).a, -1);
  EXPECT_EQ(fa::ch03::smem_tile_load(0, 0, 4, 0, 96, M, N, K).b, -1);
  EXPECT_EQ(fa::ch03::smem_tile_load(3, 0, 4, 0, 0, M, N, K).a, -1);  // row 100 of 100
}

}  // namespace
