// Chapter 09: attention as it is served — variable-length batches, sliding windows, a paged KV
// cache.
//
// The program, in the order it runs:
//   1. CPU tier (ch09_cpu_model.cpp, in double, against the float64 reference): the varlen forward
//      on ragged batches (lengths 0, 1, 17, 127, 129, ...), causal or not, with windows and GQA,
//      tiled as the kernels tile it (ch09_band.h); and the split-KV decode over a paged cache whose
//      pages are shuffled. Then the problems the GPU part runs: the mixed batch and what padding
//      it would cost, the key tiles a window visits against full causal attention.
//   2. GPU: (a) every 09/ varlen forward on the mixed batch, next to the same kernel on a square
//      batch of as many tokens (every sequence the mean length), and the fixed-length baselines
//      (05/v5, and 07/v4 where this program has it) padded to the longest sequence or called once
//      per sequence; (b) the window kernels on one long sequence with the window and without it;
//      (c) the backward of both; (d) every paged forward at each page size on the decode shape
//      (B 8, H 32, H_kv 8, seq_k 32768, D 128, one query row), next to chapter 08's best on the
//      same cache stored contiguously, a ragged decode, a chunked prefill (seq_q = --chunk, 128
//      by default), and the append of the new tokens' keys and values.
// Without a GPU the program runs the CPU tier, says what it skipped and exits 0.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ch09_band.h"
#include "ch09_cpu_model.h"
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
using fa::PagedAppendKernel;
using fa::PagedFwdKernel;
using fa::PagedShape;
using fa::RunResult;
using fa::VarlenBwdKernel;
using fa::VarlenFwdKernel;
using fa::VarlenShape;

// The fixed-length kernels a varlen batch is compared with (when this program has them).
constexpr const char* kFixedLength[] = {"05/v5_fewer_instructions", "07/v4_intra_overlap"};
constexpr const char* kContiguousDecode = "08/v5_swizzled_ring";

// ---- 1. The CPU model against the float64 reference. ----------------------------------------

// The largest |a - b| over O, and over L with -inf matched exactly (a row that sees no key).
struct Errors {
  double O = 0, L = 0;
  void add(const double* o, const double* o_ref, const double* l, const double* l_ref, int64_t rows,
           int64_t d) {
    for (int64_t x = 0; x < rows * d; ++x) {
      const double e = std::fabs(o[x] - o_ref[x]);
      if (!(e <= O)) O = e;  // a NaN (read from a poisoned page) sticks
    }
    for (int64_t i = 0; i < rows; ++i) {
      if (std::isinf(l_ref[i]) && l_ref[i] == l[i]) continue;
      L = std::max(L, std::isfinite(l[i]) ? std::fabs(l[i] - l_ref[i]) : INFINITY);
    }
  }
  bool ok() const { return O <= 1e-12 && L <= 1e-12; }
};

int varlen_model_checks(uint64_t seed) {
  std::cout << "\n== CPU model: the varlen forward (packed head-major, offsets from cu_seqlens, "
               "the band's tiles), vs the float64 reference ==\n";
  const std::vector<int64_t> lens = {0, 1, 17, 127, 129, 300, 64, 200};
  const std::vector<int64_t> other = {5, 1, 40, 127, 100, 300, 0, 250};  // seq_k != seq_q
  struct Case {
    const char* what;
    VarlenShape s;
    int64_t Br, Bc;
  };
  auto shape = [&](const std::vector<int64_t>& k_lens, bool causal, int64_t left, int64_t right) {
    VarlenShape s;
    s.seqlens_q = lens;
    s.seqlens_k = k_lens;
    s.heads = 4;
    s.heads_kv = 2;  // GQA: groups of two
    s.head_dim = 32;
    s.causal = causal;
    s.window_left = left;
    s.window_right = right;
    return s;
  };
  const std::vector<Case> cases = {
      {"full", shape(lens, false, -1, -1), 64, 64},
      {"causal", shape(lens, true, -1, -1), 64, 64},
      {"causal, window 50 left", shape(lens, true, 50, -1), 64, 64},
      {"window (20, 7)", shape(lens, false, 20, 7), 64, 32},
      {"window (0, 0): the diagonal", shape(lens, false, 0, 0), 32, 64},
      {"causal, seq_k != seq_q", shape(other, true, -1, -1), 64, 64},
      {"window (33, 5), seq_k != seq_q", shape(other, false, 33, 5), 128, 64},
  };
  int failures = 0;
  std::printf("  lengths q %s; k the same, or %s (H 4, H_kv 2, D 32)\n",
              "0,1,17,127,129,300,64,200", "5,1,40,127,100,300,0,250");
  std::printf("  %-32s %8s  %22s  %10s  %10s\n", "case", "Br x Bc", "tiles full/masked/skip",
              "max|O err|", "max|L err|");
  for (const Case& c : cases) {
    const VarlenShape& s = c.s;
    const std::vector<float> q = fa::random_normal(s.q_numel(), fa::derive_seed(seed, 11));
    const std::vector<float> k = fa::random_normal(s.k_numel(), fa::derive_seed(seed, 12));
    const std::vector<float> v = fa::random_normal(s.k_numel(), fa::derive_seed(seed, 13));
    const fa::ch09::VarlenForward m =
        fa::ch09::varlen_forward_model(q.data(), k.data(), v.data(), s, c.Br, c.Bc);
    const std::vector<int32_t> cu = s.cu_seqlens_q();
    Errors e;
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t b = 0; b < s.batch(); ++b) {
        const fa::HeadView view = fa::ch09::varlen_head_view(s, q.data(), k.data(), v.data(), b, h);
        std::vector<double> O(view.seq_q * view.d), L(view.seq_q);
        fa::attention_forward_ref_head(view, {}, O.data(), L.data());
        const int64_t row0 = h * s.total_q() + cu[b];
        e.add(m.O.data() + row0 * s.head_dim, O.data(), m.L.data() + row0, L.data(), view.seq_q,
              view.d);
      }
    failures += e.ok() ? 0 : 1;
    const std::string tiles = std::to_string(m.tiles.full) + "/" + std::to_string(m.tiles.masked) +
                              "/" + std::to_string(m.tiles.skipped);
    const std::string tile = std::to_string(c.Br) + "x" + std::to_string(c.Bc);
    std::printf("  %-32s %8s  %22s  %10.2e  %10.2e%s\n", c.what, tile.c_str(), tiles.c_str(), e.O,
                e.L, e.ok() ? "" : "  <-- FAILED (tolerance 1e-12)");
  }
  return failures;
}

int paged_model_checks(uint64_t seed) {
  std::cout << "\n== CPU model: split-KV decode over a paged cache (pages shuffled, spare pages "
               "NaN), vs the float64 reference ==\n";
  struct Case {
    int64_t seq_q, page_size, split_len;
    bool causal;
  };
  const std::vector<int64_t> lens = {1000, 1, 17, 129, 0, 64, 256};
  const std::vector<Case> cases = {
      {1, 16, 128, false}, {1, 64, 100, false}, {1, 256, 1000, false},
      {7, 64, 64, true},  // a chunk: 7 new tokens; the sequence of 1 key leaves 6 rows empty
      {7, 16, 48, false},
  };
  int failures = 0;
  std::printf("  seqlens_k %s (H 4, H_kv 2, D 32)\n", "1000,1,17,129,0,64,256");
  std::printf("  %-6s %5s %6s %6s %7s %8s  %10s  %10s\n", "seq_q", "page", "pages", "causal",
              "split", "partials", "max|O err|", "max|L err|");
  for (const Case& c : cases) {
    PagedShape s;
    s.seqlens_k = lens;
    s.heads = 4;
    s.heads_kv = 2;
    s.head_dim = 32;
    s.seq_q = c.seq_q;
    s.page_size = c.page_size;
    s.causal = c.causal;
    s = fa::ch09::with_page_counts(s, 3);
    int64_t keys = 0;
    for (int64_t len : lens) keys += len;
    const std::vector<float> q = fa::random_normal(s.q_numel(), fa::derive_seed(seed, 21));
    const std::vector<float> k =
        fa::random_normal(keys * s.kv_heads() * s.head_dim, fa::derive_seed(seed, 22));
    const std::vector<float> v =
        fa::random_normal(keys * s.kv_heads() * s.head_dim, fa::derive_seed(seed, 23));
    const fa::ch09::PagedCache cache =
        fa::ch09::build_paged_cache(s, k.data(), v.data(), fa::derive_seed(seed, 24));
    std::vector<double> O(s.q_numel()), L(s.lse_numel());
    const int64_t partials =
        fa::ch09::paged_split_forward(s, q.data(), cache, c.split_len, O.data(), L.data());
    Errors e;
    const int64_t group = s.heads / s.kv_heads(), d = s.head_dim;
    for (int64_t b = 0; b < s.batch(); ++b)
      for (int64_t h = 0; h < s.heads; ++h) {
        // The reference reads the contiguous K and V the pages were made from.
        const int64_t len = lens[b];
        const int64_t kv0 = fa::ch09::contiguous_offset(s, b) + (h / group) * len * d;
        fa::HeadView view;
        view.q = q.data() + (b * s.heads + h) * s.seq_q * d;
        view.k = k.data() + kv0;
        view.v = v.data() + kv0;
        view.seq_q = s.seq_q;
        view.seq_k = len;
        view.d = d;
        view.causal = s.causal;
        view.scale = s.sequence(b).softmax_scale();
        std::vector<double> Or(s.seq_q * d), Lr(s.seq_q);
        fa::attention_forward_ref_head(view, {}, Or.data(), Lr.data());
        const int64_t row0 = (b * s.heads + h) * s.seq_q;
        e.add(O.data() + row0 * d, Or.data(), L.data() + row0, Lr.data(), s.seq_q, d);
      }
    failures += e.ok() ? 0 : 1;
    std::printf("  %-6lld %5lld %6lld %6s %7lld %8lld  %10.2e  %10.2e%s\n", (long long)c.seq_q,
                (long long)c.page_size, (long long)s.num_pages, c.causal ? "yes" : "no",
                (long long)c.split_len, (long long)partials, e.O, e.L,
                e.ok() ? "" : "  <-- FAILED (tolerance 1e-12)");
  }
  return failures;
}

// ---- What the GPU part runs, described on the CPU. -------------------------------------------
std::string join(const std::vector<int64_t>& v) {
  std::string out;
  for (int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

void print_problems(const VarlenShape& mixed, const VarlenShape& square, const VarlenShape& win,
                    const VarlenShape& full) {
  std::cout << "\n== The problems ==\n";
  const int64_t padded = mixed.batch() * mixed.max_seq_q();
  std::printf("  mixed batch: %lld sequences, lengths %s\n", (long long)mixed.batch(),
              join(mixed.seqlens_q).c_str());
  std::printf(
      "    %lld tokens, the longest %lld; padded to the longest: %lld tokens (%.0f%% padding); "
      "visible pairs per head %lld\n",
      (long long)mixed.total_q(), (long long)mixed.max_seq_q(), (long long)padded,
      padded > 0 ? 100.0 * double(padded - mixed.total_q()) / double(padded) : 0.0,
      (long long)mixed.visible_pairs());
  if (square.batch() > 0)
    std::printf("  square batch: %lld sequences of %lld (%lld tokens)\n", (long long)square.batch(),
                (long long)square.max_seq_q(), (long long)square.total_q());
  // The key tiles a block of 128 rows visits, 128 keys a tile: the window's saving in loads.
  auto tiles = [](const VarlenShape& s, int64_t& visited, int64_t& masked) {
    visited = masked = 0;
    const AttentionShape one = s.sequence(0);
    const fa::ch09::Band band =
        fa::ch09::Band::make(one.seq_q, one.seq_k, one.causal, one.window_left, one.window_right);
    for (int64_t i0 = 0; i0 < one.seq_q; i0 += 128) {
      const int64_t i1 = std::min(i0 + 128, one.seq_q);
      const fa::ch09::TileRange r = fa::ch09::key_tiles(band, i0, i1, 128);
      for (int64_t t = r.begin; t < r.end; ++t) {
        ++visited;
        masked += fa::ch09::tile_needs_mask(band, i0, i1, t * 128, t * 128 + 128) ? 1 : 0;
      }
    }
  };
  int64_t wv, wm, fv, fm;
  tiles(win, wv, wm);
  tiles(full, fv, fm);
  std::printf(
      "  window: %s\n    128x128 tiles visited %lld (%lld masked), without the window "
      "%lld (%lld masked): %.1f%% of the loads; visible pairs %lld vs %lld\n",
      win.str().c_str(), (long long)wv, (long long)wm, (long long)fv, (long long)fm,
      fv > 0 ? 100.0 * double(wv) / double(fv) : 0.0, (long long)win.visible_pairs(),
      (long long)full.visible_pairs());
}

// ---- Kernels: --kernel names kernels of any of the four kinds. -------------------------------
struct Kernels {
  std::vector<const VarlenFwdKernel*> fwd;
  std::vector<const VarlenBwdKernel*> bwd;
  std::vector<const PagedFwdKernel*> paged;
  std::vector<const PagedAppendKernel*> append;
};

Kernels select(const std::string& requested) {
  Kernels out;
  if (requested.empty() || requested == "all") {
    out.fwd = fa::entries_with_prefix<VarlenFwdKernel>("09/");
    out.bwd = fa::entries_with_prefix<VarlenBwdKernel>("09/");
    out.paged = fa::entries_with_prefix<PagedFwdKernel>("09/");
    out.append = fa::entries_with_prefix<PagedAppendKernel>("09/");
    return out;
  }
  for (const std::string& name : fa::split_list(requested)) {
    bool found = false;
    if (name.rfind("09/", 0) == 0) {
      auto take = [&](auto* k, auto& list) {
        if (k != nullptr) {
          list.push_back(k);
          found = true;
        }
      };
      take(fa::find_entry<VarlenFwdKernel>(name), out.fwd);
      take(fa::find_entry<VarlenBwdKernel>(name), out.bwd);
      take(fa::find_entry<PagedFwdKernel>(name), out.paged);
      take(fa::find_entry<PagedAppendKernel>(name), out.append);
    }
    if (!found) {
      std::vector<std::string> all = fa::entry_names<VarlenFwdKernel>("09/");
      for (const std::string& n : fa::entry_names<VarlenBwdKernel>("09/")) all.push_back(n);
      for (const std::string& n : fa::entry_names<PagedFwdKernel>("09/")) all.push_back(n);
      for (const std::string& n : fa::entry_names<PagedAppendKernel>("09/")) all.push_back(n);
      fa::throw_unknown_kernel(name, all);
    }
  }
  return out;
}

std::string kernels_text() {
  std::string text =
      fa::kernels_help<VarlenFwdKernel>("09/") + fa::kernels_help<VarlenBwdKernel>("09/") +
      fa::kernels_help<PagedFwdKernel>("09/") + fa::kernels_help<PagedAppendKernel>("09/");
  if (text.empty()) text = "  (none registered yet)\n";
  text += "the peers in the tables:\n";
  for (const char* name : kFixedLength)
    if (const AttentionFwdKernel* k = fa::find_entry<AttentionFwdKernel>(name))
      text += "  " + fa::describe_kernel(*k) + "\n";
  if (const AttentionFwdKernel* k = fa::find_entry<AttentionFwdKernel>(kContiguousDecode))
    text += "  " + fa::describe_kernel(*k) + "\n";
  return text;
}

// Kernel k runs dtype t at this head dim: one it lists, or one it rounds up (takes_head_dim).
template <class K>
bool takes(const K& k, DType t, int64_t head_dim) {
  return fa::supports(k.dtypes, t) && fa::takes_head_dim(k, head_dim);
}

// "09/v1_varlen bf16: the mixed batch at 0.97x the TFLOP/s of the square batch", for each pair
// of rows (index of the first, index of the second) that `pairs` lists.
using Pairs = std::vector<std::pair<size_t, size_t>>;
void print_ratios(const std::vector<RunResult>& rows, const Pairs& pairs, const std::string& first,
                  const std::string& second) {
  for (const auto& [i, j] : pairs) {
    const RunResult &a = rows[i], &b = rows[j];
    if (a.tflops <= 0 || b.tflops <= 0) continue;  // failed, unsupported or not timed
    std::printf("  %s %s: %s at %.2fx the TFLOP/s of %s\n", a.kernel.c_str(), a.dtype.c_str(),
                first.c_str(), a.tflops / b.tflops, second.c_str());
  }
}

bool wants(const std::vector<std::string>& parts, const std::string& part) {
  return std::find(parts.begin(), parts.end(), part) != parts.end();
}

int run(const std::vector<std::string>& args) {
  fa::Cli cli("ch09_serving",
              "Attention as it is served: variable-length batches packed without padding, "
              "sliding windows, a paged KV cache.");
  using Cli = fa::Cli;
  cli.option("heads", Cli::Int, "16", "heads H of the varlen and window problems")
      .at_least(1)
      .option("head_dim", Cli::Int, "128", "head dimension D (see the kernels below)")
      .at_least(1)
      .option("dtype", Cli::TextList, "bf16", "fp16, bf16, comma-separated")
      .flag("causal",
            "varlen batches causal only (bottom-right aligned); =false: no mask only; "
            "default: both")
      .option("scale", Cli::Number, "0", "softmax scale (0 = 1/sqrt(D))")
      .option("lengths", Cli::IntList, "",
              "the mixed batch's sequence lengths, comma-separated (default: a seeded mix of "
              "--tokens tokens with a 0 and a 1)")
      .at_least(0)
      .option("tokens", Cli::Int, "4096",
              "tokens of the default mixed batch (sequences up to 2048)")
      .at_least(1)
      .option("window", Cli::IntList, "",
              "left,right: the window's keys before and after the diagonal (-1: unlimited; "
              "right 0: causal). Default 255,0; 4095,0 with --full")
      .at_least(-1)
      .option("window_seq", Cli::Int, "0",
              "length N of the window problem, one sequence (0: 2048; 32768 "
              "with --full)")
      .at_least(0)
      .option("batch", Cli::Int, "8", "sequences of the paged problems")
      .at_least(1)
      .option("decode_heads", Cli::Int, "32", "query heads of the paged problems")
      .at_least(1)
      .option("heads_kv", Cli::Int, "8", "K/V heads of the paged problems (0 = decode_heads)")
      .at_least(0)
      .option("seq_k", Cli::Int, "32768", "keys per sequence of the paged problems")
      .at_least(1)
      // The rule of every paged kernel (paged_v1_decode.cu): a power of two, since key j's page
      // and row are j >> page_shift and a mask ("Why page sizes are powers of two"), and at least
      // 16, since the loaders copy runs of 16 keys (kSmallRun) that lie in one page.
      .option("page_size", Cli::IntList, "16,64,256",
              "page sizes of the paged problems, comma-separated")
      .power_of_two()
      .at_least(16)
      .option("chunk", Cli::Int, "128",
              "new tokens of the chunked prefill over the pages (0 = skip)")
      .at_least(0)
      .option("parts", Cli::TextList, "varlen,window,backward,paged,append",
              "what the GPU part runs");
  fa::add_kernel_options(cli, "09/", 20);
  cli.option("check_heads", Cli::Int, "1",
             "heads checked against the CPU reference (0 = automatic)")
      .at_least(0)
      .flag("full", "the large shapes: the window problem at N 32768 with 4095 keys to the left")
      .section("kernels (name, dtypes, head dims, oldest GPU, what it changes)", kernels_text())
      .example(fa::printed_command("ch09.help").args);
  if (!cli.parse(args)) return cli.exit_code();

  // Every check of the command line comes before any work, so a mistake exits 2 at once.
  const bool full_size = cli.get_bool("full");
  std::vector<DType> dtypes = fa::read_dtypes(cli);
  for (DType t : dtypes)
    if (t == DType::F32)
      throw fa::UsageError("--dtype: chapter 09's kernels take fp16 and bf16 (not fp32)");
  const std::vector<bool> causal_list = cli.given("causal")
                                            ? std::vector<bool>{cli.get_bool("causal")}
                                            : std::vector<bool>{false, true};
  const int64_t heads = cli.get_int("heads"), head_dim = cli.get_int("head_dim");
  const float scale = static_cast<float>(cli.get_double("scale"));
  std::vector<int64_t> lengths = cli.get_int_list("lengths");
  if (lengths.empty())
    lengths = fa::ch09::mixed_lengths(fa::derive_seed(cli.seed(), 1), cli.get_int("tokens"), 2048);
  int64_t total = 0;
  for (int64_t len : lengths) total += len;
  if (total == 0) throw fa::UsageError("--lengths: the batch holds no token");
  if (total >= (int64_t(1) << 31))
    throw fa::UsageError("--lengths: the batch's tokens must stay below 2^31 (int32 cu_seqlens)");
  std::vector<int64_t> window = cli.get_int_list("window");
  if (window.empty())
    window = full_size ? std::vector<int64_t>{4095, 0} : std::vector<int64_t>{255, 0};
  if (window.size() != 2)
    throw fa::UsageError("--window: give left,right (each -1 or more), e.g. --window=4095,0");
  int64_t window_seq = cli.get_int("window_seq");
  if (window_seq == 0) window_seq = full_size ? 32768 : 2048;
  const int64_t batch = cli.get_int("batch"), decode_heads = cli.get_int("decode_heads");
  const int64_t heads_kv = cli.get_int("heads_kv"), seq_k = cli.get_int("seq_k");
  const int64_t chunk = cli.get_int("chunk");
  if (heads_kv > 0 && decode_heads % heads_kv != 0)
    throw fa::UsageError("--decode_heads=" + std::to_string(decode_heads) +
                         " must be a multiple of --heads_kv=" + std::to_string(heads_kv));
  const std::vector<int64_t> page_sizes = cli.get_int_list("page_size");
  const std::vector<std::string> parts = cli.get_list("parts");
  for (const std::string& p : parts)
    if (!wants({"varlen", "window", "backward", "paged", "append"}, p))
      throw fa::UsageError("--parts: unknown part '" + p +
                           "' (varlen, window, backward, paged, append)");
  const Kernels kernels = select(cli.get("kernel"));
  const int64_t repeats = cli.get_int("repeats");
  const int64_t check_heads = cli.get_int("check_heads");

  // The problems.
  VarlenShape mixed;
  mixed.seqlens_q = mixed.seqlens_k = lengths;
  mixed.heads = heads;
  mixed.head_dim = head_dim;
  mixed.scale = scale;
  VarlenShape square = mixed;  // as many sequences and tokens, every one the mean length
  const int64_t mean = lengths.empty() ? 0 : total / int64_t(lengths.size());
  square.seqlens_q.assign(lengths.size(), mean);
  square.seqlens_k = square.seqlens_q;
  if (mean == 0) {  // nothing to compare with
    square.seqlens_q.clear();
    square.seqlens_k.clear();
  }
  VarlenShape win;  // one long sequence with the window; `full` the same without it
  win.seqlens_q = win.seqlens_k = {window_seq};
  win.heads = heads;
  win.head_dim = head_dim;
  win.scale = scale;
  win.causal = window[1] == 0;  // right 0 is causal; the comparison is then full causal
  win.window_left = window[0];
  win.window_right = win.causal ? -1 : window[1];
  VarlenShape full = win;
  full.window_left = full.window_right = -1;

  PagedShape decode;
  decode.seqlens_k.assign(batch, seq_k);
  decode.heads = decode_heads;
  decode.heads_kv = heads_kv;
  decode.head_dim = head_dim;
  decode.seq_q = 1;
  decode.scale = scale;
  for (DType t : dtypes) {
    fa::require_fits_in_gpu_memory(
        2.0 * (3 * mixed.q_numel() + 3 * mixed.k_numel()) * fa::dtype_size(t),
        "the varlen batch " + mixed.str());
    fa::require_fits_in_gpu_memory(
        2.0 * (3 * full.q_numel() + 3 * full.k_numel()) * fa::dtype_size(t),
        "the window problem " + full.str());
    fa::require_fits_in_gpu_memory(
        2.0 * double(batch) * decode.kv_heads() * (seq_k + 1024) * head_dim * fa::dtype_size(t),
        "the paged cache of " + std::to_string(batch) + " sequences of " + std::to_string(seq_k) +
            " keys");
  }
  fa::print_chapter_header(std::cout, "09", "serving: varlen batches, windows, a paged KV cache",
                           cli);

  // 1. CPU tier.
  // paged_model_checks reads the CPU exercise (paged_row): in the exercise build, a TODO message.
  int failures =
      varlen_model_checks(cli.seed()) +
      fa::unless_exercise_todo([&] { return paged_model_checks(cli.seed()); }, std::cout);
  print_problems(mixed, square, win, full);
  if (!fa::have_gpu()) {
    fa::print_no_gpu(std::cout,
                     "the varlen, window and paged kernels and their fixed-length peers");
    return failures ? 1 : 0;
  }

  // 2. GPU.
  fa::RunOptions opt;
  opt.seed = cli.seed();
  opt.timing.repeats = static_cast<int>(repeats);
  opt.check_heads = check_heads;
  std::vector<RunResult> all, rows;
  auto table = [&](const std::string& title) {
    fa::print_table(std::cout, title, rows);
    all.insert(all.end(), rows.begin(), rows.end());
  };

  Pairs pairs;  // rows compared in the lines under a table
  if (wants(parts, "varlen")) {
    rows.clear();
    pairs.clear();
    for (DType t : dtypes)
      for (bool causal : causal_list) {
        VarlenShape m = mixed, sq = square;
        m.causal = sq.causal = causal;
        for (const VarlenFwdKernel* k : kernels.fwd) {
          if (!takes(*k, t, head_dim)) continue;
          rows.push_back(fa::run_varlen_fwd(*k, m, t, opt));
          if (sq.batch() == 0) continue;
          rows.push_back(fa::run_varlen_fwd(*k, sq, t, opt));
          pairs.emplace_back(rows.size() - 2, rows.size() - 1);
        }
        for (const char* name : kFixedLength) {
          const AttentionFwdKernel* k = fa::find_entry<AttentionFwdKernel>(name);
          if (k == nullptr || !takes(*k, t, head_dim)) continue;
          rows.push_back(fa::time_varlen_padded(*k, m, t, opt));
          rows.push_back(fa::time_varlen_per_sequence(*k, m, t, opt));
        }
        std::cout << "  ran " << m.str() << " " << fa::dtype_name(t) << "\n" << std::flush;
      }
    table(
        "09: varlen forward, TFLOP/s on the visible pairs (the mixed batch, then a square batch "
        "of as many tokens; fixed-length kernels padded or once per sequence)");
    print_ratios(rows, pairs, "the mixed batch", "the square batch");
  }

  if (wants(parts, "window")) {
    rows.clear();
    pairs.clear();
    for (DType t : dtypes) {
      for (const VarlenFwdKernel* k : kernels.fwd) {
        if (!k->window || !takes(*k, t, head_dim)) continue;
        rows.push_back(fa::run_varlen_fwd(*k, win, t, opt));
        rows.push_back(fa::run_varlen_fwd(*k, full, t, opt));
        pairs.emplace_back(rows.size() - 2, rows.size() - 1);
      }
      const AttentionFwdKernel* k = fa::find_entry<AttentionFwdKernel>(kFixedLength[0]);
      if (k != nullptr && takes(*k, t, head_dim))
        rows.push_back(fa::run_attention_fwd(*k, full.sequence(0), t, opt));
    }
    table(
        "09: sliding window, TFLOP/s on the visible pairs (the window, then the same kernel "
        "without it)");
    print_ratios(rows, pairs, "the window", "no window");
  }

  if (wants(parts, "backward")) {
    rows.clear();
    for (DType t : dtypes)
      for (const VarlenBwdKernel* k : kernels.bwd) {
        if (!takes(*k, t, head_dim)) continue;
        for (bool causal : causal_list) {
          VarlenShape m = mixed, sq = square;
          m.causal = sq.causal = causal;
          rows.push_back(fa::run_varlen_bwd(*k, m, t, opt));
          if (sq.batch() > 0) rows.push_back(fa::run_varlen_bwd(*k, sq, t, opt));
        }
        if (k->window) {
          rows.push_back(fa::run_varlen_bwd(*k, win, t, opt));
          rows.push_back(fa::run_varlen_bwd(*k, full, t, opt));
        }
      }
    table("09: varlen backward, TFLOP/s (2.5x the forward's FLOPs on the visible pairs)");
  }

  if (wants(parts, "paged") || wants(parts, "append")) {
    rows.clear();
    std::vector<RunResult> appends;
    const AttentionFwdKernel* contiguous = fa::find_entry<AttentionFwdKernel>(kContiguousDecode);
    // A ragged batch too: the empty and one-key sequences, tails that end mid-page.
    PagedShape ragged = decode;
    const std::vector<int64_t> mix = {0, 1, 17, 129, 1000, seq_k / 2 + 3, seq_k - 1, seq_k};
    const bool grouped = decode.kv_heads() != decode.heads;  // a kernel without GQA sits it out
    for (int64_t b = 0; b < batch; ++b) ragged.seqlens_k[b] = std::min(seq_k, mix[b % mix.size()]);
    for (DType t : dtypes) {
      for (int64_t chunk_len : {int64_t(1), chunk}) {
        if (chunk_len == 0) continue;
        PagedShape s = decode;
        s.seq_q = chunk_len;
        s.causal = chunk_len > 1;  // the chunk's rows are the sequence's last tokens
        if (s.seq_q > seq_k) continue;
        for (int64_t page : page_sizes) {
          s.page_size = page;  // num_pages, max_pages left 0: the harness sizes the pool
          if (wants(parts, "paged"))
            for (const PagedFwdKernel* k : kernels.paged)
              if (takes(*k, t, head_dim) && fa::supports(k->page_sizes, int(page)) &&
                  (k->gqa || !grouped))
                rows.push_back(fa::run_paged_fwd(*k, s, t, opt));
          if (wants(parts, "append"))
            for (const PagedAppendKernel* k : kernels.append)
              if (fa::supports(k->dtypes, t))
                appends.push_back(fa::run_paged_append(*k, s, t, opt));
        }
        if (wants(parts, "paged") && contiguous != nullptr && takes(*contiguous, t, head_dim)) {
          AttentionShape c{batch,    decode_heads, chunk_len, seq_k,
                           head_dim, s.causal,     scale,     heads_kv};
          rows.push_back(fa::run_attention_fwd(*contiguous, c, t, opt));
        }
      }
      if (wants(parts, "paged") && !page_sizes.empty()) {
        ragged.page_size = page_sizes.front();
        for (const PagedFwdKernel* k : kernels.paged)
          if (takes(*k, t, head_dim) && fa::supports(k->page_sizes, int(ragged.page_size)) &&
              (k->gqa || !grouped))
            rows.push_back(fa::run_paged_fwd(*k, ragged, t, opt));
      }
    }
    if (wants(parts, "paged")) {
      std::printf("\n  the ragged decode: seqlens_k %s\n", join(ragged.seqlens_k).c_str());
      table(
          "09: paged forward (decode: GB/s of Q, the keys and values each sequence holds, O, L; "
          "% of the copy ceiling), beside " +
          std::string(kContiguousDecode) + " on the same cache stored contiguously");
    }
    if (wants(parts, "append")) {
      rows = appends;
      table("09: appending the new tokens' K and V to the pages, GB/s (read once, written once)");
    }
  }
  failures += fa::print_failures(std::cout, all);
  return failures > 0 ? 1 : 0;
}

}  // namespace

FA_REGISTER(Chapter,
            {"09", "serving: variable-length batches, sliding windows, a paged KV cache", run});
