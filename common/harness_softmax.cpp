// harness_softmax.cpp: run a row-softmax kernel (chapters 01, 02): fp32 in and out, checked
// against the float64 reference, GB/s of one read and one write against the copy bandwidth.
#include "harness.h"

#include "buffer.h"
#include "ceilings.h"
#include "check.h"
#include "harness_run.h"
#include "reference.h"
#include "timing.h"
#include "tolerances.h"

namespace fa {

using harness_detail::draw;
using harness_detail::finish_checks;
using harness_detail::gpu_ready;
using harness_detail::guarded;
using harness_detail::make_input;

RunResult run_softmax(const SoftmaxKernel& k, SoftmaxShape s, const RunOptions& opt) {
  RunResult r;
  r.kernel = k.name;
  r.shape = s.str();
  r.dtype = "fp32";
  r.passes = k.reads + 1;
  if (!gpu_ready(r, k.min_sm)) return r;
  std::vector<float> x;
  DeviceBuffer dx;
  if (opt.check || opt.softmax_input_hook) {
    x = draw(s.numel(), opt.seed, 1, opt, DType::F32);
    if (opt.softmax_input_hook) opt.softmax_input_hook(x, s);
    dx = to_device(DType::F32, x);
  } else {
    dx = make_input(DType::F32, s.numel(), 1, opt, &x);
  }
  DeviceBuffer dy(s.numel() * sizeof(float));
  guarded(r, [&] {
    if (opt.check) {
      dy.poison();
      k.run(dx.as<float>(), dy.as<float>(), s, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> y = to_host(DType::F32, dy, s.numel());
      std::vector<double> ref = softmax_rows_ref(x.data(), s);
      Tolerance tol = opt.has_tolerance ? opt.tolerance
                                        : Tolerance::allclose(tol::kSoftmaxAtol, tol::kSoftmaxRtol);
      CompareResult c = compare("y", y.data(), ref.data(), nullptr, s.numel(), tol);
      c.dims = {s.rows, s.cols};
      c.names = {"row", "col"};
      r.checks.push_back(c);
      finish_checks(r);
    }
    if (opt.time) {
      Timing t = time_gpu([&](cudaStream_t st) { k.run(dx.as<float>(), dy.as<float>(), s, st); },
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
