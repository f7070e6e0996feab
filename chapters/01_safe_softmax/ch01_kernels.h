// ch01_kernels.h: the launchers of chapter 01 that other files call by name.
//
// The ladder kernels (v1..v3) are reached through the registry (fa::SoftmaxKernel), so only the
// overflow demo, which is deliberately NOT registered (it is wrong for large inputs), and the
// "safe" launcher the demo is compared with are declared here.
#pragma once
#include <cuda_runtime_api.h>

#include "shapes.h"

namespace ch01 {

// exp(x) / sum(exp(x)) with no max subtraction: overflows to Inf/NaN once inputs pass ~88.7.
void naive_softmax_demo(const float* x, float* y, fa::SoftmaxShape shape, cudaStream_t stream);

// The chapter's best kernel (v3_warp_shuffle_vec4), for the side-by-side demo.
void softmax_v3_warp_shuffle_vec4(const float* x, float* y, fa::SoftmaxShape shape,
                                  cudaStream_t stream);

// v4: the row held in registers (falls back to v3 for rows that do not fit).
void softmax_v4_row_in_registers(const float* x, float* y, fa::SoftmaxShape shape,
                                 cudaStream_t stream);

}  // namespace ch01
