// Chapter 08: decoding, split-KV ("flash-decoding") and grouped-query attention.
//
// The program, in the order it runs:
//   1. CPU tier: the split-KV algorithm (ch08_split_kv.cpp: partials per key range, merged with the
//      pair merge) against the float64 reference, for several split counts, causal and not, GQA.
//   2. The launch plan for the chosen shape: the grid without splitting, the splits, the blocks.
//   3. GPU: every "08/" kernel on the chosen shape (GB/s against the copy ceiling), next to the
//      chapter 05 forward on the same shape with heads_kv = heads (it takes no GQA), then the same
//      kernel at heads_kv = heads, heads / 4 and 1: what sharing K/V heads saves in bytes and time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "ch08_split_kv.h"
#include "chapter.h"
#include "exercise.h"
#include "gpu.h"
#include "harness.h"
#include "random.h"
#include "reference.h"

namespace {

using fa::AttentionFwdKernel;
using fa::AttentionShape;
using fa::DType;

constexpr const char* kChapter05Kernel = "05/v5_fewer_instructions";

// ---- 1. The CPU model against the float64 reference. Returns the number of failed checks. ----
int cpu_model_checks(uint64_t seed) {
  std::cout << "\n== CPU model: split the keys, merge the (m, l, o) partials, vs the float64 "
               "reference ==\n";
  struct Case {
    AttentionShape s;
    int64_t split_len;
  };
  const std::vector<Case> cases = {
      {{1, 4, 1, 1000, 32, false, 0.0f, 1}, 1000},  // one split: the plain online softmax
      {{1, 4, 1, 1000, 32, false, 0.0f, 1}, 64},    // MQA, 16 splits, the last one ragged
      {{1, 8, 2, 1000, 32, true, 0.0f, 2}, 333},    // GQA group 4, causal, splits 333 long
      {{1, 2, 16, 9, 32, true, 0.0f, 0}, 4},        // seq_q > seq_k: 7 rows see no key
  };
  int failures = 0;
  std::printf("  %-40s %9s  %10s  %10s\n", "shape", "split_len", "max|O err|", "max|L err|");
  for (const Case& c : cases) {
    const AttentionShape& s = c.s;
    std::vector<float> q = fa::random_normal(s.q_numel(), fa::derive_seed(seed, 1));
    std::vector<float> k = fa::random_normal(s.k_numel(), fa::derive_seed(seed, 2));
    std::vector<float> v = fa::random_normal(s.k_numel(), fa::derive_seed(seed, 3));
    fa::AttentionFwdRef ref = fa::attention_forward_ref(q.data(), k.data(), v.data(), s);
    double eO = 0, eL = 0;
    for (int64_t bh = 0; bh < s.bh(); ++bh) {
      fa::HeadView h = fa::head_view(s, q.data(), k.data(), v.data(), bh);
      std::vector<double> O(s.seq_q * s.head_dim), L(s.seq_q);
      fa::ch08::split_kv_forward_head(h, c.split_len, O.data(), L.data());
      for (size_t i = 0; i < O.size(); ++i)
        eO = std::max(eO, std::fabs(O[i] - ref.O[bh * O.size() + i]));
      for (size_t i = 0; i < L.size(); ++i) {
        const double r = ref.L[bh * L.size() + i];
        if (std::isinf(r) && r == L[i]) continue;  // -inf matched exactly
        eL = std::max(eL, std::isfinite(L[i]) ? std::fabs(L[i] - r) : INFINITY);
      }
    }
    const bool ok = eO <= 1e-12 && eL <= 1e-12;
    failures += ok ? 0 : 1;
    std::printf("  %-40s %9lld  %10.2e  %10.2e %s\n", s.str().c_str(), (long long)c.split_len, eO,
                eL, ok ? "" : " <-- FAILED (tolerance 1e-12)");
  }
  return failures;
}

// ---- 2. The plan. ---------------------------------------------------------------------------------
void print_plan(const AttentionShape& s) {
  const int sms = fa::have_gpu() ? fa::gpu_info().sm_count : 132;
  std::cout << "\n== The plan for " << s.str() << " (" << sms << " SMs"
            << (fa::have_gpu() ? "" : ", an H100's count: no GPU here") << ") ==\n";
  // The kernels' occupancy is measured by their launchers; here the H100's (notes/08_decoding.md):
  // 08/v1 and v2, blocks of 128 threads and 64-key tiles: 3 per SM (168 registers per thread at
  // bf16, D 128); 08/v3 and t04, one-warp blocks and 16-key steps: 6 per SM (34816 B of shared
  // memory); 08/v4, v5 and t06, four-warp blocks and 64-key tiles: 2 per SM (206 registers).
  struct Kernel {
    const char* names;
    int64_t key_tile, per_sm;
    const char* block;
    bool m16;  // rows padded to one m16 tile of the tensor cores
  };
  for (const Kernel& k : {Kernel{"08/v1, 08/v2", 64, 3, "128-thread blocks", false},
                          Kernel{"08/v3, 08/t04", 16, 6, "one-warp blocks", true},
                          Kernel{"08/v4, 08/v5, 08/t06", 64, 2, "four-warp blocks", true}}) {
    const int64_t resident = int64_t(sms) * k.per_sm;
    const fa::ch08::SplitPlan p = fa::ch08::plan_split_kv(s, k.key_tile, resident);
    std::cout << "  " << k.names << " (" << k.block << ", " << k.per_sm << " per SM):\n"
              << "    without splitting: " << p.base_blocks << " blocks (B x H_kv x row tiles of "
              << (k.m16 ? "16 (padded)" : std::to_string(p.rows_per_block))
              << " rows), each walking all " << s.seq_k
              << " keys: " << std::min<int64_t>(100, 100 * p.base_blocks / resident)
              << "% of the resident block slots busy\n"
              << "    split-KV: " << p.num_splits << " splits of " << p.split_len << " keys, "
              << p.blocks << " blocks; the " << p.num_splits
              << " partials of each row are folded by a merge kernel (v1-v5) or by the row "
                 "tile's last split block (v6)\n";
  }
}

int run(const std::vector<std::string>& args) {
  fa::Cli cli("ch08_decoding",
              "Decoding: split-KV (flash-decoding) for a few query rows against a long K/V cache, "
              "and grouped-query attention.");
  fa::AttentionDefaults d;
  d.batch = 8;
  d.heads = 32;
  d.seq_q = 1;
  d.seq_k = 32768;
  d.head_dim = 128;
  d.dtype = "bf16";
  fa::add_attention_options(cli, d);
  cli.option("heads_kv", fa::Cli::Int, "8",
             "K/V heads H_kv (GQA: H a multiple of H_kv; 1 = MQA; 0 = H)")
      .at_least(0);
  fa::add_kernel_options(cli, "08/", 20);
  cli.option("check_heads", fa::Cli::Int, "4",
             "heads checked against the CPU reference (0 = automatic)")
      .at_least(0)
      .section("kernels (name, dtypes, head dims, oldest GPU, what it changes)",
               fa::kernels_help<AttentionFwdKernel>("08/"))
      .example(fa::printed_command("ch08.help").args);
  if (!cli.parse(args)) return cli.exit_code();

  const fa::AttentionOptions req = fa::read_attention_options(cli);
  AttentionShape shape = req.shape;
  shape.heads_kv = cli.get_int("heads_kv");
  if (!shape.valid_heads())
    throw fa::UsageError("--heads=" + std::to_string(shape.heads) +
                         " must be a multiple of --heads_kv=" + std::to_string(shape.heads_kv));
  fa::AttentionOptions asked = req;
  asked.shape = shape;  // with --heads_kv
  const std::vector<const AttentionFwdKernel*> kernels =
      cli.get("kernel") == "auto"
          ? fa::dispatch_kernels<AttentionFwdKernel>(asked, std::cout)
          : fa::select_kernels<AttentionFwdKernel>("08/", cli.get("kernel"));
  fa::require_supported(kernels, req, cli.get("kernel") != "all");
  for (DType t : req.dtypes) {
    AttentionShape mha = shape;
    mha.heads_kv = 0;  // the chapter 05 row and the heads_kv = heads row
    fa::require_fits_in_gpu_memory(fa::attention_fwd_bytes(mha, t), "the forward at " + mha.str());
  }
  const int64_t repeats = cli.get_int("repeats");
  const int64_t check_heads = cli.get_int("check_heads");
  fa::print_chapter_header(std::cout, "08", "decoding: split-KV and grouped-query attention", cli);

  int failures = fa::unless_exercise_todo([&] { return cpu_model_checks(cli.seed()); }, std::cout);
  print_plan(shape);
  if (!fa::have_gpu()) {
    fa::print_no_gpu(std::cout, "the split-KV kernels and the chapter 05 comparison");
    return failures ? 1 : 0;
  }

  fa::RunOptions opt;
  opt.seed = cli.seed();
  opt.timing.repeats = static_cast<int>(repeats);
  opt.check_heads = check_heads;  // big inputs: drawn on the GPU, these heads checked
  std::vector<fa::RunResult> all, rows;
  const AttentionFwdKernel* ch05 = fa::find_entry<AttentionFwdKernel>(kChapter05Kernel);
  for (DType t : req.dtypes)
    for (bool causal : req.causal) {
      AttentionShape s = shape;
      s.causal = causal;
      for (const AttentionFwdKernel* k : kernels)
        if (fa::supports(k->dtypes, t)) rows.push_back(fa::run_attention_fwd(*k, s, t, opt));
      if (ch05 != nullptr && fa::supports(ch05->dtypes, t)) {
        AttentionShape mha = s;
        mha.heads_kv = 0;
        rows.push_back(fa::run_attention_fwd(*ch05, mha, t, opt));
      }
      std::cout << "  ran " << s.str() << " " << fa::dtype_name(t) << "\n" << std::flush;
    }
  fa::print_table(std::cout, "08: decoding forward, GB/s of Q, K, V, O, L (K, V with H_kv heads)",
                  rows);
  all.insert(all.end(), rows.begin(), rows.end());

  // What grouping the K/V heads buys: the same queries, fewer K/V bytes.
  rows.clear();
  const DType t = req.dtypes.front();
  for (int64_t hkv : {shape.heads, std::max<int64_t>(1, shape.heads / 4), int64_t(1)}) {
    if (shape.heads % hkv != 0) continue;
    AttentionShape s = shape;
    s.heads_kv = hkv;
    s.causal = req.causal.front();
    for (const AttentionFwdKernel* k : kernels)
      if (fa::supports(k->dtypes, t)) rows.push_back(fa::run_attention_fwd(*k, s, t, opt));
  }
  fa::print_table(std::cout, "08: the same queries with H_kv = H, H/4 and 1 (MHA, GQA, MQA)", rows);
  all.insert(all.end(), rows.begin(), rows.end());
  return failures + fa::print_failures(std::cout, all) > 0 ? 1 : 0;
}

}  // namespace

FA_REGISTER(Chapter, {"08", "decoding: split-KV and grouped-query attention", run});
