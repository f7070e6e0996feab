// Chapter 07: the FlashAttention-3 style forward on Hopper (wgmma, TMA, warp specialisation).
//
// The program, in the order it runs:
//   1. CPU tier: the tile-range arithmetic every rung uses (kv_tiles.h) against a brute-force
//      definition, and the visit/mask/skip map of one causal problem with seq_q != seq_k.
//   2. GPU: every "07/" kernel (or the ones --kernel names) and, as the peer to beat, 05/v5 (the
//      best mma.sync forward), on the chosen shape, causal and not; then a bf16 D=128 timing row
//      at B=2, H=16, N=--big_seq. The 07 kernels need compute capability 9.0 and a build that
//      targets it; elsewhere they report "unsupported".
// The options are the shared ones (common/README.md, "The command line"); without a GPU the
// program runs the CPU tier, says what it skipped and exits 0.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "kv_tiles.h"
#include "chapter.h"
#include "check.h"
#include "gpu.h"
#include "harness.h"

namespace {

using fa::AttentionFwdKernel;
using fa::AttentionShape;
using fa::DType;

constexpr const char* kPeer = "05/v5_fewer_instructions";

// ---- 1. The tile ranges, checked by brute force. Returns the number of failures. --------------
int tile_range_checks() {
  std::cout << "\n== CPU: which K/V tiles a Q tile visits (bottom-right causal), brute force ==\n";
  int failures = 0, cases = 0;
  for (bool causal : {false, true})
    for (int64_t seq_q : {1, 17, 63, 64, 65, 127, 129, 200})
      for (int64_t seq_k : {1, 17, 63, 64, 65, 127, 129, 200})
        for (int64_t br : {64, 128})
          for (int64_t bc : {64, 128})
            for (int64_t q0 = 0; q0 < seq_q; q0 += br) {
              const fa::ch07::KvTiles got = fa::ch07::kv_tiles(q0, br, seq_q, seq_k, bc, causal);
              const fa::ch07::KvTiles want =
                  fa::ch07::kv_tiles_brute_force(q0, br, seq_q, seq_k, bc, causal);
              ++cases;
              if (got.visit != want.visit || got.unmasked != want.unmasked) {
                if (failures++ < 5)
                  std::printf(
                      "  MISMATCH seq_q %lld seq_k %lld causal %d Br %lld Bc %lld q0 %lld:"
                      " visit %lld (want %lld), unmasked %lld (want %lld)\n",
                      (long long)seq_q, (long long)seq_k, int(causal), (long long)br, (long long)bc,
                      (long long)q0, (long long)got.visit, (long long)want.visit,
                      (long long)got.unmasked, (long long)want.unmasked);
              }
            }
  std::printf("  %d Q tiles checked, %d mismatches\n", cases, failures);

  // One picture: seq_q = 300, seq_k = 500, Br = 64, Bc = 128, causal. '.' = no mask, 'm' = masked,
  // ' ' = skipped (never loaded).
  const int64_t seq_q = 300, seq_k = 500, br = 64, bc = 128;
  std::printf(
      "  causal, seq_q %lld, seq_k %lld, Br %lld, Bc %lld ('.' full, 'm' masked, ' ' "
      "skipped):\n",
      (long long)seq_q, (long long)seq_k, (long long)br, (long long)bc);
  for (int64_t q0 = 0; q0 < seq_q; q0 += br) {
    const fa::ch07::KvTiles r = fa::ch07::kv_tiles(q0, br, seq_q, seq_k, bc, true);
    std::string line;
    for (int64_t j = 0; j < (seq_k + bc - 1) / bc; ++j)
      line += j < r.unmasked ? '.' : j < r.visit ? 'm' : ' ';
    std::printf("    rows %3lld-%3lld  [%s]\n", (long long)q0,
                (long long)std::min(q0 + br, seq_q) - 1, line.c_str());
  }
  return failures;
}

// The --help list: the 07 kernels of this build, then the peer every table shows.
std::string kernels_text() {
  std::string text = fa::kernels_help<AttentionFwdKernel>("07/");
  if (text.empty())
    text =
        "  (none in this build: they are compiled only when CMAKE_CUDA_ARCHITECTURES includes "
        "90)\n";
  for (const fa::AttentionFwdFp8Kernel* k :
       fa::entries_with_prefix<fa::AttentionFwdFp8Kernel>("07/"))
    text += "  " + k->name +
            (k->name.rfind("07/fp8_v", 0) == 0
                 ? "  (FP8 e4m3; run with --kernel=all, in a table of its own): "
                 : "  (FP8 tuning step: the GPU tests run and time it, fp8/tuning/README.md): ") +
            k->about + "\n";
  text += "the peer in every table (chapter 05's best forward):\n";
  if (const AttentionFwdKernel* peer = fa::find_entry<AttentionFwdKernel>(kPeer))
    text += "  " + fa::describe_kernel(*peer) + "\n";
  return text;
}

bool supports_shape(const AttentionFwdKernel& k, DType t, int64_t head_dim) {
  return fa::supports(k.dtypes, t) && fa::takes_head_dim(k, head_dim);
}

int run(const std::vector<std::string>& args) {
  fa::Cli cli("ch07_flash_hopper",
              "FlashAttention-3 style forward on Hopper: TMA, wgmma, warp specialisation; each "
              "kernel next to chapter 05's best (" +
                  std::string(kPeer) + ").");
  fa::AttentionDefaults defaults;
  defaults.heads = 16;
  defaults.seq_q = 2048;
  defaults.head_dim = 128;
  defaults.dtype = "bf16";
  fa::add_attention_options(cli, defaults);
  fa::add_kernel_options(cli, "07/", 20);
  cli.option("check_heads", fa::Cli::Int, "4",
             "heads checked against the CPU reference (0 = automatic)")
      .at_least(0)
      .option("big_seq", fa::Cli::Int, "8192",
              "N of the extra bf16 D=128 timing row at B=2, H=16 (0 = skip)")
      .at_least(0)
      .section("kernels (name, dtypes, head dims, oldest GPU, what it changes)", kernels_text())
      .example(fa::printed_command("ch07.help").args);
  if (!cli.parse(args)) return cli.exit_code();

  // Every check of the command line comes before any work, so a mistake exits 2 at once.
  const fa::AttentionOptions req = fa::read_attention_options(cli);
  const AttentionShape& shape = req.shape;
  const bool named = cli.get("kernel") != "all";
  const std::vector<const AttentionFwdKernel*> selected =
      cli.get("kernel") == "auto"
          ? fa::dispatch_kernels<AttentionFwdKernel>(req, std::cout)
          : fa::select_kernels<AttentionFwdKernel>("07/", cli.get("kernel"));
  if (named) fa::require_supported(selected, req, true);  // each named kernel takes the request
  std::vector<const AttentionFwdKernel*> kernels = selected;
  if (const AttentionFwdKernel* peer = fa::find_entry<AttentionFwdKernel>(kPeer))
    kernels.insert(kernels.begin(), peer);
  // With --kernel=all some 07 kernel must take it (the peer alone, in a build without them).
  if (!named) fa::require_supported(selected.empty() ? kernels : selected, req, false);
  for (DType t : req.dtypes)
    fa::require_fits_in_gpu_memory(fa::attention_fwd_bytes(shape, t),
                                   "the forward pass at " + shape.str());
  const int64_t repeats = cli.get_int("repeats");
  const int64_t check_heads = cli.get_int("check_heads");
  const int64_t big_seq = cli.get_int("big_seq");
  const AttentionShape big_shape{2, 16, big_seq, big_seq, 128, false, 0.0f};
  if (big_seq > 0)
    fa::require_fits_in_gpu_memory(fa::attention_fwd_bytes(big_shape, DType::BF16),
                                   "--big_seq=" + std::to_string(big_seq));
  fa::print_chapter_header(std::cout, "07", "FlashAttention on Hopper", cli);

  // 1. CPU tier.
  int failures = tile_range_checks();
  if (fa::entries_with_prefix<AttentionFwdKernel>("07/").empty())
    std::cout << "\n  no 07/ kernel in this build: they are compiled only when "
                 "CMAKE_CUDA_ARCHITECTURES includes 90\n";

  if (!fa::have_gpu()) {
    fa::print_no_gpu(std::cout, "the Hopper kernels and their peer 05/v5");
    return failures ? 1 : 0;
  }

  // 2. GPU: 05/v5 first, then every selected 07 kernel, on the chosen shape, then the big row.
  fa::RunOptions opt;
  opt.seed = cli.seed();
  opt.timing.repeats = static_cast<int>(repeats);
  opt.check_heads = check_heads;

  std::vector<fa::RunResult> all, rows;
  for (DType t : req.dtypes)
    for (bool causal : req.causal)
      for (const AttentionFwdKernel* k : kernels) {
        if (!supports_shape(*k, t, shape.head_dim)) continue;
        AttentionShape s = shape;
        s.causal = causal;
        rows.push_back(fa::run_attention_fwd(*k, s, t, opt));
      }
  fa::print_table(std::cout, "07: attention forward, TFLOP/s (4*B*H*D per visible query-key pair)",
                  rows);
  all.insert(all.end(), rows.begin(), rows.end());

  if (big_seq > 0) {
    rows.clear();
    fa::RunOptions big = opt;
    big.check_heads = 0;  // automatic: the harness samples heads and rows at this size
    for (bool causal : req.causal)
      for (const AttentionFwdKernel* k : kernels) {
        if (!supports_shape(*k, DType::BF16, 128)) continue;
        AttentionShape s = big_shape;
        s.causal = causal;
        rows.push_back(fa::run_attention_fwd(*k, s, DType::BF16, big));
      }
    fa::print_table(std::cout, "07: bf16 D=128 at B=2, H=16, N=" + std::to_string(big_seq), rows);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  // 3. The FP8 forwards of the main path (their own signature, AttentionFwdFp8Kernel): with
  // --kernel=all, on the chosen shape and at the big row, checked by fp8.h's rule against the
  // float64 reference on the dequantised values, next to the 16-bit rows above. The tuning steps
  // (07/fp8_t..., fp8/tuning/README.md) run in the GPU tests, which time them too.
  const std::vector<const fa::AttentionFwdFp8Kernel*> fp8 =
      fa::entries_with_prefix<fa::AttentionFwdFp8Kernel>("07/fp8_v");
  if (!named && !fp8.empty()) {
    rows.clear();
    fa::Fp8RunOptions o8;
    static_cast<fa::RunOptions&>(o8) = opt;
    for (const fa::AttentionFwdFp8Kernel* k : fp8)
      for (bool big_row : {false, true}) {
        const AttentionShape& base = big_row ? big_shape : shape;
        if (base.seq_q == 0 || !fa::supports(k->head_dims, int(base.head_dim))) continue;
        for (bool causal : req.causal) {
          AttentionShape s = base;
          s.causal = causal;
          o8.check_heads = big_row ? 0 : check_heads;
          rows.push_back(fa::run_attention_fwd_fp8(*k, s, o8));
        }
      }
    fa::print_table(std::cout,
                    "07: FP8 (e4m3) forward, TFLOP/s; checked against the float64 reference on the "
                    "dequantised inputs (common/fp8.h)",
                    rows);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  failures += fa::print_failures(std::cout, all);
  return failures > 0 ? 1 : 0;
}

}  // namespace

FA_REGISTER(Chapter, {"07", "FlashAttention on Hopper", run});
