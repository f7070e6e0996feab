// timing.h: honest GPU timing. CUDA events around the kernel only, warm-up runs first, L2 flushed
// before every timed run (so a second run does not read its inputs from cache), median of many.
// The flush reads a buffer twice the size of L2 (Flush::Clean): a memset of it (Flush::Memset,
// what many benchmark harnesses do) would leave up to one L2 of dirty lines that the timed kernel
// must write back, which cost a 0.05 ms kernel 13% on an H100 (l2_flush.cu says more).
#pragma once
#include <cuda_runtime_api.h>

#include <functional>

namespace fa {

enum class Flush {
  Clean,  // read a buffer twice the size of L2: the cache ends full of clean lines (default)
  Memset,  // overwrite that buffer: the cache ends full of dirty lines, written back in the timed run
  None,    // no flush: the timed run may find its inputs in L2
};

struct TimingOptions {
  int warmup = 3;
  int repeats = 20;
  Flush flush = Flush::Clean;
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int repeats = 0;
};

// Runs `launch(stream)` warmup + repeats times; returns statistics of the timed repeats.
Timing time_gpu(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt = {},
                cudaStream_t stream = nullptr);

// Empties L2 of everything but a scratch buffer twice its size, so the next kernel starts with a
// cold cache (Flush::None does nothing).
void flush_l2(cudaStream_t stream = nullptr, Flush how = Flush::Clean);

// The kernel of Flush::Clean (l2_flush.cu): reads every byte of `buffer`; `sink` is never written.
void read_to_flush_l2(const void* buffer, size_t bytes, unsigned* sink, cudaStream_t stream);

}  // namespace fa
