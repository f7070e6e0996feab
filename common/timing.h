// timing.h: honest GPU timing. CUDA events around the kernel only, warm-up runs first, L2 flushed
// before every timed run (so a second run does not read its inputs from cache), median of many.
#pragma once
#include <cuda_runtime_api.h>

#include <functional>

namespace fa {

struct TimingOptions {
  int warmup = 3;
  int repeats = 20;
  bool flush_l2 = true;
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int repeats = 0;
};

// Runs `launch(stream)` warmup + repeats times; returns statistics of the timed repeats.
Timing time_gpu(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt = {},
                cudaStream_t stream = nullptr);

// Overwrites a buffer twice the size of L2 so the next kernel starts with a cold cache.
void flush_l2(cudaStream_t stream = nullptr);

}  // namespace fa
