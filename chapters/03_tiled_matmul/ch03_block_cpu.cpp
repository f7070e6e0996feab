#include "ch03_block_cpu.h"

#include <algorithm>

#include "check.h"

namespace fa::ch03 {

BlockMatmulResult block_matmul(const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                               bool b_transposed, BlockTiles t) {
  FA_REQUIRE(M >= 0 && N >= 0 && K >= 0, "sizes must be non-negative");
  FA_REQUIRE(t.bm > 0 && t.bn > 0 && t.bk > 0, "block sizes must be positive");
  BlockMatmulResult r;
  r.C.assign(static_cast<size_t>(M * N), 0.0f);
  // The "fast memory" of the model: one block of A, one block of B, one block of C.
  std::vector<float> a_tile(static_cast<size_t>(t.bm * t.bk));
  std::vector<float> b_tile(static_cast<size_t>(t.bk * t.bn));
  std::vector<float> c_tile(static_cast<size_t>(t.bm * t.bn));

  for (int64_t i0 = 0; i0 < M; i0 += t.bm) {  // block row I of C
    const int64_t rows = std::min(t.bm, M - i0);
    for (int64_t j0 = 0; j0 < N; j0 += t.bn) {  // block column J of C
      const int64_t cols = std::min(t.bn, N - j0);
      std::fill(c_tile.begin(), c_tile.end(), 0.0f);
      for (int64_t p0 = 0; p0 < K; p0 += t.bk) {  // inner block P
        const int64_t depth = std::min(t.bk, K - p0);
        // Load A[I, P] and B[P, J] into the tile buffers (the only reads of A and B).
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t p = 0; p < depth; ++p) a_tile[i * t.bk + p] = A[(i0 + i) * K + (p0 + p)];
        for (int64_t p = 0; p < depth; ++p)
          for (int64_t j = 0; j < cols; ++j)
            b_tile[p * t.bn + j] =
                b_transposed ? B[(j0 + j) * K + (p0 + p)] : B[(p0 + p) * N + (j0 + j)];
        r.elements_loaded += rows * depth + depth * cols;
        ++r.tile_products;
        // C[I, J] += A[I, P] * B[P, J], entirely inside the tiles.
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t p = 0; p < depth; ++p) {
            const float a = a_tile[i * t.bk + p];
            for (int64_t j = 0; j < cols; ++j) c_tile[i * t.bn + j] += a * b_tile[p * t.bn + j];
          }
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) r.C[(i0 + i) * N + (j0 + j)] = c_tile[i * t.bn + j];
    }
  }
  return r;
}

std::vector<float> block_qkv(const float* Q, const float* K, const float* V, int64_t n_q,
                             int64_t n_k, int64_t d, BlockTiles tiles, std::vector<float>* S) {
  // S = Q K^T: [n_q, d] x [d, n_k]; K is stored [n_k, d], i.e. already "B transposed".
  BlockMatmulResult s = block_matmul(Q, K, n_q, n_k, d, /*b_transposed=*/true, tiles);
  // O = S V: [n_q, n_k] x [n_k, d].
  BlockMatmulResult o = block_matmul(s.C.data(), V, n_q, d, n_k, /*b_transposed=*/false, tiles);
  if (S != nullptr) *S = std::move(s.C);
  return o.C;
}

}  // namespace fa::ch03
