// fma_rate.cu: how many fp32 FLOP/s can the SMs do? A kernel that does nothing but fused
// multiply-adds, measured against the clock-based peak (SMs x FP32 lanes x 2 x clock).
//
// Why it is built like this:
//   - An FMA (a * b + c in one instruction, rounded once) counts as 2 FLOPs, as in every GEMM rate.
//   - One chain acc = acc * a + b cannot go faster than one step per FMA latency (about 4 cycles),
//     because each step needs the previous result. kFmaChains independent chains per thread, and
//     many warps per SM, give the scheduler a ready FMA every cycle: throughput, not latency.
//   - The loop is unrolled kFmaUnroll times so the counter/compare/branch instructions take a
//     negligible share of the issue slots (they do not count as FLOPs but do cost issue cycles).
//   - The result of every chain is summed and stored, so the compiler cannot delete the work, and
//   - `iters`, `a`, `b` are runtime values, so it cannot fold the loop at compile time either.
// Speed (H100, 2026-11-21): 64.1 TFLOP/s fp32, 96% of the 66.9 the clock and SM count
// predict (notes/measured/h100-2026-11-21/tour.log).
#include "ch00_gpu_basics.h"
#include "check.h"

namespace fa::ch00 {

namespace {

__global__ void fma_rate_kernel(float* __restrict__ out, int iters, float a, float b) {
  int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float acc[kFmaChains];  // fully unrolled below, so these live in registers
#pragma unroll
  for (int j = 0; j < kFmaChains; ++j) acc[j] = float(thread % 1024) * 1e-3f + float(j);

#pragma unroll kFmaUnroll
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < kFmaChains; ++j) acc[j] = fmaf(acc[j], a, b);
  }

  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kFmaChains; ++j) sum += acc[j];
  out[thread] = sum;
}

}  // namespace

void fma_rate(float* out, int blocks, int threads, int iters, float a, float b, cudaStream_t s) {
  FA_REQUIRE(blocks > 0 && threads > 0 && threads <= 1024, "fma_rate: bad launch shape");
  FA_REQUIRE(iters > 0 && iters % kFmaUnroll == 0, "fma_rate: iters must be a multiple of 16");
  fma_rate_kernel<<<blocks, threads, 0, s>>>(out, iters, a, b);
  FA_CHECK_LAUNCH();
}

}  // namespace fa::ch00
