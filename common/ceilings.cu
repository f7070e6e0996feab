#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <map>
#include <utility>

#include "buffer.h"
#include "ceilings.h"
#include "check.h"
#include "cublas_check.h"
#include "device_fill.h"
#include "registry.h"
#include "timing.h"

namespace fa {

cublasHandle_t cublas_handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t hh;
    FA_CUBLAS_CHECK(cublasCreate(&hh));
    return hh;
  }();
  return h;
}

cudaDataType_t cublas_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::F16:
      return CUDA_R_16F;
    case DType::BF16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

namespace {

// One float4 (16 bytes) per thread per step, grid-stride: the widest plain load there is.
__global__ void copy_vec4_kernel(const float4* __restrict__ in, float4* __restrict__ out,
                                 int64_t n4) {
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride)
    out[i] = in[i];
}
__global__ void copy_tail_kernel(const float* __restrict__ in, float* __restrict__ out,
                                 int64_t begin, int64_t n) {
  int64_t i = begin + int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}

void gemm_ex(const void* A, const void* B, void* C, cudaDataType_t c_type, GemmShape s, DType dtype,
             cudaStream_t stream) {
  FA_CUBLAS_CHECK(cublasSetStream(cublas_handle(), stream));
  const float alpha = 1.0f, beta = 0.0f;
  // cuBLAS is column-major. Row-major C = A*B is column-major C^T = B^T * A^T, so we pass B
  // first and swap M and N: no data is moved.
  FA_CUBLAS_CHECK(cublasGemmEx(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, int(s.N), int(s.M),
                               int(s.K), &alpha, B, cublas_type(dtype), int(s.N), A,
                               cublas_type(dtype), int(s.K), &beta, C, c_type, int(s.N),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void copy_kernel_launch(const float* in, float* out, int64_t n, cudaStream_t stream) {
  const int threads = 256;
  int64_t n4 = n / 4;
  if (n4 > 0) {
    int blocks = 132 * 16;  // enough resident blocks to fill any current GPU
    copy_vec4_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(in),
                                                     reinterpret_cast<float4*>(out), n4);
    FA_CHECK_LAUNCH();
  }
  int64_t tail = n - n4 * 4;
  if (tail > 0) {
    copy_tail_kernel<<<1, threads, 0, stream>>>(in, out, n4 * 4, n);
    FA_CHECK_LAUNCH();
  }
}

double copy_bandwidth_gbps() {
  static const double gbps = [] {
    const int64_t n = int64_t(1) << 28;  // 1 GiB of floats each way
    DeviceBuffer in(n * 4), out(n * 4);
    in.zero();
    Timing t =
        time_gpu([&](cudaStream_t s) { copy_kernel_launch(in.as<float>(), out.as<float>(), n, s); },
                 TimingOptions{3, 20, Flush::Clean});
    return 2.0 * n * 4 / (t.median_ms * 1e-3) / 1e9;
  }();
  return gbps;
}

double cublas_tflops(DType dtype, int n) {
  static std::map<std::pair<int, int>, double> cache;
  auto key = std::make_pair(int(dtype), n);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  size_t el = dtype_size(dtype);
  GemmShape s{n, n, n};
  // Random normal inputs, as PyTorch's torch.randn: tensor cores draw less power, and so clock
  // higher, on zeros or on low-entropy patterns (a pattern of 1000 distinct values measured
  // 831 TFLOP/s on an H100 on 2026-11-21, against 762 with random inputs in chapter 03).
  DeviceBuffer A(size_t(n) * n * el), B(size_t(n) * n * el);
  fill_random_device(dtype, A.data(), int64_t(n) * n, 1, 0.0f, 1.0f);
  fill_random_device(dtype, B.data(), int64_t(n) * n, 2, 0.0f, 1.0f);
  DeviceBuffer C(size_t(n) * n * el);
  cudaDataType_t c_type = cublas_type(dtype);  // 16-bit output for the 16-bit "peak"
  Timing t = time_gpu(
      [&](cudaStream_t st) { gemm_ex(A.data(), B.data(), C.data(), c_type, s, dtype, st); },
      TimingOptions{3, 20, Flush::Clean});
  double tf = s.flops() / (t.median_ms * 1e-3) / 1e12;
  cache[key] = tf;
  return tf;
}

void cublas_gemm(const void* A, const void* B, float* C, GemmShape shape, DType dtype,
                 cudaStream_t stream) {
  gemm_ex(A, B, C, CUDA_R_32F, shape, dtype, stream);
}

}  // namespace fa
