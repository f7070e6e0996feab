// ch06_preprocess.h: the first step of every backward kernel in this chapter.
//
//   D_i = rowsum(dO_i * O_i)   (one float per query row, [batch, heads, seq_q], fp32)
//
// D_i equals rowsum(P_i * dP_i), the term the softmax Jacobian subtracts in dS = P * (dP - D)
// (notes/06_flash_backward.md derives it). Computing it up front from O and dO costs one
// memory-bound pass and saves a whole row reduction inside the dK/dV and dQ loops.
//
// Shared by every 06/ backward kernel (v1 fp32, and the tensor-core versions) so each one reuses
// the same, tested preprocess. Defined in delta_preprocess.cu; the kernel, its launcher's choices
// (U, the load hint) and the grid it reports are in common/device/ (delta_preprocess.cuh and .h),
// which chapters 07 and 09 compile too.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "delta_preprocess.h"  // kDeltaLauncherUnroll, DeltaVariant, DeltaGrid
#include "dtype.h"
#include "shapes.h"

namespace fa {

// o and dout are `t` (fp32, fp16 or bf16) with the layout of Q ([batch, heads, seq_q, head_dim]);
// delta is fp32 [batch, heads, seq_q]. Products are accumulated in fp32. Up to 32 lanes per row
// (several rows per warp for short rows), vectorised loads when the head dim and the pointers
// allow it. Any head_dim >= 1 works.
void launch_delta_preprocess(const void* o, const void* dout, float* delta, const AttentionShape& s,
                             DType t, cudaStream_t st);

// The same kernel with other choices (DeltaVariant), for the chapter's bytes-in-flight table.
DeltaGrid launch_delta_preprocess_variant(const void* o, const void* dout, float* delta,
                                          const AttentionShape& s, DType t, DeltaVariant v,
                                          cudaStream_t st);

}  // namespace fa
