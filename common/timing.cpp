#include "timing.h"

#include <algorithm>
#include <vector>

#include "buffer.h"
#include "check.h"
#include "gpu.h"

namespace fa {

void flush_l2(cudaStream_t stream, Flush how) {
  static DeviceBuffer scratch = [] {
    DeviceBuffer b(std::max<size_t>(2 * gpu_info().l2_bytes, size_t(64) << 20));
    b.zero();  // defined contents for the reads; its dirty lines go with the first flush
    return b;
  }();
  static DeviceBuffer sink(sizeof(unsigned));
  if (how == Flush::Clean)
    read_to_flush_l2(scratch.data(), scratch.bytes(), sink.as<unsigned>(), stream);
  if (how == Flush::Memset)
    FA_CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0, scratch.bytes(), stream));
}

namespace {
struct Event {
  cudaEvent_t e = nullptr;
  Event() { FA_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() { cudaEventDestroy(e); }
};
}  // namespace

Timing time_gpu(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt,
                cudaStream_t stream) {
  for (int i = 0; i < opt.warmup; ++i) launch(stream);
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));

  const int n = std::max(1, opt.repeats);
  std::vector<Event> start(n), stop(n);
  for (int i = 0; i < n; ++i) {
    flush_l2(stream, opt.flush);
    FA_CUDA_CHECK(cudaEventRecord(start[i].e, stream));
    launch(stream);
    FA_CUDA_CHECK(cudaEventRecord(stop[i].e, stream));
  }
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<double> ms(n);
  for (int i = 0; i < n; ++i) {
    float t = 0;
    FA_CUDA_CHECK(cudaEventElapsedTime(&t, start[i].e, stop[i].e));
    ms[i] = t;
  }
  std::sort(ms.begin(), ms.end());
  Timing r;
  r.repeats = n;
  r.min_ms = ms.front();
  r.max_ms = ms.back();
  r.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  return r;
}

}  // namespace fa
