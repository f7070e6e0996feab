// ch00_index_model.h: the launches of threads_and_blocks.cu on paper. A kernel is written for one
// thread; which element that thread owns is arithmetic on blockIdx, blockDim and threadIdx, and
// the CPU can do that arithmetic for every thread of a grid and count what each element gets.
// A CPU exercise (notes/coursework.md): the two index functions of ch00_index_model.cpp.
#pragma once
#include <cstdint>
#include <vector>

namespace fa::ch00 {

// The x and y of a blockIdx, blockDim or threadIdx (z is 1 in this chapter).
struct Dim2 {
  int64_t x = 1, y = 1;
};

// The element of an n-element vector that thread `thread` of block `block` owns in vector_add
// (blocks of `block_dim` threads), or -1 for a thread past the end.
int64_t vector_add_element(int64_t block, int64_t thread, int64_t block_dim, int64_t n);

// The row-major offset of the element of a rows x cols matrix that thread `thread` of block
// `block` owns in matrix_add (blocks of block_dim.x x block_dim.y threads), or -1.
int64_t matrix_add_offset(Dim2 block, Dim2 thread, Dim2 block_dim, int64_t rows, int64_t cols);

// Every thread of the launch vector_add makes for n elements (ceil_div(n, block_dim) blocks):
// how many threads own each element. Correct indexing gives 1 everywhere.
std::vector<int> vector_add_owners(int64_t n, int64_t block_dim);

// The same for matrix_add's 2D grid (ceil_div(cols, x) x ceil_div(rows, y) blocks).
std::vector<int> matrix_add_owners(int64_t rows, int64_t cols, Dim2 block_dim);

}  // namespace fa::ch00
