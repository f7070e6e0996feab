// v2_block_smem.cu: one block per row, shared-memory tree reductions. Still three passes.
//
// What changed vs v1: a whole block of kThreads threads shares one row. Thread t reads elements
// t, t + kThreads, t + 2*kThreads, ...: consecutive threads read consecutive floats, so one warp
// load is a single 128-byte transaction (coalesced). Each thread keeps a partial max (then a
// partial sum); the block combines the kThreads partials with a tree in shared memory:
//
//   s[t] = partial;  for (stride = kThreads/2; stride > 0; stride /= 2) s[t] op= s[t + stride]
//
// log2(256) = 8 steps, each followed by __syncthreads(). Many more threads are in flight (one
// block of 256 per row instead of one thread), so memory latency is hidden far better.
//
// What is still slow: the tree spends 8 barriers per reduction (two reductions per row), most
// threads idle in the later steps, and every access is a 4-byte load. v3 fixes those.
//
// Speed (H200, 2026-12-02): 3215 GB/s at 4096x4096 (81.0% of copy), 2288 at 16384x1024 (57.6%)
// (notes/measured/h200-2026-12-02/tour.log).
#include <algorithm>
#include <limits>

#include "check.h"
#include "registry.h"

namespace {

constexpr int kThreads = 256;  // a power of two: the tree halves it every step
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Combines one value per thread; every thread gets the result. Ends with a barrier so that the
// buffer can be reused by the next reduction.
template <class Op>
__device__ float block_reduce_tree(float v, float* s, Op op) {
  const int t = threadIdx.x;
  s[t] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] = op(s[t], s[t + stride]);
    __syncthreads();
  }
  const float result = s[0];
  __syncthreads();  // everyone has read s[0] before anyone writes s[] again
  return result;
}

__global__ void __launch_bounds__(kThreads)
    softmax_block_smem_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                              int64_t cols) {
  __shared__ float s[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;

    float m = kNegInf;  // pass 1
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, xr[c]);
    m = block_reduce_tree(m, s, MaxOp{});

    // An all -inf row is all zeros: use m = 0 and scale 0 so that no -inf - -inf = NaN appears.
    const bool empty = (m == kNegInf);
    const float m_use = empty ? 0.0f : m;

    float l = 0.0f;  // pass 2
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) l += expf(xr[c] - m_use);
    l = block_reduce_tree(l, s, SumOp{});

    const float inv_l = empty ? 0.0f : 1.0f / l;  // pass 3
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) yr[c] = expf(xr[c] - m_use) * inv_l;
  }
}

void softmax_v2(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return;
  // rows go on gridDim.x (limit 2^31 - 1); the loop inside covers any rows beyond it.
  const int64_t blocks = std::min<int64_t>(s.rows, std::numeric_limits<int>::max());
  softmax_block_smem_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, s.rows,
                                                                                    s.cols);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(SoftmaxKernel, {"01/v2_block_smem", softmax_v2,
                            "one block per row, shared-memory tree reductions; three passes", 3});
