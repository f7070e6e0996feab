// GENERATED from chapters/00_gpu_basics/threads_and_blocks.cu by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// threads_and_blocks.cu: the first kernels. Vector add and matrix add, with every piece of the
// index arithmetic spelled out, the bounds test that makes ragged sizes safe, and (for the demo
// only) the same kernel without that test.
//
// The picture to keep in mind:
//   a launch <<<grid, block>>> starts grid x block threads.
//   blockIdx.x   which block this thread belongs to      (0 .. gridDim.x - 1)
//   blockDim.x   threads per block                        (the `block` of the launch)
//   threadIdx.x  which thread inside its block            (0 .. blockDim.x - 1)
// Consecutive threadIdx.x values form warps of 32 that execute one instruction at a time together
// (SIMT). A block runs on one SM from start to finish; blocks never talk to each other except
// through global memory.
// EXERCISE-KERNELS: 00/vector_add, 00/matrix_add
#include "ch00_gpu_basics.h"
#include "check.h"

namespace fa::ch00 {

namespace {

__global__ void vector_add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ c, int64_t n) {
  // TODO(exercise vector-add-index): give each thread its own element: its global position counts the threads of every block before its own plus its place in its block (mind how wide that arithmetic must be); the grid is rounded up to whole blocks, so some threads have no element
  (void)a, (void)b, (void)c, (void)n;  // stand-in: nothing is written yet
}

// The same kernel without the bounds test. Every one of the grid x block threads writes c[i], so
// for a ragged n the last threads_out_of_bounds(n, block) of them write past the end. The chapter
// runs it only on buffers padded to grid x block elements, to SEE those writes land.
__global__ void vector_add_unchecked_kernel(const float* __restrict__ a,
                                            const float* __restrict__ b, float* __restrict__ c) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  c[i] = a[i] + b[i];  // no `if (i < n)`: the bug this kernel exists to show
}

// Matrix add on a 2D grid. x is the fast (column) direction: the 32 threads of a warp have
// consecutive threadIdx.x, hence consecutive columns of one row, hence 32 consecutive floats in
// memory -- one 128-byte transaction (a "coalesced" access). Putting rows on x instead would make
// each warp touch 32 different rows, 32 transactions for the same data.
constexpr int kTileCols = 32;  // blockDim.x: one warp across a row
constexpr int kTileRows = 8;   // blockDim.y: 8 warps per block, 256 threads

__global__ void matrix_add_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                  float* __restrict__ C, int64_t rows, int64_t cols) {
  // TODO(exercise matrix-add-index): the same in two dimensions: which grid dimension should run along a row so that a warp touches consecutive addresses? Blocks can stick out past the matrix in both directions
  (void)A, (void)B, (void)C, (void)rows, (void)cols;  // stand-in: nothing is written yet
}

}  // namespace

void vector_add(const float* a, const float* b, float* c, int64_t n, int block, cudaStream_t s) {
  FA_REQUIRE(n > 0 && block > 0, "vector_add needs n > 0 and block > 0");
  int64_t grid = ceil_div(n, block);
  FA_REQUIRE(grid <= 0x7fffffff, "vector_add: too many blocks for gridDim.x");
  // A block above 1024 threads is not rejected here on purpose: the chapter launches one to show
  // the runtime's cudaErrorInvalidConfiguration, reported by FA_CHECK_LAUNCH.
  vector_add_kernel<<<unsigned(grid), unsigned(block), 0, s>>>(a, b, c, n);
  FA_CHECK_LAUNCH();
}

void vector_add_unchecked(const float* a, const float* b, float* c, int64_t n, int block,
                          cudaStream_t s) {
  FA_REQUIRE(n > 0 && block > 0 && block <= 1024, "vector_add_unchecked: bad n or block");
  int64_t grid = ceil_div(n, block);
  FA_REQUIRE(grid <= 0x7fffffff, "vector_add_unchecked: too many blocks for gridDim.x");
  vector_add_unchecked_kernel<<<unsigned(grid), unsigned(block), 0, s>>>(a, b, c);
  FA_CHECK_LAUNCH();
}

void matrix_add(const float* A, const float* B, float* C, int64_t rows, int64_t cols,
                cudaStream_t s) {
  FA_REQUIRE(rows > 0 && cols > 0, "matrix_add needs rows > 0 and cols > 0");
  dim3 block(kTileCols, kTileRows);
  int64_t grid_x = ceil_div(cols, kTileCols);  // up to 2^31 - 1 blocks
  int64_t grid_y = ceil_div(rows, kTileRows);  // at most 65535 blocks: y and z are the short axes
  FA_REQUIRE(grid_x <= 0x7fffffff && grid_y <= 65535,
             "matrix_add: the matrix is too tall for gridDim.y (at most 65535 * 8 rows)");
  dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  matrix_add_kernel<<<grid, block, 0, s>>>(A, B, C, rows, cols);
  FA_CHECK_LAUNCH();
}

KernelResources vector_add_resources(int block) {
  KernelResources r;
  cudaFuncAttributes attr{};
  FA_CUDA_CHECK(cudaFuncGetAttributes(&attr, vector_add_kernel));
  r.regs_per_thread = attr.numRegs;
  r.static_smem_bytes = int(attr.sharedSizeBytes);
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r.resident_blocks_per_sm,
                                                              vector_add_kernel, block, 0));
  return r;
}

}  // namespace fa::ch00

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/00_gpu_basics/exercises/threads_and_blocks.cu", {"00/vector_add", "00/matrix_add"}, 2});
