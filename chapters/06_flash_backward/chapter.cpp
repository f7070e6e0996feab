// Chapter 06: the backward pass. The program body (ch06_flash_backward, and the tour).
//
//   CPU tier  the tiled FlashAttention-2 backward (ch06_cpu_model.cpp) against the float64
//             reference on ragged shapes; the identity rowsum(dO o O) = rowsum(P o dP); a few
//             steps of gradient descent on a toy head with tiled vs reference gradients.
//   GPU tier  every 06/ backward kernel through the harness (O and L from 06/forward_helper, so
//             this program needs no other chapter), causal and not, for each dtype it lists;
//             the D preprocess on its own in GB/s; the same training steps with the GPU's
//             gradients (06/v1_fp32) against the CPU's.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "buffer.h"
#include "ceilings.h"
#include "ch06_cpu_model.h"
#include "ch06_preprocess.h"
#include "chapter.h"
#include "check.h"
#include "gpu.h"
#include "harness.h"
#include "random.h"
#include "reference.h"
#include "timing.h"

namespace fa::ch06 {
namespace {

const char* kForwardHelper = "06/forward_helper";
const char* kTrainingKernel = "06/v1_fp32";

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
void preprocess_bandwidth(std::ostream& os, const AttentionShape& s,
                          const std::vector<DType>& dtypes, uint64_t seed) {
  os << "\n== The D preprocess alone: D_i = rowsum(dO_i o O_i), " << s.str() << " ==\n"
     << "  bytes = read O and dO once + write D (fp32); copy ceiling " << std::fixed
     << std::setprecision(0) << copy_bandwidth_gbps() << " GB/s\n";
  for (DType t : dtypes) {
    DeviceBuffer o = to_device(t, random_normal(s.q_numel(), derive_seed(seed, 71)));
    DeviceBuffer dout = to_device(t, random_normal(s.q_numel(), derive_seed(seed, 72)));
    DeviceBuffer delta(size_t(s.lse_numel()) * sizeof(float));
    Timing tm = time_gpu([&](cudaStream_t st) {
      launch_delta_preprocess(o.data(), dout.data(), delta.as<float>(), s, t, st);
    });
    const double bytes =
        2.0 * double(s.q_numel()) * double(dtype_size(t)) + double(s.lse_numel()) * sizeof(float);
    os << "  " << std::setw(5) << dtype_name(t) << "  " << std::setprecision(4) << tm.median_ms
       << " ms  " << std::setprecision(0) << bytes / (tm.median_ms * 1e-3) / 1e9 << " GB/s\n";
  }
  os << std::defaultfloat << std::setprecision(6);
}

// Gradients of the toy problem from a registered GPU backward kernel (fp32). O and L come from
// the CPU forward, uploaded as the fp32 values a forward kernel would have saved.
::ch06::Grads gpu_grads(const AttentionBwdKernel& kern, const std::vector<float>& q,
                        const std::vector<float>& k, const std::vector<float>& v,
                        const std::vector<float>& dO, const std::vector<double>& O,
                        const std::vector<double>& L, const AttentionShape& s) {
  std::vector<float> Of(O.begin(), O.end()), Lf(L.begin(), L.end());
  DeviceBuffer bq = to_device(DType::F32, q), bk = to_device(DType::F32, k),
               bv = to_device(DType::F32, v), bdO = to_device(DType::F32, dO),
               bO = to_device(DType::F32, Of), bL = to_device(DType::F32, Lf);
  DeviceBuffer gq(size_t(s.q_numel()) * 4), gk(size_t(s.k_numel()) * 4),
      gv(size_t(s.k_numel()) * 4), gD(size_t(s.lse_numel()) * 4), ws(size_t(s.q_numel()) * 4);
  ws.zero();
  AttentionBwdArgs a;
  a.q = bq.data();
  a.k = bk.data();
  a.v = bv.data();
  a.o = bO.data();
  a.dout = bdO.data();
  a.lse = bL.as<float>();
  a.dq = gq.data();
  a.dk = gk.data();
  a.dv = gv.data();
  a.delta = gD.as<float>();
  a.workspace = ws.as<float>();
  a.shape = s;
  a.dtype = DType::F32;
  kern.run(a, nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  auto back = [](const DeviceBuffer& b, int64_t n) {
    std::vector<float> f = to_host(DType::F32, b, size_t(n));
    return std::vector<double>(f.begin(), f.end());
  };
  return {back(gq, s.q_numel()), back(gk, s.k_numel()), back(gv, s.k_numel()),
          back(gD, s.lse_numel())};
}

int gpu_training_check(std::ostream& os) {
  const AttentionBwdKernel* kern = find_entry<AttentionBwdKernel>(kTrainingKernel);
  if (kern == nullptr || !gpu_skip_reason(kern->min_sm).empty()) {
    os << "\n(" << kTrainingKernel << " not available here: GPU training check skipped)\n";
    return 0;
  }
  ::ch06::ToyProblem p;
  p.shape = AttentionShape{1, 1, 16, 16, 32, true, 0.0f};  // a head dim the kernel has
  p.lr = 0.1;  // larger scores at d = 32: a smaller step keeps the descent smooth (monotonic)
  std::vector<double> cpu = ::ch06::train_toy(p, ::ch06::grads_from_reference);
  std::vector<double> gpu = ::ch06::train_toy(
      p,
      [&](const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
          const std::vector<float>& dO, const std::vector<double>& O, const std::vector<double>& L,
          const AttentionShape& s) { return gpu_grads(*kern, q, k, v, dO, O, L, s); });
  double diff = 0;
  for (size_t t = 0; t < cpu.size(); ++t)
    diff = std::max(diff, std::abs(gpu[t] - cpu[t]) / (1e-3 + cpu[t]));
  const double tol = 1e-4;  // fp32 gradients, 20 steps
  const bool ok = diff <= tol && gpu.back() < gpu.front();
  os << "\n== The training steps again, gradients from " << kTrainingKernel << " on the GPU ("
     << p.shape.str() << ") ==\n";
  print_losses(os, "CPU reference gradients", cpu);
  print_losses(os, std::string(kTrainingKernel) + " gradients", gpu);
  os << "  largest relative difference of the losses " << std::scientific << std::setprecision(2)
     << diff << std::defaultfloat << std::setprecision(6) << " (tolerance " << tol << ")"
     << (ok ? "  ok" : "  CHECK FAILED") << "\n";
  return ok ? 0 : 1;
}

int run(const std::vector<std::string>& args) {
  Cli cli("ch06_flash_backward",
          "The FlashAttention-2 backward pass: the D preprocess, dK/dV and dQ kernels.");
  AttentionDefaults defaults;
  defaults.heads = 4;
  add_attention_options(cli, defaults);
  add_kernel_options(cli, "06/", 0);
  cli.section("kernels (name, dtypes, head dims, oldest GPU, what it changes)",
              kernels_help<AttentionBwdKernel>("06/"))
      .example(printed_command("ch06.help").args);
  if (!cli.parse(args)) return cli.exit_code();

  // Every check of the command line comes before any work, so a mistake exits 2 at once.
  const AttentionOptions req = read_attention_options(cli);
  const AttentionShape shape = req.shape;
  const std::vector<DType>& dtypes = req.dtypes;
  std::vector<const AttentionBwdKernel*> kernels =
      select_kernels<AttentionBwdKernel>("06/", cli.get("kernel"));
  require_supported(kernels, req, cli.get("kernel") != "all");
  for (DType t : dtypes)
    require_fits_in_gpu_memory(attention_bwd_bytes(shape, t),
                               "the backward pass at " + shape.str());
  print_chapter_header(std::cout, "06", "the backward pass", cli);
  const uint64_t seed = cli.seed();

  // 1. CPU tier.
  int failures = tiled_model_check(std::cout, seed);
  failures += training_check(std::cout);
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
  preprocess_bandwidth(std::cout, shape, dtypes, seed);
  failures += gpu_training_check(std::cout);
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace fa::ch06

FA_REGISTER(Chapter, {"06", "the backward pass", fa::ch06::run});
