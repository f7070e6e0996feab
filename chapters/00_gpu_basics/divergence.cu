// divergence.cu: what an if/else costs when the threads of one warp disagree.
//
// A warp issues ONE instruction at a time for its 32 lanes (SIMT). When lanes of the same warp
// take different sides of a branch, the warp runs the first side with the other lanes switched
// off, then the second side with the first lanes switched off: it pays for both. When a whole
// warp agrees, it runs only its own side.
//
// Both kernels below do exactly the same work per thread: one of two loops of equal cost (the
// same number of FMAs, on kDivergenceChains independent chains so the FMA pipes stay busy).
//   divergent_kernel: the side is chosen by lane parity -> every warp runs both loops, half
//                     its lanes idle each time -> about 2x the time.
//   uniform_kernel:   the side is chosen by warp parity -> every warp runs one loop.
// The two loop bodies are different computations (x*0.9+0.05 vs x*x+0.2), so the compiler cannot
// merge them into one loop with selected constants, which would hide the effect.
// Speed (H100, 2026-11-21): divergent 0.304 ms, 1.96x the uniform branch
// (notes/measured/h100-2026-11-21/tour.log).
#include "ch00_gpu_basics.h"
#include "check.h"

namespace fa::ch00 {

namespace {

__device__ float seed_of(int64_t thread) {
  return float(thread % 97) * 0.004f;
}

__device__ float path_affine(float seed, int iters) {
  float x[kDivergenceChains];
#pragma unroll
  for (int j = 0; j < kDivergenceChains; ++j) x[j] = seed + 0.01f * float(j);
#pragma unroll 8
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < kDivergenceChains; ++j) x[j] = fmaf(x[j], 0.9f, 0.05f);
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kDivergenceChains; ++j) sum += x[j];
  return sum;
}

__device__ float path_quadratic(float seed, int iters) {
  float x[kDivergenceChains];
#pragma unroll
  for (int j = 0; j < kDivergenceChains; ++j) x[j] = seed + 0.01f * float(j);
#pragma unroll 8
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < kDivergenceChains; ++j) x[j] = fmaf(x[j], x[j], 0.2f);
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kDivergenceChains; ++j) sum += x[j];
  return sum;
}

__global__ void divergent_kernel(float* __restrict__ out, int iters) {
  int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int lane = threadIdx.x % kWarpSize;  // position inside the warp
  float seed = seed_of(thread);
  // Even and odd lanes sit in the SAME warp: the warp executes both loops one after the other.
  out[thread] = (lane % 2 == 0) ? path_affine(seed, iters) : path_quadratic(seed, iters);
}

__global__ void uniform_kernel(float* __restrict__ out, int iters) {
  int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int warp = threadIdx.x / kWarpSize;  // which warp of the block
  float seed = seed_of(thread);
  // All 32 lanes of a warp share `warp`: each warp executes one loop only.
  out[thread] = (warp % 2 == 0) ? path_affine(seed, iters) : path_quadratic(seed, iters);
}

}  // namespace

void divergence(float* out, int blocks, int threads, int iters, bool divergent, cudaStream_t s) {
  FA_REQUIRE(blocks > 0 && threads > 0 && threads <= 1024 && threads % kWarpSize == 0,
             "divergence: threads must be a multiple of 32, at most 1024");
  FA_REQUIRE(iters > 0, "divergence: iters must be positive");
  if (divergent) {
    divergent_kernel<<<blocks, threads, 0, s>>>(out, iters);
  } else {
    uniform_kernel<<<blocks, threads, 0, s>>>(out, iters);
  }
  FA_CHECK_LAUNCH();
}

}  // namespace fa::ch00
