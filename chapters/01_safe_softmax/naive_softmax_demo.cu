// naive_softmax_demo.cu: the softmax straight from its definition, y_i = e^(x_i) / sum_j e^(x_j).
//
// It is here to fail. fp32 holds numbers up to about 3.4e38 = e^88.72, so e^89 is already +Inf;
// a row of inputs around 100 gives Inf / Inf = NaN. It is NOT registered in the kernel ladder
// (the tests would rightly reject it); the chapter program calls it on one small row to show the
// problem that the "safe" versions (v1..v3) solve by subtracting the row maximum first.
//
// One thread per row, two passes (sum, then write): the simplest possible kernel.
#include <algorithm>

#include "ch01_kernels.h"
#include "check.h"

namespace {

constexpr int kThreads = 128;

__global__ void naive_softmax_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < rows;
       row += int64_t(gridDim.x) * blockDim.x) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += expf(xr[c]);         // e^100 = +Inf in fp32
    for (int64_t c = 0; c < cols; ++c) yr[c] = expf(xr[c]) / sum;  // Inf / Inf = NaN
  }
}

}  // namespace

namespace ch01 {

void naive_softmax_demo(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return;
  const int64_t blocks = std::min<int64_t>(fa::ceil_div(s.rows, kThreads), 65535);
  naive_softmax_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, s.rows,
                                                                               s.cols);
  FA_CHECK_LAUNCH();
}

}  // namespace ch01
