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
  if (scale != 0.0f) os << " scale=" << scale;
  return os.str();
}

}  // namespace fa
