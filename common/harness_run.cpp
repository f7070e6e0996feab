// harness_run.cpp: the steps every runner takes (harness_run.h).
#include "harness_run.h"

#include "device_fill.h"
#include "exercise.h"
#include "gpu.h"
#include "random.h"

namespace fa::harness_detail {

bool gpu_ready(RunResult& r, int min_sm) {
  std::string why = gpu_skip_reason(min_sm);
  if (why.empty()) return true;
  r.status = have_gpu() ? Status::Unsupported : Status::NoGpu;
  r.message = why;
  return false;
}

bool exercise_written(RunResult& r) {
  const std::string file = untouched_exercise(r.kernel);
  if (file.empty()) return true;
  r.status = Status::Fail;
  // The report adds exercise_hint's "TODO in <file>" line above this one (harness.cpp).
  r.message = "not run: " + file + " is still the exercise as handed out";
  return false;
}

void finish_checks(RunResult& r) {
  for (const CompareResult& c : r.checks)
    if (!c.ok) r.status = Status::Fail;
}

std::vector<float> draw(int64_t n, uint64_t seed, uint64_t stream, const RunOptions& opt, DType t) {
  std::vector<float> v = random_normal(n, derive_seed(seed, stream), opt.input_mean, opt.input_std);
  round_in_place(t, v);
  return v;
}

DeviceBuffer make_input(DType t, int64_t n, uint64_t stream, const RunOptions& opt,
                        std::vector<float>* host, bool need_host) {
  if (opt.check || need_host) {
    *host = draw(n, opt.seed, stream, opt, t);
    return to_device(t, *host);
  }
  DeviceBuffer b(n * dtype_size(t));
  fill_random_device(t, b.data(), n, derive_seed(opt.seed, stream), opt.input_mean, opt.input_std);
  return b;
}

}  // namespace fa::harness_detail
