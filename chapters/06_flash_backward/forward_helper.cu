// forward_helper.cu: 06/forward_helper, a small, plainly correct attention forward so that the
// chapter 06 program can produce the O and L its backward kernels need on its own (the program
// links only chapter 06; the fast forwards live in chapter 05).
//
// One thread per query row, online softmax (chapter 05's idea in its simplest form): the thread
// keeps q_i and the running output in registers, walks over the keys it can see, and keeps the
// running maximum m and sum l so that the row is never stored. At the end
//   O_i = acc / l,   L_i = m + log(l)   (natural log, the L every backward kernel here reads).
// A row that sees no key (causal with seq_q > seq_k) gets O_i = 0 and L_i = -inf.
// All threads of a warp read the same key row at the same time, so K and V loads are broadcasts
// served from cache. Correctness, not speed, is the point: it is not part of the ladder.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "check.h"
#include "registry.h"

namespace fa {
namespace ch06_fwd {
namespace {

constexpr int kThreads = 128;  // query rows per block

__device__ __forceinline__ float load(const float* p) {
  return *p;
}
__device__ __forceinline__ float load(const __half* p) {
  return __half2float(*p);
}
__device__ __forceinline__ float load(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ void store(float* p, float x) {
  *p = x;
}
__device__ __forceinline__ void store(__half* p, float x) {
  *p = __float2half_rn(x);
}
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) {
  *p = __float2bfloat16_rn(x);
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    forward_row_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                       T* __restrict__ o, float* __restrict__ lse, int64_t seq_q, int64_t seq_k,
                       float scale, bool causal) {
  const int64_t tiles = ceil_div(seq_q, kThreads);
  const int64_t bh = int64_t(blockIdx.x) / tiles;
  const int64_t i = (int64_t(blockIdx.x) % tiles) * kThreads + threadIdx.x;
  if (i >= seq_q) return;
  const T* Q = q + (bh * seq_q + i) * D;
  const T* K = k + bh * seq_k * D;
  const T* V = v + bh * seq_k * D;

  float qi[D], acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    qi[d] = load(Q + d) * scale;  // fold the scale into q once
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  // Keys this row sees: all of them, or j <= causal_last_key(i) under bottom-right causal.
  const int64_t n_keys =
      causal ? min(seq_k, max(int64_t(0), causal_last_key(i, seq_q, seq_k) + 1)) : seq_k;
  for (int64_t j = 0; j < n_keys; ++j) {
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d) s += qi[d] * load(K + j * D + d);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // m = -inf on the first key: exp(-inf) = 0
    const float pj = expf(s - m_new);
    l = l * correction + pj;
#pragma unroll
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * correction + pj * load(V + j * D + d);
    m = m_new;
  }
  T* O = o + (bh * seq_q + i) * D;
  const float inv_l = n_keys > 0 ? 1.0f / l : 0.0f;
#pragma unroll
  for (int d = 0; d < D; ++d) store(O + d, acc[d] * inv_l);
  lse[bh * seq_q + i] = n_keys > 0 ? m + logf(l) : -INFINITY;
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t st) {
  const AttentionShape& s = a.shape;
  const int64_t blocks = s.bh() * ceil_div(s.seq_q, kThreads);
  if (blocks == 0) return;
  FA_REQUIRE(blocks <= 0x7fffffff, "too many blocks for gridDim.x");
  forward_row_kernel<T, D><<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
      static_cast<T*>(a.o), a.lse, s.seq_q, s.seq_k, s.softmax_scale(), s.causal);
  FA_CHECK_LAUNCH();
}

template <class T>
void launch_dim(const AttentionFwdArgs& a, cudaStream_t st) {
  switch (a.shape.head_dim) {
    case 32:
      launch<T, 32>(a, st);
      break;
    case 64:
      launch<T, 64>(a, st);
      break;
    case 96:
      launch<T, 96>(a, st);
      break;
    case 128:
      launch<T, 128>(a, st);
      break;
    default:
      FA_UNSUPPORTED_IF(true, "06/forward_helper has head dims 32, 64, 96, 128");
  }
}

void run_forward_helper(const AttentionFwdArgs& a, cudaStream_t st) {
  switch (a.dtype) {
    case DType::F32:
      launch_dim<float>(a, st);
      break;
    case DType::F16:
      launch_dim<__half>(a, st);
      break;
    case DType::BF16:
      launch_dim<__nv_bfloat16>(a, st);
      break;
  }
}

}  // namespace
}  // namespace ch06_fwd
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {"06/forward_helper",
             fa::ch06_fwd::run_forward_helper,
             "one thread per query row, online softmax: O and L for the backward kernels",
             {fa::DType::F32, fa::DType::F16, fa::DType::BF16},
             {32, 64, 96, 128},
             70});
