// device_fill.h: random inputs generated on the GPU, for timing-only runs. Benchmarks at the
// FlashAttention protocol's sizes need hundreds of millions of values; drawing them on the CPU
// would take longer than the benchmark. Checked runs keep using the host generator (random.h),
// whose values the CPU reference sees.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "dtype.h"

namespace fa {

// Approximately normal values (mean, stddev) from a counter-based hash: reproducible for a seed.
void fill_random_device(DType t, void* ptr, int64_t n, uint64_t seed, float mean, float stddev,
                        cudaStream_t stream = nullptr);

}  // namespace fa
