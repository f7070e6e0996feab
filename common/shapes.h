// shapes.h: the problems of this repository and their memory layouts. Every offset is 64-bit:
// an attention tensor of 4 x 32 x 16384 x 128 already has 2^28 elements, and the tests go past 2^31.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define FA_HD __host__ __device__ __forceinline__
#else
#define FA_HD inline
#endif

namespace fa {

// Row softmax: x and y are row-major [rows, cols]; each row is normalised on its own.
struct SoftmaxShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t numel() const { return rows * cols; }
  std::string str() const;
};

// GEMM: C[M, N] = A[M, K] * B[K, N], all row-major, C in fp32.
struct GemmShape {
  int64_t M = 0, N = 0, K = 0;
  double flops() const { return 2.0 * double(M) * double(N) * double(K); }
  std::string str() const;
};

// Transpose: out[cols, rows] = in[rows, cols]^T, fp32, row-major.
struct TransposeShape {
  int64_t rows = 0, cols = 0;
  int64_t numel() const { return rows * cols; }
  std::string str() const;
};

// Attention: Q is [batch, heads, seq_q, head_dim]; K and V are [batch, heads_kv, seq_k, head_dim];
// O is shaped like Q; L (the log-sum-exp of each row of scale * Q K^T) is [batch, heads, seq_q],
// always fp32. All row-major.
//
// Grouped-query attention (GQA): heads_kv K/V heads serve heads query heads, heads a multiple of
// heads_kv; query head h reads K/V head h / (heads / heads_kv), so consecutive query heads share
// one K/V head. heads_kv = 0 (the default) means heads_kv = heads, plain multi-head attention;
// heads_kv = 1 is multi-query attention (MQA).
//
// Causal masking is aligned to the bottom-right corner, as FlashAttention does: query i sees keys
// j <= i + (seq_k - seq_q). With seq_q == seq_k this is the usual j <= i. When seq_q > seq_k the
// first (seq_q - seq_k) queries see no key at all: their O is 0 and their L is -inf.
struct AttentionShape {
  int64_t batch = 1, heads = 1, seq_q = 0, seq_k = 0, head_dim = 64;
  bool causal = false;
  float scale = 0.0f;    // 0 means the default 1/sqrt(head_dim)
  int64_t heads_kv = 0;  // K/V heads; 0 means heads (no grouping)

  float softmax_scale() const {
    return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  int64_t bh() const { return batch * heads; }
  int64_t kv_heads() const { return heads_kv > 0 ? heads_kv : heads; }
  int64_t group() const { return heads / kv_heads(); }  // query heads per K/V head
  bool is_gqa() const { return kv_heads() != heads; }
  bool valid_heads() const { return heads_kv >= 0 && heads % kv_heads() == 0; }
  // The K/V head (b * heads_kv + kv_head) that query head bh = b * heads + h reads.
  int64_t kv_index(int64_t bh_index) const {
    return (bh_index / heads) * kv_heads() + (bh_index % heads) / group();
  }
  int64_t q_numel() const { return bh() * seq_q * head_dim; }
  int64_t k_numel() const { return batch * kv_heads() * seq_k * head_dim; }
  int64_t lse_numel() const { return bh() * seq_q; }
  // The (query, key) pairs of one head that are not masked: seq_q * seq_k, or under causal
  // masking the sum over rows of the keys each row sees (a closed form, see shapes.cpp). Square
  // causal problems give N (N + 1) / 2; seq_q != seq_k gives something else than half.
  int64_t visible_pairs() const;
  // Forward FLOPs: two matmuls of 2 * D per visible (query, key) pair, 4 * B * H * D * pairs.
  double fwd_flops() const {
    return 4.0 * double(bh()) * double(head_dim) * double(visible_pairs());
  }
  // Backward: the convention of the FlashAttention papers (five matmuls, counted as 2.5x).
  double bwd_flops() const { return 2.5 * fwd_flops(); }
  std::string str() const;
};

// The last key index that query row i may see (inclusive), bottom-right aligned. Negative means
// the row sees no key. Without causal masking every row sees keys 0..seq_k-1. This is the one
// place the alignment is written down; kernels, references and models all call it.
FA_HD int64_t causal_last_key(int64_t i, int64_t seq_q, int64_t seq_k) {
  return i + (seq_k - seq_q);
}

// The inverse: the first query row that sees key j (causal_last_key(i) >= j exactly when
// i >= causal_first_query(j)). Negative means every row sees key j.
FA_HD int64_t causal_first_query(int64_t j, int64_t seq_q, int64_t seq_k) {
  return j - causal_last_key(0, seq_q, seq_k);
}

// Tiles (or blocks) of `b` needed to cover `a` items: ceil(a / b) for a >= 0, b > 0.
constexpr FA_HD int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace fa
