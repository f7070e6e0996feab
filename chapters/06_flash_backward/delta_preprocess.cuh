// delta_preprocess.cuh: the kernel of D_i = rowsum(dO_i o O_i) and its launcher, in a header so
// that every CUDA module that needs it compiles its own copy: chapter 06's delta_preprocess.cu
// (which defines launch_delta_preprocess, ch06_preprocess.h) and chapter 07's sm_90a backward,
// whose program does not link chapter 06's objects. Everything here is in an anonymous namespace:
// each including .cu file gets private symbols, and no module uses a kernel compiled in another.
//
// What it is for: the softmax Jacobian turns dP into dS = P o (dP - D), where D_i = rowsum(P_i o
// dP_i). That rowsum is over a whole row of the attention matrix, which the tiled kernels never
// hold at once. But D_i = rowsum(dO_i o O_i) too (notes/06_flash_backward.md proves it), and that
// is a dot product of two head_dim-long vectors we already have. So one cheap pass computes it.
//
// How: memory-bound (2 * head_dim loads per 1 store), so the only goal is to stream O and dO at
// full bandwidth with every lane busy. Each lane loads 16 bytes at a time (float4, or 8 halves /
// bfloat16s) when the head dim and the pointers allow it. A row of R such vectors gets
// kLanes = min(32, R rounded up to a power of two) lanes and a warp handles 32 / kLanes rows at
// once: a bf16 row of 64 (128 bytes, 8 vectors) takes 8 lanes, 4 rows per warp, where one row per
// warp left 24 of the 32 lanes idle (bf16 D64 ran at 55% of copy bandwidth, notes/06). Products
// are summed in fp32 whatever the storage type, then reduced across the row's lanes with xor
// shuffles. The sums are bitwise those of one row per warp: there a lane past the row's vectors
// contributed an exact 0, and the xor tree over the remaining lanes is this one.
// Without 16-byte alignment a scalar loop with 32 lanes per row does the same work.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "check.h"
#include "dtype.h"
#include "shapes.h"

namespace fa {
namespace {

constexpr int kDeltaWarpsPerBlock = 8;
constexpr int kDeltaWarp = 32;

__device__ __forceinline__ float delta_to_f32(float x) {
  return x;
}
__device__ __forceinline__ float delta_to_f32(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float delta_to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// 16 bytes of T as one aligned load: 4 floats or 8 halves / bfloat16s.
template <class T>
struct DeltaVec16 {
  static constexpr int kElems = 16 / int(sizeof(T));
  alignas(16) T v[kElems];
};

// kLanes lanes per row, 32 / kLanes rows per warp. kVectorised: 16-byte loads (the launcher
// checks the alignment); otherwise one element per lane per step (kLanes is then 32).
template <class T, bool kVectorised, int kLanes>
__global__ void __launch_bounds__(kDeltaWarpsPerBlock* kDeltaWarp)
    delta_preprocess_kernel(const T* __restrict__ o, const T* __restrict__ dout,
                            float* __restrict__ delta, int64_t rows, int64_t head_dim) {
  constexpr int kRowsPerWarp = kDeltaWarp / kLanes;
  const int lane = threadIdx.x % kDeltaWarp;
  const int sub = lane % kLanes;  // this lane's place in its row
  const int64_t warp = int64_t(blockIdx.x) * kDeltaWarpsPerBlock + threadIdx.x / kDeltaWarp;
  const int64_t row = warp * kRowsPerWarp + lane / kLanes;
  // A row past the end still joins the shuffles below (they take the whole warp), with 0.
  float acc = 0.0f;
  if (row < rows) {
    const T* orow = o + row * head_dim;
    const T* drow = dout + row * head_dim;
    if constexpr (kVectorised) {
      using V = DeltaVec16<T>;
      const int64_t nvec = head_dim / V::kElems;
      const V* ov = reinterpret_cast<const V*>(orow);
      const V* dv = reinterpret_cast<const V*>(drow);
      for (int64_t x = sub; x < nvec; x += kLanes) {
        const V a = ov[x], b = dv[x];
#pragma unroll
        for (int e = 0; e < V::kElems; ++e) acc += delta_to_f32(a.v[e]) * delta_to_f32(b.v[e]);
      }
    } else {
      for (int64_t x = sub; x < head_dim; x += kLanes)
        acc += delta_to_f32(orow[x]) * delta_to_f32(drow[x]);
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (sub == 0 && row < rows) delta[row] = acc;
}

template <class T, bool kVectorised, int kLanes>
void delta_launch_lanes(const T* o, const T* dout, float* delta, int64_t rows, int64_t head_dim,
                        cudaStream_t st) {
  constexpr int64_t kRowsPerBlock = kDeltaWarpsPerBlock * (kDeltaWarp / kLanes);
  const int64_t blocks = ceil_div(rows, kRowsPerBlock);
  FA_REQUIRE(blocks <= 0x7fffffff, "too many rows for one grid");
  delta_preprocess_kernel<T, kVectorised, kLanes>
      <<<static_cast<unsigned>(blocks), kDeltaWarpsPerBlock * kDeltaWarp, 0, st>>>(o, dout, delta,
                                                                                   rows, head_dim);
  FA_CHECK_LAUNCH();
}

template <class T>
void delta_launch_typed(const void* o, const void* dout, float* delta, const AttentionShape& s,
                        cudaStream_t st) {
  const int64_t rows = s.lse_numel();
  if (rows == 0) return;
  constexpr int kElems = DeltaVec16<T>::kElems;
  const T* op = static_cast<const T*>(o);
  const T* dp = static_cast<const T*>(dout);
  // Every row starts on a 16-byte boundary when head_dim is a multiple of the vector width and
  // the tensors themselves are 16-byte aligned (cudaMalloc gives 256).
  const bool vectorised = s.head_dim % kElems == 0 && reinterpret_cast<uintptr_t>(o) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(dout) % 16 == 0;
  if (!vectorised) return delta_launch_lanes<T, false, 32>(op, dp, delta, rows, s.head_dim, st);
  const int64_t nvec = s.head_dim / kElems;  // 16-byte vectors per row
  if (nvec <= 1) return delta_launch_lanes<T, true, 1>(op, dp, delta, rows, s.head_dim, st);
  if (nvec <= 2) return delta_launch_lanes<T, true, 2>(op, dp, delta, rows, s.head_dim, st);
  if (nvec <= 4) return delta_launch_lanes<T, true, 4>(op, dp, delta, rows, s.head_dim, st);
  if (nvec <= 8) return delta_launch_lanes<T, true, 8>(op, dp, delta, rows, s.head_dim, st);
  if (nvec <= 16) return delta_launch_lanes<T, true, 16>(op, dp, delta, rows, s.head_dim, st);
  delta_launch_lanes<T, true, 32>(op, dp, delta, rows, s.head_dim, st);
}

// D = rowsum(dO o O) for o, dout of dtype t (layout of Q), delta fp32 [batch, heads, seq_q].
inline void delta_preprocess_launch(const void* o, const void* dout, float* delta,
                                    const AttentionShape& s, DType t, cudaStream_t st) {
  switch (t) {
    case DType::F32:
      delta_launch_typed<float>(o, dout, delta, s, st);
      break;
    case DType::F16:
      delta_launch_typed<__half>(o, dout, delta, s, st);
      break;
    case DType::BF16:
      delta_launch_typed<__nv_bfloat16>(o, dout, delta, s, st);
      break;
  }
}

}  // namespace
}  // namespace fa
