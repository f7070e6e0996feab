// Chapter 00's CPU exercise (notes/coursework.md): the element each thread of vector_add and
// matrix_add owns, in ch00_index_model.cpp. The tests run the whole grid of each launch on the CPU
// and count the threads that own each element: exactly one for every element, at sizes that are
// and are not multiples of the block, with the stray threads of the last blocks owning nothing;
// 64-bit indices past 2^32; and the 32 threads of a warp on consecutive addresses.
// Suite CpuExercise* (label exercise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "ch00_gpu_basics.h"
#include "ch00_index_model.h"

namespace {

using fa::ch00::Dim2;

TEST(CpuExerciseCh00Index, EveryElementHasOneThreadAtRaggedSizes) {
  for (int64_t block : {32, 128, 256, 1024})
    for (int64_t n : {1, 31, 32, 33, 1000, 4097}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", block " + std::to_string(block));
      const std::vector<int> owners = fa::ch00::vector_add_owners(n, block);
      EXPECT_TRUE(std::all_of(owners.begin(), owners.end(), [](int o) { return o == 1; }));
      // The stray threads of the last block own nothing (the kernel's `if (i < n)`).
      int64_t idle = 0;
      const int64_t last = fa::ch00::ceil_div(n, block) - 1;
      for (int64_t t = 0; t < block; ++t)
        idle += fa::ch00::vector_add_element(last, t, block, n) < 0;
      EXPECT_EQ(idle, fa::ch00::threads_out_of_bounds(n, block));
    }
}

TEST(CpuExerciseCh00Index, IndicesPast2To32DoNotWrap) {
  // Block 4194304 of 1024 threads starts at element 2^32: a 32-bit product would wrap to 0.
  const int64_t n = int64_t(1) << 33;
  EXPECT_EQ(fa::ch00::vector_add_element(4194304, 0, 1024, n), int64_t(1) << 32);
  EXPECT_EQ(fa::ch00::vector_add_element(8388607, 1023, 1024, n), n - 1);
  EXPECT_EQ(fa::ch00::vector_add_element(8388608, 0, 1024, n), -1);
}

TEST(CpuExerciseCh00Index, EveryMatrixElementHasOneThread) {
  for (const Dim2 block : {Dim2{32, 8}, Dim2{16, 16}, Dim2{32, 1}})
    for (const Dim2 shape : {Dim2{1, 1}, Dim2{33, 7}, Dim2{100, 129}, Dim2{5, 1000}}) {
      SCOPED_TRACE("cols " + std::to_string(shape.x) + " rows " + std::to_string(shape.y));
      const std::vector<int> owners = fa::ch00::matrix_add_owners(shape.y, shape.x, block);
      EXPECT_TRUE(std::all_of(owners.begin(), owners.end(), [](int o) { return o == 1; }));
    }
}

TEST(CpuExerciseCh00Index, AWarpOwnsConsecutiveAddresses) {
  // The 32 threads of a warp differ in threadIdx.x only (block 32 x 8): consecutive offsets, one
  // 128-byte transaction. Rows on x would put them `cols` floats apart.
  const int64_t rows = 100, cols = 1000;
  const Dim2 block_dim{32, 8};
  for (const Dim2 block : {Dim2{0, 0}, Dim2{3, 5}, Dim2{30, 12}}) {
    const int64_t first = fa::ch00::matrix_add_offset(block, {0, 2}, block_dim, rows, cols);
    ASSERT_GE(first, 0);
    for (int64_t lane = 1; lane < 32; ++lane)
      EXPECT_EQ(fa::ch00::matrix_add_offset(block, {lane, 2}, block_dim, rows, cols), first + lane)
          << "lane " << lane;
  }
  // The right-most blocks stick out past the last column; their threads there own nothing.
  EXPECT_EQ(fa::ch00::matrix_add_offset({31, 0}, {8, 0}, block_dim, rows, cols), -1);
  EXPECT_EQ(fa::ch00::matrix_add_offset({0, 12}, {0, 4}, block_dim, rows, cols), -1);
}

}  // namespace
