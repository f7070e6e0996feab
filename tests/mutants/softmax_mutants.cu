// softmax_mutants.cu: row softmax, one thread per row, done right once and wrong twice.
//   softmax_online_correct      the online recurrence with its rescale (the twin that must pass)
//   softmax_no_max_subtraction  (a) exp(x) / sum exp(x): fine for small x, NaN once x > 88.7
//   softmax_online_no_rescale   (b) l += exp(x - m_new) without first scaling l by exp(m - m_new)
#include <cstdint>

#include "check.h"
#include "mutants.h"

namespace mutants {
namespace {

constexpr int kThreads = 128;

enum class SoftmaxBug { None, NoMaxSubtraction, NoRescale };

template <SoftmaxBug kBug>
__global__ void softmax_thread_per_row(const float* __restrict__ x, float* __restrict__ y,
                                       int64_t rows, int64_t cols) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + row * cols;
  float* yr = y + row * cols;

  if (kBug == SoftmaxBug::NoMaxSubtraction) {
    float l = 0.0f;
    for (int64_t c = 0; c < cols; ++c) l += expf(xr[c]);  // BUG: exp(1e4) = inf
    for (int64_t c = 0; c < cols; ++c) yr[c] = expf(xr[c]) / l;
    return;
  }

  float m = -INFINITY, l = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    const float v = xr[c];
    const float m_new = fmaxf(m, v);
    if (m_new == -INFINITY) continue;  // nothing but -inf so far: exp(-inf - -inf) would be NaN
    if (kBug == SoftmaxBug::NoRescale)
      l = l + expf(v - m_new);  // BUG: the terms summed so far still refer to the old max
    else
      l = l * expf(m - m_new) + expf(v - m_new);
    m = m_new;
  }
  for (int64_t c = 0; c < cols; ++c) yr[c] = l > 0.0f ? expf(xr[c] - m) / l : 0.0f;
}

template <SoftmaxBug kBug>
void launch(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st) {
  if (s.rows == 0 || s.cols == 0) return;
  const int64_t blocks = (s.rows + kThreads - 1) / kThreads;
  softmax_thread_per_row<kBug>
      <<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(x, y, s.rows, s.cols);
  FA_CHECK_LAUNCH();
}

}  // namespace

void softmax_online_correct(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st) {
  launch<SoftmaxBug::None>(x, y, s, st);
}
void softmax_no_max_subtraction(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st) {
  launch<SoftmaxBug::NoMaxSubtraction>(x, y, s, st);
}
void softmax_online_no_rescale(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st) {
  launch<SoftmaxBug::NoRescale>(x, y, s, st);
}

}  // namespace mutants

FA_REGISTER_MUTANT(SoftmaxKernel,
                   {"mutant/01_no_max_subtraction", mutants::softmax_no_max_subtraction,
                    "exp(x) without subtracting the row max", 2});
FA_REGISTER_MUTANT(SoftmaxKernel,
                   {"mutant/02_online_no_rescale", mutants::softmax_online_no_rescale,
                    "online softmax: l not rescaled when the max grows", 1});
