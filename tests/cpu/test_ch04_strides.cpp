// Chapter 04, CPU tier: the stride arithmetic (offsets, transpose, reshape, attention layouts).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ch04_strides.h"
#include "check.h"

namespace {

using namespace fa::ch04;

TEST(Ch04Strides, RowMajorStrides) {
  EXPECT_EQ(row_major_strides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  TensorView v = contiguous({2, 3, 4});
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(offset_of(v, {1, 2, 3}), 23);
  EXPECT_THROW(offset_of(v, {2, 0, 0}), fa::Error);
}

TEST(Ch04Strides, TransposeSwapsStridesAndMaterializes) {
  std::vector<float> data(12);
  std::iota(data.begin(), data.end(), 0.0f);
  TensorView x = contiguous({3, 4});
  TensorView t = transpose(x, 0, 1);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(t.strides, (std::vector<int64_t>{1, 4}));
  EXPECT_FALSE(t.is_contiguous());
  std::vector<float> m = materialize(data.data(), t);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(m[i * 3 + j], data[j * 4 + i]);
  EXPECT_TRUE(transpose(t, 0, 1).is_contiguous());
}

TEST(Ch04Strides, ReshapeIsNotTranspose) {
  std::vector<float> data(6);
  std::iota(data.begin(), data.end(), 0.0f);
  TensorView x = contiguous({2, 3});
  EXPECT_EQ(materialize(data.data(), reshape(x, {3, 2})), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(materialize(data.data(), transpose(x, 0, 1)), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(reshape(transpose(x, 0, 1), {6}), fa::Error);
  EXPECT_THROW(reshape(x, {4}), fa::Error);
  // Size-1 dimensions do not break contiguity.
  EXPECT_TRUE(transpose(contiguous({1, 5}), 0, 1).is_contiguous());
}

TEST(Ch04Strides, AttentionLayouts) {
  const int64_t B = 2, N = 10, H = 3, D = 8;
  TensorView a = bnhd(B, N, H, D), b = bhnd(B, N, H, D);
  EXPECT_EQ(a.strides, (std::vector<int64_t>{N * H * D, H * D, D, 1}));
  EXPECT_EQ(b.strides, (std::vector<int64_t>{H * N * D, N * D, D, 1}));
  EXPECT_EQ(head_row_stride_bnhd(a), H * D);
  EXPECT_EQ(head_row_stride_bhnd(b), D);
  // The [B,H,N,D]-shaped view of [B,N,H,D] memory reaches the same element as [B,N,H,D] indexing.
  TensorView q = transpose(a, 1, 2);
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n)
        EXPECT_EQ(offset_of(q, {bb, h, n, 5}), offset_of(a, {bb, n, h, 5}));
  EXPECT_FALSE(q.is_contiguous());
}

}  // namespace
