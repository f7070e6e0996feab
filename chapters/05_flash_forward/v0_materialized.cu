// v0_materialized.cu: "standard attention", the way a framework computes it without a fused
// kernel. Three steps, each a full pass over an N x N matrix in global memory:
//
//   1. S = Q K^T               cuBLAS (batched over batch*heads), S stored in fp32
//   2. P = softmax(scale * S)  our row kernel below: causal mask, safe softmax, L = m + log(l)
//   3. O = P V                 cuBLAS, P rounded to the input dtype first (as a framework would)
//
// It is the row the fused kernels are measured against, and the reason they exist: S alone needs
// batch*heads*seq_q*seq_k*4 bytes (256 GiB at B=1, H=16, N=65536), so this version throws
// fa::Unsupported with the number when the GPU cannot hold it, and its traffic is O(N^2) bytes
// where the fused kernels' is O(N * D).
//
// Speed (H100, 2026-11-21): 70.1 TFLOP/s bf16 D128 N8192 (53.3 causal), 23.2 fp32 D64 N2048
// (fa_bench, B = 16384/N, H = 2048/D; notes/measured/h100-2026-11-21/bench.log).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "check.h"
#include "cublas_check.h"
#include "registry.h"

namespace fa {
namespace {

constexpr int kSoftmaxThreads = 256;

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Block-wide reduction (max or sum) of one value per thread; every thread gets the result.
template <bool kIsMax>
__device__ float block_reduce(float x, float* scratch) {
  for (int off = 16; off > 0; off /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, off);
    x = kIsMax ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = kIsMax ? -INFINITY : 0.0f;
  for (int w = 0; w < blockDim.x / 32; ++w) x = kIsMax ? fmaxf(x, scratch[w]) : x + scratch[w];
  return x;
}

// One block per row of S (grid-stride over rows: batch*heads*seq_q may exceed the grid). Three
// passes over the row in global memory: max, sum of exponentials, write P. Keys past the causal
// limit get P = 0; a row that sees no key at all gets P = 0 everywhere and L = -inf, so P V
// gives O = 0.
template <class T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    masked_softmax_rows(const float* S, T* P, float* __restrict__ Lse,  // S and P alias in fp32
                        int64_t rows, int64_t seq_q, int64_t seq_k, float scale, bool causal) {
  __shared__ float scratch[kSoftmaxThreads / 32];
  const int64_t offset = causal_last_key(0, seq_q, seq_k);  // causal_last_key(i) = i + offset
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t i = row % seq_q;  // query index within its head
    // Keys 0..visible-1 are visible (bottom-right causal alignment: j <= causal_last_key(i)).
    int64_t visible = seq_k;
    if (causal) {
      const int64_t last = i + offset;
      visible = last < 0 ? 0 : (last + 1 < seq_k ? last + 1 : seq_k);
    }
    const float* s = S + row * seq_k;
    T* p = P + row * seq_k;

    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) m = fmaxf(m, scale * s[j]);
    m = block_reduce<true>(m, scratch);

    float l = 0.0f;
    if (visible > 0)
      for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) l += expf(scale * s[j] - m);
    l = block_reduce<false>(l, scratch);

    const float inv_l = visible > 0 ? 1.0f / l : 0.0f;
    for (int64_t j = threadIdx.x; j < seq_k; j += blockDim.x)
      p[j] = from_float<T>(j < visible ? expf(scale * s[j] - m) * inv_l : 0.0f);
    if (threadIdx.x == 0) Lse[row] = visible > 0 ? m + logf(l) : -INFINITY;
  }
}

// Workspace for S (fp32) and, for 16-bit inputs, P (in the input dtype; fp32 P reuses S).
// Allocated stream-ordered per call: inside a timing loop the pool hands the same memory back
// without a device synchronisation.
struct Workspace {
  void* ptr = nullptr;
  cudaStream_t stream = nullptr;
  Workspace(size_t bytes, cudaStream_t st) : stream(st) {
    size_t free_bytes = 0, total_bytes = 0;
    FA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    // Memory the default pool holds but does not use (an earlier call's freed S) is free too.
    int device = 0;
    FA_CUDA_CHECK(cudaGetDevice(&device));
    cudaMemPool_t pool;
    FA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t reserved = 0, used = 0;
    FA_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    FA_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    const size_t available = free_bytes + size_t(reserved - used);
    char msg[256];
    std::snprintf(
        msg, sizeof msg,
        "05/v0_materialized needs %.2f GB for S (and P), more than the GPU has "
        "(%.2f GB free of %.2f GB): this is the N x N matrix the fused kernels never store",
        bytes / 1e9, available / 1e9, total_bytes / 1e9);
    FA_UNSUPPORTED_IF(bytes > available, msg);
    if (cudaMallocAsync(&ptr, bytes, stream) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the allocation error: it is reported as UNSUPPORTED
      ptr = nullptr;
      FA_UNSUPPORTED_IF(true, msg);
    }
  }
  ~Workspace() {
    if (ptr != nullptr) (void)cudaFreeAsync(ptr, stream);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
};

template <class T>
void launch_softmax(const float* S, void* P, float* lse, const AttentionShape& s,
                    cudaStream_t stream) {
  const int64_t rows = s.bh() * s.seq_q;
  const int64_t kMaxBlocks = int64_t(1) << 20;  // grid-stride beyond this
  const unsigned blocks = static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
  masked_softmax_rows<T><<<blocks, kSoftmaxThreads, 0, stream>>>(
      S, static_cast<T*>(P), lse, rows, s.seq_q, s.seq_k, s.softmax_scale(), s.causal);
  FA_CHECK_LAUNCH();
}

void attention_materialized(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  if (s.seq_q == 0 || s.bh() == 0) return;
  FA_UNSUPPORTED_IF(s.seq_k == 0, "05/v0_materialized: seq_k = 0 (an empty S) is not handled");
  FA_UNSUPPORTED_IF(s.bh() > 0x7fffffffLL || s.seq_q > 0x7fffffffLL || s.seq_k > 0x7fffffffLL,
                    "05/v0_materialized: cuBLAS takes int sizes");

  const int64_t s_elems = s.bh() * s.seq_q * s.seq_k;
  const size_t s_bytes = size_t(s_elems) * sizeof(float);
  const size_t p_offset = (s_bytes + 255) / 256 * 256;  // P starts aligned for the tensor cores
  const size_t p_bytes = a.dtype == DType::F32 ? 0 : size_t(s_elems) * dtype_size(a.dtype);
  Workspace ws(p_bytes == 0 ? s_bytes : p_offset + p_bytes, stream);
  float* S = static_cast<float*>(ws.ptr);
  void* P = a.dtype == DType::F32 ? ws.ptr : static_cast<char*>(ws.ptr) + p_offset;

  cublasHandle_t h = cublas_handle();
  FA_CUBLAS_CHECK(cublasSetStream(h, stream));
  const cudaDataType_t t = cublas_type(a.dtype);
  const int Nq = int(s.seq_q), Nk = int(s.seq_k), D = int(s.head_dim), batch = int(s.bh());
  const float one = 1.0f, zero = 0.0f;

  // cuBLAS is column-major: a row-major [r, c] matrix is its column-major [c, r] transpose.
  // 1. S (row-major [Nq, Nk]) = Q K^T  <=>  S^T (col-major [Nk, Nq]) = (K^T)^T-as-stored * Q.
  //    K row-major [Nk, D] is col-major [D, Nk]: op T gives [Nk, D]. Q is col-major [D, Nq].
  FA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, Nk, Nq, D, &one, a.k, t,
                                             D, int64_t(Nk) * D, a.q, t, D, int64_t(Nq) * D, &zero,
                                             S, CUDA_R_32F, Nk, int64_t(Nq) * Nk, batch,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));

  // 2. P = softmax(scale * S) with the causal mask; L = m + log(l).
  switch (a.dtype) {
    case DType::F32:
      launch_softmax<float>(S, P, a.lse, s, stream);
      break;
    case DType::F16:
      launch_softmax<__half>(S, P, a.lse, s, stream);
      break;
    case DType::BF16:
      launch_softmax<__nv_bfloat16>(S, P, a.lse, s, stream);
      break;
  }

  // 3. O (row-major [Nq, D]) = P V  <=>  O^T (col-major [D, Nq]) = V^T (col-major [D, Nk], as
  //    stored) * P^T (col-major [Nk, Nq], as stored).
  FA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, D, Nq, Nk, &one, a.v, t,
                                             D, int64_t(Nk) * D, P, t, Nk, int64_t(Nq) * Nk, &zero,
                                             a.o, t, D, int64_t(Nq) * D, batch, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
}

}  // namespace

FA_REGISTER(
    AttentionFwdKernel,
    {"05/v0_materialized",
     attention_materialized,
     "standard attention: cuBLAS S = QK^T (fp32), softmax kernel, cuBLAS O = PV; N x N in memory",
     {DType::F32, DType::BF16, DType::F16},
     {32, 64, 96, 128},
     70});

}  // namespace fa
