// v1_online_two_pass.cu: max and sum in ONE pass (the online recurrence), then the write.
// Two passes over x instead of chapter 01's three.
//
// What changed vs 01/v3: each thread keeps a running state (m, l) and updates it as values
// arrive: a new maximum rescales the old sum by e^(m_old - m_new) (absorb, in common/device/
// online_softmax.cuh). Threads then combine their states with the pair merge
//   (m1, l1) (+) (m2, l2) = (M, l1 e^(m1 - M) + l2 e^(m2 - M)),  M = max(m1, m2),
// which is associative and commutative, so it is a valid operator for a butterfly of shuffles
// exactly like max or + were. One reduction per row instead of two.
//
//   pass 1: (m, l) of the row    (reads x)
//   pass 2: y = e^(x - m) / l    (reads x, writes y)
//
// Layout: rows of up to 1024 floats get one warp each (4 rows per 128-thread block: no shared
// memory, no barrier); longer rows get a whole block of 256..1024 threads. Every thread moves
// float4s when the rows are 16-byte aligned (scalar fallback otherwise) and has kUnroll loads in
// flight per loop trip. The second pass uses streaming cache hints: x is read for the last time and
// y is never re-read, so neither should push the next rows out of L2.
//
// Speed (H200, 2026-12-02): 3324 GB/s at 4096x4096 (83.7% of copy), 3823 at 16384x1024 (96.3%)
// (notes/measured/h200-2026-12-02/tour.log).
#include <algorithm>
#include <limits>

#include "ch02_kernels.h"
#include "online_softmax.cuh"
#include "check.h"
#include "registry.h"

namespace {

using namespace ch02::gpu;

constexpr int kUnroll = 4;  // float4 loads in flight per thread per trip (16 floats)

__device__ __forceinline__ float4 normalise(float4 v, float m, float inv_l) {
  return make_float4(expf(v.x - m) * inv_l, expf(v.y - m) * inv_l, expf(v.z - m) * inv_l,
                     expf(v.w - m) * inv_l);
}

// kGroup threads share one row (32: a warp; kBlock: the whole block). kVec4: float4 path.
template <int kGroup, int kBlock, bool kVec4>
__global__ void __launch_bounds__(kBlock)
    online_two_pass_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                           int64_t cols) {
  constexpr int kRowsPerBlock = kBlock / kGroup;
  __shared__ Stats buf[2][kWarp];  // used only when kGroup > 32; two buffers: see group_merge
  int parity = 0;
  const int t = threadIdx.x % kGroup;
  const int64_t row_stride = int64_t(gridDim.x) * kRowsPerBlock;
  for (int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kGroup; row < rows;
       row += row_stride) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;

    // ---- pass 1: the online recurrence over this thread's share of the row ----
    Stats s = empty_stats();
    if constexpr (kVec4) {
      const float4* x4 = reinterpret_cast<const float4*>(xr);
      const int64_t n4 = cols / 4;
      int64_t i = t;
      for (; i + (kUnroll - 1) * kGroup < n4; i += kUnroll * kGroup) {
        float v[4 * kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {  // issue every load before using any
          const float4 f = x4[i + u * kGroup];
          v[4 * u] = f.x, v[4 * u + 1] = f.y, v[4 * u + 2] = f.z, v[4 * u + 3] = f.w;
        }
        s = absorb(s, v);
      }
      for (; i < n4; i += kGroup) {
        const float4 f = x4[i];
        const float v[4] = {f.x, f.y, f.z, f.w};
        s = absorb(s, v);
      }
    } else {
      constexpr int kScalarUnroll = 4 * kUnroll;
      int64_t i = t;
      for (; i + (kScalarUnroll - 1) * kGroup < cols; i += kScalarUnroll * kGroup) {
        float v[kScalarUnroll];
#pragma unroll
        for (int u = 0; u < kScalarUnroll; ++u) v[u] = xr[i + u * kGroup];
        s = absorb(s, v);
      }
      for (; i < cols; i += kGroup) {
        const float v[1] = {xr[i]};
        s = absorb(s, v);
      }
    }

    // ---- merge the threads' states: the (m, l) of the whole row, in every thread ----
    s = group_merge<kGroup>(s, buf[parity]);
    parity ^= 1;
    // All -inf row: m = 0 and 1/l = 0 make every output e^(-inf) * 0 = 0, with no NaN.
    const bool empty = (s.m == kNegInf);
    const float m = empty ? 0.0f : s.m;
    const float inv_l = empty ? 0.0f : 1.0f / s.l;

    // ---- pass 2: normalise and write ----
    if constexpr (kVec4) {
      const float4* x4 = reinterpret_cast<const float4*>(xr);
      float4* y4 = reinterpret_cast<float4*>(yr);
      const int64_t n4 = cols / 4;
      int64_t i = t;
      for (; i + (kUnroll - 1) * kGroup < n4; i += kUnroll * kGroup) {
        float4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(x4 + i + u * kGroup);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) __stcs(y4 + i + u * kGroup, normalise(v[u], m, inv_l));
      }
      for (; i < n4; i += kGroup) __stcs(y4 + i, normalise(__ldcs(x4 + i), m, inv_l));
    } else {
      for (int64_t i = t; i < cols; i += kGroup) __stcs(yr + i, expf(__ldcs(xr + i) - m) * inv_l);
    }
  }
}

template <int kGroup, int kBlock>
void launch(bool vec4, const float* x, float* y, fa::SoftmaxShape s, cudaStream_t stream) {
  constexpr int64_t kRowsPerBlock = kBlock / kGroup;
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>(fa::ceil_div(s.rows, kRowsPerBlock), std::numeric_limits<int>::max()));
  if (vec4)
    online_two_pass_kernel<kGroup, kBlock, true>
        <<<blocks, kBlock, 0, stream>>>(x, y, s.rows, s.cols);
  else
    online_two_pass_kernel<kGroup, kBlock, false>
        <<<blocks, kBlock, 0, stream>>>(x, y, s.rows, s.cols);
  FA_CHECK_LAUNCH();
}

}  // namespace

namespace ch02 {

void softmax_online_two_pass(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return;
  const bool vec4 = s.cols % 4 == 0 && gpu::aligned16(x) && gpu::aligned16(y);
  if (s.cols <= 1024)
    launch<32, 128>(vec4, x, y, s, stream);  // a warp per row, 4 rows per block
  else if (s.cols <= 4096)
    launch<256, 256>(vec4, x, y, s, stream);  // a block per row
  else if (s.cols <= 32768)
    launch<512, 512>(vec4, x, y, s, stream);
  else
    launch<1024, 1024>(vec4, x, y, s, stream);
}

}  // namespace ch02

FA_REGISTER(SoftmaxKernel, {"02/v1_online_two_pass", ch02::softmax_online_two_pass,
                            "online (m, l) in one pass + pair-merge reduction, then the write", 2});
