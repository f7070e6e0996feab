// Chapter 07: the FlashAttention-3 style forward on Hopper (wgmma, TMA, warp specialisation).
//
// The program, in the order it runs:
//   1. CPU tier: the tile-range arithmetic every rung uses (ch07_tiles.h) against a brute-force
//      definition, and the visit/mask/skip map of one causal problem with seq_q != seq_k.
//   2. GPU: every "07/" kernel and, as the peer to beat, 05/v3 (the best mma.sync forward), on the
//      chosen shape, causal and not; then a larger timing row. The 07 kernels need compute
//      capability 9.0 and a build that targets it; elsewhere they report "unsupported".
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "ch07_tiles.h"
#include "chapter.h"
#include "check.h"
#include "gpu.h"
#include "harness.h"

namespace {

using fa::AttentionFwdKernel;
using fa::AttentionShape;
using fa::DType;

constexpr const char* kPeer = "05/v3_fused_scale_warp_skip";

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
              int64_t visit = 0, unmasked = 0;
              bool prefix = true;
              for (int64_t k0 = 0; k0 < seq_k; k0 += bc) {
                bool any = false, all = true;
                for (int64_t i = q0; i < q0 + br && i < seq_q; ++i)
                  for (int64_t j = k0; j < k0 + bc; ++j) {
                    const bool seen = j < seq_k && (!causal || j <= i + seq_k - seq_q);
                    any = any || seen;
                    all = all && seen;
                  }
                if (any) visit = k0 / bc + 1;
                if (all && prefix) unmasked = k0 / bc + 1;
                prefix = prefix && all;
              }
              ++cases;
              if (got.visit != visit || got.unmasked != unmasked) {
                if (failures++ < 5)
                  std::printf(
                      "  MISMATCH seq_q %lld seq_k %lld causal %d Br %lld Bc %lld q0 %lld:"
                      " visit %lld (want %lld), unmasked %lld (want %lld)\n",
                      (long long)seq_q, (long long)seq_k, int(causal), (long long)br, (long long)bc,
                      (long long)q0, (long long)got.visit, (long long)visit,
                      (long long)got.unmasked, (long long)unmasked);
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

std::vector<bool> parse_causal(const std::string& v) {
  if (v == "both") return {false, true};
  if (v == "1" || v == "true" || v == "on") return {true};
  if (v == "0" || v == "false" || v == "off") return {false};
  throw fa::Error("--causal: expected both, 0/1, true/false or on/off, got '" + v + "'");
}

int run(const std::vector<std::string>& args) {
  fa::Cli cli("ch07_flash_hopper",
              "FlashAttention-3 style forward on Hopper: wgmma, TMA, warp specialisation.");
  cli.option("batch", "2", "batch size B")
      .option("heads", "16", "heads H")
      .option("seq_q", "2048", "query length N_q")
      .option("seq_k", "0", "key length N_k (0 = seq_q)")
      .option("head_dim", "128", "head dimension D (64, 128, 256)")
      .option("causal", "both", "causal mask (bottom-right aligned): both, 0 or 1")
      .option("dtype", "bf16", "bf16, fp16 (comma-separated)")
      .option("kernel", "all", "kernel name(s) to run, comma-separated (07/...)")
      .option("repeats", "20", "timed repeats (median reported)")
      .option("check_heads", "4", "heads checked against the CPU reference (0 = automatic)")
      .option("big_seq", "8192", "N of the extra timing row at B=2, H=16 (0 = skip)");
  if (!cli.parse(args)) return cli.exit_code();
  fa::print_chapter_header(std::cout, "07", "FlashAttention on Hopper", cli);

  AttentionShape shape;
  shape.batch = cli.get_int("batch");
  shape.heads = cli.get_int("heads");
  shape.seq_q = cli.get_int("seq_q");
  shape.seq_k = cli.get_int("seq_k") == 0 ? shape.seq_q : cli.get_int("seq_k");
  shape.head_dim = cli.get_int("head_dim");
  FA_REQUIRE(shape.batch > 0 && shape.heads > 0 && shape.seq_q > 0 && shape.seq_k > 0 &&
                 shape.head_dim > 0,
             "sizes must be positive");
  const std::vector<bool> causals = parse_causal(cli.get("causal"));
  std::vector<DType> dtypes;
  for (const std::string& name : cli.get_list("dtype")) dtypes.push_back(fa::parse_dtype(name));
  const int64_t big_seq = cli.get_int("big_seq");

  int failures = tile_range_checks();

  if (!fa::have_gpu()) {
    fa::print_no_gpu(std::cout, "the Hopper kernels and their peer 05/v3");
    return failures ? 1 : 0;
  }
  std::vector<const AttentionFwdKernel*> kernels =
      fa::select_kernels<AttentionFwdKernel>("07/", cli.get("kernel"));
  if (kernels.empty())
    std::cout << "\n  no 07/ kernel in this build: they are compiled only when "
                 "CMAKE_CUDA_ARCHITECTURES includes 90\n";
  if (const AttentionFwdKernel* peer = fa::find_entry<AttentionFwdKernel>(kPeer))
    kernels.insert(kernels.begin(), peer);

  fa::RunOptions opt;
  opt.seed = cli.seed();
  opt.timing.repeats = static_cast<int>(cli.get_int("repeats"));
  opt.check_heads = cli.get_int("check_heads");

  std::vector<fa::RunResult> all, rows;
  for (DType t : dtypes)
    for (bool causal : causals)
      for (const AttentionFwdKernel* k : kernels) {
        if (!fa::supports(k->dtypes, t) || !fa::supports(k->head_dims, int(shape.head_dim)))
          continue;
        AttentionShape s = shape;
        s.causal = causal;
        rows.push_back(fa::run_attention_fwd(*k, s, t, opt));
      }
  fa::print_table(std::cout, "07: attention forward, TFLOP/s (4*B*H*Nq*Nk*D, halved when causal)",
                  rows);
  all.insert(all.end(), rows.begin(), rows.end());

  if (big_seq > 0) {
    rows.clear();
    fa::RunOptions big = opt;
    big.check_heads = 0;  // automatic: the harness samples heads and rows at this size
    for (bool causal : causals)
      for (const AttentionFwdKernel* k : kernels) {
        if (!fa::supports(k->dtypes, DType::BF16) || !fa::supports(k->head_dims, 128)) continue;
        rows.push_back(fa::run_attention_fwd(*k, {2, 16, big_seq, big_seq, 128, causal, 0.0f},
                                             DType::BF16, big));
      }
    fa::print_table(std::cout, "07: bf16 D=128 at B=2, H=16, N=" + std::to_string(big_seq), rows);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  failures += fa::print_failures(std::cout, all);
  return failures > 0 ? 1 : 0;
}

}  // namespace

FA_REGISTER(Chapter, {"07", "FlashAttention on Hopper", run});
