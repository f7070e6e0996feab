// delta_preprocess.cu: D_i = rowsum(dO_i o O_i), the first kernel of every backward pass here.
// The kernel and its launcher are in common/device/delta_preprocess.cuh (what D is for, how the
// rows are spread over the lanes, and how many loads each lane keeps in flight); this file
// compiles them for chapter 06 and gives them the names ch06_preprocess.h declares. Chapters 07
// and 09 compile their own copies.
//
// Speed (H100, fa_bench, % of the copy bandwidth measured in the same run): one row per warp
// (2026-11-21): fp32 D128 96%, bf16 D128 83%, bf16 D64 55% (8 of 32 lanes loaded anything).
// Several rows per warp for short rows (2026-11-23b): bf16 D64 and D128 84%, fp32 96%
// (notes/06_flash_backward.md). U rows per lane group, grid-stride: not yet measured.
#include "ch06_preprocess.h"
#include "delta_preprocess.cuh"
#include "registry.h"

namespace fa {

void launch_delta_preprocess(const void* o, const void* dout, float* delta, const AttentionShape& s,
                             DType t, cudaStream_t st) {
  delta_preprocess_launch(o, dout, delta, s, t, st);
}

// Registered so that fa_bench times the launcher every backward calls (bwd_preprocess rows).
FA_REGISTER(AttentionBwdPreprocessKernel,
            {"06/delta_preprocess",
             launch_delta_preprocess,
             "D_i = rowsum(dO_i o O_i): U rows per lane group, 16-byte loads, O evict-first",
             {DType::F32, DType::F16, DType::BF16}});

DeltaGrid launch_delta_preprocess_variant(const void* o, const void* dout, float* delta,
                                          const AttentionShape& s, DType t, DeltaVariant v,
                                          cudaStream_t st) {
  if (!v.evict_first) {
    FA_REQUIRE(v.unroll == 4, "plain loads of O are compiled for U = 4 only");
    return delta_preprocess_launch_as<4, false>(o, dout, delta, s, t, st);
  }
  FA_REQUIRE(v.unroll == 1 || v.unroll == 2 || v.unroll == 4, "U must be 1, 2 or 4");
  if (v.unroll == 1) return delta_preprocess_launch_as<1, true>(o, dout, delta, s, t, st);
  if (v.unroll == 2) return delta_preprocess_launch_as<2, true>(o, dout, delta, s, t, st);
  return delta_preprocess_launch_as<4, true>(o, dout, delta, s, t, st);
}

}  // namespace fa
