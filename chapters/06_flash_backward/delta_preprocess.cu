// delta_preprocess.cu: D_i = rowsum(dO_i o O_i), the first kernel of every backward pass here.
// The kernel and its launcher are in delta_preprocess.cuh (what D is for, and how the rows are
// spread over the lanes); this file compiles them for chapter 06 and gives them the name every
// 06/ backward calls (ch06_preprocess.h). Chapter 07's sm_90a backward compiles its own copy.
//
// Speed (H100, 2026-11-21, one row per warp, the version before delta_preprocess.cuh):
// 2728 GB/s fp32 D128 N8192 (96% of copy), bf16 D128 2339 (83%), bf16 D64 1567 (55%: only 8
// of 32 lanes loaded anything, notes/06_flash_backward.md). Several rows per warp for short rows:
// not yet measured. (fa_bench; notes/measured/h100-2026-11-21/bench.log).
#include "ch06_preprocess.h"
#include "delta_preprocess.cuh"

namespace fa {

void launch_delta_preprocess(const void* o, const void* dout, float* delta, const AttentionShape& s,
                             DType t, cudaStream_t st) {
  delta_preprocess_launch(o, dout, delta, s, t, st);
}

}  // namespace fa
