// ch06_atomic_dq.cuh: what every backward with an fp32 dQ accumulator (06/v3 to 06/v9) gives its
// dK/dV kernel, and the last of its three launches. Each rung keeps its own tile and kernel; these
// two pieces are the same for all of them (06/v3's header says how the accumulator works).
//   Params             what the dK/dV kernel gets
//   convert_dq_kernel  dQ = dQaccum * scale in the 16-bit dtype
// Device code, in an anonymous namespace (each including .cu file compiles its own copy).
#pragma once
#include <cstdint>

#include "mma.cuh"

namespace {

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* dout;
  const float* lse;
  const float* delta;
  float* dq_accum;  // fp32 [batch * heads][seq_q][D], zero on entry (the caller's workspace)
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int64_t n_tiles;   // key tiles per (batch, head)
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(S * scale_log2 - L * log2(e))
  bool causal;
};

// ---- dQ = dQaccum * scale ------------------------------------------------------------------
// n4 = elements / 4 (every D here is a multiple of 16); 16-byte loads, 8-byte stores.
template <class T>
__global__ void convert_dq_kernel(const float* __restrict__ acc, T* __restrict__ dq, int64_t n4,
                                  float scale) {
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < n4;
       x += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(acc)[x];
    uint2 out;
    out.x = fa::mma::pack2<T>(v.x * scale, v.y * scale);
    out.y = fa::mma::pack2<T>(v.z * scale, v.w * scale);
    reinterpret_cast<uint2*>(dq)[x] = out;
  }
}

}  // namespace
