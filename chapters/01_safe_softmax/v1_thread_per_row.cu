// v1_thread_per_row.cu: safe softmax, one thread per row, three passes over x.
//
// What changed vs the naive demo: the row maximum m is subtracted before exponentiating, so every
// exponent x_i - m is <= 0 and every e^(x_i - m) lies in (0, 1]: nothing can overflow, and the
// largest term is exactly 1, so the sum is >= 1 and the division is safe.
//
//   pass 1: m = max_i x_i            (reads x)
//   pass 2: l = sum_i e^(x_i - m)    (reads x)
//   pass 3: y_i = e^(x_i - m) / l    (reads x, writes y)
//
// Why it is slow: the 32 threads of a warp work on 32 different rows, so one load instruction
// touches 32 addresses `cols` floats apart: 32 memory sectors for 128 useful bytes. And with one
// thread per row, a 4096-row problem has only 4096 threads to hide memory latency on 132 SMs.
//
// Accuracy: a single thread adds up to 10^6 terms; the error of plain fp32 accumulation grows with
// the length (bound N * 2^-24), so the sum is compensated (Kahan): the rounding error of each
// addition is carried into the next one (notes/01_safe_softmax.md has the numbers).
//
// Speed (H200, 2026-12-02): 82 GB/s at 4096x4096 (2.1% of copy), 283 at 16384x1024 (7.1%)
// (notes/measured/h200-2026-12-02/tour.log).
#include <algorithm>
#include <limits>

#include "check.h"
#include "registry.h"

namespace {

constexpr int kThreads = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

__global__ void softmax_thread_per_row_kernel(const float* __restrict__ x, float* __restrict__ y,
                                              int64_t rows, int64_t cols) {
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < rows;
       row += int64_t(gridDim.x) * blockDim.x) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;

    // Pass 1: the maximum.
    float m = kNegInf;
    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);

    // A row of only -inf has no distribution: it is defined as all zeros (and e^(-inf - -inf)
    // would be NaN).
    if (m == kNegInf) {
      for (int64_t c = 0; c < cols; ++c) yr[c] = 0.0f;
      continue;
    }

    // Pass 2: the sum of e^(x - m), compensated.
    float l = 0.0f, carry = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float term = expf(xr[c] - m) - carry;  // -inf entries give e^-inf = 0
      const float t = l + term;
      carry = (t - l) - term;  // what the addition just rounded away
      l = t;
    }

    // Pass 3: normalise. l >= 1 (the maximum contributes e^0 = 1).
    const float inv_l = 1.0f / l;
    for (int64_t c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) * inv_l;
  }
}

void softmax_v1(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return;
  const int64_t blocks = std::min<int64_t>(fa::ceil_div(s.rows, kThreads), 1 << 20);
  softmax_thread_per_row_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, y, s.rows, s.cols);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(SoftmaxKernel, {"01/v1_thread_per_row", softmax_v1,
                            "one thread per row; three passes: max, sum, write", 3});
