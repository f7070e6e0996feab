#include "shapes.h"

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

std::string AttentionShape::str() const {
  std::ostringstream os;
  os << "B" << batch << " H" << heads << " Nq" << seq_q << " Nk" << seq_k << " D" << head_dim
     << (causal ? " causal" : "");
  if (scale != 0.0f) os << " scale=" << scale;
  return os.str();
}

}  // namespace fa
