// ch06_preprocess.h: the first step of every backward kernel in this chapter.
//
//   D_i = rowsum(dO_i * O_i)   (one float per query row, [batch, heads, seq_q], fp32)
//
// D_i equals rowsum(P_i * dP_i), the term the softmax Jacobian subtracts in dS = P * (dP - D)
// (notes/06_flash_backward.md derives it). Computing it up front from O and dO costs one
// memory-bound pass and saves a whole row reduction inside the dK/dV and dQ loops.
//
// Shared by every 06/ backward kernel (v1 fp32, and the tensor-core versions) so each one reuses
// the same, tested preprocess. Defined in delta_preprocess.cu; the kernel is in
// delta_preprocess.cuh, which chapter 07 compiles too.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "dtype.h"
#include "shapes.h"

namespace fa {

// The launcher's U: rows per lane group, so each lane has 2U 16-byte loads of O and dO in flight.
// 4: 128 bytes per lane, at 62 registers (no spills) where U = 1 takes 28, so an SM holds 4 blocks
// of 256 threads instead of 8: at most 128 KiB in flight per SM, against 64 KiB at U = 1 and
// 96 KiB at U = 2 (6 blocks). U = 8 would take 116 registers, 2 blocks per SM, for the same
// 128 KiB. The chapter program prints GB/s for U = 1, 2, 4 (not yet measured on a GPU).
constexpr int kDeltaLauncherUnroll = 4;
// O is loaded evict-first (ld.global.cs): nothing after the preprocess reads it again, so its
// lines should be the first L2 gives up. dO is loaded plainly: the dK/dV and dQ kernels read it.
constexpr bool kDeltaLauncherEvictFirst = true;

// o and dout are `t` (fp32, fp16 or bf16) with the layout of Q ([batch, heads, seq_q, head_dim]);
// delta is fp32 [batch, heads, seq_q]. Products are accumulated in fp32. Up to 32 lanes per row
// (several rows per warp for short rows), vectorised loads when the head dim and the pointers
// allow it. Any head_dim >= 1 works.
void launch_delta_preprocess(const void* o, const void* dout, float* delta, const AttentionShape& s,
                             DType t, cudaStream_t st);

// ---- For the chapter's bytes-in-flight table -------------------------------------------------
// The same kernel with other choices: U in {1, 2, 4} with O evict-first, or U = 4 with plain
// loads of O. Every choice gives bitwise the same D.
struct DeltaVariant {
  int unroll = kDeltaLauncherUnroll;
  bool evict_first = kDeltaLauncherEvictFirst;
};

// The grid a launch used. Little's law needs the resident threads: sms * blocks_per_sm * 256,
// each with 32 * U bytes of loads in flight at most.
struct DeltaGrid {
  int64_t blocks = 0;     // launched: a few waves at most, then a grid-stride loop
  int blocks_per_sm = 0;  // resident at once, from the occupancy calculator
  int sms = 0;
};
constexpr int kDeltaBlockThreads = 256;  // threads per block of the kernel

DeltaGrid launch_delta_preprocess_variant(const void* o, const void* dout, float* delta,
                                          const AttentionShape& s, DType t, DeltaVariant v,
                                          cudaStream_t st);

}  // namespace fa
