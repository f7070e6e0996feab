// group_split.cuh: chapter 06's t22 (06/t22_group_split: a grouped backward's K/V tile shared
// among several blocks, each walking some of the group's query heads) as the pieces a later rung
// calls instead of copying: the atomic add of a block's dK or dV part into an fp32 buffer of the
// K/V heads' size, and the host's choice of the split with that buffer.
//
// Read them in 06/t22 first (chapters/06_flash_backward/tuning/t22_group_split.cu), which carries
// its own copy so that it reads top to bottom. Chapter 09's grouped packed backwards
// (09/bwd_v6_varlen_grouped, bwd_v7_window_grouped, bwd_v8_grouped_d256) call these; each keeps
// its kernel, its walk and its conversion of the parts (the dQ conversion of the kernel it builds
// on, run on the parts with the scale for dK and 1 for dV).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "check.h"
#include "gpu.h"
#include "group_split_plan.h"  // full_split
#include "stream_buffer.h"

namespace fa::ch06::t22 {

// A 16 x DC fp32 accumulator (mma.sync's C layout: lane (g, t) holds rows g and g + 8, columns 2t
// and 2t + 1 of each 8-column tile) added by atomics into rows r0 + g, r0 + g + 8 and columns
// col0 .. col0 + DC - 1 of a [seq, d] fp32 matrix, the columns below d; rows at or past seq (with
// packing, the next sequence's) are not touched. by_element false (d a multiple of 8): the pair
// 2t, 2t + 1 of an 8-column tile is both below d or both past it, and sm_90 adds it as one float2
// (8-byte aligned: d, col0 and 2t are even). by_element true (rows of any length): one float at
// a time, each tested against d.
template <int DC>
__device__ __forceinline__ void add_rows_of_d(float* out, const float (&acc)[DC / 8][4], int64_t r0,
                                              int col0, int64_t seq, int d, bool by_element,
                                              int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = r0 + g + 8 * h;
    if (row >= seq) continue;
    float* dst = out + row * int64_t(d) + col0 + 2 * t;
#pragma unroll
    for (int nt = 0; nt < DC / 8; ++nt) {
      const int col = col0 + 8 * nt + 2 * t;
      if (by_element) {
        if (col < d) atomicAdd(dst + 8 * nt, acc[nt][2 * h]);
        if (col + 1 < d) atomicAdd(dst + 8 * nt + 1, acc[nt][2 * h + 1]);
      } else if (col < d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float2*>(dst + 8 * nt),
                  make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]));
#else
        atomicAdd(dst + 8 * nt, acc[nt][2 * h]);
        atomicAdd(dst + 8 * nt + 1, acc[nt][2 * h + 1]);
#endif
      }
    }
  }
}

// The blocks of kKernel (`threads` threads, kSmem bytes of dynamic shared memory, its limit set
// here) the GPU holds at once: its SMs times the blocks one SM holds. Asked once per kernel and
// process (a kernel is always launched with the same block size).
template <auto kKernel, int kSmem>
int64_t resident_blocks(int threads) {
  static const int64_t slots = [threads] {
    FA_CUDA_CHECK(
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    int per_sm = 1;
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, kSmem));
    return int64_t(std::max(per_sm, 1)) * fa::gpu_info().sm_count;
  }();
  return slots;
}

// The split of a call, and its parts (host side). Under the causal mask each query head gets its
// own block (split = group: the MHA grid and order); full attention takes full_split's
// (group_split_plan.h: 1, t20's walk, wherever the grid fills the GPU). With split > 1 the
// blocks' dK and dV parts meet in an fp32 buffer of kv_n elements each (dV's at a 16-byte
// boundary, for the conversion's float4 reads), zeroed on the stream here, before the kernel
// adds into it. At split 1 the block stores dK and dV itself; so does a call whose dK or dV is
// not 8-byte aligned (the conversion stores four 16-bit elements at a time; a slice of a tensor
// at an odd head dim may not be), and one whose stream-ordered buffer the pool cannot give. `blocks`: the grid at split 1; `slots`:
// resident_blocks of the dK/dV kernel. The buffer is freed on the stream when the object goes,
// after everything queued before: keep it until the conversions of the parts are launched.
class GroupSplit {
 public:
  GroupSplit(bool causal, int group, int64_t blocks, int64_t slots, const void* dk, const void* dv,
             int64_t kv_n, cudaStream_t stream)
      : split_(wanted(causal, group, blocks, slots, dk, dv)),
        dv_at_((kv_n + 3) / 4 * 4),
        parts_(split_ > 1 ? size_t(dv_at_ + kv_n) * sizeof(float) : 0, stream) {
    if (split_ > 1 && parts_.as<float>() == nullptr) split_ = 1;
    if (split_ > 1)
      FA_CUDA_CHECK(
          cudaMemsetAsync(parts_.as<float>(), 0, size_t(dv_at_ + kv_n) * sizeof(float), stream));
  }
  int split() const { return split_; }
  float* dk_parts() const { return split_ > 1 ? parts_.as<float>() : nullptr; }
  float* dv_parts() const { return split_ > 1 ? parts_.as<float>() + dv_at_ : nullptr; }

 private:
  static int wanted(bool causal, int group, int64_t blocks, int64_t slots, const void* dk,
                    const void* dv) {
    const bool aligned8 =
        reinterpret_cast<uintptr_t>(dk) % 8 == 0 && reinterpret_cast<uintptr_t>(dv) % 8 == 0;
    if (!aligned8 || group <= 1) return 1;
    return causal ? group : fa::ch06::full_split(group, blocks, slots);
  }
  int split_;
  int64_t dv_at_;
  fa::StreamBuffer parts_;
};

}  // namespace fa::ch06::t22
