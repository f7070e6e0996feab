// split_kv.cuh: the plumbing every split-KV kernel shares, none of it a rung's idea: the kernel
// parameters, the per-dtype conversions, the cached workspace of the partials, the occupancy
// query the split plan needs, and the parameters of a launch that follows the plan
// (split_kv_plan.h). Chapter 08 introduces it (notes/08_decoding.md); its rungs
// (chapters/08_decoding/v1_split_kv.cu ... v6_last_block_merge.cu, tuning/) and chapter 09's paged
// decode (chapters/09_serving/paged_v1_decode.cu) hold their kernels, launchers and dispatch, and
// include chapter 02's pair merge (Stats, merge, rescale) themselves: merge is chapter 02's
// exercise, which a shared header must not carry (README.md of this folder).
//
// Everything here is in an anonymous namespace: every .cu file that includes it compiles its own
// private copy (its own workspace buffer too), and no CUDA module launches a kernel compiled in
// another.
//
// The workspace layout: [split][row][D] floats for the unnormalised o of each partial, then
// [split][row] (m, l) pairs, m in natural-log units; rows are the batch * heads * seq_q output rows.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "buffer.h"
#include "check.h"
#include "mma.cuh"  // unpack2: two 16-bit values -> two floats
#include "registry.h"
#include "split_kv_plan.h"  // SplitPlan

namespace {

using fa::AttentionFwdArgs;
using fa::DType;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Per dtype: how many elements one 16-byte load carries, and the conversions. The primary template
// is the 16-bit one (__half, __nv_bfloat16); fp32 below.
template <class T>
struct Traits {
  static constexpr int kVec = 8;
  __device__ static void unpack(const uint4& u, float* f) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = fa::mma::unpack2<T>(w[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
  __device__ static float to_float(T x) {
    return static_cast<float>(x);
  }
  __device__ static T from_float(float x) {
    return T(x);
  }  // round to nearest
};
template <>
struct Traits<float> {
  static constexpr int kVec = 4;
  __device__ static void unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  }
  __device__ static float to_float(float x) { return x; }
  __device__ static float from_float(float x) { return x; }
};

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  float* ws_o;    // [num_splits][total_rows][D]: unnormalised partial o
  float2* ws_ml;  // [num_splits][total_rows]: (m in natural-log units, l)
  int64_t heads, heads_kv, group, seq_q, seq_k;
  int64_t rows_per_kv;  // group * seq_q: the query rows that read one K/V head
  int64_t row_tiles, num_splits, split_len;
  int64_t total_rows;  // batch * heads * seq_q
  float scale_log2;    // softmax scale * log2(e)
  bool causal;
};

// The workspace of the partials: one buffer per process, grown when a plan needs more.
float* workspace(size_t bytes) {
  static fa::DeviceBuffer buf;
  if (buf.bytes() < bytes) {
    FA_CUDA_CHECK(cudaDeviceSynchronize());  // a smaller buffer may still be in use
    buf = fa::DeviceBuffer(bytes);
  }
  return buf.as<float>();
}

// SMs x blocks of `kernel` (threads, smem bytes) that one SM holds at once.
int resident_blocks(const void* kernel, int threads, size_t smem) {
  int device = 0, sms = 0, per_sm = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return sms * (per_sm > 0 ? per_sm : 1);
}

inline bool aligned4(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 4 == 0;
}

// The kernel parameters of a launch that follows `plan` (the workspace grown to fit, with more
// than one split). Every split kernel of the chapter takes these.
Params make_params(const AttentionFwdArgs& a, const fa::ch08::SplitPlan& plan) {
  const fa::AttentionShape& s = a.shape;
  Params p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.heads = s.heads;
  p.heads_kv = s.kv_heads();
  p.group = s.group();
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.rows_per_kv = s.group() * s.seq_q;
  p.row_tiles = plan.row_tiles;
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.total_rows = s.lse_numel();
  p.scale_log2 = s.softmax_scale() * kLog2e;
  p.causal = s.causal;
  p.ws_o = nullptr;
  p.ws_ml = nullptr;
  if (plan.num_splits > 1) {
    const size_t rows = size_t(plan.num_splits) * size_t(p.total_rows);
    // The (m, l) pairs are float2: 8-byte aligned, so the partials of O take an even number of
    // floats (rows * d is odd only at an odd head dim, 08/t08's, with an odd number of rows).
    const size_t o_floats = (rows * size_t(s.head_dim) + 1) & ~size_t(1);
    float* ws = workspace((o_floats + 2 * rows) * sizeof(float));
    p.ws_o = ws;
    p.ws_ml = reinterpret_cast<float2*>(ws + o_floats);
  }
  return p;
}

}  // namespace
