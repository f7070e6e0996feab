// Chapter 05: the fused FlashAttention forward kernel.
//
// The program, in the order it runs:
//   1. CPU tier: the tiled FlashAttention-2 algorithm (ch05_cpu_model.cpp) against the float64
//      reference, plus the wrong "per-block softmax" to show why the running (m, l) is needed.
//   2. The memory bill of standard attention for the chosen shape (the N x N matrix S).
//   3. GPU: the main path's forward kernels, 05/v0 to 05/v5 (the materialised baseline, the scalar
//      fp32 kernel, the tensor-core kernels), or the ones --kernel names (the tuning steps
//      05/tNN_... too), on the chosen shape, causal and not, then a larger bf16 D=128 timing row;
//      one ladder table per shape.
//   4. --memory_demo: N = 65536, where the baseline cannot even allocate S and the fused kernel runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ch05_cpu_model.h"
#include "chapter.h"
#include "check.h"
#include "exercise.h"
#include "gpu.h"
#include "harness.h"
#include "random.h"
#include "reference.h"

namespace {

using fa::AttentionFwdKernel;
using fa::AttentionShape;
using fa::DType;

constexpr const char* kBaselineName = "05/v0_materialized";
constexpr const char* kMainPath = "05/v";  // the main path's rungs; tuning/'s steps are 05/tNN_...

// Max |a - b| over two arrays, where equal infinities (L = -inf rows) count as 0.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && a[i] == b[i]) continue;
    const double d = std::fabs(a[i] - b[i]);
    if (!(d <= worst)) worst = d;  // NaN propagates as a failure (worst becomes NaN)
  }
  return worst;
}

// ---- 1. The CPU model of the tiled algorithm. Returns the number of failed checks. ----------
int cpu_model_checks(uint64_t seed) {
  std::cout << "\n== CPU model: FlashAttention-2 tile loops vs the float64 reference ==\n";
  int failures = 0;
  auto draw = [seed](int64_t n, uint64_t stream) {
    return fa::random_normal(n, fa::derive_seed(seed, stream));  // mean 0.5, std 1
  };
  struct Case {
    AttentionShape s;
    int64_t Br, Bc;
  };
  // Ragged on purpose: the tiles divide neither seq_q nor seq_k, and seq_q != seq_k both ways.
  const std::vector<Case> cases = {
      {{1, 2, 77, 131, 32, false, 0.0f}, 16, 24},
      {{1, 2, 77, 131, 32, true, 0.0f}, 16, 24},
      {{1, 2, 131, 77, 32, true, 0.0f}, 32, 16},  // 54 rows see no key: O = 0, L = -inf
  };
  std::cout << "  shape                                         Br  Bc  max|O err|  max|L err|"
               "  tiles full/masked/skipped\n";
  for (const Case& c : cases) {
    const AttentionShape& s = c.s;
    std::vector<float> q = draw(s.q_numel(), 1);
    std::vector<float> k = draw(s.k_numel(), 2);
    std::vector<float> v = draw(s.k_numel(), 3);
    fa::AttentionFwdRef ref = fa::attention_forward_ref(q.data(), k.data(), v.data(), s);
    fa::ch05::TiledForward got =
        fa::ch05::flash_forward_model<float>(q.data(), k.data(), v.data(), s, c.Br, c.Bc);
    const double eO = max_abs_diff(got.O, ref.O), eL = max_abs_diff(got.L, ref.L);
    const bool ok = eO <= 1e-4 && eL <= 1e-4;  // float accumulation: ~1e-6 expected
    failures += ok ? 0 : 1;
    std::printf("  %-45s %3lld %3lld  %10.2e  %10.2e  %lld/%lld/%lld %s\n", s.str().c_str(),
                (long long)c.Br, (long long)c.Bc, eO, eL, (long long)got.tiles.full,
                (long long)got.tiles.masked, (long long)got.tiles.skipped,
                ok ? "" : " <-- FAILED (tolerance 1e-4)");
  }

  // Why the running statistics matter: normalising every K/V tile on its own is wrong as soon as
  // there is more than one tile.
  {
    AttentionShape s{1, 1, 64, 256, 32, false, 0.0f};
    std::vector<float> q = draw(s.q_numel(), 4);
    std::vector<float> k = draw(s.k_numel(), 5);
    std::vector<float> v = draw(s.k_numel(), 6);
    fa::AttentionFwdRef ref = fa::attention_forward_ref(q.data(), k.data(), v.data(), s);
    fa::HeadView h = fa::head_view(s, q.data(), k.data(), v.data(), 0);
    std::vector<double> wrong(s.q_numel());
    fa::ch05::per_block_softmax_wrong_head(h, 64, wrong.data());
    const double e = max_abs_diff(wrong, ref.O);
    std::printf("  per-block softmax (the wrong way, 4 tiles of 64 keys): max|O err| = %.2e %s\n",
                e, e > 1e-2 ? "(wrong, as expected)" : "<-- FAILED: it should be visibly wrong");
    failures += e > 1e-2 ? 0 : 1;
  }
  return failures;
}

// ---- 2. What standard attention must store for a shape. --------------------------------------
void print_memory_bill(const AttentionShape& s, DType t) {
  const double s_bytes = double(s.bh()) * double(s.seq_q) * double(s.seq_k) * 4.0;
  const double p_bytes = t == DType::F32 ? 0.0 : double(s.bh()) * s.seq_q * s.seq_k * 2.0;
  const double io_bytes =
      double(2 * s.q_numel() + 2 * s.k_numel()) * fa::dtype_size(t) + double(s.lse_numel()) * 4.0;
  std::cout << "  " << s.str() << " " << fa::dtype_name(t) << ": standard attention stores S ("
            << fa::format_bytes(s_bytes) << ")"
            << (p_bytes > 0 ? " and P (" + fa::format_bytes(p_bytes) + ")" : "")
            << "; the fused kernels touch only Q, K, V, O, L (" << fa::format_bytes(io_bytes)
            << ")\n";
}

bool is_tensor_core_kernel(const AttentionFwdKernel& k) {
  return k.name != kBaselineName &&
         (fa::supports(k.dtypes, DType::BF16) || fa::supports(k.dtypes, DType::F16));
}

// ---- 4. --memory_demo. -------------------------------------------------------------------------
int memory_demo(const fa::RunOptions& base, const std::vector<bool>& causals) {
  AttentionShape s{1, 16, 65536, 65536, 128, false, 0.0f};
  const DType t = DType::BF16;
  std::cout << "\n== Memory demo: N = 65536, bf16, D = 128 ==\n";
  print_memory_bill(s, t);
  const AttentionFwdKernel* fused = fa::best_forward_kernel(t, int(s.head_dim));
  if (fused != nullptr && fused->name == kBaselineName) fused = nullptr;
  const AttentionFwdKernel* baseline = fa::find_entry<AttentionFwdKernel>(kBaselineName);
  std::vector<fa::RunResult> rows;
  fa::RunOptions o = base;
  o.check_heads = 1;  // the harness also samples query rows at this length
  for (bool causal : causals) {
    s.causal = causal;
    if (baseline != nullptr) {
      fa::RunOptions no_time = o;
      rows.push_back(fa::run_attention_fwd(*baseline, s, t, no_time));
    }
    if (fused != nullptr) rows.push_back(fa::run_attention_fwd(*fused, s, t, o));
  }
  fa::print_table(std::cout, "memory demo (B=1, H=16, N=65536, D=128, bf16)", rows);
  if (fused == nullptr) {
    std::cout << "  no fused tensor-core forward kernel for bf16 D=128 is registered yet\n";
  } else {
    const double io = double(2 * s.q_numel() + 2 * s.k_numel()) * 2.0 + s.lse_numel() * 4.0;
    std::cout << "  " << fused->name << " needs only its inputs and outputs: q, k, v, o ("
              << fa::format_bytes(double(2 * s.q_numel() + 2 * s.k_numel()) * 2.0) << ") + L ("
              << fa::format_bytes(s.lse_numel() * 4.0) << ") = " << fa::format_bytes(io)
              << " of device memory, O(N);"
              << " S alone would be " << fa::format_bytes(double(s.bh()) * s.seq_q * s.seq_k * 4.0)
              << ", O(N^2).\n";
  }
  // The baseline is expected to refuse (UNSUPPORTED) at this size; on a GPU that can hold S, say so.
  for (const fa::RunResult& r : rows)
    if (r.kernel == kBaselineName && r.status == fa::Status::Pass)
      std::cout << "  note: the baseline ran: this GPU holds the whole S matrix\n";
  return fa::print_failures(std::cout, rows);
}

int run(const std::vector<std::string>& args) {
  fa::Cli cli("ch05_flash_forward",
              "The fused FlashAttention forward kernel: from the N x N baseline to tiles + online "
              "softmax.");
  fa::add_attention_options(cli, {});
  fa::add_kernel_options(cli, kMainPath, 20);
  cli.option("check_heads", fa::Cli::Int, "4",
             "heads checked against the CPU reference (0 = automatic)")
      .at_least(0)
      .option("big_seq", fa::Cli::Int, "4096",
              "N of the extra bf16 D=128 timing row at B=4, H=16 (0 = skip)")
      .at_least(0)
      .flag("memory_demo",
            "run at N=65536 (B=1, H=16, D=128, bf16): the baseline cannot, the "
            "fused kernel can")
      .section("kernels (name, dtypes, head dims, oldest GPU, what it changes)",
               fa::kernels_help<AttentionFwdKernel>("05/"))
      .example(fa::printed_command("ch05.help").args);
  if (!cli.parse(args)) return cli.exit_code();

  // Every check of the command line comes before any work, so a mistake exits 2 at once.
  const fa::AttentionOptions req = fa::read_attention_options(cli);
  AttentionShape shape = req.shape;
  const std::vector<bool>& causals = req.causal;
  const std::vector<DType>& dtypes = req.dtypes;
  // By default the main path; any 05 kernel by name (a tuning step, tuning/README.md).
  const std::string wanted = cli.get("kernel");
  const std::vector<const AttentionFwdKernel*> kernels =
      wanted == "auto"                    ? fa::dispatch_kernels<AttentionFwdKernel>(req, std::cout)
      : wanted.empty() || wanted == "all" ? fa::entries_with_prefix<AttentionFwdKernel>(kMainPath)
                                          : fa::select_kernels<AttentionFwdKernel>("05/", wanted);
  fa::require_supported(kernels, req, cli.get("kernel") != "all");
  for (DType t : dtypes)
    fa::require_fits_in_gpu_memory(fa::attention_fwd_bytes(shape, t),
                                   "the forward pass at " + shape.str());
  const int64_t repeats = cli.get_int("repeats");
  const int64_t check_heads = cli.get_int("check_heads");
  const int64_t big_seq = cli.get_int("big_seq");
  if (big_seq > 0)
    fa::require_fits_in_gpu_memory(
        fa::attention_fwd_bytes({4, 16, big_seq, big_seq, 128, false, 0.0f}, DType::BF16),
        "--big_seq=" + std::to_string(big_seq));
  const bool demo = cli.get_bool("memory_demo");
  fa::print_chapter_header(std::cout, "05", "the fused forward kernel", cli);

  // 1. CPU tier.
  int failures = fa::unless_exercise_todo([&] { return cpu_model_checks(cli.seed()); }, std::cout);

  // 2. The N x N bill.
  std::cout << "\n== Memory: the N x N matrix of standard attention ==\n";
  for (DType t : dtypes) print_memory_bill(shape, t);
  if (big_seq > 0) print_memory_bill({4, 16, big_seq, big_seq, 128, false, 0.0f}, DType::BF16);

  if (!fa::have_gpu()) {
    fa::print_no_gpu(std::cout, "the kernel ladder and the memory demo");
    return failures ? 1 : 0;
  }

  // 3. The ladder.
  fa::RunOptions opt;
  opt.seed = cli.seed();
  opt.timing.repeats = static_cast<int>(repeats);
  opt.check_heads = check_heads;

  std::vector<fa::RunResult> all;
  std::vector<fa::RunResult> rows;
  for (DType t : dtypes)
    for (bool causal : causals)
      for (const AttentionFwdKernel* k : kernels) {
        if (!fa::supports(k->dtypes, t)) continue;  // e.g. v1 in bf16: not a row worth printing
        AttentionShape s = shape;
        s.causal = causal;
        rows.push_back(fa::run_attention_fwd(*k, s, t, opt));
      }
  fa::print_table(std::cout, "05: attention forward, TFLOP/s (4*B*H*D per visible query-key pair)",
                  rows);
  all.insert(all.end(), rows.begin(), rows.end());

  if (big_seq > 0) {
    rows.clear();
    fa::RunOptions big = opt;
    big.check_heads = 0;  // automatic: the harness samples heads and rows at this size
    for (bool causal : causals)
      for (const AttentionFwdKernel* k : kernels) {
        if (!fa::supports(k->dtypes, DType::BF16) || !fa::supports(k->head_dims, 128)) continue;
        if (!is_tensor_core_kernel(*k) && k->name != kBaselineName) continue;
        rows.push_back(fa::run_attention_fwd(*k, {4, 16, big_seq, big_seq, 128, causal, 0.0f},
                                             DType::BF16, big));
      }
    if (!rows.empty()) {
      fa::print_table(std::cout, "05: bf16 D=128 at B=4, H=16, N=" + std::to_string(big_seq), rows);
      all.insert(all.end(), rows.begin(), rows.end());
    }
  }

  int gpu_failures = fa::print_failures(std::cout, all);
  // 4. The memory demo.
  if (demo)
    gpu_failures += memory_demo(opt, causals.size() == 2 ? std::vector<bool>{false} : causals);
  return failures + gpu_failures > 0 ? 1 : 0;
}

}  // namespace

FA_REGISTER(Chapter, {"05", "the fused forward kernel", run});
