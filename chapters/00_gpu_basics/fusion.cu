// fusion.cu: y = relu(x * a + b), unfused (three kernels) and fused (one).
//
// Each unfused kernel reads its input from global memory (HBM) and writes its output back:
//   scale: read x, write t      shift: read t, write u      relu: read u, write y
// that is 6 x n x 4 bytes of traffic for 3n FLOPs -- far left on the roofline (1/8 FLOP per
// byte), so the time is bytes / bandwidth. The fused kernel keeps t and u in a register and
// moves 2 x n x 4 bytes: about a third of the time. The arithmetic is identical; only the trips
// to memory differ.
//
// The fused kernel uses __fmul_rn and __fadd_rn (multiply, add, each rounded to nearest) so that
// it rounds exactly as the three kernels do: left alone, the compiler would contract x * a + b
// into one FMA, which is slightly MORE accurate, but then the two outputs would differ in the
// last bit and we could not compare them bit for bit.
// Speed (H100, 2026-11-21): 64 Mi floats, three kernels 0.679 ms, fused 0.229 ms (2.97x;
// 2348 GB/s, 83% of copy) (notes/measured/h100-2026-11-21/tour.log).
#include "ch00_gpu_basics.h"
#include "check.h"

namespace fa::ch00 {

namespace {

constexpr int kThreads = 256;

__global__ void scale_k(const float* __restrict__ x, float* __restrict__ t, float a, int64_t n) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) t[i] = __fmul_rn(x[i], a);
}
__global__ void shift_k(const float* __restrict__ t, float* __restrict__ u, float b, int64_t n) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) u[i] = __fadd_rn(t[i], b);
}
__global__ void relu_k(const float* __restrict__ u, float* __restrict__ y, int64_t n) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(u[i], 0.0f);
}
__global__ void fused_k(const float* __restrict__ x, float* __restrict__ y, float a, float b,
                        int64_t n) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    float t = __fmul_rn(x[i], a);  // stays in a register
    float u = __fadd_rn(t, b);     // so does this
    y[i] = fmaxf(u, 0.0f);         // the only write
  }
}

unsigned grid_for(int64_t n) {
  int64_t grid = ceil_div(n, kThreads);
  FA_REQUIRE(n > 0 && grid <= 0x7fffffff, "fusion kernels: n must be in 1 .. 2^31 * 256");
  return unsigned(grid);
}

}  // namespace

void scale_kernel(const float* x, float* t, float a, int64_t n, cudaStream_t s) {
  scale_k<<<grid_for(n), kThreads, 0, s>>>(x, t, a, n);
  FA_CHECK_LAUNCH();
}
void shift_kernel(const float* t, float* u, float b, int64_t n, cudaStream_t s) {
  shift_k<<<grid_for(n), kThreads, 0, s>>>(t, u, b, n);
  FA_CHECK_LAUNCH();
}
void relu_kernel(const float* u, float* y, int64_t n, cudaStream_t s) {
  relu_k<<<grid_for(n), kThreads, 0, s>>>(u, y, n);
  FA_CHECK_LAUNCH();
}
void fused_relu_axb(const float* x, float* y, float a, float b, int64_t n, cudaStream_t s) {
  fused_k<<<grid_for(n), kThreads, 0, s>>>(x, y, a, b, n);
  FA_CHECK_LAUNCH();
}

}  // namespace fa::ch00
