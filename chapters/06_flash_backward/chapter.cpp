// Chapter 06: the backward pass. The program body (ch06_flash_backward, and the tour).
//
//   CPU tier  the tiled FlashAttention-2 backward (ch06_cpu_model.cpp) against the float64
//             reference on ragged shapes; the identity rowsum(dO o O) = rowsum(P o dP); a few
//             steps of gradient descent on a toy head with tiled vs reference gradients.
//   GPU tier  every 06/ backward kernel through the harness (O and L from 06/forward_helper, so
//             this program needs no other chapter), causal and not, for each dtype it lists:
//             the main path (v1 .. v5) first, then the tuning steps (tuning/, 06/tKK_*);
//             the D preprocess on its own in GB/s, and at fa_bench's bf16 shapes with U = 1, 2,
//             4 rows per lane (bytes in flight); the same training steps with the GPU's
//             gradients (06/v1_fp32 in fp32, 06/v2_mma in bf16) against the CPU's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "buffer.h"
#include "ceilings.h"
#include "ch06_cpu_model.h"
#include "ch06_preprocess.h"
#include "chapter.h"
#include "check.h"
#include "device_fill.h"
#include "exercise.h"
#include "gpu.h"
#include "harness.h"
#include "random.h"
#include "reference.h"
#include "timing.h"

namespace fa::ch06 {
namespace {

const char* kForwardHelper = "06/forward_helper";
// The GPU training check's kernels: this chapter's own, so the program needs no other chapter.
const char* const kTrainingKernels[] = {"06/v1_fp32", "06/v2_mma"};

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t x = 0; x < a.size(); ++x) {
    if (!std::isfinite(a[x])) return INFINITY;
    worst = std::max(worst, std::abs(a[x] - b[x]) / (1.0 + std::abs(b[x])));
  }
  return worst;
}

// ---- CPU tier ----------------------------------------------------------------------------------
// The tiled model against the reference; returns the number of failed checks.
int tiled_model_check(std::ostream& os, uint64_t seed) {
  struct Case {
    int64_t nq, nk;
  };
  const Case cases[] = {{1, 1}, {17, 17}, {113, 203}, {203, 113}, {129, 129}, {40, 9}};
  const ::ch06::TileSizes tiles{16, 24};  // Br != Bc, and neither divides most of the N
  const double tol = 1e-10;
  os << "\n== The tiled backward, on the CPU (Br = " << tiles.Br << ", Bc = " << tiles.Bc
     << ", float64) vs fa::attention_backward_ref ==\n";
  int failures = 0;
  for (bool causal : {false, true})
    for (Case c : cases) {
      AttentionShape s{1, 2, c.nq, c.nk, 16, causal, 0.0f};
      std::vector<float> q = random_normal(s.q_numel(), derive_seed(seed, 61));
      std::vector<float> k = random_normal(s.k_numel(), derive_seed(seed, 62));
      std::vector<float> v = random_normal(s.k_numel(), derive_seed(seed, 63));
      std::vector<float> dO = random_normal(s.q_numel(), derive_seed(seed, 64));
      std::vector<double> O, L;
      ::ch06::forward(q.data(), k.data(), v.data(), s, O, L);
      ::ch06::Grads g = ::ch06::flash_backward_tiled(q.data(), k.data(), v.data(), dO.data(),
                                                     O.data(), L.data(), s, tiles);
      AttentionBwdRef r = attention_backward_ref(q.data(), k.data(), v.data(), dO.data(), s);
      std::vector<double> rowsum_pdp =
          ::ch06::rowsum_p_dp(q.data(), k.data(), v.data(), dO.data(), s);
      const double e = std::max(
          {max_rel(g.dQ, r.dQ), max_rel(g.dK, r.dK), max_rel(g.dV, r.dV), max_rel(g.D, r.D)});
      const double eD = max_rel(g.D, rowsum_pdp);  // rowsum(dO o O) vs rowsum(P o dP)
      const bool ok = e <= tol && eD <= tol;
      failures += ok ? 0 : 1;
      os << "  " << std::left << std::setw(34) << s.str() << std::right
         << " max rel err dQ/dK/dV/D " << std::scientific << std::setprecision(2) << e
         << "   |rowsum(dO*O) - rowsum(P*dP)| " << eD << std::defaultfloat
         << (ok ? "  ok" : "  CHECK FAILED") << "\n";
    }
  return failures;
}

void print_losses(std::ostream& os, const std::string& name, const std::vector<double>& l) {
  os << "  " << std::left << std::setw(26) << name << std::right << std::scientific
     << std::setprecision(4);
  for (size_t t = 0; t < l.size(); t += 4) os << " " << l[t];
  os << std::defaultfloat << "\n";
}

int training_check(std::ostream& os) {
  ::ch06::ToyProblem p;  // one head, N = 8, D = 4, 20 steps
  std::vector<double> tiled = ::ch06::train_toy(p, ::ch06::grads_from_tiled);
  std::vector<double> ref = ::ch06::train_toy(p, ::ch06::grads_from_reference);
  double diff = 0;
  int rises = 0;
  for (size_t t = 0; t < tiled.size(); ++t) {
    diff = std::max(diff, std::abs(tiled[t] - ref[t]) / (1 + ref[t]));
    if (t > 0 && tiled[t] > tiled[t - 1]) ++rises;
  }
  const bool ok = diff <= 1e-9 && rises <= 2 && tiled.back() < 0.5 * tiled.front();
  os << "\n== A training step: fit one head's Q, K, V to a target O* (N = " << p.shape.seq_q
     << ", D = " << p.shape.head_dim << ", lr = " << p.lr << ", " << p.steps << " steps) ==\n"
     << "  loss = 0.5 ||O - O*||^2 at steps 0, 4, 8, ...\n";
  print_losses(os, "tiled model gradients", tiled);
  print_losses(os, "reference gradients", ref);
  os << "  trajectories agree to " << std::scientific << std::setprecision(2) << diff
     << std::defaultfloat << " (tolerance 1e-9); loss rose at " << rises << " of " << p.steps
     << " steps; final / initial = " << std::setprecision(3) << tiled.back() / tiled.front()
     << std::setprecision(6) << (ok ? "  ok" : "  CHECK FAILED") << "\n";
  return ok ? 0 : 1;
}

// ---- GPU tier ----------------------------------------------------------------------------------
double gbps(double bytes, double ms) {
  return bytes / (ms * 1e-3) / 1e9;
}

void preprocess_bandwidth(std::ostream& os, const AttentionShape& s,
                          const std::vector<DType>& dtypes, uint64_t seed, int repeats) {
  os << "\n== The D preprocess alone: D_i = rowsum(dO_i o O_i), " << s.str() << " ==\n"
     << "  bytes = read O and dO once + write D (fp32); copy ceiling " << std::fixed
     << std::setprecision(0) << copy_bandwidth_gbps() << " GB/s\n";
  for (DType t : dtypes) {
    DeviceBuffer o = to_device(t, random_normal(s.q_numel(), derive_seed(seed, 71)));
    DeviceBuffer dout = to_device(t, random_normal(s.q_numel(), derive_seed(seed, 72)));
    DeviceBuffer delta(size_t(s.lse_numel()) * sizeof(float));
    TimingOptions timing;
    timing.repeats = repeats;
    Timing tm = time_gpu(
        [&](cudaStream_t st) {
          launch_delta_preprocess(o.data(), dout.data(), delta.as<float>(), s, t, st);
        },
        timing);
    const double bytes =
        2.0 * double(s.q_numel()) * double(dtype_size(t)) + double(s.lse_numel()) * sizeof(float);
    os << "  " << std::setw(5) << dtype_name(t) << "  " << std::setprecision(4) << tm.median_ms
       << " ms  " << std::setprecision(0) << gbps(bytes, tm.median_ms) << " GB/s\n";
  }
  os << std::defaultfloat << std::setprecision(6);
}

// ---- The preprocess: bytes in flight ----------------------------------------------------------
// Little's law: bandwidth = bytes in flight / latency. With U rows per lane group each lane issues
// 2U 16-byte loads (O and dO) before its first product, so an SM has at most resident threads *
// 32U bytes outstanding, and GB/s should rise with U until DRAM, not the loads in flight, is the
// limit. Each kernel is timed twice: after a memset flush, which leaves L2 full of dirty lines the
// timed run must write back, and after time_gpu's default clean flush (common/l2_flush.cu), which
// fa_bench uses: the difference is the flush's cost, not the kernel's.

void print_preprocess_header(std::ostream& os) {
  os << "\n  Bytes in flight (bf16). U: rows per lane group, each lane has 2U 16-byte loads in\n"
     << "  flight; KiB/SM: resident threads x 32U bytes, the most an SM has in flight. Plain\n"
     << "  loads: O without the evict-first hint. Timed after a memset flush (L2 full of dirty\n"
     << "  lines to write back) and after time_gpu's clean flush (reads only; fa_bench's).\n"
     << "  " << std::string(26 + 22 + 3 * 7, ' ') << std::setw(23) << "---- memset flush ----"
     << std::setw(23) << "---- clean flush ----"
     << "\n"
     << "  " << std::left << std::setw(26) << "shape" << std::setw(22) << "kernel" << std::right
     << std::setw(7) << "blocks" << std::setw(7) << "thr/SM" << std::setw(7) << "KiB/SM"
     << std::setw(9) << "ms" << std::setw(7) << "GB/s" << std::setw(7) << "%copy" << std::setw(9)
     << "ms" << std::setw(7) << "GB/s" << std::setw(7) << "%copy"
     << "  D\n";
}

void print_preprocess_row(std::ostream& os, const AttentionShape& s, const std::string& name,
                          const DeltaGrid* g, int unroll, const Timing& flushed,
                          const Timing& clean, double bytes, const std::string& note) {
  const double copy = copy_bandwidth_gbps();
  os << "  " << std::left << std::setw(26) << s.str() << std::setw(22) << name << std::right;
  if (g)
    os << std::setw(7) << g->blocks << std::setw(7) << g->blocks_per_sm * kDeltaBlockThreads
       << std::setw(7) << g->blocks_per_sm * kDeltaBlockThreads * 32 * unroll / 1024;
  else
    os << std::setw(7) << "-" << std::setw(7) << "-" << std::setw(7) << "-";
  const double f = gbps(bytes, flushed.median_ms), c = gbps(bytes, clean.median_ms);
  os << std::fixed << std::setprecision(4) << std::setw(9) << flushed.median_ms
     << std::setprecision(0) << std::setw(7) << f << std::setprecision(1) << std::setw(7)
     << 100 * f / copy << std::setprecision(4) << std::setw(9) << clean.median_ms
     << std::setprecision(0) << std::setw(7) << c << std::setprecision(1) << std::setw(7)
     << 100 * c / copy << "  " << note << std::defaultfloat << std::setprecision(6) << "\n";
}

// Largest |D - D_ref| / sum_c |dO_ic O_ic| over the rows, D_ref in float64 from the same inputs.
double preprocess_error(const DeviceBuffer& o, const DeviceBuffer& dout,
                        const std::vector<float>& D, const AttentionShape& s, DType t) {
  const std::vector<float> oh = to_host(t, o, size_t(s.q_numel()));
  const std::vector<float> dh = to_host(t, dout, size_t(s.q_numel()));
  double worst = 0;
  for (int64_t r = 0; r < s.lse_numel(); ++r) {
    double sum = 0, mag = 0;
    for (int64_t c = r * s.head_dim; c < (r + 1) * s.head_dim; ++c) {
      const double p = double(oh[size_t(c)]) * double(dh[size_t(c)]);
      sum += p;
      mag += std::abs(p);
    }
    const double e = std::abs(double(D[size_t(r)]) - sum) / std::max(mag, 1e-30);
    if (!std::isfinite(e)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

struct PreprocessRow {
  std::string name;
  DeltaVariant variant;
  bool launcher = false;  // launch_delta_preprocess itself, which fa_bench's rows time
};

// The table at fa_bench's bf16 shapes (16384 tokens x 2048 hidden, N = 8192), then the launcher
// on 4x the rows; returns the number of failed checks.
int preprocess_bytes_in_flight(std::ostream& os, int repeats) {
  const DType t = DType::BF16;
  const std::vector<PreprocessRow> rows = {
      {"U = 1", DeltaVariant{1, true}},
      {"U = 2", DeltaVariant{2, true}},
      {"U = 4", DeltaVariant{4, true}},
      {"U = 4, plain loads", DeltaVariant{4, false}},
      {"launcher (U = " + std::to_string(kDeltaLauncherUnroll) + ")", DeltaVariant{}, true}};
  print_preprocess_header(os);
  int failures = 0;
  int sms = 0;
  for (int64_t batch : {2, 8})
    for (int d : {64, 128}) {
      if (batch == 8 && d == 128) continue;  // 4x the rows: one shape is enough
      const AttentionShape s{batch, 2048 / d, 8192, 8192, d, false, 0.0f};
      const double bytes =
          2.0 * double(s.q_numel()) * double(dtype_size(t)) + double(s.lse_numel()) * sizeof(float);
      DeviceBuffer o(size_t(s.q_numel()) * dtype_size(t)), dout(o.bytes());
      DeviceBuffer delta(size_t(s.lse_numel()) * sizeof(float));
      fill_random_device(t, o.data(), s.q_numel(), 1, 0.5f, 1.0f);  // fa_bench's inputs
      fill_random_device(t, dout.data(), s.q_numel(), 2, 0.5f, 1.0f);
      std::vector<float> first;  // D of the first row; every other row must match it bitwise
      for (const PreprocessRow& row : rows) {
        // 4x the rows: the launcher only. A cost per run (a flush's write-back, the launch)
        // weighs 4x less there; a cost per byte (too few loads in flight) just as much.
        if (batch == 8 && !row.launcher) continue;
        DeltaGrid g;
        auto launch = [&](cudaStream_t st) {
          if (row.launcher)
            launch_delta_preprocess(o.data(), dout.data(), delta.as<float>(), s, t, st);
          else
            g = launch_delta_preprocess_variant(o.data(), dout.data(), delta.as<float>(), s, t,
                                                row.variant, st);
        };
        delta.poison();
        TimingOptions memset, clean_flush;
        memset.flush = Flush::Memset;
        memset.repeats = clean_flush.repeats = repeats;
        const Timing flushed = time_gpu(launch, memset);
        const Timing clean = time_gpu(launch, clean_flush);
        std::vector<float> D(size_t(s.lse_numel()));
        delta.download(D.data(), D.size() * sizeof(float));
        std::ostringstream note;
        if (first.empty()) {
          first = D;
          // fp32 sums of d <= 128 exact products: about d * 2^-24 of sum |dO o O| at most.
          const double err = preprocess_error(o, dout, D, s, t);
          const bool ok = err <= 1e-5;
          failures += ok ? 0 : 1;
          note << "vs float64 " << std::scientific << std::setprecision(1) << err
               << (ok ? " ok" : " CHECK FAILED");
        } else if (std::memcmp(first.data(), D.data(), D.size() * sizeof(float)) == 0) {
          note << "same bits as U = 1";
        } else {
          note << "differs from U = 1: CHECK FAILED";
          ++failures;
        }
        sms = std::max(sms, g.sms);
        print_preprocess_row(os, s, row.name, row.launcher ? nullptr : &g, row.variant.unroll,
                             flushed, clean, bytes, note.str());
      }
    }
  // What Little's law asks for at the copy ceiling with, say, 1 us of DRAM latency under load.
  if (sms > 0)
    os << "  Little's law: " << std::fixed << std::setprecision(0) << copy_bandwidth_gbps()
       << " GB/s x 1 us = " << copy_bandwidth_gbps() * 1e3 / sms / 1024 << " KiB in flight per SM ("
       << sms << " SMs)\n"
       << std::defaultfloat << std::setprecision(6);
  return failures;
}

// The training steps again, with a GPU kernel's gradients (::ch06::gpu_grad_source: O and L come
// from the CPU forward, uploaded as the values a forward kernel would have saved), for this
// chapter's fp32 and tensor-core kernels, each at its first listed dtype and head dim, on
// toy_problem's causal head (N = 64). The weights are stored in the kernel's dtype, so the
// float64-gradient trajectory it is compared with is trained in that dtype too, and the band
// follows its unit roundoff (::ch06::trajectory_band). tests/gpu/test_training_step.cpp runs the
// same check for every registered backward kernel, causal and not.
int gpu_training_check(std::ostream& os) {
  int failures = 0;
  for (const char* name : kTrainingKernels) {
    const AttentionBwdKernel* kern = find_entry<AttentionBwdKernel>(name);
    if (kern == nullptr || kern->dtypes.empty() || kern->head_dims.empty() ||
        !gpu_skip_reason(kern->min_sm).empty()) {
      os << "\n(" << name << " not available here: its GPU training check skipped)\n";
      continue;
    }
    const DType t = kern->dtypes.front();
    const ::ch06::ToyProblem p = ::ch06::toy_problem(64, kern->head_dims.front(), true, t);
    os << "\n== The training steps again, gradients from " << name << " on the GPU ("
       << p.shape.str() << ", " << dtype_name(t) << ", lr = " << std::setprecision(3) << p.lr
       << std::setprecision(6) << ", " << p.steps << " steps) ==\n";
    std::vector<double> gpu;
    try {
      gpu = ::ch06::train_toy(p, ::ch06::gpu_grad_source(*kern, t));
    } catch (const Error& e) {
      // As the harness: a refusal (or no code for this GPU) is not a wrong answer.
      bool unsupported = false;
      const std::string why = kernel_error_message(e, &unsupported);
      os << "  " << (unsupported ? "UNSUPPORTED: " : "CHECK FAILED: ") << why << "\n";
      failures += unsupported ? 0 : 1;
      continue;
    }
    const std::vector<double> cpu = ::ch06::train_toy(p, ::ch06::grads_from_reference);
    const ::ch06::TrajectoryCheck c = ::ch06::check_trajectory(gpu, cpu, t);
    print_losses(os, "CPU reference gradients", cpu);
    print_losses(os, std::string(name) + " gradients", gpu);
    os << "  " << c.str() << (c.ok() ? "  ok" : "  CHECK FAILED") << "\n";
    failures += c.ok() ? 0 : 1;
  }
  return failures;
}

int run(const std::vector<std::string>& args) {
  Cli cli("ch06_flash_backward",
          "The FlashAttention-2 backward pass: the D preprocess, dK/dV and dQ kernels.");
  AttentionDefaults defaults;
  defaults.heads = 4;
  add_attention_options(cli, defaults);
  add_kernel_options(cli, "06/", 20);
  cli.section("kernels (name, dtypes, head dims, oldest GPU, what it changes)",
              kernels_help<AttentionBwdKernel>("06/"))
      .example(printed_command("ch06.help").args);
  if (!cli.parse(args)) return cli.exit_code();

  // Every check of the command line comes before any work, so a mistake exits 2 at once.
  const AttentionOptions req = read_attention_options(cli);
  const AttentionShape shape = req.shape;
  const std::vector<DType>& dtypes = req.dtypes;
  std::vector<const AttentionBwdKernel*> kernels =
      cli.get("kernel") == "auto" ? dispatch_kernels<AttentionBwdKernel>(req, std::cout)
                                  : select_kernels<AttentionBwdKernel>("06/", cli.get("kernel"));
  require_supported(kernels, req, cli.get("kernel") != "all");
  // The main path (06/v1 .. v5) before the tuning steps (06/t04 .. t12), each in ladder order.
  std::stable_partition(kernels.begin(), kernels.end(),
                        [](const AttentionBwdKernel* k) { return k->name.rfind("06/t", 0) != 0; });
  const int repeats = static_cast<int>(cli.get_int("repeats"));
  for (DType t : dtypes)
    require_fits_in_gpu_memory(attention_bwd_bytes(shape, t),
                               "the backward pass at " + shape.str());
  print_chapter_header(std::cout, "06", "the backward pass", cli);
  const uint64_t seed = cli.seed();

  // 1. CPU tier.
  int failures =
      unless_exercise_todo([&] { return tiled_model_check(std::cout, seed); }, std::cout);
  failures += unless_exercise_todo([] { return training_check(std::cout); }, std::cout);
  if (!have_gpu()) {
    print_no_gpu(std::cout,
                 "the backward kernel ladder, the preprocess bandwidth and the GPU "
                 "training check");
    return failures ? 1 : 0;
  }

  // 2. The ladder.
  std::vector<RunResult> rows;
  RunOptions opt;
  opt.seed = seed;
  opt.timing.repeats = repeats;
  opt.forward_kernel = kForwardHelper;
  // The first and the last (batch, head) are compared with the float64 reference: it keeps the
  // tour fast. tests/gpu/ checks every head on the ragged shapes.
  opt.check_heads = 2;
  for (DType t : dtypes)
    for (bool causal : req.causal)
      for (const AttentionBwdKernel* k : kernels) {
        if (!supports(k->dtypes, t)) continue;  // only the dtypes a kernel lists
        AttentionShape s = shape;
        s.causal = causal;
        rows.push_back(run_attention_bwd(*k, s, t, opt));
      }
  print_table(std::cout, "06: backward kernels (O and L from " + std::string(kForwardHelper) + ")",
              rows);
  failures += print_failures(std::cout, rows);

  // 3. The preprocess on its own, and the training check.
  preprocess_bandwidth(std::cout, shape, dtypes, seed, repeats);
  failures += preprocess_bytes_in_flight(std::cout, repeats);
  failures += gpu_training_check(std::cout);
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace fa::ch06

FA_REGISTER(Chapter, {"06", "the backward pass", fa::ch06::run});
