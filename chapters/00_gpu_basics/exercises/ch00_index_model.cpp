// GENERATED from chapters/00_gpu_basics/ch00_index_model.cpp by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// ch00_index_model.cpp: the index arithmetic of threads_and_blocks.cu, run for every thread of a
// grid on the CPU (see ch00_index_model.h).
// A CPU exercise (notes/coursework.md): the element a thread owns, in one and two dimensions.
// EXERCISE-KERNELS: cpu/00_thread_index
#include "ch00_index_model.h"

#include "check.h"
#include "exercise.h"
#include "shapes.h"

namespace fa::ch00 {

int64_t vector_add_element(int64_t block, int64_t thread, int64_t block_dim, int64_t n) {
  // TODO(exercise vector-index): the element this thread owns: the threads of every block before its own, plus its place in its block; a thread past the end of the vector owns none (-1). The arithmetic is already 64-bit here: the kernel has to ask for it
  return fa::exercise_todo<int64_t>("cpu/00_thread_index", "vector-index");
}

int64_t matrix_add_offset(Dim2 block, Dim2 thread, Dim2 block_dim, int64_t rows, int64_t cols) {
  // TODO(exercise matrix-offset): the same in two dimensions: x runs along a row, so that the 32 threads of a warp (consecutive threadIdx.x) own consecutive addresses; a thread outside the matrix in either direction owns none (-1); the offset of (row, col) in a row-major matrix
  return fa::exercise_todo<int64_t>("cpu/00_thread_index", "matrix-offset");
}

std::vector<int> vector_add_owners(int64_t n, int64_t block_dim) {
  FA_REQUIRE(n > 0 && block_dim > 0, "vector_add_owners needs n > 0 and block_dim > 0");
  std::vector<int> owners(static_cast<size_t>(n), 0);
  for (int64_t b = 0; b < ceil_div(n, block_dim); ++b)
    for (int64_t t = 0; t < block_dim; ++t) {
      const int64_t i = vector_add_element(b, t, block_dim, n);
      FA_REQUIRE(i >= -1 && i < n, "vector_add_element gave an index outside the vector");
      if (i >= 0) ++owners[static_cast<size_t>(i)];
    }
  return owners;
}

std::vector<int> matrix_add_owners(int64_t rows, int64_t cols, Dim2 block_dim) {
  FA_REQUIRE(rows > 0 && cols > 0, "matrix_add_owners needs rows > 0 and cols > 0");
  std::vector<int> owners(static_cast<size_t>(rows * cols), 0);
  const Dim2 grid{ceil_div(cols, block_dim.x), ceil_div(rows, block_dim.y)};
  for (int64_t by = 0; by < grid.y; ++by)
    for (int64_t bx = 0; bx < grid.x; ++bx)
      for (int64_t ty = 0; ty < block_dim.y; ++ty)
        for (int64_t tx = 0; tx < block_dim.x; ++tx) {
          const int64_t o = matrix_add_offset({bx, by}, {tx, ty}, block_dim, rows, cols);
          FA_REQUIRE(o >= -1 && o < rows * cols, "matrix_add_offset gave an offset outside");
          if (o >= 0) ++owners[static_cast<size_t>(o)];
        }
  return owners;
}

}  // namespace fa::ch00

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/00_gpu_basics/exercises/ch00_index_model.cpp", {"cpu/00_thread_index"}, 2});
