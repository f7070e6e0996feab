// Chapter 02 program: the online softmax. A walk through [3, 2, 5, 1] by hand (on the CPU), the
// pair merge that makes it parallel, then two kernels: two passes over x, then one.
//
//   ch02_online_softmax                                     both default shapes
//   ch02_online_softmax --rows=1024 --cols=100000 --kernel=02/v1_online_two_pass
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ceilings.h"
#include "ch02_online_cpu.h"
#include "chapter.h"
#include "check.h"
#include "cli.h"
#include "exercise.h"
#include "gpu.h"
#include "harness.h"
#include "random.h"
#include "reference.h"

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

int check(bool ok, const std::string& what) {
  std::cout << "  [" << (ok ? "ok" : "FAILED") << "] " << what << "\n";
  return ok ? 0 : 1;
}

bool close(double a, double b, double tol) {
  return std::abs(a - b) <= tol * (1.0 + std::abs(b));
}

bool all_close(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!close(a[i], b[i], tol)) return false;
  return true;
}

std::string state(ch02::MaxSum s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(6) << "(m = " << s.m << ", l = " << s.l << ")";
  return os.str();
}

// The walk-through and the CPU checks. Returns the number of failures.
int cpu_tier() {
  int failures = 0;
  const std::vector<float> x = {3, 2, 5, 1};
  std::cout << "\n== Online softmax by hand: x = [3, 2, 5, 1] ==\n"
            << "  start                      (m = -inf, l = 0)\n";
  std::vector<ch02::MaxSum> trace;
  std::vector<double> y = ch02::online_softmax(x.data(), 4, &trace);
  double m_prev = kNegInf;
  for (size_t i = 0; i < x.size(); ++i) {
    std::cout << "  read x" << i + 1 << " = " << x[i] << "  ->  " << std::left << std::setw(30)
              << state(trace[i]) << std::right;
    if (i == 0)
      std::cout << "  the first element: l = e^0 = 1";
    else if (trace[i].m == m_prev)
      std::cout << "  same max: l += e^(x - m)";
    else
      std::cout << "  NEW max: old l times e^(" << m_prev << " - " << trace[i].m << "), then + 1";
    std::cout << "\n";
    m_prev = trace[i].m;
  }
  std::cout << "  softmax = e^(x - m) / l = [";
  for (size_t i = 0; i < y.size(); ++i)
    std::cout << (i ? ", " : "") << std::setprecision(6) << y[i];
  std::cout << "]\n";

  // The same row as two halves merged: what threads, warps and blocks do on the GPU.
  const ch02::MaxSum left = ch02::reduce_in_pieces(x.data(), 2, 1);
  const ch02::MaxSum right = ch02::reduce_in_pieces(x.data() + 2, 2, 1);
  const ch02::MaxSum both = ch02::merge(left, right);
  std::cout << "\n== The pair merge: [3, 2] and [5, 1] reduced apart, then merged ==\n"
            << "  " << state(left) << " (+) " << state(right) << "\n  = " << state(both)
            << "   (l = " << left.l << " * e^(3 - 5) + " << right.l << ")\n";

  std::cout << "\n== CPU checks ==\n";
  const std::vector<double> safe = ch02::safe_softmax(x.data(), 4);
  failures += check(all_close(y, safe, 1e-15), "online softmax of [3, 2, 5, 1] == safe softmax");
  failures +=
      check(close(trace.back().m, 5.0, 0) &&
                close(trace.back().l, 1 + std::exp(-2.0) + std::exp(-3.0) + std::exp(-4.0), 1e-15),
            "final (m, l) = (5, 1 + e^-2 + e^-3 + e^-4)");
  failures += check(both.m == trace.back().m && close(both.l, trace.back().l, 1e-15),
                    "merging the halves gives the sequential (m, l)");

  // A long random row with -inf entries, against the float64 Eigen reference.
  std::vector<float> row = fa::random_normal(10000, 2, 1e4f, 3.0f);
  for (size_t i = 0; i < row.size(); i += 7) row[i] = -std::numeric_limits<float>::infinity();
  const std::vector<double> ref = fa::softmax_rows_ref(row.data(), {1, int64_t(row.size())});
  failures += check(all_close(ch02::online_softmax(row.data(), int64_t(row.size())), ref, 1e-12),
                    "online softmax of 10000 values around 1e4 (every 7th -inf) == reference");
  const std::vector<float> dead(5, -std::numeric_limits<float>::infinity());
  failures += check(ch02::online_softmax(dead.data(), 5) == std::vector<double>(5, 0.0),
                    "an all -inf row gives zeros, not NaN");
  return failures;
}

// Predicted time of a memory-bound kernel: passes * (bytes of x) at the measured copy rate (the
// copy rate counts bytes read + written, the same unit as one pass).
void print_prediction(const std::vector<fa::RunResult>& results,
                      const std::vector<fa::SoftmaxShape>& shapes) {
  const double bw = fa::copy_bandwidth_gbps() * 1e9;
  std::cout << "\n== Passes predict the time: passes x bytes(x) / copy bandwidth (" << std::fixed
            << std::setprecision(0) << bw / 1e9 << " GB/s) ==\n"
            << "  kernel                    shape          passes  predicted ms  measured ms  "
               "measured/predicted\n";
  for (const fa::SoftmaxShape& s : shapes) {
    const double bytes = double(s.numel()) * sizeof(float);
    std::cout << "  " << std::left << std::setw(26) << "(01/v1..v3: 3 reads)" << std::setw(15)
              << s.str() << std::right << std::setw(6) << 4 << std::setw(14) << std::setprecision(4)
              << 4 * bytes / bw * 1e3 << std::setw(13) << "see ch01"
              << "\n";
    for (const fa::RunResult& r : results) {
      if (r.shape != s.str() || r.ms < 0) continue;
      const double predicted = r.passes * bytes / bw * 1e3;
      std::cout << "  " << std::left << std::setw(26) << r.kernel << std::setw(15) << r.shape
                << std::right << std::setw(6) << r.passes << std::setw(14) << predicted
                << std::setw(13) << r.ms << std::setw(20) << std::setprecision(2)
                << r.ms / predicted << std::setprecision(4) << "\n";
    }
  }
  std::cout << std::defaultfloat
            << "  A ratio below 1 means re-reads were served by L2 (a row read twice in a row is "
               "still cached).\n";
}

int run(const std::vector<std::string>& args) {
  fa::Cli cli("ch02_online_softmax",
              "Online softmax: max and sum in one pass, the pair merge, and a one-read kernel.");
  fa::add_matrix_options(cli, "4096,16384", "4096,1024", "softmax input x");
  fa::add_kernel_options(cli, "02/", 20);
  cli.section("kernels (name, dtype, oldest GPU, what it changes)",
              fa::kernels_help<fa::SoftmaxKernel>("02/"))
      .example(fa::printed_command("ch02.help").args);
  if (!cli.parse(args)) return cli.exit_code();
  const std::vector<fa::SoftmaxShape> shapes = fa::read_matrix_shapes(cli);
  const auto kernels = fa::select_kernels<fa::SoftmaxKernel>("02/", cli.get("kernel"));
  fa::print_chapter_header(std::cout, "02", "online softmax", cli);

  int failures = fa::unless_exercise_todo(cpu_tier, std::cout);  // the CPU exercise, if unfinished
  if (!fa::have_gpu()) {
    fa::print_no_gpu(std::cout, "the kernel ladder");
    return failures ? 1 : 0;
  }
  fa::RunOptions opt;
  opt.seed = cli.seed();
  opt.timing.repeats = static_cast<int>(cli.get_int("repeats"));
  std::vector<fa::RunResult> results;
  for (const fa::SoftmaxShape& s : shapes)
    for (const fa::SoftmaxKernel* k : kernels) results.push_back(fa::run_softmax(*k, s, opt));
  fa::print_table(std::cout, "Row softmax, fp32: GB/s counts x read once + y written once",
                  results);
  std::cout << "  Chapter 01's kernels read x three times (passes 4); to compare at the default "
               "shapes, run\n    "
            << fa::printed_command("ch02.compare_with_ch01").line() << "\n";
  print_prediction(results, shapes);
  failures += fa::print_failures(std::cout, results);
  return failures ? 1 : 0;
}

}  // namespace

FA_REGISTER(Chapter, {"02", "online softmax", run});
