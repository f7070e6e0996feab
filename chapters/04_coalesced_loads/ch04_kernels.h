// ch04_kernels.h: the demo copies of chapter 04 (not registered: the program times them against
// the copy ceiling). The transposes are registered as fa::TransposeKernel ("04/...").
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "shapes.h"

namespace fa::ch04 {

// in and out are [rows, cols] fp32. Same result, different order of work:
// copy_walk_rows: consecutive threads take consecutive columns of a row (coalesced);
// copy_walk_cols: consecutive threads take consecutive rows of a column (each warp touches 32
// different rows, cols*4 bytes apart: uncoalesced).
void copy_walk_rows(const float* in, float* out, TransposeShape s, cudaStream_t stream);
void copy_walk_cols(const float* in, float* out, TransposeShape s, cudaStream_t stream);

// A flat copy of n floats with 4-, 8- or 16-byte accesses per thread (float, float2, float4),
// the tail that does not fill a vector copied by scalar threads.
void copy_vector_width(const float* in, float* out, int64_t n, int bytes_per_access,
                       cudaStream_t stream);

}  // namespace fa::ch04
