#include "ch04_strides.h"

#include <sstream>

#include "check.h"

namespace fa::ch04 {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  return st;
}

bool TensorView::is_contiguous() const {
  // Dimensions of size 1 may carry any stride.
  int64_t expect = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::string TensorView::str() const {
  std::ostringstream os;
  auto list = [&](const std::vector<int64_t>& v) {
    os << "[";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "]";
  };
  os << "shape ";
  list(shape);
  os << " strides ";
  list(strides);
  os << " offset " << offset << (is_contiguous() ? " (contiguous)" : " (not contiguous)");
  return os.str();
}

TensorView contiguous(const std::vector<int64_t>& shape) {
  for (int64_t s : shape) FA_REQUIRE(s >= 0, "negative size");
  return TensorView{shape, row_major_strides(shape), 0};
}

int64_t offset_of(const TensorView& v, const std::vector<int64_t>& index) {
  FA_REQUIRE(index.size() == v.shape.size(), "index rank differs from the tensor's");
  int64_t off = v.offset;
  for (size_t i = 0; i < index.size(); ++i) {
    FA_REQUIRE(index[i] >= 0 && index[i] < v.shape[i], "index out of range");
    off += index[i] * v.strides[i];
  }
  return off;
}

TensorView transpose(const TensorView& v, int d0, int d1) {
  const int rank = int(v.shape.size());
  FA_REQUIRE(d0 >= 0 && d0 < rank && d1 >= 0 && d1 < rank, "transpose: bad dimension");
  TensorView t = v;
  std::swap(t.shape[d0], t.shape[d1]);
  std::swap(t.strides[d0], t.strides[d1]);
  return t;
}

TensorView reshape(const TensorView& v, const std::vector<int64_t>& shape) {
  TensorView r{shape, row_major_strides(shape), v.offset};
  FA_REQUIRE(r.numel() == v.numel(), "reshape: the number of elements must not change");
  if (!v.is_contiguous())
    throw Error("reshape: this view is not contiguous (" + v.str() +
                "); copy it out first (materialize, PyTorch's .contiguous())");
  return r;
}

std::vector<float> materialize(const float* base, const TensorView& v) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(v.numel()));
  if (v.numel() == 0) return out;
  std::vector<int64_t> idx(v.shape.size(), 0);
  for (int64_t n = 0; n < v.numel(); ++n) {
    out.push_back(base[offset_of(v, idx)]);
    for (int d = int(idx.size()) - 1; d >= 0; --d) {  // odometer increment, last dim fastest
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

TensorView bnhd(int64_t B, int64_t N, int64_t H, int64_t D) {
  return contiguous({B, N, H, D});
}
TensorView bhnd(int64_t B, int64_t N, int64_t H, int64_t D) {
  return contiguous({B, H, N, D});
}
int64_t head_row_stride_bnhd(const TensorView& v) {
  return v.strides[1];
}
int64_t head_row_stride_bhnd(const TensorView& v) {
  return v.strides[2];
}

}  // namespace fa::ch04
