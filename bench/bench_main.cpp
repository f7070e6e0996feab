// fa_bench: every registered kernel at the repository's benchmark shapes (for attention, the
// FlashAttention-2 paper's protocol: B = 16384/N, H = 2048/D, N 512 to 16384, D 64 and 128,
// and D 256 here too).
//
//   fa_bench                                   everything
//   fa_bench --benchmark_filter=attn_fwd/auto  the dispatch's choice at each protocol shape
//   fa_bench --benchmark_filter=attn_fwd       one family (softmax, gemm, transpose, attn_fwd, attn_bwd,
//                                              attn_decode, bwd_preprocess, and chapter 09's
//                                              attn_varlen, attn_window, attn_paged, each with
//                                              its _bwd or _append rows)
//   fa_bench --benchmark_format=json --benchmark_out=bench.json   for bench/compare_sdpa.py
//
// Each benchmark runs one "iteration" whose manual time is the harness's median over many timed
// runs (CUDA events, warm-up first, L2 flushed before each run). Counters: TFLOP/s for attention
// and GEMM (attention forward FLOPs = 4*B*H*D per visible (query, key) pair: Nq*Nk, N(N+1)/2 when
// causal and square, AttentionShape::visible_pairs() in general; backward = 2.5x), GB/s
// for memory-bound kernels (each input read once, each output written once).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include "buffer.h"
#include "ceilings.h"
#include "device_fill.h"
#include "dispatch.h"
#include "gpu.h"
#include "harness.h"
#include "registry.h"

namespace {

fa::RunOptions timing_only() {
  fa::RunOptions o;
  o.check = false;
  o.time = true;
  o.timing.warmup = 3;
  o.timing.repeats = 30;
  return o;
}

// A row that did not run (UNSUPPORTED, no GPU) or failed (a kernel error; in a student release an
// exercise not written yet, which the harness does not launch) has no time: it is reported as
// skipped with its reason, never as 0 ms.
void report(benchmark::State& st, const fa::RunResult& r) {
  if (r.status != fa::Status::Pass) {
    st.SkipWithError(r.message.c_str());
    for (auto _ : st) {
    }
    return;
  }
  for (auto _ : st) st.SetIterationTime(r.ms * 1e-3);
  if (r.tflops > 0) st.counters["TFLOPs"] = r.tflops;
  if (r.gbps > 0) st.counters["GBps"] = r.gbps;
  if (r.pct > 0) st.counters["pct_of_copy"] = r.pct;
}

template <class F>
void add(const std::string& name, F body) {
  benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& st) { body(st); })
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

// Every registered attention kernel of type K (forward or backward), in each dtype it takes, at
// D 64, 128 and 256, causal and not, N 512..16384 with B = 16384/N and H = 2048/D.
template <class K, class Run>
void add_attention_protocol(const std::string& family, Run run) {
  for (const K* k : fa::entries_with_prefix<K>("")) {
    if constexpr (std::is_same_v<K, fa::AttentionFwdKernel>)
      if (k->decoding) continue;  // timed on the decode shapes instead (add_decode_shapes)
    for (fa::DType t : k->dtypes)
      for (int d : k->head_dims) {
        if (d != 64 && d != 128 && d != 256) continue;
        for (bool causal : {false, true})
          for (int64_t n : {512, 1024, 2048, 4096, 8192, 16384}) {
            // The fp32 teaching kernels are slow: keep them to the short end of the sweep.
            if (t == fa::DType::F32 && n > 2048) continue;
            fa::AttentionShape s{16384 / n, 2048 / d, n, n, d, causal, 0.0f};
            add(family + k->name + "/" + fa::dtype_name(t) + "/D" + std::to_string(d) + "/" +
                    (causal ? "causal" : "full") + "/N" + std::to_string(n),
                [k, s, t, run](benchmark::State& st) { report(st, run(*k, s, t, timing_only())); });
          }
      }
  }
}

// attn_fwd/auto/..., attn_bwd/auto/...: what a user of the library gets without naming a kernel,
// the dispatch's choice (dispatch.h) on this GPU for each protocol shape, bf16. The row's label
// names the kernel; bench/compare_sdpa.py reports these rows as "ours" beside the fastest
// registered kernel of the same run.
template <class K, class Run>
void add_auto(const std::string& family, bool backward, const fa::AttentionShape& s, fa::DType t,
              Run run) {
  add(family + "auto/" + fa::dtype_name(t) + "/D" + std::to_string(s.head_dim) + "/" +
          (s.causal ? "causal" : "full") + "/N" + std::to_string(s.seq_q),
      [s, t, backward, run](benchmark::State& st) {
        const fa::Pick k =
            fa::pick(backward ? fa::Problem::backward(s, t) : fa::Problem::forward(s, t));
        const K* kernel = k ? fa::find_entry<K>(k.kernel) : nullptr;
        if (kernel == nullptr) {
          st.SkipWithError((k ? k.kernel + " is not of this family" : k.refusal).c_str());
          for (auto _ : st) {
          }
          return;
        }
        st.SetLabel(k.kernel);
        report(st, run(*kernel, s, t, timing_only()));
      });
}

template <class K, class Run>
void add_dispatch_protocol(const std::string& family, bool backward, Run run) {
  for (int d : {64, 128, 256})
    for (bool causal : {false, true})
      for (int64_t n : {512, 1024, 2048, 4096, 8192, 16384})
        add_auto<K>(family, backward, {16384 / n, 2048 / d, n, n, d, causal, 0.0f}, fa::DType::BF16,
                    run);
}

// Head dims off the protocol's three: D 32, three between chapter 07's instances (80, 96, 192:
// rounded up inside the kernels, rounds_head_dim in registry.h) and three that are no multiple of
// 8 (59, 111: chapter 05's t15 and 06's t17; 201: t15 and 06's t21), bf16, B = 16384/N, H = 2048/D
// (rounded down), N 2048 and 8192, with the protocol's row names so that compare_sdpa.py times
// SDPA beside them: the dispatch's choice (auto), the final Hopper rungs that round, the mma.sync
// kernels that list the head dim (the dispatch's choice before the rounding), and the mma.sync
// steps that round (05/t14, 06/t16: the dispatch's choice before sm_90; 05/t15, 06/t17: every
// head dim; 06/t19: the backward from 136 to 256 computed at 256, for GPUs before sm_90; 06/t21:
// t19 at every head dim up to 256).
template <class K, class Run>
void add_head_dims_between(const std::string& family, bool backward,
                           const std::vector<const char*>& names, Run run) {
  const fa::DType t = fa::DType::BF16;
  for (int d : {32, 59, 80, 96, 111, 192, 201})
    for (bool causal : {false, true})
      for (int64_t n : {2048, 8192}) {
        const fa::AttentionShape s{16384 / n, 2048 / d, n, n, d, causal, 0.0f};
        add_auto<K>(family, backward, s, t, run);
        for (const char* name : names) {
          const K* k = fa::find_entry<K>(name);
          if (k == nullptr || !fa::supports(k->dtypes, t) || !fa::takes_head_dim(*k, d)) continue;
          add(family + k->name + "/bf16/D" + std::to_string(d) + "/" +
                  (causal ? "causal" : "full") + "/N" + std::to_string(n),
              [k, s, t, run](benchmark::State& st) { report(st, run(*k, s, t, timing_only())); });
        }
      }
}

// Grouped K/V heads on the fixed-length kernels that take them (forward and backward; decoding
// kernels are timed on the decode shapes): B 2, H 32 query heads over H_kv 32 (MHA), 8, 4 and 1
// (MQA) K/V heads, N 4096 and 8192, D 128 (the rows the grouped-heads goal is measured on), D 64
// and D 256, bf16, causal and full. The query heads (and so the FLOPs) are the same at every H_kv, so
// a row's time against its Hkv32 row is the time per query head against MHA:
// attn_gqa/fwd|bwd/<kernel>/bf16/D<d>/<causal|full>/N<n>/Hkv<h>.
std::string gqa_row(const std::string& family, const std::string& kernel, int d, bool causal,
                    int64_t n, int64_t hkv) {
  return family + kernel + "/bf16/D" + std::to_string(d) + "/" + (causal ? "causal" : "full") +
         "/N" + std::to_string(n) + "/Hkv" + std::to_string(hkv);
}

template <class K, class Run>
void add_grouped_heads(const std::string& family, Run run) {
  const fa::DType t = fa::DType::BF16;
  for (const K* k : fa::entries_with_prefix<K>("")) {
    if constexpr (std::is_same_v<K, fa::AttentionFwdKernel>)
      if (k->decoding) continue;
    if (!k->gqa || !fa::supports(k->dtypes, t)) continue;
    for (int d : {128, 64, 256}) {
      if (!fa::supports(k->head_dims, d)) continue;
      for (bool causal : {false, true})
        for (int64_t n : {4096, 8192})
          for (int64_t hkv : {32, 8, 4, 1}) {
            const fa::AttentionShape s{2, 32, n, n, d, causal, 0.0f, hkv};
            add(gqa_row(family, k->name, d, causal, n, hkv),
                [k, s, t, run](benchmark::State& st) { report(st, run(*k, s, t, timing_only())); });
          }
    }
  }
}

// The same rows at D 128 for chapter 09's varlen kernels that take grouped heads, on the same
// problem packed (two sequences of N tokens); at D 256 for those whose only instance is 256
// (09/bwd_v8_grouped_d256).
template <class K, class Run>
void add_grouped_varlen(const std::string& family, Run run) {
  const fa::DType t = fa::DType::BF16;
  for (const K* k : fa::entries_with_prefix<K>("")) {
    if (!k->gqa || !fa::supports(k->dtypes, t)) continue;
    const bool only_256 = k->head_dims == std::vector<int>{256};
    if (!fa::supports(k->head_dims, 128) && !only_256) continue;
    const int d = only_256 ? 256 : 128;
    for (bool causal : {false, true})
      for (int64_t n : {4096, 8192})
        for (int64_t hkv : {32, 8, 4, 1}) {
          fa::VarlenShape s;
          s.seqlens_q = s.seqlens_k = {n, n};
          s.heads = 32;
          s.heads_kv = hkv;
          s.head_dim = d;
          s.causal = causal;
          add(gqa_row(family, k->name, d, causal, n, hkv),
              [k, s, t, run](benchmark::State& st) { report(st, run(*k, s, t, timing_only())); });
        }
  }
}

// Decoding: one query row per sequence against a long K/V cache, bf16, D 128, for every forward
// kernel that takes bf16 D 128 (a kernel without GQA is reported as skipped on the grouped shape).
// Memory-bound: the harness reports GB/s of Q, K, V, O, L and the percentage of the copy ceiling.
// bench/compare_decode.py times PyTorch SDPA on the same shapes.
void add_decode_shapes() {
  const std::vector<fa::AttentionShape> shapes = {
      {8, 32, 1, 32768, 128, false, 0.0f, 32},   // multi-head: H_kv = H
      {8, 32, 1, 32768, 128, false, 0.0f, 8},    // GQA, groups of 4
      {1, 16, 1, 131072, 128, false, 0.0f, 16},  // one long sequence
  };
  const fa::DType t = fa::DType::BF16;
  // D 128, the protocol's; D 80, a head dim between the instances, for every kernel that takes
  // it (rounded up inside: chapter 07's rungs, 08/t07_rounded_head_dims); D 59, no multiple of 8,
  // for the kernels that take every head dim (08/t08_any_head_dim, and chapter 05's t15 and t17,
  // which ran it before). D 256 and 192, above chapter 08's first instances: the decoding kernels
  // that take them (08/t09_d256) and the two that ran them before, 07/v5_persistent on Hopper and
  // 05/t16_grouped_heads before it (every other kernel that takes D 256 is a prefill kernel too).
  const auto before_t09 = [](const std::string& name) {
    return name == "07/v5_persistent" || name == "05/t16_grouped_heads";
  };
  for (int d : {128, 80, 59, 256, 192})
    for (const fa::AttentionFwdKernel* k : fa::entries_with_prefix<fa::AttentionFwdKernel>(""))
      for (fa::AttentionShape s : shapes) {
        if (!fa::supports(k->dtypes, t) || !fa::takes_head_dim(*k, d)) continue;
        if (d == 128 && !fa::supports(k->head_dims, 128)) continue;
        if (d > 128 && !k->decoding && !before_t09(k->name)) continue;
        s.head_dim = d;
        const std::string name = "attn_decode/" + k->name + "/bf16/D" + std::to_string(d) + "/B" +
                                 std::to_string(s.batch) + "_H" + std::to_string(s.heads) + "_Hkv" +
                                 std::to_string(s.kv_heads()) + "/Nq" + std::to_string(s.seq_q) +
                                 "/Nk" + std::to_string(s.seq_k);
        add(name, [k, s, t](benchmark::State& st) {
          report(st, fa::run_attention_fwd(*k, s, t, timing_only()));
        });
      }
}

// ---- Chapter 09: attention as it is served ----------------------------------------------------
// One fixed mixed batch, written out so every run and bench/compare_serving.py see the same
// lengths: 14 sequences, 16384 tokens, the ragged extremes 0 and 1 among them, the longest 4096.
// The square batch has as many sequences of the mean length (1170: 16380 tokens).
const std::vector<int64_t> kMixedLengths = {0,    1,    17,  127,  129,  1000, 4096,
                                            2048, 3000, 513, 2600, 1950, 400,  503};

// The long batch: bench/compare_serving.py's (seeded lengths of 1..5000 summing to 32768 tokens,
// its default seed), 15 sequences of 260 to 4456 tokens: long, uneven sequences, where a
// persistent kernel's static deal of units meets its most uneven costs.
const std::vector<int64_t> kLongLengths = {3889, 3645, 260,  664,  2387, 2661, 1843, 2414,
                                           853,  3344, 2827, 2019, 4456, 1052, 454};

fa::VarlenShape varlen_batch(bool square, int d, bool causal, bool long_batch = false) {
  fa::VarlenShape s;
  s.seqlens_q = long_batch ? kLongLengths : kMixedLengths;
  if (square) {
    int64_t total = 0;
    for (int64_t len : kMixedLengths) total += len;
    s.seqlens_q.assign(kMixedLengths.size(), total / int64_t(kMixedLengths.size()));
  }
  s.seqlens_k = s.seqlens_q;
  s.heads = 2048 / d;  // the protocol's hidden size 2048
  s.head_dim = d;
  s.causal = causal;
  return s;
}

// attn_varlen/<kernel>/bf16/D<64|96|128|192|256|59|201>/<causal|full>/<mixed|square|long>: every
// varlen forward that takes the head dim (D 59 and 201, no multiple of 8: chapter 09's v3 and v4),
// on the three batches (long: the forwards only), and the fixed-length forwards serving the mixed
// batch padded to its longest sequence (mixed_padded) or called once per sequence
// (mixed_per_sequence).
// TFLOP/s on the visible pairs of the varlen problem. attn_varlen_bwd/: the varlen backwards that
// take the head dim (D 59: bwd_v3 and v4; 192, 201 and 256: bwd_v5) on the same batches.
void add_varlen_shapes() {
  const fa::DType t = fa::DType::BF16;
  for (int d : {64, 96, 128, 192, 256, 59, 201})  // 96, 192, 256: the Hopper kernels' instances
    for (bool causal : {false, true}) {
      const std::string tail =
          std::string("/bf16/D") + std::to_string(d) + (causal ? "/causal/" : "/full/");
      for (bool square : {false, true}) {
        const fa::VarlenShape s = varlen_batch(square, d, causal);
        const std::string batch = square ? "square" : "mixed";
        for (const fa::VarlenFwdKernel* k : fa::entries_with_prefix<fa::VarlenFwdKernel>("")) {
          if (!fa::supports(k->dtypes, t) || !fa::takes_head_dim(*k, d)) continue;
          add("attn_varlen/" + k->name + tail + batch, [k, s, t](benchmark::State& st) {
            report(st, fa::run_varlen_fwd(*k, s, t, timing_only()));
          });
        }
        for (const fa::VarlenBwdKernel* k : fa::entries_with_prefix<fa::VarlenBwdKernel>("")) {
          if (!fa::supports(k->dtypes, t) || !fa::takes_head_dim(*k, d)) continue;
          add("attn_varlen_bwd/" + k->name + tail + batch, [k, s, t](benchmark::State& st) {
            report(st, fa::run_varlen_bwd(*k, s, t, timing_only()));
          });
        }
      }
      // The long batch (kLongLengths), the forwards only.
      const fa::VarlenShape long_batch = varlen_batch(false, d, causal, true);
      for (const fa::VarlenFwdKernel* k : fa::entries_with_prefix<fa::VarlenFwdKernel>("")) {
        if (!fa::supports(k->dtypes, t) || !fa::takes_head_dim(*k, d)) continue;
        add("attn_varlen/" + k->name + tail + "long", [k, long_batch, t](benchmark::State& st) {
          report(st, fa::run_varlen_fwd(*k, long_batch, t, timing_only()));
        });
      }
      const fa::VarlenShape s = varlen_batch(false, d, causal);
      for (const char* name : {"05/v5_fewer_instructions", "07/v4_intra_overlap"}) {
        const fa::AttentionFwdKernel* k = fa::find_entry<fa::AttentionFwdKernel>(name);
        if (k == nullptr || !fa::supports(k->dtypes, t) || !fa::supports(k->head_dims, d)) continue;
        add("attn_varlen/" + k->name + tail + "mixed_padded", [k, s, t](benchmark::State& st) {
          report(st, fa::time_varlen_padded(*k, s, t, timing_only()));
        });
        add("attn_varlen/" + k->name + tail + "mixed_per_sequence",
            [k, s, t](benchmark::State& st) {
              report(st, fa::time_varlen_per_sequence(*k, s, t, timing_only()));
            });
      }
    }
}

// attn_window/<kernel>/bf16/D<d>/N32768/<causal_W4096|causal>: one sequence of 32768 tokens,
// H 16, causal, each query seeing its 4096 most recent keys (window_left 4095), and the same
// kernel without the window; the fixed-length forwards on the full causal problem beside them
// (05/v5, 07/v4, and 07/t52, the persistent forward 09/hopper_v3 to v5 are built on); the Hopper
// window forwards also at D 64, 96, 192 and 256 (the window alone).
// attn_window_bwd/: the window backwards, the same two problems.
void add_window_shapes() {
  const fa::DType t = fa::DType::BF16;
  const int64_t n = 32768, d = 128;
  fa::VarlenShape full;
  full.seqlens_q = full.seqlens_k = {n};
  full.heads = 16;
  full.head_dim = d;
  full.causal = true;
  fa::VarlenShape win = full;
  win.window_left = 4095;
  const std::string tail = "/bf16/D128/N" + std::to_string(n) + "/";
  for (const fa::VarlenFwdKernel* k : fa::entries_with_prefix<fa::VarlenFwdKernel>("")) {
    if (!k->window || !fa::supports(k->dtypes, t) || !fa::supports(k->head_dims, int(d))) continue;
    for (const fa::VarlenShape& s : {win, full})
      add("attn_window/" + k->name + tail + (s.has_window() ? "causal_W4096" : "causal"),
          [k, s, t](benchmark::State& st) {
            report(st, fa::run_varlen_fwd(*k, s, t, timing_only()));
          });
  }
  for (const fa::VarlenBwdKernel* k : fa::entries_with_prefix<fa::VarlenBwdKernel>("")) {
    if (!k->window || !fa::supports(k->dtypes, t) || !fa::supports(k->head_dims, int(d))) continue;
    for (const fa::VarlenShape& s : {win, full})
      add("attn_window_bwd/" + k->name + tail + (s.has_window() ? "causal_W4096" : "causal"),
          [k, s, t](benchmark::State& st) {
            report(st, fa::run_varlen_bwd(*k, s, t, timing_only()));
          });
  }
  // The Hopper window forwards at their other instances (the window only), for the dispatch.
  for (const fa::VarlenFwdKernel* k : fa::entries_with_prefix<fa::VarlenFwdKernel>("")) {
    if (!k->window || k->min_sm < 90 || !fa::supports(k->dtypes, t)) continue;
    for (int dd : {64, 96, 192, 256}) {
      if (!fa::supports(k->head_dims, dd)) continue;
      fa::VarlenShape s = win;
      s.head_dim = dd;
      add("attn_window/" + k->name + "/bf16/D" + std::to_string(dd) + "/N" + std::to_string(n) +
              "/causal_W4096",
          [k, s, t](benchmark::State& st) {
            report(st, fa::run_varlen_fwd(*k, s, t, timing_only()));
          });
    }
  }
  for (const char* name :
       {"05/v5_fewer_instructions", "07/v4_intra_overlap", "07/t52_wide_kv_tiles_persistent"}) {
    const fa::AttentionFwdKernel* k = fa::find_entry<fa::AttentionFwdKernel>(name);
    if (k == nullptr || !fa::supports(k->dtypes, t) || !fa::supports(k->head_dims, int(d)))
      continue;
    const fa::AttentionShape s = full.sequence(0);
    add("attn_window/" + k->name + tail + "causal", [k, s, t](benchmark::State& st) {
      report(st, fa::run_attention_fwd(*k, s, t, timing_only()));
    });
  }
}

// attn_paged/<kernel>/bf16/D<128|80|192|256|59>/B8_H32_Hkv8/Nq<1|512>/Nk32768/page<16|64|256>: every
// paged forward at each page size it takes, on attn_decode's GQA shape (one query row; GB/s and %
// of copy) and on a chunked prefill of 512 new tokens (causal; TFLOP/s); .../contiguous: the same
// keys stored contiguously, read by the kernel 09/paged_v1_decode is built on
// (08/t07_rounded_head_dims; at D 59 08/t08_any_head_dim, which 09/paged_v4_decode_any_head_dim is
// built on) for one query row, and by the dispatch's Hopper forward (07/v5_persistent) for the
// chunk. D 80 is a head dim between the instances, for the kernels that round it up inside; D 192
// and 256 the Hopper kernels' widest instances (the contiguous 07/v5 computes D 192 as 256); D 59,
// no multiple of 8, for the kernels that take every head dim (09/paged_v3_prefill_any_head_dim,
// 09/paged_v4_decode_any_head_dim).
// attn_paged_append/: writing the new tokens' K and V (at D 128).
void add_paged_shapes() {
  const fa::DType t = fa::DType::BF16;
  const int64_t batch = 8, heads = 32, heads_kv = 8, seq_k = 32768;
  for (int64_t d : {128, 80, 192, 256, 59}) {
    for (int64_t seq_q : {int64_t(1), int64_t(512)}) {
      const fa::AttentionFwdKernel* contiguous =
          fa::find_entry<fa::AttentionFwdKernel>(seq_q > 1    ? "07/v5_persistent"
                                                 : d % 8 == 0 ? "08/t07_rounded_head_dims"
                                                              : "08/t08_any_head_dim");
      const std::string shape = "/bf16/D" + std::to_string(d) + "/B8_H32_Hkv8/Nq" +
                                std::to_string(seq_q) + "/Nk" + std::to_string(seq_k) + "/";
      for (int page : {16, 64, 256}) {
        fa::PagedShape s;
        s.seqlens_k.assign(batch, seq_k);
        s.heads = heads;
        s.heads_kv = heads_kv;
        s.head_dim = d;
        s.seq_q = seq_q;
        s.causal = seq_q > 1;  // the chunk's rows are the sequence's last tokens
        s.page_size = page;
        // num_pages and max_pages left 0: the harness sizes the pool (spare pages included) and
        // the block table (a column wider than needed).
        for (const fa::PagedFwdKernel* k : fa::entries_with_prefix<fa::PagedFwdKernel>("")) {
          if (!fa::supports(k->dtypes, t) || !fa::takes_head_dim(*k, d) ||
              !fa::supports(k->page_sizes, page) || !k->gqa)  // the shape groups the heads
            continue;
          // A head dim its smallest instance computes at twice the work or more (D 128 and 80 in
          // 09/paged_v5_decode_d256, which the dispatch runs above 128 only): not timed.
          if (k->rounds_head_dim && !k->head_dims.empty() && 2 * d <= k->head_dims.front())
            continue;
          add("attn_paged/" + k->name + shape + "page" + std::to_string(page),
              [k, s, t](benchmark::State& st) {
                report(st, fa::run_paged_fwd(*k, s, t, timing_only()));
              });
        }
        if (d != 128) continue;
        for (const fa::PagedAppendKernel* k : fa::entries_with_prefix<fa::PagedAppendKernel>("")) {
          if (!fa::supports(k->dtypes, t)) continue;
          add("attn_paged_append/" + k->name + shape + "page" + std::to_string(page),
              [k, s, t](benchmark::State& st) {
                report(st, fa::run_paged_append(*k, s, t, timing_only()));
              });
        }
      }
      if (contiguous != nullptr && fa::supports(contiguous->dtypes, t) &&
          fa::takes_head_dim(*contiguous, d)) {
        const fa::AttentionShape s{batch, heads, seq_q, seq_k, d, seq_q > 1, 0.0f, heads_kv};
        add("attn_paged/" + contiguous->name + shape + "contiguous",
            [contiguous, s, t](benchmark::State& st) {
              report(st, fa::run_attention_fwd(*contiguous, s, t, timing_only()));
            });
      }
    }
  }
}

void register_all() {
  // Ceilings first: every percentage elsewhere is of these.
  add("ceiling/copy_bandwidth", [](benchmark::State& st) {
    double gbps = fa::have_gpu() ? fa::copy_bandwidth_gbps() : 0;
    if (gbps == 0) {
      st.SkipWithError("no GPU");
      for (auto _ : st) {
      }
      return;
    }
    for (auto _ : st) st.SetIterationTime(2.0 * (1 << 30) / (gbps * 1e9));
    st.counters["GBps"] = gbps;
  });

  for (const fa::SoftmaxKernel* k : fa::entries_with_prefix<fa::SoftmaxKernel>(""))
    for (fa::SoftmaxShape s : {fa::SoftmaxShape{4096, 4096}, fa::SoftmaxShape{16384, 1024},
                               fa::SoftmaxShape{1024, 65536}})
      add("softmax/" + k->name + "/" + s.str(),
          [k, s](benchmark::State& st) { report(st, fa::run_softmax(*k, s, timing_only())); });

  for (const fa::TransposeKernel* k : fa::entries_with_prefix<fa::TransposeKernel>(""))
    add("transpose/" + k->name + "/8192x8192", [k](benchmark::State& st) {
      report(st, fa::run_transpose(*k, {8192, 8192}, timing_only()));
    });

  for (const fa::GemmKernel* k : fa::entries_with_prefix<fa::GemmKernel>(""))
    for (fa::DType t : k->dtypes)
      for (int64_t n : {1024, 4096}) {
        fa::GemmShape s{n, n, n};
        add(std::string("gemm/") + k->name + "/" + fa::dtype_name(t) + "/" + s.str(),
            [k, s, t](benchmark::State& st) { report(st, fa::run_gemm(*k, s, t, timing_only())); });
      }

  // The FlashAttention protocol: 16384 tokens per batch, hidden 2048, N from 512 to 16384.
  add_attention_protocol<fa::AttentionFwdKernel>("attn_fwd/", fa::run_attention_fwd);
  add_attention_protocol<fa::AttentionBwdKernel>("attn_bwd/", fa::run_attention_bwd);
  add_dispatch_protocol<fa::AttentionFwdKernel>("attn_fwd/", false, fa::run_attention_fwd);
  add_dispatch_protocol<fa::AttentionBwdKernel>("attn_bwd/", true, fa::run_attention_bwd);
  add_head_dims_between<fa::AttentionFwdKernel>(
      "attn_fwd/", false,
      {"07/v5_persistent", "07/t51_wide_kv_tiles", "07/t52_wide_kv_tiles_persistent",
       "07/t56_wide_o_stores", "05/v5_fewer_instructions", "05/v4_swizzled_pipelined",
       "05/t14_rounded_head_dims", "05/t15_any_head_dim"},
      fa::run_attention_fwd);
  add_head_dims_between<fa::AttentionBwdKernel>(
      "attn_bwd/", true,
      {"07/bwd_v6_head_groups", "07/bwd_t48_dq_in_turns", "07/bwd_t53_d256_halves",
       "07/bwd_t55_d96", "07/bwd_t58_wide_dkdv_stores", "07/bwd_t59_d256_wide_stores",
       "07/bwd_v1_tma_wgmma", "06/v5_warp_tiles", "06/v4_bc128_tuned", "06/t16_rounded_head_dims",
       "06/t17_any_head_dim", "06/t19_d256_rounded", "06/t21_d256_any_head_dim"},
      fa::run_attention_bwd);
  add_decode_shapes();
  add_grouped_heads<fa::AttentionFwdKernel>("attn_gqa/fwd/", fa::run_attention_fwd);
  add_grouped_heads<fa::AttentionBwdKernel>("attn_gqa/bwd/", fa::run_attention_bwd);
  add_grouped_varlen<fa::VarlenFwdKernel>("attn_gqa/fwd/", fa::run_varlen_fwd);
  add_grouped_varlen<fa::VarlenBwdKernel>("attn_gqa/bwd/", fa::run_varlen_bwd);
  // Chapter 09: variable-length batches, sliding windows, the paged KV cache.
  add_varlen_shapes();
  add_window_shapes();
  add_paged_shapes();

  // The backward's preprocess, D_i = rowsum(dO_i o O_i), every registered one (chapter 06's):
  // memory-bound, so GB/s against the copy ceiling (bytes: O and dO read once, D written once in
  // fp32).
  for (const fa::AttentionBwdPreprocessKernel* k :
       fa::entries_with_prefix<fa::AttentionBwdPreprocessKernel>(""))
    for (fa::DType t : {fa::DType::BF16, fa::DType::F32}) {
      if (!fa::supports(k->dtypes, t)) continue;
      for (int d : {64, 128})
        for (int64_t n : {1024, 8192}) {
          fa::AttentionShape s{16384 / n, 2048 / d, n, n, d, false, 0.0f};
          add("bwd_preprocess/" + k->name + "/" + fa::dtype_name(t) + "/D" + std::to_string(d) +
                  "/N" + std::to_string(n),
              [k, s, t](benchmark::State& st) {
                const std::string why = fa::gpu_skip_reason(k->min_sm);
                if (!why.empty()) {
                  st.SkipWithError(why.c_str());
                  for (auto _ : st) {
                  }
                  return;
                }
                const size_t el = fa::dtype_size(t);
                fa::DeviceBuffer o(s.q_numel() * el), dout(s.q_numel() * el),
                    delta(s.lse_numel() * sizeof(float));
                fa::fill_random_device(t, o.data(), s.q_numel(), 1, 0.5f, 1.0f);
                fa::fill_random_device(t, dout.data(), s.q_numel(), 2, 0.5f, 1.0f);
                fa::Timing tm = fa::time_gpu(
                    [&](cudaStream_t stream) {
                      k->run(o.data(), dout.data(), delta.as<float>(), s, t, stream);
                    },
                    timing_only().timing);
                for (auto _ : st) st.SetIterationTime(tm.median_ms * 1e-3);
                double bytes = 2.0 * s.q_numel() * el + s.lse_numel() * sizeof(float);
                st.counters["GBps"] = bytes / (tm.median_ms * 1e-3) / 1e9;
                st.counters["pct_of_copy"] =
                    100.0 * st.counters["GBps"] / fa::copy_bandwidth_gbps();
              });
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
  bool list_only = false;
  std::filesystem::path out_folder;  // of --benchmark_out=build/bench.json: made below
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i], out = "--benchmark_out=";
    list_only =
        list_only || arg == "--benchmark_list_tests" || arg == "--benchmark_list_tests=true";
    if (arg.rfind(out, 0) == 0)
      out_folder = std::filesystem::path(arg.substr(out.size())).parent_path();
  }
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  if (!fa::have_gpu() && !list_only) {
    // Every row would be an error row: say it once (the CPU tests are ctest -L cpu).
    std::cout << "fa_bench on " << fa::describe_gpu()
              << ": nothing to time (--benchmark_list_tests lists the benchmarks)\n";
    return 0;
  }
  std::cerr << "fa_bench on " << fa::describe_gpu() << "\n";
  std::error_code ignored;  // a folder that cannot be made: Google Benchmark says so
  if (!out_folder.empty()) std::filesystem::create_directories(out_folder, ignored);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
