// harness.cpp: what every problem's runner shares with its callers: the status names, a row's
// report, the support queries (dtype, head dim, grouped heads), the choice of forward for a
// backward run, and the result table. Each problem's runner is in its own file:
// harness_softmax.cpp, harness_gemm.cpp, harness_transpose.cpp, harness_attention_fwd.cpp,
// harness_attention_bwd.cpp; the steps they share are in harness_run.h and harness_attention.h.
#include "harness.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "check.h"
#include "exercise.h"
#include "gpu.h"

namespace fa {

const char* status_name(Status s) {
  switch (s) {
    case Status::Pass:
      return "PASS";
    case Status::Fail:
      return "FAIL";
    case Status::Unsupported:
      return "UNSUPPORTED";
    case Status::NoGpu:
      return "SKIPPED";
  }
  return "?";
}

double RunResult::max_error() const {
  double m = -1;
  for (const CompareResult& c : checks) m = std::max(m, c.max_abs);
  return m;
}

// In an exercise build, a kernel whose file still came from the generator says so.
std::string exercise_hint(const std::string& kernel) {
  for (const Exercise& e : registry<Exercise>())
    for (const std::string& k : e.kernels)
      if (k == kernel)
        return "TODO in " + e.name +
               ": not implemented? This is an exercise build: " + std::to_string(e.todos) +
               " TODO(exercise) block(s) were cut out of that file; fill them in.";
  return "";
}

std::string RunResult::report() const {
  std::ostringstream os;
  os << kernel << " on " << shape << " " << dtype << ": " << status_name(status) << "\n";
  if (status == Status::Fail) {
    std::string hint = exercise_hint(kernel);
    if (!hint.empty()) os << "  " << hint << "\n";
  }
  if (!message.empty()) os << "  " << message << "\n";
  if (!note.empty()) os << "  " << note << "\n";
  for (const CompareResult& c : checks) os << c.report();
  return os.str();
}

bool supports(const std::vector<DType>& dtypes, DType t) {
  return std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end();
}
bool supports(const std::vector<int>& head_dims, int d) {
  return std::find(head_dims.begin(), head_dims.end(), d) != head_dims.end();
}

int64_t computed_head_dim(const std::vector<int>& head_dims, bool rounds_up, int64_t d, int step) {
  if (!rounds_up || d <= 0 || d % step != 0 || supports(head_dims, int(d))) return d;
  for (int listed : head_dims)  // sorted (tests/cpu/test_registry_head_dims.cpp)
    if (listed > d) return listed;
  return d;
}

bool takes_head_dim(const std::vector<int>& head_dims, bool rounds_up, int64_t d, int step) {
  const int64_t c = computed_head_dim(head_dims, rounds_up, d, step);
  return c <= INT_MAX && supports(head_dims, int(c));
}

std::string missing_version(const std::vector<DType>& dtypes, const std::vector<int>& head_dims,
                            DType t, int64_t d, bool rounds_up, int step) {
  if (supports(dtypes, t) && takes_head_dim(head_dims, rounds_up, d, step)) return "";
  std::string why =
      "this kernel has no " + std::string(dtype_name(t)) + " D=" + std::to_string(d) + " version";
  if (rounds_up && !head_dims.empty())
    why += step == 1 ? " (it rounds every head dim up to " + std::to_string(head_dims.back()) + ")"
                     : " (it rounds head dims up to " + std::to_string(head_dims.back()) +
                           " that are multiples of " + std::to_string(step) + ")";
  return why;
}

std::string kernel_error_message(const Error& e, bool* unsupported) {
  std::string what = e.what();
  *unsupported = dynamic_cast<const Unsupported*>(&e) != nullptr;
  if (what.find("cudaErrorNoKernelImageForDevice") != std::string::npos) {
    *unsupported = true;
    what += " (rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(gpu_info().sm) + ")";
  }
  return what;
}

std::string grouped_heads_refusal(const AttentionShape& s, bool takes_gqa) {
  if (!s.valid_heads())
    return "heads (" + std::to_string(s.heads) + ") must be a multiple of heads_kv (" +
           std::to_string(s.heads_kv) + ")";
  if (s.is_gqa() && !takes_gqa)
    return "this kernel takes heads_kv == heads only (no grouped-query attention)";
  return "";
}

double attention_fwd_min_bytes(const AttentionShape& s, DType t) {
  return double(2 * s.q_numel() + 2 * s.k_numel()) * dtype_size(t) + double(s.lse_numel()) * 4.0;
}

const AttentionFwdKernel* best_forward_kernel(DType t, int d) {
  const AttentionFwdKernel* best = nullptr;
  for (const AttentionFwdKernel* k : entries_with_prefix<AttentionFwdKernel>("05/"))
    if (supports(k->dtypes, t) && takes_head_dim(*k, d) && gpu_skip_reason(k->min_sm).empty())
      best = k;
  return best;
}

const AttentionFwdKernel* forward_for_backward(DType t, int d) {
  if (const AttentionFwdKernel* k = best_forward_kernel(t, d)) return k;
  const AttentionFwdKernel* any = nullptr;
  for (const AttentionFwdKernel* k : entries_with_prefix<AttentionFwdKernel>(""))
    if (!k->decoding && k->name.rfind("ref/", 0) != 0 && supports(k->dtypes, t) &&
        takes_head_dim(*k, d) && gpu_skip_reason(k->min_sm).empty())
      any = k;
  return any;
}

const AttentionFwdKernel* forward_for_backward(const AttentionShape& s, DType t) {
  const AttentionFwdKernel* best = forward_for_backward(t, int(s.head_dim));
  if (!s.is_gqa() || (best != nullptr && best->gqa)) return best;
  for (const AttentionFwdKernel* k : entries_with_prefix<AttentionFwdKernel>(""))
    if (k->gqa && k->name.rfind("ref/", 0) != 0 && supports(k->dtypes, t) &&
        takes_head_dim(*k, s.head_dim) && gpu_skip_reason(k->min_sm).empty())
      return k;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
void print_table(std::ostream& os, const std::string& title, const std::vector<RunResult>& rows) {
  os << "\n== " << title << " ==\n";
  size_t wk = 6, ws = 5;
  for (const RunResult& r : rows) {
    wk = std::max(wk, r.kernel.size());
    ws = std::max(ws, r.shape.size());
  }
  auto pad = [&](const std::string& s, size_t w) {
    os << s;
    for (size_t i = s.size(); i < w + 2; ++i) os << ' ';
  };
  pad("kernel", wk);
  pad("shape", ws);
  os << "dtype  " << std::setw(10) << "ms" << std::setw(11) << "TFLOP/s" << std::setw(10) << "GB/s"
     << std::setw(13) << "% of ceiling" << std::setw(7) << "passes" << std::setw(11) << "max err"
     << "  status\n";
  for (const RunResult& r : rows) {
    pad(r.kernel, wk);
    pad(r.shape, ws);
    pad(r.dtype, 5);
    auto num = [&](double v, int w, int prec) {
      if (v < 0)
        os << std::setw(w) << "-";
      else
        os << std::setw(w) << std::fixed << std::setprecision(prec) << v;
    };
    num(r.ms, 10, 4);
    num(r.tflops, 11, 1);
    num(r.gbps, 10, 0);
    if (r.pct >= 0) {
      std::ostringstream p;
      p << std::fixed << std::setprecision(1) << r.pct << "% " << r.pct_of;
      os << std::setw(13) << p.str();
    } else {
      os << std::setw(13) << "-";
    }
    if (r.passes > 0)
      os << std::setw(7) << r.passes;
    else
      os << std::setw(7) << "-";
    double e = r.max_error();
    if (e < 0)
      os << std::setw(11) << "-";
    else
      os << std::setw(11) << std::scientific << std::setprecision(2) << e;
    os << std::defaultfloat << "  " << status_name(r.status);
    if (r.status == Status::Unsupported || r.status == Status::NoGpu)
      os << " (" << r.message << ")";
    os << "\n";
  }
}

int print_failures(std::ostream& os, const std::vector<RunResult>& rows) {
  int failures = 0;
  std::vector<std::string> not_written;
  const char* report = std::getenv("FA_REPORT");
  const bool all = report != nullptr && std::string(report) == "all";
  for (const RunResult& r : rows) {
    if (all && r.status != Status::Fail && !r.checks.empty()) os << "\n" << r.report();
    if (r.status == Status::Fail) {
      const std::string file = untouched_exercise(r.kernel);
      if (!file.empty()) {  // a student release's exercise, as handed out (exercise.h)
        if (std::find(not_written.begin(), not_written.end(), r.kernel) == not_written.end())
          not_written.push_back(r.kernel);
        continue;
      }
      ++failures;
      os << "\n" << r.report();
    }
  }
  for (const std::string& k : not_written)
    os << "\n"
       << k << ": FAIL, its exercise is not written yet (TODO in " << untouched_exercise(k)
       << ", untouched): not counted as a failed check; its tests (`ctest -L exercise`) fail "
          "until it is written, and from the first change to the file on a wrong answer fails "
          "this program too\n";
  return failures;
}

}  // namespace fa
