// chapters/user/my_softmax.cu
#include "check.h"     // FA_CHECK_LAUNCH
#include "registry.h"  // FA_REGISTER and the problems' signatures

__global__ void my_softmax_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  // your kernel: y[r, :] = softmax(x[r, :]) for every row r
}

void my_softmax(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t stream) {
  my_softmax_kernel<<</*grid=*/1, /*block=*/256, 0, stream>>>(x, y, s.rows, s.cols);
  FA_CHECK_LAUNCH();
}

FA_REGISTER(SoftmaxKernel, {"01/user_my_softmax", my_softmax, "what I changed", /*reads=*/1});
