// GENERATED from common/device/online_softmax.cuh by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// online_softmax.cuh: the online softmax's device pieces, introduced by chapter 02, whose two
// kernels share them; chapter 08's split-KV merges and chapter 09's paged decode merge with them too.
//
//  * Stats (m, l) and merge(): the pair merge of notes/02_online_softmax.md, the reduction
//    operator of every warp and block reduction here.
//  * absorb(): the online step for a chunk of values a thread has just loaded (one rescale per
//    chunk, not per element).
//  * group_merge<kGroup>(): all-reduce of Stats over a group of threads that shares a row: one
//    warp (shuffles only) or a whole block (shuffles + one barrier).
//
// merge() is the GPU half of chapter 02's exercise (notes/coursework.md): the same operator as the
// CPU exercise's pair merge (online_cpu.cpp). Its exercise is generated into chapter 02's folder
// (chapters/02_online_softmax/exercises/, the chapter of the first kernel listed below), and in the
// student release that version stands here: every kernel listed on the next line then reduces with
// the student's merge (until it is written they fail with "TODO in" this file), and the answer is
// not in the release.
// EXERCISE-KERNELS: 02/v1_online_two_pass, 02/v2_single_read, 08/v1_split_kv, 08/v2_parallel_merge, 08/v3_mma_split, 08/v4_block_stream, 08/v5_swizzled_ring, 08/v6_last_block_merge, 08/t04_hoisted_addresses, 08/t06_l2_prefetch, 09/paged_v1_decode
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

namespace ch02 {
namespace gpu {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// m = the largest value seen, l = sum of e^(x - m) over the values seen. Empty: (-inf, 0).
struct Stats {
  float m;
  float l;
};

__device__ __forceinline__ Stats empty_stats() {
  return {kNegInf, 0.0f};
}

// e^(m_old - m_new), m_new >= m_old. Exactly 1 when equal: that also covers m_old == m_new == -inf
// (two empty states), where e^(-inf - -inf) would be NaN. e^(-inf - finite) = 0 is right as it is.
__device__ __forceinline__ float rescale(float m_old, float m_new) {
  return m_old == m_new ? 1.0f : expf(m_old - m_new);
}

// (m1, l1) (+) (m2, l2) = (M, l1 e^(m1 - M) + l2 e^(m2 - M)), M = max(m1, m2).
// The explicit round-to-nearest intrinsics stop the compiler from fusing a multiply and the add
// into an FMA: an FMA would round merge(a, b) and merge(b, a) differently, and the lanes of a
// butterfly (which merge in opposite orders) would end with slightly different l.
__device__ __forceinline__ Stats merge(Stats a, Stats b) {
  // TODO(exercise device-merge): the pair merge of the CPU exercise, in float on the GPU: the larger maximum, and each side's sum brought to it by its own factor (the helper above) before they are added. Keep each product and the sum rounded on their own, with no fused multiply-add: the lanes of a butterfly merge in opposite orders, and merge(a, b) must equal merge(b, a) to the bit
  return a;  // stand-in: b is dropped
}

// The online step for N freshly loaded values: one new maximum, one rescale of the old sum,
// N exponentials. -inf values contribute e^-inf = 0; while nothing finite has been seen the
// state stays empty (no -inf - -inf).
template <int N>
__device__ __forceinline__ Stats absorb(Stats s, const float (&v)[N]) {
  float m = s.m;
#pragma unroll
  for (int i = 0; i < N; ++i) m = fmaxf(m, v[i]);
  if (m == kNegInf) return s;
  float l = s.l * rescale(s.m, m);
#pragma unroll
  for (int i = 0; i < N; ++i) l += expf(v[i] - m);
  return {m, l};
}

// Butterfly all-reduce over the 32 lanes: every lane ends with the merged state of the warp.
__device__ __forceinline__ Stats warp_merge(Stats s) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const Stats other{__shfl_xor_sync(kFullMask, s.m, offset),
                      __shfl_xor_sync(kFullMask, s.l, offset)};
    s = merge(s, other);
  }
  return s;
}

// All-reduce over the kGroup threads that share a row. kGroup == 32: a warp, no shared memory.
// kGroup == blockDim.x (a multiple of 32, <= 1024): warps merge, lane 0 of each writes its state to
// `buf`, one barrier, then every warp merges the per-warp states again (so no second barrier is
// needed to broadcast). The caller alternates two buffers between consecutive calls, so the
// barrier of call i+1 also guarantees that everyone has finished reading the buffer of call i.
template <int kGroup>
__device__ __forceinline__ Stats group_merge(Stats s, Stats* buf) {
  s = warp_merge(s);
  if constexpr (kGroup > kWarp) {
    constexpr int kWarps = kGroup / kWarp;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    if (lane == 0) buf[warp] = s;
    __syncthreads();
    s = lane < kWarps ? buf[lane] : empty_stats();
    s = warp_merge(s);
  }
  return s;
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace gpu
}  // namespace ch02

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/02_online_softmax/exercises/online_softmax.cuh", {"02/v1_online_two_pass", "02/v2_single_read", "08/v1_split_kv", "08/v2_parallel_merge", "08/v3_mma_split", "08/v4_block_stream", "08/v5_swizzled_ring", "08/v6_last_block_merge", "08/t04_hoisted_addresses", "08/t06_l2_prefetch", "09/paged_v1_decode"}, 1});
