// harness_transpose.cpp: run a transpose kernel (chapter 04): fp32, checked exactly, GB/s of one
// read and one write against the copy bandwidth.
#include "harness.h"

#include "buffer.h"
#include "ceilings.h"
#include "check.h"
#include "harness_run.h"
#include "timing.h"

namespace fa {

using harness_detail::finish_checks;
using harness_detail::gpu_ready;
using harness_detail::guarded;
using harness_detail::make_input;

RunResult run_transpose(const TransposeKernel& k, TransposeShape s, const RunOptions& opt) {
  RunResult r;
  r.kernel = k.name;
  r.shape = s.str();
  r.dtype = "fp32";
  if (!gpu_ready(r, k.min_sm)) return r;
  std::vector<float> x;
  DeviceBuffer din = make_input(DType::F32, s.numel(), 1, opt, &x), dout(s.numel() * sizeof(float));
  guarded(r, [&] {
    if (opt.check) {
      dout.poison();
      k.run(din.as<float>(), dout.as<float>(), s, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> y = to_host(DType::F32, dout, s.numel());
      std::vector<double> ref(static_cast<size_t>(s.numel()));
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t j = 0; j < s.cols; ++j) ref[j * s.rows + i] = x[i * s.cols + j];
      CompareResult c = compare_allclose("out", y.data(), ref.data(), s.numel(), 0.0, 0.0);
      c.dims = {s.cols, s.rows};
      c.names = {"row", "col"};
      r.checks.push_back(c);
      finish_checks(r);
    }
    if (opt.time) {
      Timing t = time_gpu([&](cudaStream_t st) { k.run(din.as<float>(), dout.as<float>(), s, st); },
                          opt.timing);
      r.ms = t.median_ms;
      r.gbps = 2.0 * s.numel() * sizeof(float) / (r.ms * 1e-3) / 1e9;
      r.pct = 100.0 * r.gbps / copy_bandwidth_gbps();
      r.pct_of = "copy";
    }
  });
  return r;
}

}  // namespace fa
