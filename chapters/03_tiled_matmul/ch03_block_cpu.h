// ch03_block_cpu.h: the block-matrix view of a matmul, on the CPU, with the block loops written
// out. This is the algebra every GPU kernel of the chapter (and FlashAttention after it) relies on:
//
//   C[I, J] = sum over k-blocks P of A[I, P] * B[P, J]
//
// where I, J, P are ranges of rows, columns and the inner dimension. A block of C needs one row
// of blocks of A and one column of blocks of B; each block, once loaded into fast memory, is used
// for a whole tile of outputs. The model counts those loads, so the reuse is a number, not a claim.
//
// In attention terms (chapter 05): S = Q K^T is computed as S[I, J] = Q[I, :] K[J, :]^T, one
// Br x Bc tile at a time, and O = S V as O[I, :] = sum_J S[I, J] V[J, :].
#pragma once
#include <cstdint>
#include <vector>

namespace fa::ch03 {

struct BlockTiles {
  int64_t bm = 32, bn = 32, bk = 32;  // block sizes along M (rows of C), N (columns), K (inner)
};

struct BlockMatmulResult {
  std::vector<float> C;         // [M, N] row-major, fp32 accumulation
  int64_t elements_loaded = 0;  // elements of A and B copied into a "fast" tile buffer
  int64_t tile_products = 0;    // block products A[I,P] * B[P,J] performed
};

// C = A * B (b_transposed = false: B is [K, N]) or C = A * B^T (b_transposed = true: B is [N, K],
// as K is in S = Q K^T). A is [M, K]. All row-major. Any sizes: the last blocks are ragged.
BlockMatmulResult block_matmul(const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                               bool b_transposed, BlockTiles tiles);

// Elements a naive (one output at a time, no reuse) matmul reads: 2*M*N*K.
inline int64_t naive_elements_loaded(int64_t M, int64_t N, int64_t K) {
  return 2 * M * N * K;
}

// S = Q K^T then O = S V, both through block_matmul (no softmax: this is only the block algebra).
// Q is [n_q, d], K and V are [n_k, d]. Returns O [n_q, d]; S [n_q, n_k] is written to *S if given.
std::vector<float> block_qkv(const float* Q, const float* K, const float* V, int64_t n_q,
                             int64_t n_k, int64_t d, BlockTiles tiles, std::vector<float>* S);

}  // namespace fa::ch03
