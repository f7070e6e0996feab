// ch03_smem_model.cpp: 03/v2_smem_tiled's loads and tile products, thread by thread on the CPU
// (see ch03_smem_model.h).
// A CPU exercise (notes/coursework.md): which element each thread stages, and the tile product.
// EXERCISE-KERNELS: cpu/03_smem_tiles
#include "ch03_smem_model.h"

#include "check.h"
#include "exercise.h"
#include "shapes.h"

namespace fa::ch03 {

TileLoad smem_tile_load(int64_t by, int64_t bx, int ty, int tx, int64_t k0, int64_t M, int64_t N,
                        int64_t K) {
  TileLoad t;
  // EXERCISE(load-tiles): As[ty][tx] holds A[i][k0 + tx] for this thread's row i of C, and Bs[ty][tx] holds B[k0 + ty][j] for its column j: along tx the addresses are consecutive in both matrices (a warp's loads coalesce). An element outside A or B is -1 (the kernel stages a zero, which adds nothing to the sum)
  const int64_t i = by * kSmemTile + ty, j = bx * kSmemTile + tx;
  if (i < M && k0 + tx < K) t.a = i * K + k0 + tx;
  if (k0 + ty < K && j < N) t.b = (k0 + ty) * N + j;
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<TileLoad>("cpu/03_smem_tiles", "load-tiles");
  // EXERCISE-END
  return t;
}

std::vector<float> smem_tiled_gemm(const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                                   std::vector<int>* reads_of_a, std::vector<int>* reads_of_b) {
  FA_REQUIRE(M > 0 && N > 0 && K > 0, "smem_tiled_gemm needs M, N, K > 0");
  if (reads_of_a) reads_of_a->assign(static_cast<size_t>(M * K), 0);
  if (reads_of_b) reads_of_b->assign(static_cast<size_t>(K * N), 0);
  std::vector<float> C(static_cast<size_t>(M * N), 0.0f);
  constexpr int T = kSmemTile;
  for (int64_t by = 0; by < ceil_div(M, T); ++by)
    for (int64_t bx = 0; bx < ceil_div(N, T); ++bx) {
      float acc[T][T] = {};  // one accumulator per thread (ty, tx) of the block
      for (int64_t k0 = 0; k0 < K; k0 += T) {
        float As[T][T], Bs[T][T];  // __shared__
        for (int ty = 0; ty < T; ++ty)
          for (int tx = 0; tx < T; ++tx) {
            const TileLoad l = smem_tile_load(by, bx, ty, tx, k0, M, N, K);
            FA_REQUIRE(l.a < M * K && l.b < K * N, "smem_tile_load: an offset past the matrix");
            As[ty][tx] = l.a >= 0 ? A[l.a] : 0.0f;
            Bs[ty][tx] = l.b >= 0 ? B[l.b] : 0.0f;
            if (reads_of_a && l.a >= 0) ++(*reads_of_a)[static_cast<size_t>(l.a)];
            if (reads_of_b && l.b >= 0) ++(*reads_of_b)[static_cast<size_t>(l.b)];
          }
        // __syncthreads(): the whole tile is staged before any thread reads it.
        for (int ty = 0; ty < T; ++ty)
          for (int tx = 0; tx < T; ++tx) {
            // EXERCISE(tile-product): thread (ty, tx) adds this step's share of its element of C: the products of its row of the A tile with its column of the B tile, read from the staged tiles only
            for (int k = 0; k < T; ++k) acc[ty][tx] += As[ty][k] * Bs[k][tx];
            // EXERCISE-PLACEHOLDER
            // (void)As, (void)Bs;
            // return fa::exercise_todo<std::vector<float>>("cpu/03_smem_tiles", "tile-product");
            // EXERCISE-END
          }
      }
      for (int ty = 0; ty < T; ++ty)
        for (int tx = 0; tx < T; ++tx) {
          const int64_t i = by * T + ty, j = bx * T + tx;
          if (i < M && j < N) C[static_cast<size_t>(i * N + j)] = acc[ty][tx];
        }
    }
  return C;
}

}  // namespace fa::ch03
