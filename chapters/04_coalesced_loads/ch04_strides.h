// ch04_strides.h: a tensor is a pointer plus a shape plus strides. Element (i0, i1, ...) lives at
// offset + i0*stride0 + i1*stride1 + ... (in elements). Reshape and transpose only change the
// shape and the strides; no data moves. This CPU model is what the chapter prints and tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fa::ch04 {

struct TensorView {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  int64_t offset = 0;
  int64_t numel() const;
  bool is_contiguous() const;  // strides are those of a row-major tensor of this shape
  std::string str() const;     // "shape [2, 3] strides [3, 1] offset 0"
};

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape);
TensorView contiguous(const std::vector<int64_t>& shape);

// Offset (in elements) of one element, every index checked.
int64_t offset_of(const TensorView& v, const std::vector<int64_t>& index);

// Swap two dimensions: a new view on the same memory (the strides swap).
TensorView transpose(const TensorView& v, int d0, int d1);

// A new shape over the same memory. Possible without a copy only for a contiguous view (what
// PyTorch's view() requires); throws fa::Error otherwise, e.g. for a transposed view.
TensorView reshape(const TensorView& v, const std::vector<int64_t>& shape);

// The elements of a view in row-major order of its shape (what .contiguous() would copy out).
std::vector<float> materialize(const float* base, const TensorView& v);

// Attention tensors: [B, N, H, D] (tokens first, as projections produce them) and [B, H, N, D]
// (heads first, as this repository's kernels take them).
TensorView bnhd(int64_t B, int64_t N, int64_t H, int64_t D);
TensorView bhnd(int64_t B, int64_t N, int64_t H, int64_t D);
// Distance in elements between row n and row n+1 of one head: H*D for [B,N,H,D], D for [B,H,N,D].
int64_t head_row_stride_bnhd(const TensorView& v);
int64_t head_row_stride_bhnd(const TensorView& v);

}  // namespace fa::ch04
