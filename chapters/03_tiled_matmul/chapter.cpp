// Chapter 03: tiled matmul. The program body (ch03_tiled_matmul, and the tour).
//
//   CPU tier  the block-matrix view (S = Q K^T, O = S V tile by tile) checked against the float64
//             reference; the wave arithmetic of the lecture's 1792 vs 1793 example.
//   GPU tier  every main-path 03/v kernel (or those --kernel names, tuning/'s steps included)
//             checked on a ragged shape, then timed at M x N x K (4096^3) beside cuBLAS
//             (ref/cublas, same shape and dtype, same run): "% of cuBLAS".
//   --explain=N   tiles, waves and last-wave occupancy of our tensor-core kernel at N x N x N.
//   --sweep=a:b:s square sizes a..b: cuBLAS bf16 vs our best tensor-core kernel, with the wave
//                 numbers, written to --csv (plot with plot_mystery.py). Never part of the tour.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "buffer.h"
#include "ceilings.h"
#include "ch03_block_cpu.h"
#include "ch03_gemm.h"
#include "ch03_waves.h"
#include "chapter.h"
#include "check.h"
#include "gpu.h"
#include "harness.h"
#include "random.h"
#include "reference.h"
#include "timing.h"

namespace fa::ch03 {
namespace {

constexpr int kAssumedSms = 132;  // an H100 SXM, when there is no GPU to ask

// ---- CPU tier ----------------------------------------------------------------------------------
// Returns the number of failed checks.
int block_matmul_demo(std::ostream& os, uint64_t seed) {
  const int64_t n_q = 100, n_k = 150, d = 64;  // ragged against the 32x32 blocks on purpose
  const BlockTiles tiles{32, 32, 32};
  std::vector<float> Q = random_normal(n_q * d, derive_seed(seed, 31));
  std::vector<float> K = random_normal(n_k * d, derive_seed(seed, 32));
  std::vector<float> V = random_normal(n_k * d, derive_seed(seed, 33));
  std::vector<float> S;
  std::vector<float> O = block_qkv(Q.data(), K.data(), V.data(), n_q, n_k, d, tiles, &S);

  // References: S = Q K^T with K^T written out, O = S V from the blocked S (float64 Eigen).
  std::vector<float> Kt(static_cast<size_t>(d * n_k));
  for (int64_t j = 0; j < n_k; ++j)
    for (int64_t c = 0; c < d; ++c) Kt[c * n_k + j] = K[j * d + c];
  std::vector<double> S_ref = gemm_ref(Q.data(), Kt.data(), GemmShape{n_q, n_k, d});
  std::vector<double> O_ref = gemm_ref(S.data(), V.data(), GemmShape{n_q, d, n_k});
  auto max_rel = [](const std::vector<float>& got, const std::vector<double>& ref) {
    double err = 0, scale = 1e-30;
    for (size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, std::abs(double(got[i]) - ref[i]));
      scale = std::max(scale, std::abs(ref[i]));
    }
    return err / scale;
  };
  const double eS = max_rel(S, S_ref), eO = max_rel(O, O_ref);
  const double tol = 1e-5;  // fp32 accumulation over at most 150 terms, relative to the max
  BlockMatmulResult sm = block_matmul(Q.data(), K.data(), n_q, n_k, d, true, tiles);
  os << "\n== The block-matrix view (CPU model, " << tiles.bm << "x" << tiles.bn << "x" << tiles.bk
     << " blocks) ==\n"
     << "S = Q K^T  [" << n_q << " x " << n_k << "], O = S V [" << n_q << " x " << d
     << "], every product done block by block\n"
     << "  max |S - ref| / max|ref| = " << std::scientific << std::setprecision(2) << eS
     << ", O: " << eO << std::defaultfloat << "  (tolerance " << tol << ")\n"
     << "  S needed " << sm.tile_products
     << " block products; elements loaded into tiles: " << sm.elements_loaded << " vs "
     << naive_elements_loaded(n_q, n_k, d) << " for one-output-at-a-time (" << std::fixed
     << std::setprecision(1)
     << double(naive_elements_loaded(n_q, n_k, d)) / double(sm.elements_loaded) << "x less)\n"
     << std::defaultfloat;
  int failures = 0;
  if (!(eS <= tol) || !(eO <= tol)) {
    os << "  CHECK FAILED: the block matmul disagrees with the reference\n";
    ++failures;
  }
  return failures;
}

void wave_demo(std::ostream& os) {
  os << "\n== Wave quantization (the lecture's example: A100, 108 SMs, 256x128 tiles) ==\n";
  for (int64_t n : {1792, 1793}) os << "  " << wave_info(n, n, 256, 128, 108, 1).str() << "\n";
  os << "  (" << printed_command("ch03.explain").line()
     << " does this for our tensor-core kernel on this GPU; --sweep measures it)\n";
}

// The fastest tensor-core kernel that runs on this GPU (v6 on an H100/H200, else v5); without a
// GPU, the one an H100 would run. The mystery sweep times it against cuBLAS.
const TensorCoreGemmInfo& best_tensor_core_gemm() {
#if FA_CH03_HAVE_SM90A
  if (!have_gpu() || gpu_info().sm == 90) return v6_gemm_info();
#endif
  return v5_gemm_info();
}

// v6 loads with TMA only when rows are whole 16-byte multiples (n % 8 == 0 for a square n);
// other sizes run v5's mma.sync code, with v5's tiles and waves.
const TensorCoreGemmInfo& gemm_that_runs(int64_t n) {
  const TensorCoreGemmInfo& best = best_tensor_core_gemm();
  return n % 8 != 0 ? v5_gemm_info() : best;
}

bool usable_gpu() {
  return have_gpu() && gpu_skip_reason(80).empty();
}
int sm_count() {
  return usable_gpu() ? gpu_info().sm_count : kAssumedSms;
}

// Resident blocks of `k` per SM: the occupancy calculator on this GPU, or the kernel's own
// assumption for an H100 when there is none.
int blocks_per_sm(const TensorCoreGemmInfo& k) {
  return usable_gpu() ? std::max(1, k.blocks_per_sm(DType::BF16)) : k.assumed_blocks_per_sm;
}

std::string machine_line(const TensorCoreGemmInfo& k) {
  const std::string blocks = std::to_string(blocks_per_sm(k)) + " blocks of " + k.name + " per SM";
  if (usable_gpu())
    return gpu_info().name + " (" + std::to_string(sm_count()) + " SMs, " + blocks +
           " from the occupancy calculator)";
  return "no usable GPU here: assuming an H100 with 132 SMs and " + blocks;
}

WaveInfo waves_of(int64_t n) {
  const TensorCoreGemmInfo& k = gemm_that_runs(n);
  return wave_info(n, n, k.tile_m, k.tile_n, sm_count(), blocks_per_sm(k));
}

void explain(std::ostream& os, int64_t n) {
  const TensorCoreGemmInfo& best = best_tensor_core_gemm();
  os << "\n== --explain=" << n << ": tiles and waves of " << best.name << " ==\n"
     << "  " << machine_line(best) << "\n";
  for (int64_t m : {n - 1, n, n + 1}) {
    if (m <= 0) continue;
    os << "  " << waves_of(m).str();
    if (&gemm_that_runs(m) != &best) os << "  [" << m << " % 8 != 0: runs v5's code and tiles]";
    os << "\n";
  }
  os << "  for comparison, one 256x128 tile per SM (a typical cuBLAS tile; the one it really\n"
     << "  picks is its own choice): " << wave_info(n, n, 256, 128, sm_count(), 1).str() << "\n";
}

// ---- GPU tier: the sweep -----------------------------------------------------------------------
int sweep(std::ostream& os, const SweepRange& range, const std::string& csv_path, uint64_t seed,
          int repeats) {
  const bool gpu = usable_gpu();
  const TensorCoreGemmInfo& best = best_tensor_core_gemm();
  const GemmKernel* ours = find_entry<GemmKernel>(best.name);
  FA_REQUIRE(ours != nullptr, "the tensor-core kernel is not linked in");
  os << "\n== Sweep " << range.start << ".." << range.stop << " step " << range.step
     << ": cuBLAS bf16 vs " << ours->name << " ==\n  " << machine_line(best) << "\n";

  // --csv=build/mystery.csv: make the folder first, as the README's command expects.
  const std::filesystem::path folder = std::filesystem::path(csv_path).parent_path();
  std::error_code ignored;  // a folder that cannot be made fails the open below, which says so
  if (!folder.empty()) std::filesystem::create_directories(folder, ignored);
  std::ofstream csv(csv_path);
  if (!csv) throw Error("cannot write --csv file '" + csv_path + "'");
  csv << "n,cublas_tflops,ours_tflops,tile_m,tile_n,tiles,sms,blocks_per_sm,waves,"
         "waves_launched,last_wave_tiles,last_wave_occupancy,useful_fraction,kernel\n";

  DeviceBuffer dA, dB, dC;
  if (gpu) {
    const int64_t n_max = range.stop;
    dA = to_device(DType::BF16, random_normal(n_max * n_max, derive_seed(seed, 41)));
    dB = to_device(DType::BF16, random_normal(n_max * n_max, derive_seed(seed, 42)));
    dC = DeviceBuffer(size_t(n_max * n_max) * sizeof(float));
  } else {
    os << "  no GPU: writing the wave columns only (TFLOP/s left empty)\n";
  }
  TimingOptions topt;
  topt.warmup = 2;
  topt.repeats = repeats;
  int64_t count = 0;
  for (int64_t n = range.start; n <= range.stop; n += range.step, ++count) {
    const WaveInfo w = waves_of(n);
    std::string cub, our;
    if (gpu) {
      // The leading n*n elements of the big buffers are an n x n row-major matrix.
      const GemmShape s{n, n, n};
      double t_cub = time_gpu(
                         [&](cudaStream_t st) {
                           cublas_gemm(dA.data(), dB.data(), dC.as<float>(), s, DType::BF16, st);
                         },
                         topt)
                         .median_ms;
      double t_our = time_gpu(
                         [&](cudaStream_t st) {
                           ours->run(dA.data(), dB.data(), dC.as<float>(), s, DType::BF16, st);
                         },
                         topt)
                         .median_ms;
      std::ostringstream a, b;
      a << std::fixed << std::setprecision(2) << s.flops() / (t_cub * 1e-3) / 1e12;
      b << std::fixed << std::setprecision(2) << s.flops() / (t_our * 1e-3) / 1e12;
      cub = a.str();
      our = b.str();
    }
    csv << n << "," << cub << "," << our << "," << w.tile_m << "," << w.tile_n << "," << w.tiles
        << "," << w.sms << "," << w.blocks_per_sm << "," << w.waves << "," << w.waves_launched
        << "," << w.last_wave_tiles << "," << w.last_wave_occupancy << "," << w.useful_fraction
        << "," << gemm_that_runs(n).name << "\n";  // the code that ran (v6 falls back to v5)
    if (gpu && (count < 8 || n + range.step > range.stop))
      os << "  n=" << n << "  cuBLAS " << cub << "  ours " << our << " TFLOP/s  waves "
         << std::fixed << std::setprecision(2) << w.waves << std::defaultfloat << "\n";
  }
  os << "  wrote " << count << " sizes to " << csv_path
     << " (python3 chapters/03_tiled_matmul/plot_mystery.py " << csv_path << ")\n";
  return 0;
}

// ---- GPU tier: the ladder ----------------------------------------------------------------------
int run(const std::vector<std::string>& args) {
  Cli cli("ch03_tiled_matmul", "GEMM from one thread per output to the tensor cores.");
  cli.option("m", Cli::Int, "4096", "M of the timed runs: C[M, N] = A[M, K] B[K, N]")
      .at_least(1)
      .option("n", Cli::Int, "4096", "N of the timed runs")
      .at_least(1)
      .option("k", Cli::Int, "4096", "K of the timed runs")
      .at_least(1)
      .option("check", Cli::IntList, "509,515,521",
              "M,N,K of the correctness runs (ragged on purpose)")
      .at_least(1)
      .option("dtype", Cli::TextList, "fp32,bf16,fp16",
              "dtypes to run, or all (each kernel takes those it supports)");
  add_kernel_options(cli, "03/", 20);
  cli.option("explain", Cli::Int, "0",
             "N > 0: print tiles, waves and last-wave occupancy at N x N x N")
      .at_least(0)
      .option("sweep", Cli::Text, "",
              "start:stop[:step]: the matmul mystery sweep (cuBLAS bf16 vs ours)")
      .option("csv", Cli::Text, "ch03_mystery.csv", "where --sweep writes its CSV")
      .section("kernels (name, dtypes, oldest GPU, what it changes)",
               kernels_help<GemmKernel>("03/"))
      .example(printed_command("ch03.help").args);
  if (!cli.parse(args)) return cli.exit_code();

  // Validate everything before doing any work, so a bad value exits 2 at once.
  const GemmShape time_shape{cli.get_int("m"), cli.get_int("n"), cli.get_int("k")};
  const std::vector<int64_t> chk = cli.get_int_list("check");
  if (chk.size() != 3) throw UsageError("--check: expected three positive sizes M,N,K");
  const GemmShape check_shape{chk[0], chk[1], chk[2]};
  const std::vector<DType> dtypes = read_dtypes(cli);
  for (const GemmShape& g : {time_shape, check_shape})
    require_fits_in_gpu_memory(
        (double(g.M) * g.K + double(g.K) * g.N) * 4.0 + double(g.M) * g.N * 4.0,
        "the GEMM " + g.str());
  const int64_t repeats = cli.get_int("repeats");
  const int64_t explain_n = cli.get_int("explain");
  const std::string sweep_text = cli.get("sweep");
  SweepRange range;
  if (!sweep_text.empty()) {
    try {
      range = parse_sweep(sweep_text);
    } catch (const Error& e) {
      throw UsageError(e.what());  // its messages name --sweep and carry no file:line
    }
    require_fits_in_gpu_memory(double(range.stop) * range.stop * 8.0,
                               "--sweep up to " + std::to_string(range.stop));
  }
  // By default the main path (03/v1 .. 03/v6); any 03 kernel by name (a tuning step,
  // tuning/README.md).
  const std::string wanted = cli.get("kernel");
  const std::vector<const GemmKernel*> kernels = wanted.empty() || wanted == "all"
                                                     ? entries_with_prefix<GemmKernel>("03/v")
                                                     : select_kernels<GemmKernel>("03/", wanted);
  for (const GemmKernel* k : kernels) {  // a kernel named on the command line must have work
    bool runs = cli.get("kernel") == "all";
    for (DType t : dtypes) runs = runs || supports(k->dtypes, t);
    if (!runs)
      throw UsageError("--kernel=" + k->name + " cannot run " + dtype_list(dtypes) +
                       "; it takes:\n  " + describe_kernel(*k));
  }

  std::ostream& os = std::cout;
  print_chapter_header(os, "03", "tiled matmul", cli);

  // 1. CPU tier.
  int failures = block_matmul_demo(os, cli.seed());
  if (explain_n > 0)
    explain(os, explain_n);
  else
    wave_demo(os);

  // The sweep is an experiment of its own: it replaces the ladder.
  if (!sweep_text.empty()) {
    sweep(os, range, cli.get("csv"), cli.seed(), int(repeats));
    if (!have_gpu()) print_no_gpu(os, "the sweep's timings");
    return failures ? 1 : 0;
  }
  if (!have_gpu()) {
    print_no_gpu(os, "the GEMM ladder");
    return failures ? 1 : 0;
  }

  // 2. GPU tier: correctness on a ragged shape, then speed beside cuBLAS.
  const GemmKernel* cublas = find_entry<GemmKernel>("ref/cublas");
  FA_REQUIRE(cublas != nullptr, "ref/cublas is not linked in");

  RunOptions check_opt;
  check_opt.seed = cli.seed();
  check_opt.time = false;
  RunOptions time_opt;
  time_opt.seed = cli.seed();
  time_opt.check = false;
  time_opt.timing.repeats = int(repeats);

  std::vector<RunResult> checked, timed;
  std::map<DType, double> cublas_rate;  // TFLOP/s at time_shape, per dtype
  for (DType t : dtypes) {
    checked.push_back(run_gemm(*cublas, check_shape, t, check_opt));
    RunResult c = run_gemm(*cublas, time_shape, t, time_opt);
    if (c.ok() && c.tflops > 0) {
      cublas_rate[t] = c.tflops;
      c.pct = 100.0;
      c.pct_of = "cuBLAS";
    }
    timed.push_back(c);
  }
  for (const GemmKernel* k : kernels)
    for (DType t : dtypes) {
      if (!supports(k->dtypes, t)) continue;
      RunResult c = run_gemm(*k, check_shape, t, check_opt);
      checked.push_back(c);
      if (!c.ok()) continue;  // a wrong kernel's speed means nothing
      RunResult r = run_gemm(*k, time_shape, t, time_opt);
      if (r.tflops > 0 && cublas_rate.count(t)) {
        r.pct = 100.0 * r.tflops / cublas_rate[t];
        r.pct_of = "cuBLAS";
      }
      timed.push_back(r);
    }
  print_table(os, "Correctness at " + check_shape.str() + " (float64 reference)", checked);
  print_table(os,
              "Speed at " + time_shape.str() + " (median of " + std::to_string(repeats) +
                  ", L2 flushed; % of cuBLAS on the same shape and dtype)",
              timed);
  failures += print_failures(os, checked);
  failures += print_failures(os, timed);
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace fa::ch03

FA_REGISTER(Chapter, {"03", "tiled matmul", fa::ch03::run});
