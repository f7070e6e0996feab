// example_softmax.cu: a worked example of "bring your own kernel" (read README.md in this folder).
//
// Row softmax with one warp per row and an online max/sum:
//   pass 1: each of the 32 lanes walks its strided share of the row keeping a running (m, l)
//           (example_softmax.cuh), then the lanes merge their pairs with warp shuffles;
//   pass 2: every lane writes y = exp(x - m) / l for its share.
// Two reads of x and one write: `reads = 2` in the registration below. Any row length works
// (lanes past the end simply contribute nothing), a row of -inf becomes zeros, and the max is
// subtracted before exp, so inputs offset by 1e4 do not overflow.
//
// The registration line at the bottom is all it takes: the name "01/user_example_warp_online"
// puts the kernel in chapter 01's program, in the GPU tests and in fa_bench.
#include <cstdint>

#include "check.h"
#include "example_softmax.cuh"
#include "registry.h"

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;  // 256 threads: one row per warp, eight rows per block

__global__ void softmax_warp_online(const float* __restrict__ x, float* __restrict__ y,
                                    int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp leaves together: the shuffles below stay full-warp
  const float* xr = x + row * cols;
  float* yr = y + row * cols;

  user_example::MaxSum s = user_example::empty_max_sum();
  for (int64_t c = lane; c < cols; c += kWarp) s = user_example::push(s, xr[c]);

  // Butterfly merge: after five steps every lane holds the summary of the whole row.
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    user_example::MaxSum other;
    other.m = __shfl_xor_sync(0xffffffffu, s.m, offset);
    other.l = __shfl_xor_sync(0xffffffffu, s.l, offset);
    s = user_example::merge(s, other);
  }

  for (int64_t c = lane; c < cols; c += kWarp) yr[c] = user_example::normalise(s, xr[c]);
}

void launch(const float* x, float* y, fa::SoftmaxShape shape, cudaStream_t stream) {
  if (shape.rows == 0 || shape.cols == 0) return;
  const int64_t blocks = fa::ceil_div(shape.rows, kWarpsPerBlock);
  softmax_warp_online<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(
      x, y, shape.rows, shape.cols);
  FA_CHECK_LAUNCH();
}

}  // namespace

// The one line: name, launcher, one-line description, passes over x, oldest GPU (sm_70).
FA_REGISTER(SoftmaxKernel,
            {"01/user_example_warp_online", launch,
             "worked example: one warp per row, online max/sum, shuffle merge", 2, 70});
