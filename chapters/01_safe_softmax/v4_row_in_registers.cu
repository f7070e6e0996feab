// v4_row_in_registers.cu: the same three passes, but over registers. One read of x from DRAM.
//
// What changed vs v3:
//  * v3 reads x three times (max, sum, write); passes 2 and 3 hit L2 when lucky, DRAM when not.
//    Here each thread loads its share of the row ONCE into registers (up to kMaxUnits float4 =
//    16 floats), and the three passes of the safe softmax run over those registers. The
//    algorithm is unchanged: max, then sum of exp(x - max), then the write. Only where the passes
//    read from has changed, and that is what a memory-bound kernel's time depends on.
//  * All kMaxUnits loads are issued before the first use, so every thread has 64 bytes in flight.
//  * This needs the row to fit: cols % 4 == 0, 16-byte aligned rows, and cols <= 16 * 1024
//    (1024 threads x 16 floats). Longer or unaligned rows take v3's path, so any length works.
//    Chapter 02 removes that limit with the online softmax: one pass that needs no stored row.
//
// Speed (H200, 2026-12-02): 4052 GB/s at 4096x4096, 4018 at 16384x1024 (102.0% and 101.2% of the
// measured copy, 3971 GB/s; notes/measured/h200-2026-12-02/tour.log).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "ch01_kernels.h"
#include "check.h"
#include "registry.h"

namespace {

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;
constexpr int kMaxUnits = 4;  // float4 per thread: 16 floats, 16 registers
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr unsigned kFullMask = 0xffffffffu;

template <bool kIsMax>
__device__ __forceinline__ float warp_reduce(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    float o = __shfl_xor_sync(kFullMask, v, offset);
    v = kIsMax ? fmaxf(v, o) : v + o;
  }
  return v;
}

// Block-wide max or sum, result in every thread. `buf` is reused only after a later barrier.
template <bool kIsMax>
__device__ float block_reduce(float v, float* buf) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_reduce<kIsMax>(v);
  if (warps == 1) return v;
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  v = lane < warps ? buf[lane] : (kIsMax ? kNegInf : 0.0f);
  return warp_reduce<kIsMax>(v);
}

__global__ void __launch_bounds__(kMaxThreads)
    softmax_row_in_registers_kernel(const float4* __restrict__ x, float4* __restrict__ y,
                                    int64_t rows, int64_t units) {  // units = cols / 4
  __shared__ float red_max[kWarp], red_sum[kWarp];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float4* xr = x + row * units;
    float4 v[kMaxUnits];
#pragma unroll
    for (int u = 0; u < kMaxUnits; ++u) {  // the only read of x: all loads in flight at once
      int64_t i = threadIdx.x + int64_t(u) * blockDim.x;
      v[u] = i < units ? xr[i] : make_float4(kNegInf, kNegInf, kNegInf, kNegInf);
    }
    float m = kNegInf;  // pass 1, over registers
#pragma unroll
    for (int u = 0; u < kMaxUnits; ++u)
      m = fmaxf(m, fmaxf(fmaxf(v[u].x, v[u].y), fmaxf(v[u].z, v[u].w)));
    m = block_reduce<true>(m, red_max);
    const bool empty = (m == kNegInf);  // an all -inf row is zeros: never compute -inf - -inf
    const float m_use = empty ? 0.0f : m;

    float l = 0.0f;  // pass 2, over registers (padding is -inf: exp gives 0)
#pragma unroll
    for (int u = 0; u < kMaxUnits; ++u) {
      v[u] = make_float4(expf(v[u].x - m_use), expf(v[u].y - m_use), expf(v[u].z - m_use),
                         expf(v[u].w - m_use));
      l += (v[u].x + v[u].y) + (v[u].z + v[u].w);
    }
    l = block_reduce<false>(l, red_sum);
    const float inv_l = empty ? 0.0f : 1.0f / l;

    float4* yr = y + row * units;  // pass 3: the write
#pragma unroll
    for (int u = 0; u < kMaxUnits; ++u) {
      int64_t i = threadIdx.x + int64_t(u) * blockDim.x;
      if (i < units)
        yr[i] = make_float4(v[u].x * inv_l, v[u].y * inv_l, v[u].z * inv_l, v[u].w * inv_l);
    }
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

namespace ch01 {

void softmax_v4_row_in_registers(const float* x, float* y, fa::SoftmaxShape s,
                                 cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return;
  const int64_t units = s.cols / 4;
  const bool fits =
      s.cols % 4 == 0 && units <= int64_t(kMaxThreads) * kMaxUnits && aligned16(x) && aligned16(y);
  if (!fits) {  // too long or unaligned: v3's three passes over global memory
    softmax_v3_warp_shuffle_vec4(x, y, s, stream);
    return;
  }
  // Just enough whole warps that kMaxUnits float4 per thread cover the row.
  const int64_t warps = std::max<int64_t>(1, (units + kWarp * kMaxUnits - 1) / (kWarp * kMaxUnits));
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>(s.rows, std::numeric_limits<int>::max()));
  softmax_row_in_registers_kernel<<<blocks, static_cast<unsigned>(warps * kWarp), 0, stream>>>(
      reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), s.rows, units);
  FA_CHECK_LAUNCH();
}

}  // namespace ch01

FA_REGISTER(SoftmaxKernel, {"01/v4_row_in_registers", ch01::softmax_v4_row_in_registers,
                            "the row loaded once into registers; the three passes run on chip "
                            "(rows up to 16384 floats; longer rows fall back to v3)",
                            1});
