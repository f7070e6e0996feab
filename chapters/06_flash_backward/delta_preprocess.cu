// delta_preprocess.cu: D_i = rowsum(dO_i o O_i), the first kernel of every backward pass here.
//
// What it is for: the softmax Jacobian turns dP into dS = P o (dP - D), where D_i = rowsum(P_i o
// dP_i). That rowsum is over a whole row of the attention matrix, which the tiled kernels never
// hold at once. But D_i = rowsum(dO_i o O_i) too (notes/06_flash_backward.md proves it), and that
// is a dot product of two head_dim-long vectors we already have. So one cheap pass computes it.
//
// How: memory-bound (2 * head_dim loads per 1 store), so the only goal is to stream O and dO at
// full bandwidth: one warp per row, each lane loading 16 bytes at a time (float4, or 8 halves /
// bfloat16s) when the head dim and the pointers allow it, a scalar loop otherwise. Products are
// summed in fp32 whatever the storage type, then reduced across the warp with shuffles.
//
// Speed (H100, 2026-11-21): 2728 GB/s fp32 D128 N8192 (96% of copy), bf16 D128 2339 (83%),
// bf16 D64 1567 (55%: see notes/06_flash_backward.md)
// (fa_bench; notes/measured/h100-2026-11-21/bench.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ch06_preprocess.h"
#include "check.h"

namespace fa {
namespace {

constexpr int kWarpsPerBlock = 8;  // rows per block
constexpr int kWarp = 32;

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// 16 bytes of T as one aligned load: 4 floats or 8 halves / bfloat16s.
template <class T>
struct Vec16 {
  static constexpr int kElems = 16 / int(sizeof(T));
  alignas(16) T v[kElems];
};

template <class T, bool kVectorised>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    delta_preprocess_kernel(const T* __restrict__ o, const T* __restrict__ dout,
                            float* __restrict__ delta, int64_t rows, int64_t head_dim) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // the whole warp leaves together: the shuffles below stay full
  const T* orow = o + row * head_dim;
  const T* drow = dout + row * head_dim;
  float acc = 0.0f;
  if constexpr (kVectorised) {
    using V = Vec16<T>;
    const int64_t nvec = head_dim / V::kElems;
    const V* ov = reinterpret_cast<const V*>(orow);
    const V* dv = reinterpret_cast<const V*>(drow);
    for (int64_t x = lane; x < nvec; x += kWarp) {
      const V a = ov[x], b = dv[x];
#pragma unroll
      for (int e = 0; e < V::kElems; ++e) acc += to_f32(a.v[e]) * to_f32(b.v[e]);
    }
  } else {
    for (int64_t x = lane; x < head_dim; x += kWarp) acc += to_f32(orow[x]) * to_f32(drow[x]);
  }
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) delta[row] = acc;
}

template <class T>
void launch_typed(const void* o, const void* dout, float* delta, const AttentionShape& s,
                  cudaStream_t st) {
  const int64_t rows = s.lse_numel();
  if (rows == 0) return;
  const int64_t blocks = ceil_div(rows, kWarpsPerBlock);
  FA_REQUIRE(blocks <= 0x7fffffff, "too many rows for one grid");
  constexpr int kElems = Vec16<T>::kElems;
  // Every row starts on a 16-byte boundary when head_dim is a multiple of the vector width and
  // the tensors themselves are 16-byte aligned (cudaMalloc gives 256).
  const bool vectorised = s.head_dim % kElems == 0 && reinterpret_cast<uintptr_t>(o) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(dout) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(blocks)), block(kWarpsPerBlock * kWarp);
  const T* op = static_cast<const T*>(o);
  const T* dp = static_cast<const T*>(dout);
  if (vectorised)
    delta_preprocess_kernel<T, true><<<grid, block, 0, st>>>(op, dp, delta, rows, s.head_dim);
  else
    delta_preprocess_kernel<T, false><<<grid, block, 0, st>>>(op, dp, delta, rows, s.head_dim);
  FA_CHECK_LAUNCH();
}

}  // namespace

void launch_delta_preprocess(const void* o, const void* dout, float* delta, const AttentionShape& s,
                             DType t, cudaStream_t st) {
  switch (t) {
    case DType::F32:
      launch_typed<float>(o, dout, delta, s, st);
      break;
    case DType::F16:
      launch_typed<__half>(o, dout, delta, s, st);
      break;
    case DType::BF16:
      launch_typed<__nv_bfloat16>(o, dout, delta, s, st);
      break;
  }
}

}  // namespace fa
