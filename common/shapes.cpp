#include "shapes.h"

#include <algorithm>
#include <sstream>

namespace fa {

std::string SoftmaxShape::str() const {
  std::ostringstream os;
  os << rows << "x" << cols;
  return os.str();
}

std::string GemmShape::str() const {
  std::ostringstream os;
  os << M << "x" << N << "x" << K;
  return os.str();
}

std::string TransposeShape::str() const {
  std::ostringstream os;
  os << rows << "x" << cols;
  return os.str();
}

int64_t AttentionShape::visible_pairs() const {
  if (seq_q <= 0 || seq_k <= 0) return 0;
  if (has_window()) {  // a band: count row by row (seq_q additions, no closed form needed)
    int64_t pairs = 0;
    for (int64_t i = 0; i < seq_q; ++i) pairs += visible_key_range(*this, i).count();
    return pairs;
  }
  if (!causal) return seq_q * seq_k;
  // Row i sees keys 0 .. causal_last_key(i), i.e. causal_last_key(i) + 1 of them, clamped to
  // [0, seq_k]. The count grows by one per row and reaches exactly seq_k at the last row
  // (causal_last_key(seq_q - 1) = seq_k - 1), so the upper clamp never bites; the lower one
  // does for the rows before causal_first_query(0), which see no key. What is left is an
  // arithmetic series from the first row that sees a key to the last row.
  const int64_t first = std::max<int64_t>(0, causal_first_query(0, seq_q, seq_k));
  const int64_t rows = seq_q - first;
  const int64_t ends = (causal_last_key(first, seq_q, seq_k) + 1) +     // keys of the first row
                       (causal_last_key(seq_q - 1, seq_q, seq_k) + 1);  // and of the last
  // rows * ends is even; halve the even factor first so that the product cannot overflow.
  return rows % 2 == 0 ? (rows / 2) * ends : rows * (ends / 2);
}

std::string AttentionShape::str() const {
  std::ostringstream os;
  os << "B" << batch << " H" << heads << " Nq" << seq_q << " Nk" << seq_k << " D" << head_dim
     << (causal ? " causal" : "");
  if (is_gqa()) os << " Hkv" << kv_heads();
  if (has_window()) os << " window(" << window_left << "," << (causal ? 0 : window_right) << ")";
  if (scale != 0.0f) os << " scale=" << scale;
  return os.str();
}

// ---- Chapter 09 ---------------------------------------------------------------------------------
namespace {
int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}
int64_t largest(const std::vector<int64_t>& v) {
  int64_t m = 0;
  for (int64_t x : v) m = std::max(m, x);
  return m;
}
std::vector<int32_t> cumulative(const std::vector<int64_t>& v) {
  std::vector<int32_t> cu(v.size() + 1, 0);
  for (size_t b = 0; b < v.size(); ++b) cu[b + 1] = static_cast<int32_t>(cu[b] + v[b]);
  return cu;
}
}  // namespace

int64_t VarlenShape::total_q() const {
  return sum(seqlens_q);
}
int64_t VarlenShape::total_k() const {
  return sum(seqlens_k);
}
int64_t VarlenShape::max_seq_q() const {
  return largest(seqlens_q);
}
int64_t VarlenShape::max_seq_k() const {
  return largest(seqlens_k);
}
std::vector<int32_t> VarlenShape::cu_seqlens_q() const {
  return cumulative(seqlens_q);
}
std::vector<int32_t> VarlenShape::cu_seqlens_k() const {
  return cumulative(seqlens_k);
}

AttentionShape VarlenShape::sequence(int64_t b) const {
  AttentionShape s;
  s.batch = 1;
  s.heads = heads;
  s.heads_kv = heads_kv;
  s.head_dim = head_dim;
  s.seq_q = b < batch() ? seqlens_q[b] : 0;
  s.seq_k = b < batch() ? seqlens_k[b] : 0;
  s.causal = causal;
  s.scale = scale;
  s.window_left = window_left;
  s.window_right = window_right;
  return s;
}

AttentionShape VarlenShape::padded() const {
  AttentionShape s = sequence(0);
  s.batch = batch();
  s.seq_q = max_seq_q();
  s.seq_k = max_seq_k();
  return s;
}

int64_t VarlenShape::visible_pairs() const {
  int64_t pairs = 0;
  for (int64_t b = 0; b < batch(); ++b) pairs += sequence(b).visible_pairs();
  return pairs;
}

std::string VarlenShape::str() const {
  std::ostringstream os;
  os << "varlen " << batch() << " seqs Tq" << total_q() << " (max " << max_seq_q() << ")";
  if (seqlens_k != seqlens_q) os << " Tk" << total_k() << " (max " << max_seq_k() << ")";
  os << " H" << heads << " D" << head_dim << (causal ? " causal" : "");
  if (is_gqa()) os << " Hkv" << kv_heads();
  if (has_window()) os << " window(" << window_left << "," << (causal ? 0 : window_right) << ")";
  if (scale != 0.0f) os << " scale=" << scale;
  return os.str();
}

int64_t PagedShape::max_seq_k() const {
  return largest(seqlens_k);
}

AttentionShape PagedShape::sequence(int64_t b) const {
  AttentionShape s;
  s.batch = 1;
  s.heads = heads;
  s.heads_kv = heads_kv;
  s.head_dim = head_dim;
  s.seq_q = seq_q;
  s.seq_k = b < batch() ? seqlens_k[b] : 0;
  s.causal = causal;
  s.scale = scale;
  return s;
}

int64_t PagedShape::visible_pairs() const {
  int64_t pairs = 0;
  for (int64_t b = 0; b < batch(); ++b) pairs += sequence(b).visible_pairs();
  return pairs;
}

double PagedShape::min_bytes(int64_t elem_bytes) const {
  const double keys = double(sum(seqlens_k));
  return double(elem_bytes) * (2.0 * q_numel() + 2.0 * keys * kv_heads() * head_dim) +
         4.0 * double(lse_numel());
}

std::string PagedShape::str() const {
  std::ostringstream os;
  os << "paged B" << batch() << " H" << heads << " Nq" << seq_q << " Nk<=" << max_seq_k() << " D"
     << head_dim << " page" << page_size << (causal ? " causal" : "");
  if (kv_heads() != heads) os << " Hkv" << kv_heads();
  if (scale != 0.0f) os << " scale=" << scale;
  return os.str();
}

}  // namespace fa
