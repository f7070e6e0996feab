#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "check.h"
#include "device_fill.h"

namespace fa {

namespace {

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

template <class T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float mean, float stddev) {
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // Box-Muller on two hashed uniforms in (0, 1).
    float u1 = (hash32(seed * 0x9E3779B97F4A7C15ull + 2 * i) + 0.5f) * 2.3283064e-10f;
    float u2 = (hash32(seed * 0x9E3779B97F4A7C15ull + 2 * i + 1) + 0.5f) * 2.3283064e-10f;
    float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    float v = mean + stddev * z;
    if constexpr (std::is_same_v<T, float>)
      p[i] = v;
    else if constexpr (std::is_same_v<T, __half>)
      p[i] = __float2half_rn(v);
    else
      p[i] = __float2bfloat16_rn(v);
  }
}

}  // namespace

void fill_random_device(DType t, void* ptr, int64_t n, uint64_t seed, float mean, float stddev,
                        cudaStream_t stream) {
  if (n <= 0) return;
  const int threads = 256;
  const int blocks = 132 * 8;
  switch (t) {
    case DType::F32:
      fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(ptr), n, seed, mean, stddev);
      break;
    case DType::F16:
      fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(ptr), n, seed, mean, stddev);
      break;
    case DType::BF16:
      fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(ptr), n, seed, mean,
                                                  stddev);
      break;
  }
  FA_CHECK_LAUNCH();
}

}  // namespace fa
