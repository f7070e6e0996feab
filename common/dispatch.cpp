// dispatch.cpp: the table of dispatch.h, and the walk down it.
#include "dispatch.h"

#include <sstream>
#include <utility>

#include "gpu.h"
#include "harness.h"  // supports, missing_version, kDecodeSeqQ
#include "registry.h"

namespace fa {

namespace {

// The runs the rows cite (H200, 2026-12-01 to 2026-12-05, and H100s from 2026-12-05 on;
// notes/measured/README.md says what each holds).
constexpr const char* kRun = "notes/measured/h200-2026-12-01/";
constexpr const char* kRun1202 = "notes/measured/h200-2026-12-02/";
constexpr const char* kRun1203 = "notes/measured/h200-2026-12-03/";
constexpr const char* kRun1204 = "notes/measured/h200-2026-12-04/";
constexpr const char* kRun1205 = "notes/measured/h200-2026-12-05/";
constexpr const char* kRunH100 = "notes/measured/h100-2026-12-05/";    // an H100 that day
constexpr const char* kRun1206 = "notes/measured/h100-2026-12-06/";    // an H100
constexpr const char* kRun1207 = "notes/measured/h100-2026-12-07c/";   // an H100
constexpr const char* kRun1207d = "notes/measured/h100-2026-12-07d/";  // an H100
constexpr const char* kRun1207e = "notes/measured/h100-2026-12-07e/";  // an H100
constexpr const char* kRun1207f = "notes/measured/h100-2026-12-07f/";  // an H100
constexpr const char* kRun1207h = "notes/measured/h200-2026-12-07/";   // an H200
constexpr const char* kRun1208 = "notes/measured/h100-2026-12-08/";    // an H100
std::string log(const char* file, const char* run = kRun) {
  return std::string(run) + file;
}

// A row, written as a chain: on(Op::Fwd, "07/v5_persistent").hopper().dims({128}).causal()...
struct Row {
  Rule r;
  Row(Op op, const char* kernel) {
    r.op = op;
    r.kernel = kernel;
  }
  Row& hopper() {  // sm_90 exactly: chapter 07's and 09's Hopper kernels are sm_90a machine code
    r.sm_min = r.sm_max = 90;
    return *this;
  }
  Row& sm(int lo) {
    r.sm_min = lo;
    return *this;
  }
  Row& only(DType t) {
    r.dtypes = {t};
    return *this;
  }
  Row& dims(std::vector<int> d) {
    r.head_dims = std::move(d);
    return *this;
  }
  Row& full() {
    r.causal = Rule::Tri::No;
    return *this;
  }
  Row& causal() {
    r.causal = Rule::Tri::Yes;
    return *this;
  }
  Row& window() {
    r.window = Rule::Tri::Yes;
    return *this;
  }
  Row& grouped() {
    r.gqa = Rule::Tri::Yes;
    return *this;
  }
  Row& rounded() {
    r.rounded = Rule::Tri::Yes;
    return *this;
  }
  Row& exact() {  // the head dims the kernel lists, none it rounds up
    r.rounded = Rule::Tri::No;
    return *this;
  }
  Row& pages_from(int64_t keys) {
    r.page_min = keys;
    return *this;
  }
  Row& decoding() {
    r.seq_q_max = kDecodeSeqQ;
    return *this;
  }
  Row& keys(int64_t lo, int64_t hi) {
    r.seq_k_min = lo;
    r.seq_k_max = hi;
    return *this;
  }
  Rule because(const char* why, const std::string& measured) {
    r.why = why;
    r.measured = measured;
    return r;
  }
};
Row on(Op op, const char* kernel) {
  return Row(op, kernel);
}

constexpr int64_t kAny = -1;

}  // namespace

// The table. Read it top to bottom: specific rows first (decoding, windows, grouped heads, the
// shapes where another rung measured faster), then each GPU's general choice, then the fallbacks
// for the dtypes and head dims the fast kernels lack. Where two kernels measured within 2% of
// each other the row keeps the simpler choice: that is inside the run-to-run spread.
const std::vector<Rule>& dispatch_table() {
  static const std::vector<Rule> table = {
      // ---- forward, fixed length -------------------------------------------------------------
      on(Op::Fwd, "08/v6_last_block_merge")
          .decoding()
          .because("a query row or a few against a long cache is memory-bound: chapter 08's "
                   "last rung, one launch (the splits merged by each row tile's last block): "
                   "1.000-1.009x 08/v5_swizzled_ring on the three decode shapes (three "
                   "alternating rounds), 0.99-1.01x cuDNN at B 1 and at H_kv 32",
                   log("decode_v6_batch8_rounds.md", kRun1202)),
      on(Op::Fwd, "08/t07_rounded_head_dims")
          .decoding()
          .rounded()
          .because("head dims between v6's instances 64 and 128 (multiples of 8) rounded up "
                   "inside v6 (chapter 08's tuning step t07): at D 80 3808-4139 GB/s, 0.94-0.95x "
                   "cuDNN, 1.24-9.1x 07/v5_persistent (the kernel that ran it before); at D 128 "
                   "0.995-0.999x v6 (three alternating rounds)",
                   log("decode_t07.log", kRun1203)),
      on(Op::Fwd, "08/t09_d256")
          .decoding()
          .because("decoding above head dim 128 (multiples of 8, computed at 256): t07 at D 256 "
                   "(chapter 08's tuning step t09). H100 (2026-12-06), D 192 and 256, the decode "
                   "shapes: 104-110% of the copy bandwidth; 2.1-5.3x 07/v5_persistent (what ran "
                   "it on Hopper) and 2.7-9.2x 05/t16_grouped_heads (before sm_90) with grouped "
                   "heads or one long cache, level at H_kv = H; 0.99-1.20x FlashAttention-2 and "
                   "1.07-1.26x cuDNN in the same run (decode_t09_sdpa.log)",
                   log("decode_t09.log", kRun1206)),
      on(Op::Fwd, "08/t08_any_head_dim")
          .decoding()
          .rounded()
          .because("decoding at head dims off the step of 8 (59, 111, ...): t07 with each 16-byte "
                   "chunk of a row copied element by element. D 59: 0.215 ms at B 8, H 32, H_kv 8, "
                   "32768 keys, 12.5x 05/t17_grouped_any_head_dim (the kernel that ran it before), "
                   "3.5-47x at the other two decode shapes; at D 80 level with t07, which keeps "
                   "the multiples of 8",
                   log("group_split_bench.log", kRun1205)),
      on(Op::Fwd, "09/hopper_v5_window_single_units")
          .hopper()
          .window()
          .because("a sliding window on Hopper: 07/t52's persistent blocks with the band, one "
                   "query tile a work unit. W 4096, N 32768, causal (H100, three rounds): "
                   "1.02-1.19x 09/hopper_v2_window at D 64, 96, 128, 192, 256 (D 128: 643.1 "
                   "TFLOP/s per visible pair against 629.5)",
                   log("window_dims_rounds.log", kRun1206)),
      on(Op::Fwd, "09/v2_window")
          .window()
          .because("the window's mma.sync kernel (before sm_90)", log("ch09_serving.log")),
      on(Op::Fwd, "09/v4_window_any_head_dim")
          .window()
          .because("a window at the head dims 09/v2_window lacks (every head dim up to 256, 59 "
                   "and 111 too; on sm_90 those off the step of 8, which the Hopper rung's TMA "
                   "cannot read), where nothing ran them: 05/t17 with v2_window's tile skipping. "
                   "Timed on the H200 on packed batches without a window (the window's tiles are "
                   "v2_window's): D 59 60.7-92.1 TFLOP/s, D 256 156.2-202.7; at D 128 0.79-0.81x "
                   "v2_window, which keeps 64 and 128 (two runs)",
                   log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::Fwd, "05/v5_fewer_instructions")
          .sm(90)
          .dims({32})
          .because("D 32, which chapter 05's final rung lists: 1.01-1.02x 07/v5_persistent "
                   "rounded up to D 64 (223.6-236.7 against 219.8-231.8 TFLOP/s at N 2048 and "
                   "8192, causal and full)",
                   log("head_dims_between.log", kRun1203)),
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .grouped()
          .dims({128})
          .full()
          .because("grouped K/V heads at D 128, full: t52 with O in 16-byte stores reads K/V "
                   "head h / group as v5 does; 1.01-1.04x v5 at H 32, H_kv 32/8/4/1, N 4096 and "
                   "8192 (three rounds, each kernel a process of its own)",
                   log("fwd_dispatch_rows_gqa.md", kRun1207)),
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .grouped()
          .dims({128})
          .causal()
          .keys(4096, kAny)
          .because("grouped K/V heads at D 128, causal from 4096 keys: 0.995-1.15x v5 at H 32, "
                   "H_kv 32/8/4/1 (1.01-1.02x at N 4096); below 4096 causal keys v5 stays, as "
                   "for multi-head attention",
                   log("fwd_dispatch_rows_gqa.md", kRun1207)),
      on(Op::Fwd, "07/t66_dynamic_schedule")
          .hopper()
          .grouped()
          .dims({64})
          .full()
          .because("grouped K/V heads at D 64, full: t66 reads K/V head h / group as v5 does; "
                   "1.18-1.22x v5 at H 32, H_kv 32/8/4/1, N 4096 and 8192 (two rounds, each "
                   "kernel a process of its own; H200)",
                   log("fair_rounds_gqa.md", kRun1207h)),
      on(Op::Fwd, "07/t66_dynamic_schedule")
          .hopper()
          .grouped()
          .dims({64})
          .causal()
          .keys(2048, kAny)
          .because("grouped K/V heads at D 64, causal from 2048 keys: 1.12-1.24x v5 at H 32, "
                   "H_kv 32/8/4/1, N 4096 and 8192; below 2048 causal keys v5 stays, as for "
                   "multi-head attention",
                   log("fair_rounds_gqa.md", kRun1207h)),
      on(Op::Fwd, "07/v5_persistent")
          .hopper()
          .grouped()
          .because("grouped K/V heads in the fastest forward: the K/V head h / group in its TMA "
                   "coordinates, no copies; 0.99-1.01x its MHA time at H 32, H_kv 8/4/1, D 128, "
                   "N 4096 and 8192, causal and full (each row timed alone)",
                   log("gqa_ratios_alone.log", kRun1202)),
      on(Op::Fwd, "09/v1_varlen")
          .grouped()
          .because("grouped K/V heads on mma.sync (before sm_90)", log("ch09_serving.log")),
      on(Op::Fwd, "05/t16_grouped_heads")
          .grouped()
          .because("grouped K/V heads on mma.sync at the head dims 09/v1_varlen lacks (32, 96, "
                   "256 and the multiples of 8 between): t14 reading K/V head h / group in "
                   "place (chapter 05's tuning step t16); 0.99-1.00x its MHA time per query head "
                   "at H 32, H_kv 8/4/1, N 8192, D 64, 128 and 256 (each row alone, one round). "
                   "At D 128 09/v1_varlen, which keeps 64 and 128, ran the same problem packed "
                   "in 0.84-0.87x t16's time",
                   log("grouped_mma_sync.log", kRun1204)),
      on(Op::Fwd, "05/t17_grouped_any_head_dim")
          .grouped()
          .rounded()
          .because("grouped K/V heads at head dims that are no multiple of 8 (59, 111, ...), on "
                   "every GPU, which no other forward takes: t15 reading K/V head h / group in "
                   "place (chapter 05's tuning step t17); 0.997-1.000x its MHA time per query "
                   "head at H 32, H_kv 8/4/1, D 128, N 8192, causal and full (each row alone)",
                   log("grouped_any_head_dim_gqa.log", kRun1205)),
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .dims({192})
          .because("D 192 at t52's instance of its own (FlashAttention-3's 112-key tile), and "
                   "136-184 rounded up to it, with O in 16-byte stores: D 192 534.0-722.1 "
                   "TFLOP/s, 1.01-1.10x t52 and 1.39-1.46x v5 rounded up to 256 (0.99-1.05x "
                   "cuDNN; three rounds, each kernel a process of its own)",
                   log("fwd_dispatch_rows.md", kRun1207)),
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .dims({96})
          .because("D 96 at t52's instance of its own (D 128's 176-key tile), and 72-88 rounded "
                   "up to it, with O in 16-byte stores: D 96 381.2-551.3 TFLOP/s, 1.00-1.04x t52 "
                   "and 1.04-1.19x v5 rounded up to 128 (0.97-1.08x cuDNN); D 80 0.97-1.01x t52, "
                   "0.98-1.14x v5 (three rounds)",
                   log("fwd_dispatch_rows.md", kRun1207)),
      on(Op::Fwd, "07/t52_wide_kv_tiles_persistent")
          .hopper()
          .rounded()
          .dims({256})
          .because("head dims 200-248 rounded up to 256 in the wide K/V tiles (measured at D "
                   "192 before it had an instance: 413.6-529.3 TFLOP/s, 1.07-1.17x v5, "
                   "0.78-0.90x cuDNN; t51 3.8% ahead at full N 8192 only)",
                   log("rounded_wide_medians.txt", kRun1203)),
      on(Op::Fwd, "07/t52_wide_kv_tiles_persistent")
          .hopper()
          .rounded()
          .dims({128})
          .full()
          .because("head dims 104-120 rounded up to 128, full (measured at D 80 and 96 before "
                   "the instance at 96: 412.4-483.5 TFLOP/s, 1.02-1.06x v5, 0.95-1.01x cuDNN)",
                   log("rounded_wide_medians.txt", kRun1203)),
      on(Op::Fwd, "07/t52_wide_kv_tiles_persistent")
          .hopper()
          .rounded()
          .dims({128})
          .causal()
          .keys(4096, kAny)
          .because("head dims 104-120 rounded up to 128, long causal rows (measured at D 96 "
                   "before the instance at 96: N 8192 427.2 TFLOP/s, 1.10x v5, 0.97x cuDNN; D 80 "
                   "level with v5)",
                   log("rounded_wide_medians.txt", kRun1203)),
      on(Op::Fwd, "07/v5_persistent")
          .hopper()
          .rounded()
          .because("the other head dims between the instances 64, 128 and 256 (multiples of "
                   "8) rounded up inside v5: below 64, and 104-120 on causal rows below 4096 keys "
                   "(1.01-1.10x t52 rounded up to 128, measured at D 80 and 96, N 2048). Before "
                   "the wide tiles: D 96 401-470 "
                   "TFLOP/s, 1.51-1.77x 05/v4; D 80 312-402 and D 192 390-486 (0.69-0.94x cuDNN, "
                   "1.41-1.65x FlashAttention-2), TFLOP/s counted on the real head dim",
                   log("head_dims_between.log", kRun1203)),
      // t64's three consumers, each walking the key tiles its own rows see (t65), with the query
      // tiles handed out heaviest first to whichever block frees first (t66): three rounds, each
      // kernel a process of its own, beside t65, t64, v5, v1 and t60, with PyTorch's peers.
      on(Op::Fwd, "07/t66_dynamic_schedule")
          .hopper()
          .dims({64})
          .full()
          .because("D 64 full: 1.02-1.18x v1 (1.02x at 512 keys, 1.05x at 1024, the rung that ran "
                   "them before) and 1.01-1.08x t64 at every protocol N (394-545 TFLOP/s, "
                   "1.01-1.12x cuDNN in the same run; three rounds, each kernel a process of its "
                   "own, the order rotated; H200)",
                   log("fair_rounds_fwd.md", kRun1207h)),
      on(Op::Fwd, "07/t66_dynamic_schedule")
          .hopper()
          .dims({64})
          .causal()
          .keys(2048, kAny)
          .because("D 64 causal from 2048 keys: 1.10-1.22x v5 and 1.07-1.18x t64 (412-526 "
                   "TFLOP/s, 1.03-1.12x cuDNN); at 512 and 1024 keys 0.93x and 0.98x v5, which "
                   "runs them (three rounds, each kernel a process of its own; H200)",
                   log("fair_rounds_fwd.md", kRun1207h)),
      // t60 whose consumers compute the last key tile of a causal work tile over its first half
      // where their rows see no more (t68): three rounds on the causal rows up to 4096 keys and
      // two on every row, each kernel a process of its own, beside t60 and v5 (an H100).
      on(Op::Fwd, "07/t68_half_last_key_tile")
          .hopper()
          .dims({64})
          .causal()
          .keys(0, 2047)
          .because("D 64 causal below 2048 keys: 1.01x and 1.07x v5 at 512 and 1024 keys (v5 ran "
                   "them), 1.00-1.02x and 1.04-1.07x t60 (240.0 and 323.2 TFLOP/s, 0.91x and 0.94x "
                   "cuDNN in the same run; H100)",
                   log("fair_rounds_t68.md", kRun1208)),
      on(Op::Fwd, "07/t68_half_last_key_tile")
          .hopper()
          .dims({128})
          .causal()
          .keys(1024, 4095)
          .because("D 128 causal from 1024 to 4095 keys: 1.01-1.02x t60 at 1024, 1.03-1.04x at "
                   "2048, 1.02-1.06x at 4096 (427.7-601.4 TFLOP/s, 0.97-1.04x cuDNN in the same "
                   "run; two runs, H100)",
                   log("fair_rounds_short_causal.md", kRun1208)),
      on(Op::Fwd, "07/t60_v5_wide_o_stores")
          .hopper()
          .dims({128})
          .causal()
          .keys(0, 1023)
          .because("D 128 causal below 1024 keys: v5's 128-key tiles with O in 16-byte stores, "
                   "1.12x v5 and 1.37x t56 at 512 keys (whose 176-key tiles waste more of a short "
                   "causal tile; three rounds, each kernel a process of its own, the order "
                   "rotated); t68 level with it there (0.985-1.01x, two runs, 2026-12-08: "
                   "h100-2026-12-08/fair_rounds_short_causal.md, fair_rounds_t68.md)",
                   log("fair_rounds_fwd.md", kRun1207e)),
      // FlashAttention-3's K/V tile widths (176 keys at D 128, 80 at D 256) on v4 (t51) and on
      // v5 (t52), and t52 with O stored 16 bytes a thread (t56): three rounds, each kernel a
      // process of its own, beside v1, v5, t51 and t52, with PyTorch's peers; medians.
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .dims({128})
          .full()
          .because("D 128 full: 492-639 TFLOP/s, 1.01-1.11x t52 up to 8192 keys (1.11x at 512, "
                   "where the epilogue is a larger share), 1.01-1.32x t51 and 1.04-1.10x v5 "
                   "(0.92-0.96x cuDNN); at 16384 keys within 2% of t52 (0.98x, another run "
                   "1.00x)",
                   log("fwd_dispatch_rows.md", kRun1207)),
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .dims({128})
          .causal()
          .keys(4096, kAny)
          .because("D 128 causal from 4096 keys: 522-627 TFLOP/s, 1.04-1.11x t52 at 4096 and "
                   "8192 and 1.04-1.06x v5 (1.01-1.02x cuDNN, 0.81x at 16384, where every rung of "
                   "this run fell to 500-548); at 16384 0.95x and 1.01x t52 in "
                   "two runs; below 4096 causal keys v5 stays ahead (1.02-1.18x t56)",
                   log("fwd_dispatch_rows.md", kRun1207)),
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .dims({256})
          .full()
          .keys(0, 2048)
          .because("D 256 full up to 2048 keys: 402-565 TFLOP/s, 1.11-1.31x t51 and 1.04-1.13x "
                   "t52 at 512 and 1024 keys (0.78-0.80x cuDNN); at 2048 level with t52 (0.97x, "
                   "another run 1.03x)",
                   log("fwd_dispatch_rows.md", kRun1207)),
      on(Op::Fwd, "07/t51_wide_kv_tiles")
          .hopper()
          .dims({256})
          .full()
          .keys(2049, 8192)
          .because("D 256 full from 2049 to 8192 keys: 645-692 TFLOP/s at 4096 and 8192, t52 "
                   "and t56 0.94-0.99x (t56 0.94x and 0.97x of t52 at 4096 in two runs: the "
                   "one shape where the 16-byte stores did not pay)",
                   log("fwd_dispatch_rows.md", kRun1207)),
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .dims({256})
          .full()
          .because("D 256 full past 8192 keys: 711 TFLOP/s at N 16384, 1.06x t51 and 1.07x t52 "
                   "(another run 1.04x t52; 0.99x cuDNN)",
                   log("fwd_dispatch_rows.md", kRun1207)),
      on(Op::Fwd, "07/t56_wide_o_stores")
          .hopper()
          .dims({256})
          .causal()
          .because("D 256 causal: 269-699 TFLOP/s, 1.21x and 1.15x v5 at 512 and 1024 keys "
                   "(where v5 ran before), 1.02-1.11x t52 at 2048 and 4096, level with t52 at "
                   "8192 (0.995x, another run 1.03x), 1.06x t51 at 16384 (0.81-1.05x cuDNN)",
                   log("fwd_dispatch_rows.md", kRun1207)),
      on(Op::Fwd, "07/v5_persistent")
          .hopper()
          .because("the fastest forward, or within 2% of it, at 29 of the 36 protocol shapes "
                   "(D 64, 128, 256; 1.4-2.2x SDPA's FlashAttention-2)",
                   log("ladder_fwd_d128_peers.log")),
      on(Op::Fwd, "05/v5_fewer_instructions")
          .sm(90)
          .because("the mma.sync forward for sm_90 and newer (its epilogue is stmatrix), and D 32, "
                   "which chapter 07 has no version for: 1.04-1.19x FlashAttention-2 on the H100",
                   log("ladder_fwd_d128.log")),
      on(Op::Fwd, "05/t13_d256_tile_128x64")
          .sm(90)
          .dims({256})
          .because("the mma.sync forward at D 256 where a block may have 192 KiB of shared memory: "
                   "1.03-1.09x 05/v4 (three alternating rounds), 0.92-1.15x FlashAttention-2",
                   log("rounds_fwd_d256_t13.md", kRun1204)),
      on(Op::Fwd, "05/t14_rounded_head_dims")
          .rounded()
          .because("head dims between 05/v4's instances 32, 64, 96, 128 and 256 (multiples of 8) "
                   "before sm_90, rounded up inside v4 (chapter 05's tuning step t14), where "
                   "nothing ran them before. Timed on the H200: D 80 237.8-251.8 TFLOP/s, "
                   "0.94-0.98x FlashAttention-2; D 192 (computed at 256) 184.2-217.7, 0.69-0.77x; "
                   "at the listed head dims 0.96-1.02x v4, which keeps them (two rounds)",
                   log("rounded_mma_sync_fwd.md", kRun1204)),
      on(Op::Fwd, "05/t15_any_head_dim")
          .rounded()
          .because("head dims that are no multiple of 8 (59, 111, ...), on every GPU: no other "
                   "kernel takes them (TMA and cp.async need rows of whole 16-byte chunks); t14 "
                   "with those rows copied element by element (chapter 05's tuning step t15). "
                   "H200: D 59 89.2-120.6 TFLOP/s, D 111 69.0-98.1, 0.37-0.59x "
                   "FlashAttention-2, which pads the head dim in a copy first (two rounds)",
                   log("any_head_dim_fwd.md", kRun1204)),
      on(Op::Fwd, "05/v4_swizzled_pipelined")
          .because(
              "the mma.sync forward before sm_90 (at D 256 too: 05/t13 needs 192 KiB of shared "
              "memory a block), and at D 96 where 05/v5's K/V copy plan does not fit: "
              "0.95-1.05x 05/v5 at D 256, when 05/v5 still took it",
              log("ladder_fwd_d256.log")),
      on(Op::Fwd, "05/v1_scalar_fp32")
          .sm(70)
          .only(DType::F32)
          .because("fp32: the one fused fp32 forward (no tensor cores)",
                   log("ladder_fwd_d128.log")),

      // ---- backward, fixed length (grouped heads: a kernel that takes them sums dK and dV over
      // the group; for any other the caller repeats K and V and sums) --------------------------
      on(Op::Bwd, "09/hopper_bwd_v2_window")
          .hopper()
          .window()
          .because("a window's backward on wgmma (chapter 09; the batch packed): 291.1 against "
                   "09/bwd_v2_window's 185.2 TFLOP/s",
                   log("ch09_serving.log")),
      on(Op::Bwd, "09/bwd_v7_window_grouped")
          .window()
          .grouped()
          .because("a window with grouped K/V heads up to D 128 where the Hopper rung does not "
                   "run (before sm_90, and off the step of 8): bwd_v6 with bwd_v4's window on the "
                   "batch packed, K and V read in place where bwd_v2_window and bwd_v4 need them "
                   "repeated over the group and their dK, dV summed after. fa.attention() "
                   "forward + backward, H100 (2026-12-06), B 2, H 32, N 4096, window 1024, the "
                   "same forward: 0.99-1.21x bwd_v2_window (D 64, 128; H_kv 8 and 1) and "
                   "1.03-1.25x bwd_v4 (D 59-128) on repeated K/V, at 0.45-0.51x their peak "
                   "memory (not deterministic, as they are not)",
                   log("e2e_window_gqa.log", kRun1206)),
      on(Op::Bwd, "09/bwd_v2_window")
          .window()
          .because("a window's backward on mma.sync (before sm_90)", log("ch09_serving.log")),
      on(Op::Bwd, "09/bwd_v4_window_any_head_dim")
          .window()
          .because("a window's backward at the head dims 09/bwd_v2_window lacks (up to 128, 59 and "
                   "111 too), and on GPUs whose blocks lack bwd_v2_window's 171 KiB (an A100): "
                   "06/t17 with bwd_v2_window's tile skipping. Timed on the H200 on packed "
                   "batches without a window: D 59 72.3-94.4 TFLOP/s; at D 128 0.90-0.94x "
                   "bwd_v2_window (two runs)",
                   log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::Bwd, "09/bwd_v8_grouped_d256")
          .window()
          .grouped()
          .because(
              "a window with grouped K/V heads above D 128 where the Hopper rung does not run "
              "(before sm_90, and off the step of 8): bwd_v5 (the row below) with the group "
              "walk, K and V read in place where bwd_v5 needs them repeated over the group "
              "and its dK, dV summed after. H200, same run, packed batches without a window, MHA: "
              "0.99-1.01x bwd_v5 at D 192 and 256; grouped, 1.000-1.009x its MHA time per "
              "query head (group_split_gqa.log; not deterministic)",
              log("group_split_bench.log", kRun1205)),
      on(Op::Bwd, "09/bwd_v5_window_d256")
          .window()
          .because("a window's backward at the head dims above 128 where the Hopper rungs do not "
                   "run (before sm_90, and off the step of 8 on any GPU): bwd_v2_window's band on "
                   "06/t21 (147 KiB, an A100 has them). H200, packed batches: D 256 129.5-172.4 "
                   "TFLOP/s, D 192 110.6-144.1, D 201 54.0-67.0 (not deterministic)",
                   log("wide_head_dim_packed_bwd.log", kRun1205)),
      on(Op::Bwd, "07/bwd_v6_head_groups")
          .hopper()
          .grouped()
          .dims({128})
          .because("grouped K/V heads in the fastest backward at D 128: bwd_v5's group walk, "
                   "causal blocks in head groups weighed by their query heads; at H 32, H_kv "
                   "8/4/1, N 4096 and 8192 causal 0.97-1.00x its MHA time (bwd_v5: 1.01-1.06x), "
                   "full 0.96-0.99x (each row timed alone; not deterministic)",
                   log("bwd_v6_heads_gqa.log", kRun1202)),
      on(Op::Bwd, "07/bwd_t48_dq_in_turns")
          .hopper()
          .grouped()
          .dims({64})
          .because("grouped K/V heads in the fastest backward at D 64: bwd_v6's group walk with "
                   "dQ in turns; at H 32, H_kv 8/4/1, N 4096, causal and full 1.18-1.24x "
                   "bwd_v4 grouped and 0.97-0.99x its own MHA time (each row timed alone, one "
                   "round; not deterministic)",
                   log("bwd_t48_gqa_d64.log", kRun1202)),
      on(Op::Bwd, "07/bwd_v1_tma_wgmma")
          .hopper()
          .grouped()
          .because("grouped K/V heads: dK and dV summed over the group in registers, K and V "
                   "read at h / group, no copies; deterministic; 0.99-1.03x its MHA time at H "
                   "32, H_kv 8/4/1, D 128, N 4096 and 8192, causal and full (each row timed alone)",
                   log("gqa_ratios_alone.log", kRun1202)),
      on(Op::Bwd, "06/t22_group_split")
          .grouped()
          .because("grouped K/V heads before sm_90: t20 walks a K/V tile's group in one block, "
                   "which runs causal rows 1.08-2.06x their MHA time (H200, 2026-12-05) and full "
                   "MQA at N 4096 1.93x (64 blocks for 132 SMs); t22 splits the group among "
                   "blocks (causal: a block per query head; full: where the grid leaves resident "
                   "blocks idle) and adds the dK and dV parts by fp32 atomics: 0.98-1.02x its MHA "
                   "time per query head at H 32, H_kv 8/4/1, D 128, N 4096 and 8192, causal and "
                   "full (H100, 2026-12-06, each row alone); 1.02x t20's time where nothing is "
                   "split, which t20 (not deterministic either) no longer pays back. No K/V "
                   "copies (not deterministic)",
                   log("full_split_gqa.log", kRun1206)),
      on(Op::Bwd, "07/bwd_t48_dq_in_turns")
          .hopper()
          .rounded()
          .dims({64})
          .because("head dims below 64 (multiples of 8) rounded up inside the fastest D 64 "
                   "backward: D 32 163-205 TFLOP/s, 1.19-1.30x 06/v4 (the kernel that ran it "
                   "before; not deterministic)",
                   log("head_dims_between.log", kRun1203)),
      on(Op::Bwd, "07/bwd_t63_tall_q_tiles")
          .hopper()
          .dims({64})
          .because("D 64 on FlashAttention-3's tile, 128 queries x 128 keys: 1.08-1.18x bwd_t61 "
                   "full, 1.05-1.13x causal but level at 4096 keys (0.99-1.01x) (263-479 TFLOP/s, "
                   "0.90-1.06x cuDNN in the same run; "
                   "three runs of three rounds, each kernel a process of its own, the order "
                   "rotated; H100; not deterministic)",
                   log("fair_rounds_bwd.md", kRun1207f)),
      on(Op::Bwd, "07/bwd_t55_d96")
          .hopper()
          .dims({96})
          .full()
          .because("D 96 full at an instance of its own (bwd_v6's loop; S^T and dP^T over 6 k16 "
                   "steps, dV and dK as N 96), and 72-88 rounded up to it (not measured there): "
                   "375.2 | 430.8 TFLOP/s at N 2048 | 8192, 1.08-1.09x bwd_v6 rounded up to 128 "
                   "and 1.02-1.03x cuDNN (three alternating rounds; not deterministic)",
                   log("t55_d96_rounds.md", kRun1206)),
      on(Op::Bwd, "07/bwd_t55_d96")
          .hopper()
          .dims({96})
          .causal()
          .keys(0, 2048)
          .because("D 96 causal up to 2048 keys at its instance: 304.0 TFLOP/s at N 2048, 1.07x "
                   "bwd_v6 rounded up to 128 (1.13x cuDNN); at N 8192 0.93x bwd_v6, which keeps "
                   "the longer causal rows (three alternating rounds; not deterministic)",
                   log("t55_d96_rounds.md", kRun1206)),
      on(Op::Bwd, "07/bwd_v6_head_groups")
          .hopper()
          .rounded()
          .dims({128})
          .because("head dims between 64 and 128 (multiples of 8) rounded up inside the fastest "
                   "D 128 backward: D 96 297-389 TFLOP/s, 1.67-1.80x 06/v4 (the kernel that ran "
                   "it before; bwd_t48 within 2%); D 80 254-329, 0.92-1.04x cuDNN (not "
                   "deterministic)",
                   log("head_dims_between.log", kRun1203)),
      on(Op::Bwd, "07/bwd_t61_turns_wide_stores")
          .hopper()
          .dims({128})
          .causal()
          .because("bwd_t48 with dK and dV stored 16 bytes a thread: D 128 causal 1.01-1.11x "
                   "bwd_v6 at every protocol N, and against t58 (bwd_v6 with the same stores) "
                   "0.99-1.05x (0.99x at 512 and 8192 keys, 1.03x at 4096, 1.05x at 16384; "
                   "three rounds, each kernel a process of its own, the order rotated; not "
                   "deterministic)",
                   log("fair_rounds_bwd.md", kRun1207e)),
      on(Op::Bwd, "07/bwd_t61_turns_wide_stores")
          .hopper()
          .dims({128})
          .full()
          .keys(0, 8192)
          .because("bwd_t48 with dK and dV stored 16 bytes a thread: D 128 full up to 8192 keys "
                   "1.03-1.09x bwd_v6 and 1.01-1.09x t58; at 16384 0.97x both, where bwd_v6 "
                   "stays (three rounds, each kernel a process of its own, the order rotated; not "
                   "deterministic)",
                   log("fair_rounds_bwd.md", kRun1207e)),
      on(Op::Bwd, "07/bwd_v6_head_groups")
          .hopper()
          .dims({128})
          .because("bwd_v5 (a producer warpgroup owning the loads: 1.08-1.10x bwd_v4 full at D "
                   "128, 0.90-0.99x cuDNN) with causal blocks launched in head groups: causal "
                   "1.02-1.05x bwd_v5 at N 1024-8192, full the same (at D 64 bwd_t63 runs; not "
                   "deterministic)",
                   log("bwd_v6_t47_v5_rounds.md", kRun1202)),
      on(Op::Bwd, "07/bwd_v4_dq_tile_reduce")
          .hopper()
          .dims({64, 128})
          .because("one pass, dQ by two TMA tensor reduce-adds per tile: 1.04-1.12x bwd_v1 at D "
                   "128 and 1.08-1.10x at D 64, every protocol shape (not deterministic)",
                   log("bwd_v4_v2_v1.log", kRun1202)),
      on(Op::Bwd, "07/bwd_t53_d256_halves")
          .hopper()
          .dims({192})
          .because("D 192 at an instance of its own (96 columns a warpgroup, as N 64 + N 32 "
                   "in both), and 136-184 rounded up to it: 267.1-360.5 TFLOP/s, 1.38-1.63x "
                   "bwd_v1 rounded up to 256 and 1.14-1.16x cuDNN, 0.95x at causal N 8192 "
                   "(three alternating rounds; not deterministic: deterministic requests go to "
                   "bwd_v1)",
                   log("t53_d192_sdpa_rounds.md", kRun1206)),
      on(Op::Bwd, "07/bwd_t53_d256_halves")
          .hopper()
          .rounded()
          .dims({256})
          .because("head dims 200-248 (multiples of 8) rounded up inside the fastest D 256 "
                   "backward (measured at D 192 before it had an instance: 215.8-263.8 TFLOP/s, "
                   "1.12-1.17x bwd_v1, the kernel that ran them before, 0.78-0.87x cuDNN; one "
                   "run; not deterministic: deterministic requests go to bwd_v1)",
                   log("bwd_t53_d192.log", kRun1203)),
      on(Op::Bwd, "07/bwd_t59_d256_wide_stores")
          .hopper()
          .dims({256})
          .because("bwd_t53 with dK and dV stored 16 bytes a thread: 1.01-1.09x bwd_t53 at every "
                   "protocol N (1.08x full and 1.09x causal at 512 keys, 1.01x at 16384; three "
                   "rounds, each kernel a process of its own, the order rotated; not "
                   "deterministic: deterministic requests go to bwd_v1)",
                   log("fair_rounds_bwd.md", kRun1207e)),
      on(Op::Bwd, "07/bwd_v1_tma_wgmma")
          .hopper()
          .rounded()
          .because("head dims between 128 and 256 (multiples of 8) rounded up inside the "
                   "deterministic Hopper backward with D 256: D 192 185-221 TFLOP/s, 0.88-1.03x "
                   "FlashAttention-2, 0.68-0.76x cuDNN",
                   log("head_dims_between.log", kRun1203)),
      on(Op::Bwd, "07/bwd_v1_tma_wgmma")
          .hopper()
          .because("the fastest backward at 34 of the 36 protocol shapes; deterministic",
                   log("ladder_bwd_d128_peers.log")),
      on(Op::Bwd, "06/t16_rounded_head_dims")
          .rounded()
          .because("head dims between 06/v4's instances 32, 64, 96 and 128 (multiples of 8) "
                   "before sm_90, rounded up inside v4 (chapter 06's tuning step t16; dQ by "
                   "atomics, not deterministic), where nothing ran them before. Timed on the "
                   "H200: D 80 149.1-177.7 TFLOP/s, 0.85-1.04x FlashAttention-2; at the listed "
                   "head dims 0.96-1.01x v4, which keeps them (two rounds)",
                   log("rounded_mma_sync_bwd.md", kRun1204)),
      on(Op::Bwd, "06/t17_any_head_dim")
          .rounded()
          .because("head dims up to 128 that are no multiple of 8 (59, 111, ...), on every GPU: "
                   "no other backward takes them; t16 with those rows copied, added and stored "
                   "element by element (chapter 06's tuning step t17; not deterministic). H200: "
                   "D 59 87.9-110.4 TFLOP/s, D 111 89.9-112.6, 0.44-0.60x FlashAttention-2, "
                   "which pads the head dim in a copy first (two rounds)",
                   log("any_head_dim_bwd.md", kRun1204)),
      on(Op::Bwd, "06/v5_warp_tiles")
          .because("the mma.sync backward with FlashAttention-2's warp tiles (D 64 and 128; dQ "
                   "by atomics, not deterministic)",
                   log("ladder_bwd_d128.log")),
      on(Op::Bwd, "06/v4_bc128_tuned")
          .because("the mma.sync backward where 06/v5 does not run: at D 32 and 96, whose rows are "
                   "not the whole 128-byte groups v5's swizzled tiles need, and on a GPU whose "
                   "blocks may not have v5's 171-178 KiB of shared memory (an A100's 163 KiB): "
                   "v4's 91 KiB at D 64 and 155 KiB at D 128, 0.92-1.19x 06/v3 (the next that "
                   "fits; ahead at 20 of the 24 shapes on the H200; dQ by atomics, not "
                   "deterministic)",
                   log("ladder_bwd_d128.log")),
      on(Op::Bwd, "06/t14_d256_tiles")
          .sm(90)
          .dims({256})
          .because("the mma.sync backward at D 256 where a block may have 211 KiB of shared "
                   "memory: FlashAttention-2's 64-key tile (dQ by atomics, not deterministic)",
                   log("rounds_bwd_d256_t14.md", kRun1204)),
      on(Op::Bwd, "06/t18_d256_one_buffer")
          .dims({256})
          .because("the mma.sync backward at D 256 where 06/t14's 211 KiB do not fit (an A100's "
                   "163 KiB), where nothing ran before: t14 with one Q and one dO buffer, 147 "
                   "KiB. Timed on the H200: 171.1-206.1 TFLOP/s, 0.99-1.01x t14, 1.61-1.79x "
                   "06/v3_atomic_dq, 0.84-0.96x FlashAttention-2 (not deterministic)",
                   log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::Bwd, "06/v3_atomic_dq")
          .because("the mma.sync backward at D 96 on a GPU with 99 KiB a block (v3's 88 KiB; v4 "
                   "needs 123); at D 256 06/t18 (147 KiB, the row above) runs wherever v3 (208 "
                   "KiB) fits (not deterministic)",
                   log("ladder_bwd_d256.log")),
      on(Op::Bwd, "06/t23_one_buffer_99k")
          .dims({128})
          .because("the mma.sync backward at D 128 on a GPU with 99 KiB a block (sm_86, sm_89, "
                   "sm_120), where v3 (112 KiB) and v4 (155) do not fit and nothing ran it: v3 "
                   "with one Q and one dO buffer, 78 KiB. Timed on the H200: 192.1-201.1 TFLOP/s "
                   "at N 4096 and 8192, 0.96-1.01x v3 (not deterministic)",
                   log("group_split_bench.log", kRun1205)),
      on(Op::Bwd, "06/v2_mma")
          .because("the deterministic mma.sync backward (a dK/dV kernel and a dQ kernel)",
                   log("ladder_bwd_d128.log")),
      on(Op::Bwd, "06/t19_d256_rounded")
          .rounded()
          .dims({256})
          .because(
              "head dims between 128 and 256 (multiples of 8) before sm_90, where nothing ran "
              "them: t18 with rows of d, computed at 256: D 192 129.0-148.9 TFLOP/s on the "
              "H200, 0.61-0.71x FlashAttention-2; at D 256 0.88-0.90x t18, which keeps it (the "
              "row is last: t19 takes every multiple of 8, slower than the rungs above at "
              "theirs; not deterministic)",
              log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::Bwd, "09/bwd_v8_grouped_d256")
          .grouped()
          .because("grouped K/V heads at head dims above 128 that are no multiple of 8 (the row "
                   "below's), before sm_90 and on it: the batch packed, dK and dV summed over the "
                   "group inside, no K/V copies. End to end (fa.attention, forward and backward; "
                   "H100): D 201, H 32, H_kv 8, N 4096: 1.01x (full) and 1.07x (causal) t21 on K "
                   "and V repeated over the group, 959 against 1084 MiB at its peak; at D 192 "
                   "and 256 t19 and t18 on repeated K/V keep it (1.01-1.02x and 1.07-1.08x "
                   "bwd_v8; not deterministic)",
                   log("e2e_gqa_d201_hkv8.log", kRunH100)),
      on(Op::Bwd, "06/t21_d256_any_head_dim")
          .rounded()
          .dims({256})
          .because("head dims between 128 and 256 that are no multiple of 8 (139, 201, ...), on "
                   "every GPU, which no other backward takes: t19 with those rows copied, added "
                   "and stored element by element: D 201 62.7-72.9 TFLOP/s on the H200, "
                   "0.42-0.54x FlashAttention-2 (which pads the head dim in a copy first); at "
                   "multiples of 8 0.87-0.91x t19, which keeps them (not deterministic)",
                   log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::Bwd, "06/v1_fp32")
          .sm(70)
          .only(DType::F32)
          .because("fp32: 11-14 TFLOP/s, twice 06/v1_fp32_atomic_dq's 6-7", log("fp32_bwd.log")),

      // ---- chapter 09: packed batches ----------------------------------------------------------
      on(Op::VarlenFwd, "09/hopper_v5_window_single_units")
          .hopper()
          .window()
          .because("a sliding window on Hopper: 07/t52's persistent blocks with the band, one "
                   "query tile a work unit. W 4096, N 32768, causal (H100, three rounds): "
                   "1.02-1.19x 09/hopper_v2_window at D 64, 96, 128, 192, 256 (D 128: 643.1 "
                   "TFLOP/s per visible pair against 629.5)",
                   log("window_dims_rounds.log", kRun1206)),
      on(Op::VarlenFwd, "09/v2_window")
          .window()
          .because("the window on mma.sync", log("ch09_serving.log")),
      on(Op::VarlenFwd, "09/v4_window_any_head_dim")
          .window()
          .because("the window at the head dims 09/v2_window lacks (every head dim up to 256); "
                   "on packed batches without a window D 59 60.7-92.1 TFLOP/s, D 256 "
                   "156.2-202.7; at D 128 0.79-0.81x v2_window",
                   log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::VarlenFwd, "09/hopper_v6_varlen_heaviest_first")
          .hopper()
          .dims({128, 192, 256})
          .because("packed batches at D 104-256: v3 with its units dealt heaviest first (the "
                   "sequences in order of their units' cost, rounds in alternating directions). "
                   "H100, three rounds on fa_bench's mixed, square and long batches: 1.00-1.05x "
                   "v3 at D 128, 1.00-1.13x at 192, 1.00-1.04x at 256; the busiest SM 6.7% above "
                   "the mean on the long batch causal where v3's was 12.7% (Nsight Compute)",
                   log("varlen_v6_rounds.md", kRun1206)),
      on(Op::VarlenFwd, "09/hopper_v3_varlen_persistent")
          .hopper()
          .dims({64, 96})
          .because("packed batches up to D 96: 07/t52's persistent blocks walking the batch, "
                   "1.02-1.25x 09/hopper_v1_varlen on fa_bench's mixed and square batches (two "
                   "runs) and 1.02-1.14x on its long batch of 15 uneven sequences (three rounds), "
                   "causal and full; v6's deal measured 0.98-1.02x v3 at D 64 and 0.97-1.04x at "
                   "96 (three rounds, varlen_v6_rounds.md)",
                   log("varlen_v3_long_batch.log", kRun1206)),
      on(Op::VarlenFwd, "09/v1_varlen")
          .because("packed batches on mma.sync (05/v5 over cu_seqlens)", log("ch09_serving.log")),
      on(Op::VarlenFwd, "09/v3_varlen_any_head_dim")
          .because("packed batches at the head dims 09/v1_varlen lacks (every head dim up to 256; "
                   "on sm_90 those off the step of 8): 05/t17 over cu_seqlens: D 59 70.3-106.4 "
                   "TFLOP/s, D 256 155.4-207.0; at D 128 0.73-0.76x v1_varlen (two runs)",
                   log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::VarlenBwd, "09/hopper_bwd_v2_window")
          .hopper()
          .window()
          .because("the window's backward on wgmma: 291.1 against 185.2 TFLOP/s",
                   log("ch09_serving.log")),
      on(Op::VarlenBwd, "09/bwd_v7_window_grouped")
          .window()
          .grouped()
          .because("a window with grouped K/V heads where the Hopper rung does not run (before "
                   "sm_90, and off the step of 8), up to D 128: bwd_v6 with bwd_v4's window, K and "
                   "V read in place, no copies: 0.992-1.000x its MHA time per query head at H 32, "
                   "H_kv 8/4/1, two sequences of 8192, D 128, causal and full (each row alone; "
                   "not deterministic)",
                   log("group_split_gqa.log", kRun1205)),
      on(Op::VarlenBwd, "09/bwd_v8_grouped_d256")
          .window()
          .grouped()
          .because("a window with grouped K/V heads above D 128 (before sm_90, and off the step "
                   "of 8): bwd_v5 with bwd_v6's group walk; the packed grouped row below has its "
                   "figures",
                   log("group_split_gqa.log", kRun1205)),
      on(Op::VarlenBwd, "09/bwd_v2_window")
          .window()
          .because("the window's backward on mma.sync", log("ch09_serving.log")),
      on(Op::VarlenBwd, "09/bwd_v4_window_any_head_dim")
          .window()
          .because("the window's backward at the head dims 09/bwd_v2_window lacks (up to 128), and "
                   "without its 171 KiB a block (an A100); on packed batches without a window D "
                   "59 72.3-94.4 TFLOP/s; at D 128 0.90-0.94x bwd_v2_window (two runs)",
                   log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::VarlenBwd, "09/bwd_v5_window_d256")
          .window()
          .because("the window's backward above D 128 where the Hopper rungs do not run (before "
                   "sm_90, and off the step of 8): bwd_v2_window's band on 06/t21; the row below "
                   "has its figures",
                   log("wide_head_dim_packed_bwd.log", kRun1205)),
      on(Op::VarlenBwd, "09/hopper_bwd_v1_varlen")
          .hopper()
          .grouped()
          .because("grouped K/V heads in the packed backward: 07/bwd_v1's group walk, dK and dV "
                   "summed in registers (the group split over blocks where the grid is small), "
                   "no copies; 0.99-1.03x its MHA time per query head at H 32, H_kv 8/4/1, two "
                   "sequences of N 4096 and 8192, D 128, causal and full (each row timed alone); "
                   "deterministic",
                   log("gqa_varlen_bwd.log", kRun1203)),
      on(Op::VarlenBwd, "09/bwd_v6_varlen_grouped")
          .grouped()
          .because("grouped K/V heads in the packed backward where the Hopper rung does not run "
                   "(before sm_90, and off the step of 8), up to D 128: bwd_v3 walking the "
                   "group's query heads (causal: one each, dK and dV parts added by atomics), K "
                   "and V read in place, no copies: 0.996-1.008x its MHA time per query head at "
                   "H 32, H_kv 8/4/1, two sequences of 8192, D 128, causal and full (each row "
                   "alone; not deterministic)",
                   log("group_split_gqa.log", kRun1205)),
      on(Op::VarlenBwd, "09/bwd_v8_grouped_d256")
          .grouped()
          .because("grouped K/V heads in the packed backward above D 128 (before sm_90, and off "
                   "the step of 8): bwd_v5 with bwd_v6's group walk: 1.000-1.009x its MHA time per "
                   "query head at D 256 (as above); at D 192 and 256 0.99-1.01x bwd_v5 on MHA "
                   "batches (not deterministic)",
                   log("group_split_gqa.log", kRun1205)),
      on(Op::VarlenBwd, "09/hopper_bwd_v1_varlen")
          .hopper()
          .because("packed backward on wgmma: 287.8 against 09/bwd_v1_varlen's 176.6 TFLOP/s; "
                   "deterministic",
                   log("ch09_serving.log")),
      on(Op::VarlenBwd, "09/bwd_v1_varlen")
          .because("packed backward on mma.sync (06/v5 over cu_seqlens)", log("ch09_serving.log")),
      on(Op::VarlenBwd, "09/bwd_v3_varlen_any_head_dim")
          .because("packed backward at the head dims 09/bwd_v1_varlen lacks (up to 128, 59 and 111 "
                   "too), and without its 171 KiB a block (an A100): 06/t17 over cu_seqlens: D 59 "
                   "70.2-94.0 TFLOP/s; at D 128 0.94-0.96x bwd_v1_varlen (two runs)",
                   log("any_head_dim_serving_bench.log", kRun1205)),
      on(Op::VarlenBwd, "09/bwd_v5_window_d256")
          .because("packed backward above D 128 where the Hopper rungs do not run (before sm_90, "
                   "where nothing ran it, and off the step of 8 on any GPU): bwd_v2_window's "
                   "offsets and band on 06/t21 (147 KiB, an A100 has them). H200, mixed and "
                   "square batches: D 256 129.5-172.4 TFLOP/s (0.58-0.66x hopper_bwd_v1_varlen, "
                   "which keeps sm_90), D 192 110.6-144.1, D 201 54.0-67.0 (not deterministic)",
                   log("wide_head_dim_packed_bwd.log", kRun1205)),
      on(Op::PagedFwd, "09/paged_v1_decode")
          .decoding()
          .rounded()
          .because("decoding through a block table at head dims between the instances 64 and "
                   "128 (multiples of 8), rounded up inside (the kernel is 08/t07 with the table "
                   "in its loader): at D 80 3570-3809 GB/s at pages 16-256, 93-99% of 08/t07 on "
                   "a contiguous cache; nothing ran it before",
                   log("paged_rounded.log", kRun1203)),
      on(Op::PagedFwd, "09/paged_v4_decode_any_head_dim")
          .decoding()
          .rounded()
          .because(
              "decoding through a block table at head dims off the step of 8 (59, 111, ...): "
              "08/t08 through the table, each 16-byte chunk of a row copied element by "
              "element: D 59 at B 8, H 32, H_kv 8, 32768 keys 0.256-0.262 ms over pages 16-256, "
              "9.3-9.5x 09/paged_v3_prefill_any_head_dim (the kernel that ran it before), "
              "0.82-0.84x 08/t08 on a contiguous cache; at D 80 level with paged_v1_decode, "
              "which keeps the multiples of 8",
              log("group_split_bench.log", kRun1205)),
      on(Op::PagedFwd, "09/paged_v1_decode")
          .decoding()
          .because("decoding through a block table: 4225-4312 GB/s at pages 16-256 (D 128), "
                   "97-99% of 08/t07 on the contiguous cache; 1.008-1.016x the same kernel built "
                   "on 08/v5 (three alternating rounds)",
                   log("paged_rounded.log", kRun1203)),
      on(Op::PagedFwd, "09/paged_v5_decode_d256")
          .decoding()
          .because("decoding through a block table above head dim 128 (multiples of 8, computed "
                   "at 256), on every GPU: paged_v1_decode at D 256, as 08/t09_d256 is 08/t07 "
                   "there. H100 (2026-12-06), B 8, H 32, H_kv 8, 32768 keys, pages 16-256: "
                   "100-107% of the copy bandwidth at D 192 and 256, 0.96-0.99x t09 on a "
                   "contiguous cache; 1.09-1.47x 09/hopper_paged_pack_gqa (what Hopper ran) and "
                   "3.8-5.7x 09/paged_v3_prefill_any_head_dim (what ran it before sm_90)",
                   log("paged_d256.log", kRun1206)),
      on(Op::PagedFwd, "09/hopper_paged_pack_gqa")
          .hopper()
          .dims({256})
          .exact()
          .pages_from(256)
          .because("chunks of queries at D 256 through pages of 256 keys: 07/v4's 64-key tile, one "
                   "TMA box a strip, with the group's query heads in one Q tile: 1.07x "
                   "09/hopper_paged_prefill_persistent, whose 80-key tile takes 3 to 5 boxes a "
                   "strip (H100, B 8, H 32, H_kv 8, 512 queries over 32768 keys, three rounds); "
                   "level with it at pages of 16 and 64 (0.99-1.00x)",
                   log("paged_persistent_vs_pack.md", kRun1206)),
      on(Op::PagedFwd, "09/hopper_paged_prefill_persistent")
          .hopper()
          .because("chunks of queries through a block table on wgmma (07/t52 with the table in its "
                   "producer: persistent, FlashAttention-3's K/V tiles, instances at 96 and 192), "
                   "every head dim up to 256 (multiples of 8 rounded up inside), grouped heads. "
                   "H100, B 8, H 32, H_kv 8, 512 queries over 32768 keys, pages 16-256, three "
                   "rounds, against the kernel that ran them before (09/hopper_paged_prefill with "
                   "grouped heads and its own 96 and 192): D 128 0.98-1.02x, D 80 1.01-1.04x, "
                   "D 192 1.07-1.12x, D 256 0.96-1.01x; against 09/hopper_paged_pack_gqa "
                   "0.99-1.05x at D 128, 1.08-1.32x at D 80 and 192, D 256 in the row above",
                   log("paged_persistent_rounds.md", kRun1206)),
      on(Op::PagedFwd, "09/paged_v2_prefill")
          .because("chunks of queries through a block table before sm_90 (mma.sync): 367-378 "
                   "TFLOP/s against the decode kernel's 138-156",
                   log("ch09_serving.log")),
      on(Op::PagedFwd, "09/paged_v3_prefill_any_head_dim")
          .because("chunks of queries through a block table at the head dims 09/paged_v2_prefill "
                   "lacks before sm_90 (every head dim up to 256), and decoding and chunks off the "
                   "step of 8 on every GPU: 05/t17 with each K/V row through the table. 512 new "
                   "queries over 32768 cached keys: D 80 219.1 TFLOP/s, 2.39x 09/paged_v1_decode "
                   "(the kernel that ran it before), D 59 117.4-118.0; at D 128 0.74-0.75x "
                   "paged_v2_prefill. Decoding it reads the cache once per 128-row Q tile (D 80: "
                   "1.57 ms, where paged_v1_decode takes 0.176), so decoding at multiples of 8 "
                   "stays with the decoding rows above",
                   log("any_head_dim_serving_bench.log", kRun1205)),
  };
  return table;
}

// ---------------------------------------------------------------------------------------------

const char* op_name(Op op) {
  switch (op) {
    case Op::Fwd:
      return "fwd";
    case Op::Bwd:
      return "bwd";
    case Op::VarlenFwd:
      return "varlen_fwd";
    case Op::VarlenBwd:
      return "varlen_bwd";
    case Op::PagedFwd:
      return "paged_fwd";
  }
  return "?";
}

Problem Problem::forward(const AttentionShape& s, DType t) {
  Problem p;
  p.op = Op::Fwd;
  p.dtype = t;
  p.head_dim = static_cast<int>(s.head_dim);
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.causal = s.causal;
  p.window = s.has_window();
  p.gqa = s.is_gqa();
  return p;
}

Problem Problem::backward(const AttentionShape& s, DType t) {
  Problem p = forward(s, t);
  p.op = Op::Bwd;
  return p;
}

std::string Problem::str() const {
  std::ostringstream os;
  os << op_name(op) << " " << dtype_name(dtype) << " D" << head_dim;
  if (seq_q > 0) os << " Nq" << seq_q;
  if (seq_k > 0) os << " Nk" << seq_k;
  os << (causal ? " causal" : " full");
  if (window) os << " window";
  if (gqa) os << " gqa";
  if (page_size > 0) os << " page" << page_size;
  if (deterministic) os << " deterministic";
  return os.str();
}

std::string Rule::conditions() const {
  std::ostringstream os;
  if (sm_min == sm_max)
    os << "sm_" << sm_min;
  else
    os << "sm_" << sm_min << "+";
  if (!dtypes.empty()) {
    os << ", ";
    for (size_t i = 0; i < dtypes.size(); ++i) os << (i ? "/" : "") << dtype_name(dtypes[i]);
  }
  if (!head_dims.empty()) {
    os << ", D ";
    for (size_t i = 0; i < head_dims.size(); ++i) os << (i ? "/" : "") << head_dims[i];
  }
  if (causal != Tri::Any) os << (causal == Tri::Yes ? ", causal" : ", full");
  if (window == Tri::Yes) os << ", window";
  if (gqa == Tri::Yes) os << ", grouped K/V heads";
  if (rounded == Tri::Yes) os << ", head dims rounded up";
  if (rounded == Tri::No) os << ", head dims as listed";
  if (page_min > 0) os << ", pages of " << page_min << "+ keys";
  if (seq_q_max >= 0) os << ", seq_q <= " << seq_q_max;
  if (seq_k_min > 0 && seq_k_max >= 0)
    os << ", " << seq_k_min << " <= seq_k <= " << seq_k_max;
  else if (seq_k_min > 0)
    os << ", seq_k >= " << seq_k_min;
  else if (seq_k_max >= 0)
    os << ", seq_k <= " << seq_k_max;
  return os.str();
}

namespace {

bool tri_holds(Rule::Tri t, bool value) {
  return t == Rule::Tri::Any || (t == Rule::Tri::Yes) == value;
}

// The head dim the row's kernel computes the problem at: a kernel that rounds head dims up
// (harness.h) runs D 96 as its D 128, so a row for D 128 of it holds for D 96 too.
template <class K>
int64_t computed_by(const Rule& r, const Problem& p) {
  const K* k = find_entry<K>(r.kernel);
  return k ? computed_head_dim(*k, p.head_dim) : p.head_dim;
}
int64_t row_head_dim(const Rule& r, const Problem& p) {
  switch (p.op) {
    // A fixed-length problem may go to a varlen kernel (a packed batch of equal lengths), which
    // computes it at its own instance too: its shared memory is asked at that one.
    case Op::Fwd:
      return find_entry<AttentionFwdKernel>(r.kernel) ? computed_by<AttentionFwdKernel>(r, p)
                                                      : computed_by<VarlenFwdKernel>(r, p);
    case Op::Bwd:
      return find_entry<AttentionBwdKernel>(r.kernel) ? computed_by<AttentionBwdKernel>(r, p)
                                                      : computed_by<VarlenBwdKernel>(r, p);
    case Op::VarlenFwd:
      return computed_by<VarlenFwdKernel>(r, p);
    case Op::VarlenBwd:
      return computed_by<VarlenBwdKernel>(r, p);
    case Op::PagedFwd:
      return computed_by<PagedFwdKernel>(r, p);
  }
  return p.head_dim;
}

// Whether the row's conditions describe the problem (not yet whether its kernel can run it).
bool row_holds(const Rule& r, const Problem& p, int sm) {
  if (r.op != p.op || sm < r.sm_min || sm > r.sm_max) return false;
  if (!r.dtypes.empty() && !supports(r.dtypes, p.dtype)) return false;
  const int64_t computed = row_head_dim(r, p);
  if (!r.head_dims.empty() && !supports(r.head_dims, int(computed))) return false;
  if (!tri_holds(r.rounded, computed != p.head_dim)) return false;
  // A row for the window or for grouped heads is for those problems alone; a row without them is
  // for every problem, and its kernel's registration decides (below).
  if (!tri_holds(r.causal, p.causal) || !tri_holds(r.window, p.window) || !tri_holds(r.gqa, p.gqa))
    return false;
  if (r.seq_q_max >= 0 && p.seq_q > r.seq_q_max) return false;
  if (p.seq_k < r.seq_k_min || (r.seq_k_max >= 0 && p.seq_k > r.seq_k_max)) return false;
  if (r.page_min > 0 && p.page_size < r.page_min) return false;  // 0: the page size is not known
  return true;
}

std::string need_sm(int min_sm) {
  return "needs sm_" + std::to_string(min_sm) + " or newer";
}

std::string kib(size_t bytes) {
  std::ostringstream os;
  os << bytes / 1024.0;
  return os.str() + " KiB";
}

// "" when the kernel's blocks fit the GPU's shared memory at the head dim it computes `p` at.
std::string smem_short(const std::string& name, int64_t computed, size_t smem_optin) {
  const SmemNeed* need = find_entry<SmemNeed>(name);
  if (!need || !need->bytes) return "";
  const size_t bytes = need->bytes(int(computed));
  if (bytes <= smem_optin) return "";
  return "needs " + kib(bytes) + " of shared memory a block at head_dim " +
         std::to_string(computed) + ", more than this GPU's " + kib(smem_optin);
}

// Why kernel `name` cannot run `p` on a GPU of compute capability `sm` ("" when it can), and the
// registry kind it was found under.
std::string cannot_run_at_all(const std::string& name, const Problem& p, int sm,
                              std::string* kind) {
  const bool fwd = p.op == Op::Fwd || p.op == Op::VarlenFwd;
  const bool bwd = p.op == Op::Bwd || p.op == Op::VarlenBwd;
  // Fixed-length problems may go to a varlen kernel (a packed batch of equal lengths); packed
  // problems only to varlen kernels.
  if (fwd && p.op == Op::Fwd)
    if (const AttentionFwdKernel* k = find_entry<AttentionFwdKernel>(name)) {
      *kind = "fwd";
      if (k->min_sm > sm) return need_sm(k->min_sm);
      if (p.gqa && !k->gqa) return "takes no grouped K/V heads";
      if (p.window) return "takes no sliding window";
      return missing_version(*k, p.dtype, p.head_dim);
    }
  if (fwd)
    if (const VarlenFwdKernel* k = find_entry<VarlenFwdKernel>(name)) {
      *kind = "varlen_fwd";
      if (k->min_sm > sm) return need_sm(k->min_sm);
      if (p.gqa && !k->gqa) return "takes no grouped K/V heads";
      if (p.window && !k->window) return "takes no sliding window";
      return missing_version(*k, p.dtype, p.head_dim);
    }
  if (bwd && p.op == Op::Bwd)
    if (const AttentionBwdKernel* k = find_entry<AttentionBwdKernel>(name)) {
      *kind = "bwd";
      if (k->min_sm > sm) return need_sm(k->min_sm);
      if (p.window) return "takes no sliding window";
      if (p.deterministic && !k->deterministic) return "not deterministic";
      return missing_version(*k, p.dtype, p.head_dim);
    }
  if (bwd)
    if (const VarlenBwdKernel* k = find_entry<VarlenBwdKernel>(name)) {
      *kind = "varlen_bwd";
      if (k->min_sm > sm) return need_sm(k->min_sm);
      if (p.window && !k->window) return "takes no sliding window";
      if (p.deterministic && !k->deterministic) return "not deterministic";
      return missing_version(*k, p.dtype, p.head_dim);
    }
  if (p.op == Op::PagedFwd)
    if (const PagedFwdKernel* k = find_entry<PagedFwdKernel>(name)) {
      *kind = "paged_fwd";
      if (k->min_sm > sm) return need_sm(k->min_sm);
      if (p.gqa && !k->gqa) return "takes no grouped K/V heads";
      if (p.window) return "takes no sliding window";
      if (p.page_size > 0 && !supports(k->page_sizes, p.page_size))
        return "no version for pages of " + std::to_string(p.page_size) + " keys";
      return missing_version(*k, p.dtype, p.head_dim);
    }
  return "not in this build";
}

// The same, and whether its blocks fit `smem_optin` bytes of shared memory.
std::string cannot_run(const Rule& r, const Problem& p, int sm, size_t smem_optin,
                       std::string* kind) {
  const std::string why = cannot_run_at_all(r.kernel, p, sm, kind);
  if (!why.empty()) return why;
  return smem_short(r.kernel, row_head_dim(r, p), smem_optin);
}

}  // namespace

Pick pick(const Problem& p, int sm, size_t smem_optin) {
  Pick out;
  out.sm = sm;
  out.smem_optin = smem_optin;
  for (const Rule& r : dispatch_table()) {
    if (!row_holds(r, p, sm)) continue;
    std::string kind;
    const std::string why = cannot_run(r, p, sm, smem_optin, &kind);
    if (!why.empty()) {
      out.passed_over.push_back(r.kernel + ": " + why);
      continue;
    }
    out.kernel = r.kernel;
    out.kind = kind;
    out.rule = &r;
    return out;
  }
  std::ostringstream os;
  os << "no registered kernel runs " << p.str() << " on sm_" << sm << " with " << kib(smem_optin)
     << " of shared memory a block";
  if (!out.passed_over.empty()) {
    os << " (";
    for (size_t i = 0; i < out.passed_over.size(); ++i) os << (i ? "; " : "") << out.passed_over[i];
    os << ")";
  }
  out.refusal = os.str();
  return out;
}

Pick pick(const Problem& p) {
  const std::string why = gpu_skip_reason(70);
  if (!why.empty()) {
    Pick out;
    out.refusal = why;
    return out;
  }
  return pick(p, gpu_info().sm, smem_optin_bytes());
}

Pick pick(const Problem& p, int sm) {
  return pick(p, sm, smem_optin_bytes_of_sm(sm));
}

std::string Pick::explain(bool brief) const {
  std::ostringstream os;
  if (kernel.empty()) return refusal;
  os << kernel << " (" << rule->conditions() << ")";
  if (brief) return os.str();
  os << "\n  why: " << rule->why << "\n  measured: " << rule->measured;
  for (const std::string& s : passed_over) os << "\n  passed over: " << s;
  return os.str();
}

}  // namespace fa
