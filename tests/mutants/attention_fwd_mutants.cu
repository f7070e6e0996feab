// attention_fwd_mutants.cu: the simplest attention forward (one thread per query row, online
// softmax over the keys, head_dim 64 in registers), done right once and wrong three ways.
//   attn_fwd_correct            the twin that must pass (fp32 and fp16 inputs)
//   attn_fwd_causal_off_by_one  (c) the last visible key is i + (seq_k - seq_q) + 1
//   attn_fwd_half_accumulator   (e) the O accumulator is __half (fp16 inputs)
//   attn_fwd_skips_tail_rows    (f) only full tiles of kRowsPerBlock rows are launched
#include <cuda_fp16.h>

#include <cstdint>

#include "check.h"
#include "mutants.h"

namespace mutants {
namespace {

constexpr int kD = kHeadDim;
constexpr int kRowsPerBlock = 64;  // one thread per query row

enum class FwdBug { None, CausalOffByOne, HalfAccumulator };

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half(v);
}

// The O accumulator: fp32, or (the bug) fp16, rounded after every update.
template <FwdBug kBug>
struct Acc {
  using type = float;
};
template <>
struct Acc<FwdBug::HalfAccumulator> {
  using type = __half;
};

template <class T, FwdBug kBug>
__global__ void attn_fwd_row_per_thread(const T* __restrict__ q, const T* __restrict__ k,
                                        const T* __restrict__ v, T* __restrict__ o,
                                        float* __restrict__ lse, int64_t seq_q, int64_t seq_k,
                                        bool causal, float scale, int64_t rows_to_do) {
  using AccT = typename Acc<kBug>::type;
  const int64_t bh = blockIdx.x;  // batch*heads on x: the 2^31-1 limit
  const int64_t i = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (i >= rows_to_do) return;
  const T* qi = q + (bh * seq_q + i) * kD;
  const T* kh = k + bh * seq_k * kD;
  const T* vh = v + bh * seq_k * kD;

  int64_t last = causal ? fa::causal_last_key(i, seq_q, seq_k) : seq_k - 1;
  if (kBug == FwdBug::CausalOffByOne && causal) last += 1;  // BUG: one key past the diagonal
  if (last > seq_k - 1) last = seq_k - 1;

  float qr[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) qr[d] = to_float(qi[d]);
  AccT acc[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) acc[d] = AccT(0.0f);

  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j <= last; ++j) {
    const T* kj = kh + j * kD;
    const T* vj = vh + j * kD;
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < kD; ++d) s += qr[d] * to_float(kj[d]);
    s *= scale;
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      const float updated = float(acc[d]) * alpha + p * to_float(vj[d]);
      acc[d] = AccT(updated);  // (e): rounded to fp16 here, after every key
    }
    m = m_new;
  }

  T* oi = o + (bh * seq_q + i) * kD;
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key: O = 0, L = -inf
#pragma unroll
  for (int d = 0; d < kD; ++d) oi[d] = from_float<T>(float(acc[d]) * inv_l);
  lse[bh * seq_q + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

template <FwdBug kBug>
void launch(const fa::AttentionFwdArgs& a, cudaStream_t st, bool skip_tail = false) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(s.head_dim != kD, "mutant kernels take head_dim 64 only");
  FA_UNSUPPORTED_IF(a.dtype == fa::DType::BF16, "mutant kernels take fp32 and fp16");
  // (f) the bug: floor instead of ceiling, so the last, partial tile of rows is never launched.
  const int64_t row_blocks =
      skip_tail ? s.seq_q / kRowsPerBlock : (s.seq_q + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t rows_to_do = skip_tail ? row_blocks * kRowsPerBlock : s.seq_q;
  if (s.bh() == 0 || row_blocks == 0) return;
  FA_REQUIRE(row_blocks <= 65535, "too many query rows for gridDim.y");
  const dim3 grid(static_cast<unsigned>(s.bh()), static_cast<unsigned>(row_blocks));
  const float scale = s.softmax_scale();
  if (a.dtype == fa::DType::F32) {
    attn_fwd_row_per_thread<float, kBug><<<grid, kRowsPerBlock, 0, st>>>(
        static_cast<const float*>(a.q), static_cast<const float*>(a.k),
        static_cast<const float*>(a.v), static_cast<float*>(a.o), a.lse, s.seq_q, s.seq_k, s.causal,
        scale, rows_to_do);
  } else {
    attn_fwd_row_per_thread<__half, kBug><<<grid, kRowsPerBlock, 0, st>>>(
        static_cast<const __half*>(a.q), static_cast<const __half*>(a.k),
        static_cast<const __half*>(a.v), static_cast<__half*>(a.o), a.lse, s.seq_q, s.seq_k,
        s.causal, scale, rows_to_do);
  }
  FA_CHECK_LAUNCH();
}

}  // namespace

void attn_fwd_correct(const fa::AttentionFwdArgs& a, cudaStream_t st) {
  launch<FwdBug::None>(a, st);
}
void attn_fwd_causal_off_by_one(const fa::AttentionFwdArgs& a, cudaStream_t st) {
  launch<FwdBug::CausalOffByOne>(a, st);
}
void attn_fwd_half_accumulator(const fa::AttentionFwdArgs& a, cudaStream_t st) {
  launch<FwdBug::HalfAccumulator>(a, st);
}
void attn_fwd_skips_tail_rows(const fa::AttentionFwdArgs& a, cudaStream_t st) {
  launch<FwdBug::None>(a, st, /*skip_tail=*/true);
}

}  // namespace mutants

FA_REGISTER_MUTANT(AttentionFwdKernel, {"mutant/05_causal_off_by_one",
                                        mutants::attn_fwd_causal_off_by_one,
                                        "causal mask: one key past the diagonal",
                                        {fa::DType::F32, fa::DType::F16},
                                        {mutants::kHeadDim}});
FA_REGISTER_MUTANT(AttentionFwdKernel, {"mutant/05_half_accumulator",
                                        mutants::attn_fwd_half_accumulator,
                                        "O accumulated in fp16",
                                        {fa::DType::F16},
                                        {mutants::kHeadDim}});
FA_REGISTER_MUTANT(AttentionFwdKernel, {"mutant/05_skips_tail_rows",
                                        mutants::attn_fwd_skips_tail_rows,
                                        "only full tiles of rows launched",
                                        {fa::DType::F32, fa::DType::F16},
                                        {mutants::kHeadDim}});
