// shapes.h: the problems of this repository and their memory layouts. Every offset is 64-bit:
// an attention tensor of 4 x 32 x 16384 x 128 already has 2^28 elements, and the tests go past 2^31.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

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

// The softmax scale every kernel, reference and launcher uses: `scale` when one was given (not 0),
// else 1/sqrt(head_dim), computed in fp32 because the kernels multiply fp32 scores by it (the
// float64 references take this same fp32 value, so they compute what the kernels are asked to).
// The one place it is computed; the Python package's default (_common.softmax_scale) is the same
// 1/sqrt(head_dim).
inline float softmax_scale(float scale, int64_t head_dim) {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

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
//
// Sliding-window (local) attention, FlashAttention's meaning (chapter 09): measured from the
// same bottom-right diagonal d(i) = causal_last_key(i), query i sees keys j with
//   d(i) - window_left <= j <= d(i) + window_right,
// where -1 leaves that side unlimited. Causal masking is window_right = 0: with causal set,
// window_right is not read. visible_key_range below is the one place this is written down.
struct AttentionShape {
  int64_t batch = 1, heads = 1, seq_q = 0, seq_k = 0, head_dim = 64;
  bool causal = false;
  float scale = 0.0f;                           // 0 means the default 1/sqrt(head_dim)
  int64_t heads_kv = 0;                         // K/V heads; 0 means heads (no grouping)
  int64_t window_left = -1, window_right = -1;  // -1: unlimited (see above)

  float softmax_scale() const { return fa::softmax_scale(scale, head_dim); }
  int64_t bh() const { return batch * heads; }
  int64_t kv_heads() const { return heads_kv > 0 ? heads_kv : heads; }
  int64_t group() const { return heads / kv_heads(); }  // query heads per K/V head
  bool is_gqa() const { return kv_heads() != heads; }
  // No heads at all is no valid grouping either (and would divide by zero below).
  bool valid_heads() const { return heads_kv >= 0 && kv_heads() > 0 && heads % kv_heads() == 0; }
  // A window narrower than causal or full attention: only chapter 09's kernels take one.
  bool has_window() const { return window_left >= 0 || (!causal && window_right >= 0); }
  // The K/V head (b * heads_kv + kv_head) that query head bh = b * heads + h reads.
  int64_t kv_index(int64_t bh_index) const {
    return (bh_index / heads) * kv_heads() + (bh_index % heads) / group();
  }
  int64_t q_numel() const { return bh() * seq_q * head_dim; }
  int64_t k_numel() const { return batch * kv_heads() * seq_k * head_dim; }
  int64_t lse_numel() const { return bh() * seq_q; }
  // The (query, key) pairs of one head that are not masked: seq_q * seq_k, or under causal
  // masking the sum over rows of the keys each row sees (a closed form, see shapes.cpp). Square
  // causal problems give N (N + 1) / 2; seq_q != seq_k gives something else than half. With a
  // window, the sum over rows of visible_key_range's lengths.
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

// The keys query row i sees, first..last inclusive (empty when last < first), with causal
// masking and the window of shapes.h's AttentionShape; -1 leaves a window side unlimited.
struct KeyRange {
  int64_t first = 0, last = -1;
  FA_HD int64_t count() const { return last >= first ? last - first + 1 : 0; }
};
FA_HD KeyRange visible_key_range(int64_t i, int64_t seq_q, int64_t seq_k, bool causal,
                                 int64_t window_left, int64_t window_right) {
  const int64_t diagonal = causal_last_key(i, seq_q, seq_k);
  KeyRange r{0, seq_k - 1};
  const int64_t right = causal ? 0 : window_right;
  if (right >= 0 && diagonal + right < r.last) r.last = diagonal + right;
  if (window_left >= 0 && diagonal - window_left > r.first) r.first = diagonal - window_left;
  return r;
}
inline KeyRange visible_key_range(const AttentionShape& s, int64_t i) {
  return visible_key_range(i, s.seq_q, s.seq_k, s.causal, s.window_left, s.window_right);
}

// Tiles (or blocks) of `b` needed to cover `a` items: ceil(a / b) for a >= 0, b > 0.
constexpr FA_HD int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// ---- Chapter 09: the shapes attention is served in ------------------------------------------

// Variable-length batches: `batch` sequences of different lengths, packed without padding.
// Q is [heads, total_q, head_dim]: query head h of sequence b is rows cu_q(b) .. cu_q(b+1) - 1 of
// head h's slab, where cu_q(b) = seqlens_q[0] + ... + seqlens_q[b-1] (the kernels get these
// cumulative offsets as cu_seqlens_q, batch + 1 int32 on the device). K and V are
// [heads_kv, total_k, head_dim] with cu_seqlens_k; O is shaped like Q and L is [heads, total_q].
// Each sequence is its own attention problem (sequence(b)): causal alignment, the window and GQA
// as in AttentionShape, per sequence. A sequence may be empty (length 0).
//
// Head-major, not FlashAttention's token-major [total, heads, head_dim]: one head's rows of one
// sequence are then contiguous rows of head_dim, as in chapter 05, and a kernel reaches them by a
// different base pointer alone (chapter 09's README says what the other layout would cost).
struct VarlenShape {
  std::vector<int64_t> seqlens_q, seqlens_k;  // one entry per sequence, on the host
  int64_t heads = 1, heads_kv = 0, head_dim = 64;
  bool causal = false;
  float scale = 0.0f;
  int64_t window_left = -1, window_right = -1;

  int64_t batch() const { return static_cast<int64_t>(seqlens_q.size()); }
  int64_t total_q() const;
  int64_t total_k() const;
  int64_t max_seq_q() const;
  int64_t max_seq_k() const;
  int64_t kv_heads() const { return heads_kv > 0 ? heads_kv : heads; }
  bool is_gqa() const { return kv_heads() != heads; }
  bool has_window() const { return sequence(0).has_window(); }
  // Sequence b as a fixed-length problem of one batch entry.
  AttentionShape sequence(int64_t b) const;
  // The same problem as a fixed-length batch (every sequence of the largest lengths): what a
  // padded batch computes.
  AttentionShape padded() const;
  std::vector<int32_t> cu_seqlens_q() const;  // batch + 1 entries, starting at 0
  std::vector<int32_t> cu_seqlens_k() const;
  int64_t q_numel() const { return heads * total_q() * head_dim; }
  int64_t k_numel() const { return kv_heads() * total_k() * head_dim; }
  int64_t lse_numel() const { return heads * total_q(); }
  int64_t visible_pairs() const;  // summed over sequences, per head
  double fwd_flops() const { return 4.0 * double(heads) * double(head_dim) * visible_pairs(); }
  double bwd_flops() const { return 2.5 * fwd_flops(); }
  std::string str() const;  // "varlen 7 seqs Tq 9000 (max 5000) ..."
};

// A paged KV cache: K and V live in pages of page_size keys,
// [num_pages, heads_kv, page_size, head_dim] (FlashInfer's "HND" layout: one head's keys of one
// page are contiguous rows, as in a contiguous cache), and key j of sequence b is row
// j % page_size of page block_table[b * max_pages + j / page_size]. Sequence b holds
// seqlens_k[b] keys (ragged); its seq_q queries (Q [batch, heads, seq_q, head_dim], O like Q,
// L [batch, heads, seq_q]) are the last seq_q tokens of it, so causal masking is bottom-right
// aligned per sequence as everywhere else. Decoding has seq_q of 1 to a few; a chunked prefill a
// chunk. The kernels get block_table ([batch, max_pages] int32) and seqlens_k (batch int32) on
// the device.
struct PagedShape {
  std::vector<int64_t> seqlens_k;  // keys per sequence (the new tokens included), on the host
  int64_t heads = 1, heads_kv = 0, head_dim = 128, seq_q = 1;
  int64_t page_size = 64, num_pages = 0, max_pages = 0;  // max_pages: the block table's width
  bool causal = false;
  float scale = 0.0f;

  int64_t batch() const { return static_cast<int64_t>(seqlens_k.size()); }
  int64_t kv_heads() const { return heads_kv > 0 ? heads_kv : heads; }
  int64_t max_seq_k() const;
  AttentionShape sequence(int64_t b) const;  // batch 1, seq_k = seqlens_k[b]
  int64_t q_numel() const { return batch() * heads * seq_q * head_dim; }
  int64_t lse_numel() const { return batch() * heads * seq_q; }
  int64_t page_numel() const { return num_pages * kv_heads() * page_size * head_dim; }
  int64_t visible_pairs() const;  // summed over sequences, per head
  double fwd_flops() const { return 4.0 * double(heads) * double(head_dim) * visible_pairs(); }
  // Bytes a kernel must move at least: Q read and O written once, L written once, and each
  // sequence's K and V keys read once (pages that hold no key of it are not counted).
  double min_bytes(int64_t elem_bytes) const;
  std::string str() const;
};

}  // namespace fa
