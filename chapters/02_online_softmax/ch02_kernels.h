// ch02_kernels.h: the launchers of chapter 02 that other files call by name (v2 falls back to v1
// for rows too long to keep on chip).
#pragma once
#include <cuda_runtime_api.h>

#include "shapes.h"

namespace ch02 {

// Two passes: (m, l) with the online recurrence, then the write. Any row length.
void softmax_online_two_pass(const float* x, float* y, fa::SoftmaxShape shape, cudaStream_t stream);

// One read: the row stays in registers between the reduction and the write. Rows longer than
// kSingleReadMaxCols go to softmax_online_two_pass.
constexpr int64_t kSingleReadMaxCols = 16384;
void softmax_single_read(const float* x, float* y, fa::SoftmaxShape shape, cudaStream_t stream);

}  // namespace ch02
