// Chapter 01 program: why softmax needs the maximum subtracted, then three kernels that compute
// the safe softmax of every row, each faster than the last, all still reading x three times.
//
//   ch01_safe_softmax                       the demo, the CPU checks and the ladder at 4096 x 4096
//   ch01_safe_softmax --rows=16384 --cols=1024 --kernel=01/v3_warp_shuffle_vec4
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "buffer.h"
#include "ceilings.h"
#include "ch01_kernels.h"
#include "chapter.h"
#include "check.h"
#include "gpu.h"
#include "harness.h"
#include "reference.h"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The CPU versions of the two formulas, in fp32 like the kernels.
std::vector<float> naive_softmax_cpu(const std::vector<float>& x) {
  float sum = 0.0f;
  for (float v : x) sum += std::exp(v);
  std::vector<float> y;
  for (float v : x) y.push_back(std::exp(v) / sum);
  return y;
}

std::vector<float> safe_softmax_cpu(const std::vector<float>& x) {
  float m = -kInf;
  for (float v : x) m = std::max(m, v);  // pass 1: max
  std::vector<float> y(x.size(), 0.0f);
  if (m == -kInf) return y;  // all -inf: zeros
  float l = 0.0f;
  for (float v : x) l += std::exp(v - m);                               // pass 2: sum
  for (size_t i = 0; i < x.size(); ++i) y[i] = std::exp(x[i] - m) / l;  // pass 3: write
  return y;
}

void print_row(const std::string& label, const std::vector<float>& v) {
  std::cout << "  " << std::left << std::setw(38) << label << std::right << "[";
  for (size_t i = 0; i < v.size(); ++i)
    std::cout << (i ? ", " : "") << std::setw(10) << std::setprecision(6) << v[i];
  std::cout << "]\n";
}

// Within the kernels' tolerance of the float64 reference (atol 1e-9, rtol 2e-5)?
bool matches_reference(const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<double> ref = fa::softmax_rows_ref(x.data(), {1, int64_t(x.size())});
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(double(y[i]) - ref[i]) <= 1e-9 + 2e-5 * std::abs(ref[i]))) return false;
  return true;
}

bool any_not_finite(const std::vector<float>& v) {
  for (float f : v)
    if (!std::isfinite(f)) return true;
  return false;
}

int check(bool ok, const std::string& what) {
  std::cout << "  [" << (ok ? "ok" : "FAILED") << "] " << what << "\n";
  return ok ? 0 : 1;
}

// The CPU tier: the overflow, and the safe formula on the same rows. Returns the failures.
int cpu_tier() {
  std::cout << "\n== The problem: e^x overflows fp32 (largest float 3.4e38 = e^88.72) ==\n";
  std::cout << "  e^88 = " << std::exp(88.0f) << ",  e^89 = " << std::exp(89.0f)
            << ",  e^100 = " << std::exp(100.0f) << "\n\n";
  const std::vector<float> small = {3, 2, 5, 1};
  const std::vector<float> big = {103, 102, 105, 101};  // the same row + 100: same softmax
  const std::vector<float> with_inf = {3, -kInf, 5, 1};
  const std::vector<float> all_inf = {-kInf, -kInf, -kInf, -kInf};
  print_row("x", small);
  print_row("naive e^x / sum e^x (CPU fp32)", naive_softmax_cpu(small));
  print_row("safe  (CPU fp32)", safe_softmax_cpu(small));
  print_row("x + 100", big);
  print_row("naive e^x / sum e^x (CPU fp32)", naive_softmax_cpu(big));
  print_row("safe  (CPU fp32)", safe_softmax_cpu(big));
  print_row("x with a -inf entry", with_inf);
  print_row("safe  (CPU fp32)", safe_softmax_cpu(with_inf));
  print_row("all -inf", all_inf);
  print_row("safe  (CPU fp32): defined as zeros", safe_softmax_cpu(all_inf));

  std::cout << "\n== CPU checks ==\n";
  int failures = 0;
  failures += check(matches_reference(small, naive_softmax_cpu(small)),
                    "naive softmax is fine on small inputs");
  failures += check(any_not_finite(naive_softmax_cpu(big)),
                    "naive softmax overflows to Inf/NaN on inputs around 100");
  failures += check(matches_reference(big, safe_softmax_cpu(big)),
                    "safe softmax matches the float64 reference on inputs around 100");
  failures += check(matches_reference(small, safe_softmax_cpu(big)),
                    "softmax(x + 100) == softmax(x): shifting a row changes nothing");
  failures += check(matches_reference(with_inf, safe_softmax_cpu(with_inf)),
                    "a -inf entry gets probability 0");
  failures += check(safe_softmax_cpu(all_inf) == std::vector<float>(4, 0.0f),
                    "an all -inf row gives zeros, not NaN");
  return failures;
}

// On the GPU: the naive demo kernel against the chapter's best kernel on the two small rows.
int gpu_demo() {
  const std::vector<float> x = {3, 2, 5, 1, 103, 102, 105, 101};
  const fa::SoftmaxShape s{2, 4};
  fa::DeviceBuffer dx = fa::to_device(fa::DType::F32, x);
  fa::DeviceBuffer dy(x.size() * sizeof(float));
  std::cout << "\n== The same rows on the GPU ==\n";
  ch01::naive_softmax_demo(dx.as<float>(), dy.as<float>(), s, nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> naive = fa::to_host(fa::DType::F32, dy, s.numel());
  ch01::softmax_v3_warp_shuffle_vec4(dx.as<float>(), dy.as<float>(), s, nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> safe = fa::to_host(fa::DType::F32, dy, s.numel());
  auto row = [](const std::vector<float>& v, int r) {
    return std::vector<float>(v.begin() + 4 * r, v.begin() + 4 * r + 4);
  };
  print_row("naive kernel, x", row(naive, 0));
  print_row("naive kernel, x + 100", row(naive, 1));
  print_row("01/v3 (safe), x", row(safe, 0));
  print_row("01/v3 (safe), x + 100", row(safe, 1));
  int failures = 0;
  failures += check(any_not_finite(row(naive, 1)), "the naive kernel overflows on x + 100");
  failures +=
      check(matches_reference(row(x, 1), row(safe, 1)), "the safe kernel is exact on x + 100");
  return failures;
}

int run(const std::vector<std::string>& args) {
  fa::Cli cli(
      "ch01_safe_softmax",
      "Safe softmax: why the maximum is subtracted, and a ladder of kernels for its three passes.");
  fa::add_matrix_options(cli, "4096,16384", "4096,1024", "softmax input x");
  fa::add_kernel_options(cli, "01/", 20);
  cli.section("kernels (name, dtype, oldest GPU, what it changes)",
              fa::kernels_help<fa::SoftmaxKernel>("01/"))
      .example(fa::printed_command("ch01.help").args);
  if (!cli.parse(args)) return cli.exit_code();
  const std::vector<fa::SoftmaxShape> shapes = fa::read_matrix_shapes(cli);
  const auto kernels = fa::select_kernels<fa::SoftmaxKernel>("01/", cli.get("kernel"));
  fa::print_chapter_header(std::cout, "01", "safe softmax", cli);

  int failures = cpu_tier();
  if (!fa::have_gpu()) {
    fa::print_no_gpu(std::cout, "the GPU demo and the kernel ladder");
    return failures ? 1 : 0;
  }
  failures += gpu_demo();
  fa::RunOptions opt;
  opt.seed = cli.seed();
  opt.timing.repeats = static_cast<int>(cli.get_int("repeats"));
  std::vector<fa::RunResult> results;
  for (const fa::SoftmaxShape& shape : shapes)
    for (const fa::SoftmaxKernel* k : kernels) results.push_back(fa::run_softmax(*k, shape, opt));
  fa::print_table(std::cout, "Row softmax, fp32: GB/s counts x read once + y written once",
                  results);
  std::cout
      << "  passes = global-memory passes (reads of x + the write of y); copy bandwidth "
      << std::fixed << std::setprecision(0) << fa::copy_bandwidth_gbps() << " GB/s.\n"
      << std::defaultfloat
      << "  v1-v3 read x three times from global memory; v4 reads it once and runs the three\n"
         "  passes over registers. Chapter 02 makes one read work for rows of any length.\n";
  failures += fa::print_failures(std::cout, results);
  return failures ? 1 : 0;
}

}  // namespace

FA_REGISTER(Chapter, {"01", "safe softmax", run});
