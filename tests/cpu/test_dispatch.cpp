// The dispatch (common/dispatch.h): its table against the registry and the logs it cites, and
// its choices for the problems users bring, on an H100/H200 (sm_90) and on an A100 (sm_80). No
// GPU needed: pick(problem, sm) chooses for a GPU given by its compute capability.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "dispatch.h"
#include "gpu.h"
#include "harness.h"
#include "registry.h"

namespace {

using fa::DType;
using fa::Op;

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Whether this build holds chapter 07's sm_90a kernels (it does when it targets sm_90).
bool have_hopper_kernels() {
  return fa::find_entry<fa::AttentionFwdKernel>("07/v5_persistent") != nullptr;
}

fa::Problem fwd(DType t, int d, int64_t n, bool causal) {
  fa::Problem p;
  p.op = Op::Fwd;
  p.dtype = t;
  p.head_dim = d;
  p.seq_q = p.seq_k = n;
  p.causal = causal;
  return p;
}

fa::Problem bwd(DType t, int d, int64_t n, bool causal) {
  fa::Problem p = fwd(t, d, n, causal);
  p.op = Op::Bwd;
  return p;
}

// The head dim the chosen kernel computes d at: d, or the next instance of a kernel that rounds.
template <class K>
int64_t computed_by(const std::string& name, int d) {
  const K* k = fa::find_entry<K>(name);
  return k ? fa::computed_head_dim(*k, d) : d;
}
int64_t computed_at(const fa::Pick& k, int d) {
  if (k.kind == "fwd") return computed_by<fa::AttentionFwdKernel>(k.kernel, d);
  if (k.kind == "bwd") return computed_by<fa::AttentionBwdKernel>(k.kernel, d);
  if (k.kind == "varlen_fwd") return computed_by<fa::VarlenFwdKernel>(k.kernel, d);
  if (k.kind == "varlen_bwd") return computed_by<fa::VarlenBwdKernel>(k.kernel, d);
  return computed_by<fa::PagedFwdKernel>(k.kernel, d);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Each row's kernel is registered under a kind its op can run, takes what the row sends it (the
// row's head dims, the window, grouped heads) and runs on the row's GPUs. A row may name a
// kernel this build lacks only if it is an sm_90 row (the sm_90a kernels are built only for 90).
TEST(Dispatch, EveryRowNamesAKernelThatTakesWhatTheRowSendsIt) {
  for (const fa::Rule& r : fa::dispatch_table()) {
    SCOPED_TRACE(std::string(fa::op_name(r.op)) + " row " + r.kernel + " (" + r.conditions() + ")");
    std::vector<int> dims;
    int min_sm = 0;
    bool gqa = false, window = false, rounds = false, found = true;
    if (const auto* k = fa::find_entry<fa::AttentionFwdKernel>(r.kernel); k && r.op == Op::Fwd) {
      dims = k->head_dims, min_sm = k->min_sm, gqa = k->gqa, rounds = k->rounds_head_dim;
    } else if (const auto* k = fa::find_entry<fa::VarlenFwdKernel>(r.kernel);
               k && (r.op == Op::Fwd || r.op == Op::VarlenFwd)) {
      dims = k->head_dims, min_sm = k->min_sm, gqa = k->gqa, window = k->window;
      rounds = k->rounds_head_dim;
    } else if (const auto* k = fa::find_entry<fa::AttentionBwdKernel>(r.kernel);
               k && r.op == Op::Bwd) {
      // A grouped row sends grouped heads to the kernel itself; through any other row the caller
      // repeats K and V over the group.
      dims = k->head_dims, min_sm = k->min_sm, gqa = k->gqa || r.gqa != fa::Rule::Tri::Yes;
      rounds = k->rounds_head_dim;
    } else if (const auto* k = fa::find_entry<fa::VarlenBwdKernel>(r.kernel);
               k && (r.op == Op::Bwd || r.op == Op::VarlenBwd)) {
      dims = k->head_dims, min_sm = k->min_sm, gqa = k->gqa || r.gqa != fa::Rule::Tri::Yes;
      window = k->window, rounds = k->rounds_head_dim;
    } else if (const auto* k = fa::find_entry<fa::PagedFwdKernel>(r.kernel);
               k && r.op == Op::PagedFwd) {
      dims = k->head_dims, min_sm = k->min_sm, gqa = true, rounds = k->rounds_head_dim;
    } else {
      found = false;
    }
    if (!found) {
      EXPECT_EQ(r.sm_min, 90) << "not registered under a kind its op runs";
      EXPECT_FALSE(have_hopper_kernels()) << "an sm_90 row whose kernel this sm_90 build lacks";
      continue;
    }
    EXPECT_GE(r.sm_min, min_sm) << "the row sends GPUs the kernel does not run on";
    for (int d : r.head_dims)
      EXPECT_NE(std::find(dims.begin(), dims.end(), d), dims.end()) << "no D " << d << " version";
    if (r.window == fa::Rule::Tri::Yes) EXPECT_TRUE(window) << "takes no window";
    if (r.gqa == fa::Rule::Tri::Yes) EXPECT_TRUE(gqa) << "takes no grouped heads";
    if (r.rounded == fa::Rule::Tri::Yes) EXPECT_TRUE(rounds) << "rounds no head dim up";
    EXPECT_FALSE(r.why.empty());
  }
}

// "A row never names a kernel without the measurement that put it there": each cites a log that
// exists in the repository and holds the kernel's name.
TEST(Dispatch, EveryRowCitesALogThatHoldsItsKernel) {
  for (const fa::Rule& r : fa::dispatch_table()) {
    SCOPED_TRACE(r.kernel + " cites " + r.measured);
    ASSERT_TRUE(starts_with(r.measured, "notes/measured/"));
    const std::filesystem::path log = std::filesystem::path(FA_SOURCE_DIR) / r.measured;
    ASSERT_TRUE(std::filesystem::exists(log)) << "no such file";
    EXPECT_NE(read_file(log).find(r.kernel), std::string::npos) << "the log does not name it";
  }
}

// On an H100/H200 the protocol's shapes (D 64, 128, 256; N 512 to 16384; full and causal) run on
// chapter 07's kernels, forward and backward, in bf16 and fp16.
TEST(Dispatch, ProtocolShapesOnHopperRunChapter07) {
  if (!have_hopper_kernels()) GTEST_SKIP() << "this build targets no sm_90: no chapter 07 kernels";
  for (DType t : {DType::BF16, DType::F16})
    for (int d : {64, 128, 256})
      for (bool causal : {false, true})
        for (int64_t n : {512, 1024, 2048, 4096, 8192, 16384}) {
          const fa::Pick f = fa::pick(fwd(t, d, n, causal), 90);
          const fa::Pick b = fa::pick(bwd(t, d, n, causal), 90);
          SCOPED_TRACE(fwd(t, d, n, causal).str() + ": " + f.explain(true) + " / " +
                       b.explain(true));
          EXPECT_TRUE(starts_with(f.kernel, "07/"));
          EXPECT_EQ(f.kind, "fwd");
          EXPECT_TRUE(starts_with(b.kernel, "07/bwd_"));
          EXPECT_EQ(b.kind, "bwd");
        }
  // The rows that measured another rung faster (dispatch.cpp).
  constexpr const char* kT56 = "07/t56_wide_o_stores";     // t52 with O in 16-byte stores
  constexpr const char* kT60 = "07/t60_v5_wide_o_stores";  // v5 with O in 16-byte stores
  // D 64: t66 (three consumers on 192-row Q tiles, each its own key tiles, the list schedule)
  // on every full row and on causal rows from 2048 keys; t68 (t60 with the last key tile over
  // half its keys where a consumer's rows see no more) on the shorter causal rows, and on D 128
  // causal rows from 1024 to 4095 keys.
  constexpr const char* kT66 = "07/t66_dynamic_schedule";
  constexpr const char* kT68 = "07/t68_half_last_key_tile";
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 64, 512, false), 90).kernel, kT66);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 64, 1024, false), 90).kernel, kT66);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 64, 16384, false), 90).kernel, kT66);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 64, 512, true), 90).kernel, kT68);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 64, 1024, true), 90).kernel, kT68);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 64, 2048, true), 90).kernel, kT66);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 64, 4096, true), 90).kernel, kT66);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 128, 16384, true), 90).kernel, kT56);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 128, 512, false), 90).kernel, kT56);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 128, 4096, false), 90).kernel, kT56);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 128, 512, true), 90).kernel, kT60);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 128, 1024, true), 90).kernel, kT68);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 128, 2048, true), 90).kernel, kT68);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 128, 4096, true), 90).kernel, kT56);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 256, 2048, false), 90).kernel, kT56);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 256, 4096, false), 90).kernel, "07/t51_wide_kv_tiles");
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 256, 8192, false), 90).kernel, "07/t51_wide_kv_tiles");
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 256, 16384, false), 90).kernel, kT56);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 256, 16384, true), 90).kernel, kT56);
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 256, 512, true), 90).kernel, kT56);
  // bwd_t48 and bwd_t53 with dK and dV in 16-byte stores (t61, t59): D 128 (full up to 8192
  // keys, bwd_v6 past them), D 256 at every N. D 64: t63, FlashAttention-3's 128-query tiles.
  constexpr const char* kT59 = "07/bwd_t59_d256_wide_stores";
  constexpr const char* kT61 = "07/bwd_t61_turns_wide_stores";
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 128, 1024, true), 90).kernel, kT61);
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 128, 16384, true), 90).kernel, kT61);
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 128, 512, false), 90).kernel, kT61);
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 128, 8192, false), 90).kernel, kT61);
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 128, 16384, false), 90).kernel, "07/bwd_v6_head_groups");
  constexpr const char* kT63 = "07/bwd_t63_tall_q_tiles";
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 64, 512, true), 90).kernel, kT63);
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 64, 16384, false), 90).kernel, kT63);
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 256, 4096, false), 90).kernel, kT59);
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 256, 512, true), 90).kernel, kT59);
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 256, 16384, true), 90).kernel, kT59);
  fa::Problem det = bwd(DType::BF16, 256, 4096, true);
  det.deterministic = true;  // bwd_t59 adds dQ by reduce-adds: the deterministic D 256 is bwd_v1
  EXPECT_EQ(fa::pick(det, 90).kernel, "07/bwd_v1_tma_wgmma");
}

// Asked for a deterministic backward, the dispatch passes over the kernels that add with atomics
// and says so.
TEST(Dispatch, DeterministicBackwardPassesOverAtomics) {
  fa::Problem p = bwd(DType::BF16, 128, 1024, true);
  p.deterministic = true;
  if (have_hopper_kernels()) {
    const fa::Pick k = fa::pick(p, 90);
    EXPECT_EQ(k.kernel, "07/bwd_v1_tma_wgmma");
    ASSERT_FALSE(k.passed_over.empty());
    EXPECT_EQ(k.passed_over[0], "07/bwd_t61_turns_wide_stores: not deterministic");
  }
  EXPECT_EQ(fa::pick(p, 80).kernel, "06/v2_mma");
  p.deterministic = false;
  EXPECT_EQ(fa::pick(p, 80).kernel, "06/v4_bc128_tuned");
  EXPECT_EQ(fa::pick(p, 100).kernel, "06/v5_warp_tiles");
  p.head_dim = 256;
  EXPECT_EQ(fa::pick(p, 100).kernel, "06/t14_d256_tiles");
}

// Before sm_90 (an A100) no sm_90 row applies: chapter 05's v4 (v5's epilogue is stmatrix, an
// sm_90 instruction) and chapter 06's v4 (its final rung's 171-178 KiB a block do not fit the
// A100's 163 KiB; an sm_100 GPU has 227).
TEST(Dispatch, BeforeHopperChapters05And06) {
  const fa::Pick f = fa::pick(fwd(DType::BF16, 128, 4096, true), 80);
  EXPECT_EQ(f.kernel, "05/v4_swizzled_pipelined");
  EXPECT_TRUE(f.passed_over.empty()) << "sm_90 rows must not even be considered on sm_80";
  const fa::Pick b = fa::pick(bwd(DType::F16, 64, 4096, false), 80);
  EXPECT_EQ(b.kernel, "06/v4_bc128_tuned");
  ASSERT_EQ(b.passed_over.size(), 1u);
  EXPECT_EQ(b.passed_over[0],
            "06/v5_warp_tiles: needs 178 KiB of shared memory a block at head_dim 64, more than "
            "this GPU's 163 KiB");
  EXPECT_EQ(fa::pick(bwd(DType::F16, 64, 4096, false), 100).kernel, "06/v5_warp_tiles");
}

// A GPU with 99 KiB a block (sm_86, sm_89, sm_120): the forward runs everywhere (05/v4 needs at
// most 96 KiB, 05/v5 on sm_120 too; 05/t13's 192 KiB at D 256 do not fit); the backward where a
// kernel fits, and otherwise a refusal that says so.
TEST(Dispatch, NinetyNineKiBGpus) {
  for (int sm : {86, 89, 120}) {
    SCOPED_TRACE("sm_" + std::to_string(sm));
    for (int d : {32, 64, 96, 128, 256})
      EXPECT_EQ(
          fa::pick(fwd(DType::BF16, d, 4096, true), sm).kernel,
          sm >= 90 && d != 96 && d != 256 ? "05/v5_fewer_instructions" : "05/v4_swizzled_pipelined")
          << d;
    EXPECT_EQ(fa::pick(bwd(DType::BF16, 32, 4096, true), sm).kernel, "06/v4_bc128_tuned");
    EXPECT_EQ(fa::pick(bwd(DType::BF16, 64, 4096, true), sm).kernel, "06/v4_bc128_tuned");
    EXPECT_EQ(fa::pick(bwd(DType::BF16, 96, 4096, true), sm).kernel, "06/v3_atomic_dq");
    // D 128: 06/t23 (v3 with one Q and one dO buffer, 78 KiB). D 256: nothing fits.
    EXPECT_EQ(fa::pick(bwd(DType::BF16, 128, 4096, true), sm).kernel, "06/t23_one_buffer_99k");
    const fa::Pick b = fa::pick(bwd(DType::BF16, 256, 4096, true), sm);
    EXPECT_FALSE(b) << b.explain();
    EXPECT_NE(b.refusal.find("with 99 KiB of shared memory a block"), std::string::npos)
        << b.refusal;
    EXPECT_NE(b.refusal.find("06/v2_mma: needs"), std::string::npos) << b.refusal;
    // A deterministic request at D 128 has no kernel that fits (06/v2_mma needs 103 KiB).
    fa::Problem det = bwd(DType::BF16, 128, 4096, true);
    det.deterministic = true;
    EXPECT_FALSE(fa::pick(det, sm)) << fa::pick(det, sm).explain();
  }
}

// A final rung serves only the head dims and GPUs of its own ideas: the others go to the rung
// before it, which serves them (05/v5: D 32, 64, 128 on sm_90 and newer; 06/v5: D 64, 128).
TEST(Dispatch, HeadDimsAFinalRungLacksGoToTheRungBefore) {
  const fa::AttentionFwdKernel* v5 =
      fa::find_entry<fa::AttentionFwdKernel>("05/v5_fewer_instructions");
  ASSERT_NE(v5, nullptr);
  EXPECT_EQ(v5->head_dims, (std::vector<int>{32, 64, 128}));
  EXPECT_EQ(v5->min_sm, 90);
  const fa::AttentionBwdKernel* bwd_v5 = fa::find_entry<fa::AttentionBwdKernel>("06/v5_warp_tiles");
  ASSERT_NE(bwd_v5, nullptr);
  EXPECT_EQ(bwd_v5->head_dims, (std::vector<int>{64, 128}));

  EXPECT_EQ(fa::pick(fwd(DType::BF16, 32, 4096, false), 80).kernel, "05/v4_swizzled_pipelined");
  EXPECT_EQ(fa::pick(fwd(DType::F16, 256, 4096, true), 80).kernel, "05/v4_swizzled_pipelined");
  // At D 256 an A100's 163 KiB a block hold 06/t18 (147 KiB: one Q and one dO buffer), not t14's
  // 211 KiB; a 99 KiB GPU holds no mma.sync backward at D 256.
  const fa::Pick b256 = fa::pick(bwd(DType::F16, 256, 4096, true), 80);
  EXPECT_EQ(b256.kernel, "06/t18_d256_one_buffer") << b256.explain();
  const fa::Pick b256_99 = fa::pick(bwd(DType::F16, 256, 4096, true), 86);
  EXPECT_FALSE(b256_99);
  EXPECT_NE(b256_99.refusal.find("06/t18_d256_one_buffer: needs 147 KiB of shared memory a block "
                                 "at head_dim 256, more than this GPU's 99 KiB"),
            std::string::npos)
      << b256_99.refusal;
  // Past Hopper (sm_100: no chapter 07 machine code), D 256 goes to the mma.sync rungs that need
  // the shared memory sm_90 and newer data-center GPUs have.
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 256, 4096, false), 100).kernel, "05/t13_d256_tile_128x64");
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 256, 4096, false), 100).kernel, "06/t14_d256_tiles");
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 128, 4096, false), 100).kernel, "05/v5_fewer_instructions");
  for (int d : {32, 96}) {
    SCOPED_TRACE("D " + std::to_string(d) + " on sm_80");
    const fa::Pick b = fa::pick(bwd(DType::BF16, d, 4096, true), 80);
    EXPECT_EQ(b.kernel, "06/v4_bc128_tuned");
    ASSERT_FALSE(b.passed_over.empty());
    EXPECT_EQ(b.passed_over.back(),
              "06/v5_warp_tiles: this kernel has no bf16 D=" + std::to_string(d) + " version");
  }
}

// On Hopper the head dims between chapter 07's instances (multiples of 8) that no rung lists are
// rounded up inside its kernels, by the rows for them: the forward at the next instance in 07/v5
// (up to 64) or the wide tiles of 07/t52 (above 64, at 4096 causal keys; t52 has instances at
// 96 and 192, where 72-96 and 136-192 run, in its step t56 with O in 16-byte stores), the
// backward in
// the fastest rung of that instance (bwd_t48 up to 64, bwd_v6 up to 128, bwd_t53 up to 256, at
// its instance 192 for 136-192; a deterministic request bwd_v1). A
// head dim off the step of 8 goes to chapter 05's t15 and 06's t17 (rows copied element by element).
TEST(Dispatch, HeadDimsBetweenInstancesRoundUpOnHopper) {
  if (!have_hopper_kernels()) GTEST_SKIP() << "this build targets no sm_90: no chapter 07 kernels";
  for (int d : {32, 40, 80, 96, 160, 192, 224}) {
    SCOPED_TRACE("D " + std::to_string(d));
    const fa::Pick f = fa::pick(fwd(DType::BF16, d, 4096, true), 90);
    if (d != 32) {  // D 32 stays on chapter 05's final rung, which lists it and ran faster (below)
      // 136-192 run at t52's own D 192 instance (rounded up to it below 192), 72-96 at its D 96,
      // both in t56 (t52 with O in 16-byte stores); 200-248 rounded up to 256 in t52.
      EXPECT_EQ(f.kernel, d <= 64 ? "07/v5_persistent"
                          : d == 80 || d == 96 || d == 160 || d == 192
                              ? "07/t56_wide_o_stores"
                              : "07/t52_wide_kv_tiles_persistent");
      const char* row = d == 160 || d == 192 ? "D 192)"
                        : d == 80 || d == 96 ? "D 96)"
                                             : "rounded up";
      EXPECT_NE(f.explain(true).find(row), std::string::npos) << f.explain();
    }
    if (d == 80 || d == 96)  // at its instance 96 on short causal rows too (where 128 did not pay)
      EXPECT_EQ(fa::pick(fwd(DType::BF16, d, 2048, true), 90).kernel, "07/t56_wide_o_stores");
    const fa::Pick b = fa::pick(bwd(DType::F16, d, 4096, false), 90);
    EXPECT_EQ(b.kernel, d <= 64    ? "07/bwd_t48_dq_in_turns"
                        : d <= 96  ? "07/bwd_t55_d96"
                        : d <= 128 ? "07/bwd_v6_head_groups"
                                   : "07/bwd_t53_d256_halves");
    // 136-192 at bwd_t53's own D 192 instance, 200-248 rounded up to 256.
    if (d > 128)
      EXPECT_NE(b.explain(true).find(d <= 192 ? "D 192)" : "rounded up"), std::string::npos)
          << b.explain();
    // D 96's backward instance on causal rows up to 2048 keys; past them bwd_v6 rounded up.
    if (d == 80 || d == 96) {
      EXPECT_EQ(fa::pick(bwd(DType::BF16, d, 2048, true), 90).kernel, "07/bwd_t55_d96");
      EXPECT_EQ(fa::pick(bwd(DType::BF16, d, 8192, true), 90).kernel, "07/bwd_v6_head_groups");
    }
    fa::Problem det = bwd(DType::BF16, d, 4096, true);
    det.deterministic = true;
    EXPECT_EQ(fa::pick(det, 90).kernel, "07/bwd_v1_tma_wgmma");
  }
  // D 32, which chapter 05 lists, stays there: 05/v5 ran it 1-2% faster than 07/v5 rounded up to
  // D 64. D 96 (chapter 05's v4, chapter 06's v4) and the D 32 backward go to the rounded rungs,
  // 1.2-1.8x faster (notes/measured/h200-2026-12-03/head_dims_between.log).
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 32, 4096, false), 90).kernel, "05/v5_fewer_instructions");
  // Listed head dims keep their rows: the rounded rows hold only for head dims the kernel lacks.
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 64, 1024, false), 90).kernel, "07/t66_dynamic_schedule");
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 128, 4096, true), 90).explain(true).find("rounded"),
            std::string::npos);
  // Packed batches and the window: chapter 09's Hopper rungs round as well; before sm_90
  // 09/v3_varlen_any_head_dim runs D 80 (05/t17 over the packed batch).
  // On Hopper the persistent rungs: 09/hopper_v3 up to D 96, from D 104 09/hopper_v6 (v3 dealing
  // its units heaviest first).
  fa::Problem packed = fwd(DType::BF16, 80, 1000, true);
  packed.op = Op::VarlenFwd;
  EXPECT_EQ(fa::pick(packed, 90).kernel, "09/hopper_v3_varlen_persistent");
  for (int d : {40, 64, 96, 104, 120, 128, 160, 192, 224, 256}) {
    fa::Problem p = packed;
    p.head_dim = d;
    EXPECT_EQ(fa::pick(p, 90).kernel,
              d <= 96 ? "09/hopper_v3_varlen_persistent" : "09/hopper_v6_varlen_heaviest_first")
        << d;
  }
  EXPECT_EQ(fa::pick(packed, 80).kernel, "09/v3_varlen_any_head_dim");
  packed.window = true;
  EXPECT_EQ(fa::pick(packed, 90).kernel, "09/hopper_v5_window_single_units");
  fa::Problem window = fwd(DType::BF16, 160, 4096, true);
  window.window = true;
  EXPECT_EQ(fa::pick(window, 90).kernel, "09/hopper_v5_window_single_units");
  packed.op = Op::VarlenBwd;
  packed.head_dim = 224;
  EXPECT_EQ(fa::pick(packed, 90).kernel, "09/hopper_bwd_v2_window");
  packed.window = false;
  EXPECT_EQ(fa::pick(packed, 90).kernel, "09/hopper_bwd_v1_varlen");
  // Off the step of 8 the packed backward is 06/t17 over the batch (09/bwd_v3), the window's
  // bwd_v4.
  packed.head_dim = 59;
  EXPECT_EQ(fa::pick(packed, 90).kernel, "09/bwd_v3_varlen_any_head_dim");
  packed.window = true;
  EXPECT_EQ(fa::pick(packed, 90).kernel, "09/bwd_v4_window_any_head_dim");
  // Above 128: off the step of 8 (any GPU) and before sm_90 (every head dim) the packed backward
  // is 06/t21 over the batch with bwd_v2's band (09/bwd_v5), with a window or without; a fixed-
  // length window too. Before sm_90 nothing ran them.
  packed.head_dim = 201;
  EXPECT_EQ(fa::pick(packed, 90).kernel, "09/bwd_v5_window_d256");
  packed.window = false;
  EXPECT_EQ(fa::pick(packed, 90).kernel, "09/bwd_v5_window_d256");
  for (int d : {136, 192, 201, 256}) {
    packed.head_dim = d;
    packed.window = false;
    EXPECT_EQ(fa::pick(packed, 80).kernel, "09/bwd_v5_window_d256") << d;
    packed.window = true;
    EXPECT_EQ(fa::pick(packed, 80).kernel, "09/bwd_v5_window_d256") << d;
    fa::Problem fixed_window = bwd(DType::BF16, d, 4096, true);
    fixed_window.window = true;
    EXPECT_EQ(fa::pick(fixed_window, 80).kernel, "09/bwd_v5_window_d256") << d;
    EXPECT_EQ(fa::pick(fixed_window, 80).kind, "varlen_bwd") << d;
    // 147 KiB: not on a GPU with 99 KiB a block, where the refusal names the shared memory.
    const fa::Pick small = fa::pick(fixed_window, 86);
    EXPECT_FALSE(small) << small.explain();
    EXPECT_NE(small.refusal.find("09/bwd_v5_window_d256: needs 147 KiB of shared memory a block at "
                                 "head_dim 256"),
              std::string::npos)
        << small.refusal;
  }
  // A fixed-length problem sent to a varlen kernel is asked for that kernel's shared memory at
  // the head dim it computes at: D 100 runs at 09/bwd_v4's 128 (155 KiB), not on sm_86.
  fa::Problem window_d100 = bwd(DType::BF16, 100, 4096, true);
  window_d100.window = true;
  EXPECT_FALSE(fa::pick(window_d100, 86));
  EXPECT_EQ(fa::pick(window_d100, 80).kernel, "09/bwd_v4_window_any_head_dim");
  // Off the step of 8 the Hopper kernels (TMA: rows of whole 16-byte chunks) are passed over, and
  // chapter 05's and 06's kernels that copy such rows element by element run it.
  const fa::Pick d59 = fa::pick(fwd(DType::BF16, 59, 4096, false), 90);
  EXPECT_EQ(d59.kernel, "05/t15_any_head_dim") << d59.explain();
  EXPECT_NE(d59.explain().find("07/v5_persistent: this kernel has no bf16 D=59 version (it rounds "
                               "head dims up to 256 that are multiples of 8)"),
            std::string::npos)
      << d59.explain();
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 111, 4096, true), 90).kernel, "06/t17_any_head_dim");
  // Past t17's 128, 06/t21 (t19 with t17's element copies) computes them at 256.
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 136 + 3, 4096, true), 90).kernel, "06/t21_d256_any_head_dim");
}

// Before sm_90 the head dims between chapter 05's and 06's instances (multiples of 8) are rounded
// up inside their mma.sync kernels: the forward in 05/t14 (up to 256), the backward in 06/t16 (up
// to 128; its instance must fit the GPU's shared memory: 123 KiB at D 96, which a 99 KiB GPU has
// not). The head dims the rungs list keep their rows, and so do the GPUs from sm_90 on.
TEST(Dispatch, HeadDimsBetweenInstancesRoundUpBeforeHopper) {
  for (int sm : {80, 86}) {
    for (int d : {8, 40, 80, 112, 136, 160, 192, 224, 248}) {
      SCOPED_TRACE("sm_" + std::to_string(sm) + " D " + std::to_string(d));
      const fa::Pick f = fa::pick(fwd(DType::BF16, d, 4096, true), sm);
      EXPECT_EQ(f.kernel, "05/t14_rounded_head_dims") << f.explain();
      const fa::Pick b = fa::pick(bwd(DType::F16, d, 4096, false), sm);
      // t16 up to 128 (its D 96 and 128 need 123 and 155 KiB); above 128 t19, computed at 256
      // in 147 KiB: an A100 has both, a 99 KiB GPU neither.
      const bool fits = d <= 64 || sm == 80;
      if (fits) {
        EXPECT_EQ(b.kernel, d <= 128 ? "06/t16_rounded_head_dims" : "06/t19_d256_rounded")
            << b.explain();
      } else {
        EXPECT_FALSE(b) << b.explain();
      }
    }
    for (int d : {32, 64, 96, 128, 256})
      EXPECT_EQ(fa::pick(fwd(DType::BF16, d, 4096, false), sm).kernel, "05/v4_swizzled_pipelined");
    EXPECT_EQ(fa::pick(bwd(DType::BF16, 64, 4096, false), sm).kernel, "06/v4_bc128_tuned");
  }
  const fa::Pick b80 = fa::pick(bwd(DType::BF16, 80, 4096, false), 86);
  EXPECT_NE(b80.refusal.find("06/t16_rounded_head_dims: needs 123 KiB of shared memory a block at "
                             "head_dim 96, more than this GPU's 99 KiB"),
            std::string::npos)
      << b80.refusal;
  // Off the step of 8: the kernels that copy such rows element by element (t14 and t16 would
  // read them 16 bytes at a time from addresses that are not 16-byte aligned).
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 59, 4096, false), 80).kernel, "05/t15_any_head_dim");
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 111, 4096, false), 80).kernel, "06/t17_any_head_dim");
  EXPECT_FALSE(fa::pick(bwd(DType::BF16, 111, 4096, false), 86)) << "128 needs 155 KiB";
  // Grouped K/V heads: 09/v1_varlen at its 64 and 128, chapter 05's t16 (t14 reading K/V head
  // h / group) at every other multiple of 8 up to 256, t17 (t15 the same way) off the step of 8.
  for (int d : {32, 59, 64, 80, 111, 128, 192, 256}) {
    fa::Problem g = fwd(DType::BF16, d, 4096, true);
    g.gqa = true;
    EXPECT_EQ(fa::pick(g, 80).kernel, d == 64 || d == 128 ? "09/v1_varlen"
                                      : d % 8 != 0        ? "05/t17_grouped_any_head_dim"
                                                          : "05/t16_grouped_heads")
        << "D " << d;
  }
  // The grouped backward before sm_90: 06/t22 (the group split among blocks where t20's walk
  // leaves SMs idle) sums dK and dV over the group inside (up to 128), and so does 09/bwd_v8 (the batch
  // packed) above 128 off the step of 8; at 59, and at 136-256 on the step of 8, the caller
  // repeats K and V for t17, t19 and t18, which measured faster.
  for (bool causal : {false, true})
    for (int d : {32, 64, 80, 128, 59, 192, 256, 201}) {
      fa::Problem g = bwd(DType::BF16, d, 4096, causal);
      g.gqa = true;
      EXPECT_EQ(fa::pick(g, 80).kernel, d == 201   ? "09/bwd_v8_grouped_d256"
                                        : d == 256 ? "06/t18_d256_one_buffer"
                                        : d == 59  ? "06/t17_any_head_dim"
                                        : d > 128  ? "06/t19_d256_rounded"
                                                   : "06/t22_group_split")
          << "D " << d << (causal ? " causal" : " full");
    }
  EXPECT_EQ(fa::pick(bwd(DType::BF16, 201, 4096, true), 80).kernel, "06/t21_d256_any_head_dim");
  // A window with grouped heads: above 128 09/bwd_v8 (bwd_v5's kernel with the group walk), where
  // bwd_v5 would take K and V repeated; up to 128 09/bwd_v7 (bwd_v6's), where bwd_v4 would.
  for (int d : {59, 64, 128, 192, 201, 256}) {
    fa::Problem g = bwd(DType::BF16, d, 4096, true);
    g.gqa = g.window = true;
    EXPECT_EQ(fa::pick(g, 80).kernel,
              d > 128 ? "09/bwd_v8_grouped_d256" : "09/bwd_v7_window_grouped")
        << "D " << d;
    g.gqa = false;
    EXPECT_EQ(fa::pick(g, 80).kernel,
              d > 128 ? "09/bwd_v5_window_d256" : "09/bwd_v4_window_any_head_dim")
        << "D " << d;
  }
  // sm_100 and newer have no chapter 07 kernels (sm_90a machine code): they round here too.
  EXPECT_EQ(fa::pick(fwd(DType::BF16, 80, 4096, false), 100).kernel, "05/t14_rounded_head_dims");
}

// The problems that are not plain attention: decoding, the window, grouped heads, fp32, head dims
// chapter 07 has no version for, packed and paged batches.
TEST(Dispatch, EachKindOfProblemGoesWhereItsRowSays) {
  fa::Problem decode = fwd(DType::BF16, 128, 1, false);
  decode.seq_k = 32768;
  decode.gqa = true;
  EXPECT_EQ(fa::pick(decode, 90).kernel, "08/v6_last_block_merge");
  EXPECT_EQ(fa::pick(decode, 80).kernel, "08/v6_last_block_merge");
  // Head dims between v6's instances: its step that rounds them up, on every GPU it runs on.
  for (int d : {80, 96, 40}) {
    decode.head_dim = d;
    EXPECT_EQ(fa::pick(decode, 90).kernel, "08/t07_rounded_head_dims") << d;
    EXPECT_EQ(fa::pick(decode, 80).kernel, "08/t07_rounded_head_dims") << d;
  }
  // Off the step of 8: t08, t07 with each row's 16-byte chunks copied element by element.
  for (int d : {59, 111, 1}) {
    decode.head_dim = d;
    EXPECT_EQ(fa::pick(decode, 90).kernel, "08/t08_any_head_dim") << d;
    EXPECT_EQ(fa::pick(decode, 80).kernel, "08/t08_any_head_dim") << d;
  }
  // Above 128 (multiples of 8): t09, t07 at D 256, on every GPU it runs on; before it decoding
  // went to 07/v5_persistent on Hopper and 05/t16_grouped_heads before, prefill kernels.
  for (int d : {192, 256, 200, 136}) {
    decode.head_dim = d;
    EXPECT_EQ(fa::pick(decode, 90).kernel, "08/t09_d256") << d;
    EXPECT_EQ(fa::pick(decode, 80).kernel, "08/t09_d256") << d;
    // Its 128 KiB ring does not fit a GPU with 99 KiB a block.
    EXPECT_NE(fa::pick(decode, 86).kernel, "08/t09_d256") << d;
  }
  decode.head_dim = 128;

  fa::Problem gqa = fwd(DType::BF16, 128, 4096, true);
  gqa.gqa = true;
  fa::Problem window = fwd(DType::BF16, 128, 4096, true);
  window.window = true;
  if (have_hopper_kernels()) {
    EXPECT_EQ(fa::pick(gqa, 90).kernel, "07/t56_wide_o_stores");  // D 128 from 4096 causal keys
    EXPECT_EQ(fa::pick(gqa, 90).kind, "fwd");
    fa::Problem gqa_short = fwd(DType::BF16, 128, 2048, true);
    gqa_short.gqa = true;
    EXPECT_EQ(fa::pick(gqa_short, 90).kernel, "07/v5_persistent");
    // D 64: t66 on full rows and from 2048 causal keys, v5 below them.
    fa::Problem gqa64 = fwd(DType::BF16, 64, 4096, false);
    gqa64.gqa = true;
    EXPECT_EQ(fa::pick(gqa64, 90).kernel, "07/t66_dynamic_schedule");
    gqa64.causal = true;
    gqa64.seq_k = gqa64.seq_q = 1024;
    EXPECT_EQ(fa::pick(gqa64, 90).kernel, "07/v5_persistent");
    EXPECT_EQ(fa::pick(window, 90).kernel, "09/hopper_v5_window_single_units");
  }
  EXPECT_EQ(fa::pick(gqa, 80).kernel, "09/v1_varlen");
  EXPECT_EQ(fa::pick(window, 80).kernel, "09/v2_window");
  fa::Problem window_bwd = window;
  window_bwd.op = Op::Bwd;
  EXPECT_EQ(fa::pick(window_bwd, 100).kernel, "09/bwd_v2_window");
  EXPECT_EQ(fa::pick(window_bwd, 100).kind, "varlen_bwd");
  // 09/bwd_v2_window has 06/v5's tiles, 171 KiB a block: not on an A100, where bwd_v4 (06/t17's
  // 155 KiB at D 128) runs the window.
  EXPECT_EQ(fa::pick(window_bwd, 80).kernel, "09/bwd_v4_window_any_head_dim");
  fa::Problem gqa_bwd = gqa;
  gqa_bwd.op = Op::Bwd;
  if (have_hopper_kernels()) {  // the fastest backward takes grouped heads itself
    EXPECT_EQ(fa::pick(gqa_bwd, 90).kernel, "07/bwd_v6_head_groups");
    EXPECT_TRUE(fa::find_entry<fa::AttentionBwdKernel>("07/bwd_v6_head_groups")->gqa);
    gqa_bwd.deterministic = true;  // bwd_v1 takes them too, deterministically
    const fa::Pick det = fa::pick(gqa_bwd, 90);
    EXPECT_EQ(det.kernel, "07/bwd_v1_tma_wgmma");
    ASSERT_FALSE(det.passed_over.empty());
    EXPECT_EQ(det.passed_over[0], "07/bwd_v6_head_groups: not deterministic");
    EXPECT_TRUE(fa::find_entry<fa::AttentionBwdKernel>("07/bwd_v1_tma_wgmma")->gqa);
    gqa_bwd.deterministic = false;
    gqa_bwd.head_dim = 64;  // at D 64 the grouped rows measured bwd_t48 fastest
    EXPECT_EQ(fa::pick(gqa_bwd, 90).kernel, "07/bwd_t48_dq_in_turns");
    EXPECT_TRUE(fa::find_entry<fa::AttentionBwdKernel>("07/bwd_t48_dq_in_turns")->gqa);
    gqa_bwd.head_dim = 256;  // grouped D 256 was not timed on bwd_t53: bwd_v1, measured
    EXPECT_EQ(fa::pick(gqa_bwd, 90).kernel, "07/bwd_v1_tma_wgmma");
    gqa_bwd.head_dim = 128;
  }
  // Before sm_90 (and past it, where chapter 07 has no machine code) the grouped backward runs in
  // 06/t22 (t20's group walk, split among blocks where t20's grid is short or uneven, dK and dV
  // parts added by atomics), causal or full: it sums dK and dV over the group itself.
  for (bool causal : {true, false}) {
    gqa_bwd.causal = causal;
    EXPECT_EQ(fa::pick(gqa_bwd, 80).kernel, "06/t22_group_split");
    EXPECT_EQ(fa::pick(gqa_bwd, 100).kernel, "06/t22_group_split");
  }
  gqa_bwd.causal = true;
  // Packed batches with grouped heads: every packed backward the dispatch picks for them sums dK,
  // dV over the group itself: the Hopper ones (the window's too), and elsewhere bwd_v6 (up to
  // 128), bwd_v7 (its window) and bwd_v8 (above 128, window or not).
  fa::Problem varlen_gqa_bwd = gqa_bwd;
  varlen_gqa_bwd.op = Op::VarlenBwd;
  if (have_hopper_kernels()) {
    EXPECT_EQ(fa::pick(varlen_gqa_bwd, 90).kernel, "09/hopper_bwd_v1_varlen");
    EXPECT_TRUE(fa::find_entry<fa::VarlenBwdKernel>("09/hopper_bwd_v1_varlen")->gqa);
    varlen_gqa_bwd.window = true;
    EXPECT_EQ(fa::pick(varlen_gqa_bwd, 90).kernel, "09/hopper_bwd_v2_window");
    EXPECT_TRUE(fa::find_entry<fa::VarlenBwdKernel>("09/hopper_bwd_v2_window")->gqa);
    varlen_gqa_bwd.window = false;
  }
  EXPECT_FALSE(fa::find_entry<fa::VarlenBwdKernel>("09/bwd_v1_varlen")->gqa);
  for (int sm : {80, 100}) {
    for (bool window : {false, true})
      for (int d : {59, 64, 128, 192, 201, 256}) {
        varlen_gqa_bwd.window = window;
        varlen_gqa_bwd.head_dim = d;
        const std::string want = d > 128  ? "09/bwd_v8_grouped_d256"
                                 : window ? "09/bwd_v7_window_grouped"
                                          : "09/bwd_v6_varlen_grouped";
        EXPECT_EQ(fa::pick(varlen_gqa_bwd, sm).kernel, want) << sm << " " << window << " " << d;
        EXPECT_TRUE(fa::find_entry<fa::VarlenBwdKernel>(want)->gqa);
      }
    // Off the step of 8 the Hopper rungs cannot read the rows (TMA): the same kernels on sm_90.
    if (have_hopper_kernels() && sm == 80) {
      varlen_gqa_bwd.head_dim = 59;
      EXPECT_EQ(fa::pick(varlen_gqa_bwd, 90).kernel, "09/bwd_v7_window_grouped");
      varlen_gqa_bwd.window = false;
      EXPECT_EQ(fa::pick(varlen_gqa_bwd, 90).kernel, "09/bwd_v6_varlen_grouped");
    }
  }
  varlen_gqa_bwd.window = false;
  varlen_gqa_bwd.head_dim = 128;

  EXPECT_EQ(fa::pick(fwd(DType::F32, 64, 1000, true), 90).kernel, "05/v1_scalar_fp32");
  EXPECT_EQ(fa::pick(bwd(DType::F32, 64, 1000, true), 90).kernel, "06/v1_fp32");

  EXPECT_EQ(fa::pick(fwd(DType::BF16, 96, 4096, false), 80).kernel, "05/v4_swizzled_pipelined");

  fa::Problem varlen = fwd(DType::F16, 64, 1000, false);
  varlen.op = Op::VarlenFwd;
  EXPECT_EQ(fa::pick(varlen, 80).kernel, "09/v1_varlen");
  fa::Problem paged = fwd(DType::BF16, 128, 1, false);
  paged.op = Op::PagedFwd;
  paged.seq_k = 32768;
  paged.page_size = 64;
  EXPECT_EQ(fa::pick(paged, 90).kernel, "09/paged_v1_decode");
  paged.seq_q = 512;
  EXPECT_EQ(fa::pick(paged, 90).kernel, "09/hopper_paged_prefill_persistent");
  EXPECT_EQ(fa::pick(paged, 80).kernel, "09/paged_v2_prefill");
  // Head dims between the instances: decoding on the decoding kernel, which rounds them up, on
  // every GPU; chunks of queries on the Hopper kernel, which rounds them too, and before sm_90 on
  // 09/paged_v3 (05/t17 through the table; paged_v2_prefill takes 64 and 128 only).
  paged.head_dim = 80;
  EXPECT_EQ(fa::pick(paged, 90).kernel, "09/hopper_paged_prefill_persistent");
  EXPECT_EQ(fa::pick(paged, 80).kernel, "09/paged_v3_prefill_any_head_dim");
  paged.seq_q = 1;
  for (int sm : {80, 90}) EXPECT_EQ(fa::pick(paged, sm).kernel, "09/paged_v1_decode") << sm;
  // Off the step of 8: paged_v4 (08/t08 through the table).
  paged.head_dim = 59;
  for (int sm : {80, 90})
    EXPECT_EQ(fa::pick(paged, sm).kernel, "09/paged_v4_decode_any_head_dim") << sm;
  // Past 128, decoding on every GPU in 09/paged_v5 (paged_v1 at D 256, ahead of the Hopper
  // kernel that packs the group into one Q tile); chunks in hopper_paged_prefill_persistent on
  // Hopper, before sm_90 in 09/paged_v3 (05/t17 through the table).
  for (int d : {192, 256}) {
    paged.head_dim = d;
    for (int64_t seq_q : {1, 512}) {
      paged.seq_q = seq_q;
      EXPECT_EQ(fa::pick(paged, 90).kernel,
                seq_q == 1 ? "09/paged_v5_decode_d256" : "09/hopper_paged_prefill_persistent")
          << d << " " << seq_q;
      EXPECT_EQ(fa::pick(paged, 80).kernel,
                seq_q == 1 ? "09/paged_v5_decode_d256" : "09/paged_v3_prefill_any_head_dim")
          << d << " " << seq_q;
    }
  }
  // D 256 exactly, pages of 256: 07/v4's one box a strip (hopper_paged_pack_gqa) beats t52's 80-key
  // tile; at smaller pages, at D 200 (computed at 256) or with the page size unknown, t52's.
  paged.seq_q = 512;
  paged.head_dim = 256;
  paged.page_size = 256;
  EXPECT_EQ(fa::pick(paged, 90).kernel, "09/hopper_paged_pack_gqa");
  paged.gqa = true;
  EXPECT_EQ(fa::pick(paged, 90).kernel, "09/hopper_paged_pack_gqa");
  for (int64_t page : {0, 16, 64}) {
    paged.page_size = int(page);
    EXPECT_EQ(fa::pick(paged, 90).kernel, "09/hopper_paged_prefill_persistent") << page;
  }
  paged.head_dim = 200;
  paged.page_size = 256;
  EXPECT_EQ(fa::pick(paged, 90).kernel, "09/hopper_paged_prefill_persistent");
  // Grouped heads at D 128: never 09/hopper_paged_prefill (one K/V head per query head).
  paged.head_dim = 128;
  for (int page : {16, 64, 256}) {
    paged.page_size = page;
    EXPECT_EQ(fa::pick(paged, 90).kernel, "09/hopper_paged_prefill_persistent") << page;
  }
  paged.gqa = false;
  paged.page_size = 7;
  EXPECT_FALSE(fa::pick(paged, 90));
}

// Nothing runs it: the refusal names the problem and every row passed over, never a wrong kernel.
TEST(Dispatch, RefusesWhatNothingRuns) {
  const fa::Pick d264 = fa::pick(fwd(DType::BF16, 264, 4096, false), 80);
  EXPECT_FALSE(d264);
  EXPECT_NE(
      d264.refusal.find("no registered kernel runs fwd bf16 D264 Nq4096 Nk4096 full on sm_80"),
      std::string::npos)
      << d264.refusal;
  EXPECT_NE(d264.refusal.find("05/v4_swizzled_pipelined: this kernel has no bf16 D=264 version"),
            std::string::npos)
      << d264.refusal;
  // The backward past 256, on a GPU whose blocks hold every backward kernel's shared memory.
  const fa::Pick b264 = fa::pick(bwd(DType::BF16, 264, 4096, false), 90);
  EXPECT_FALSE(b264) << b264.explain();
  EXPECT_NE(b264.refusal.find("no registered kernel runs bwd bf16 D264"), std::string::npos)
      << b264.refusal;
  EXPECT_NE(b264.refusal.find("06/v3_atomic_dq: this kernel has no bf16 D=264 version"),
            std::string::npos)
      << b264.refusal;
  EXPECT_FALSE(fa::pick(fwd(DType::BF16, 128, 4096, false), 75)) << "no bf16 kernel before sm_80";
}

// Every choice runs its problem: for a grid of problems on both GPUs, the kernel chosen is
// registered under the kind reported and takes the problem's dtype and head dim.
TEST(Dispatch, EveryChoiceTakesItsProblem) {
  int chosen = 0;
  for (int sm : {80, 90})
    for (Op op : {Op::Fwd, Op::Bwd})
      for (DType t : {DType::F32, DType::F16, DType::BF16})
        for (int d : {32, 64, 80, 96, 128, 192, 256})
          for (int64_t n : {1, 17, 1000, 4096, 16384})
            for (bool causal : {false, true}) {
              fa::Problem p = fwd(t, d, n, causal);
              p.op = op;
              const fa::Pick k = fa::pick(p, sm);
              SCOPED_TRACE(p.str() + " on sm_" + std::to_string(sm) + ": " + k.explain(true));
              if (!k) continue;  // fp32 has one head dim; a refusal is allowed, a wrong kernel not
              ++chosen;
              std::vector<DType> dtypes;
              bool takes_d = false;
              if (k.kind == "fwd") {
                const auto* e = fa::find_entry<fa::AttentionFwdKernel>(k.kernel);
                ASSERT_NE(e, nullptr);
                dtypes = e->dtypes, takes_d = fa::takes_head_dim(*e, d);
              } else if (k.kind == "bwd") {
                const auto* e = fa::find_entry<fa::AttentionBwdKernel>(k.kernel);
                ASSERT_NE(e, nullptr);
                dtypes = e->dtypes, takes_d = fa::takes_head_dim(*e, d);
              } else {
                FAIL() << "a plain problem sent to kind " << k.kind;
              }
              EXPECT_NE(std::find(dtypes.begin(), dtypes.end(), t), dtypes.end());
              EXPECT_TRUE(takes_d);
            }
  EXPECT_GT(chosen, 300);
}

// Each SmemNeed line (registry.h) names a registered kernel and answers for every head dim it
// lists; the table it makes is printed, since it says which GPUs can run what.
TEST(Dispatch, SharedMemoryNeedsNameKernelsAndTheirHeadDims) {
  ASSERT_FALSE(fa::registry<fa::SmemNeed>().empty());
  for (const fa::SmemNeed& n : fa::registry<fa::SmemNeed>()) {
    SCOPED_TRACE(n.name);
    std::vector<int> dims;
    if (const auto* k = fa::find_entry<fa::AttentionFwdKernel>(n.name)) dims = k->head_dims;
    if (const auto* k = fa::find_entry<fa::AttentionBwdKernel>(n.name)) dims = k->head_dims;
    if (const auto* k = fa::find_entry<fa::VarlenFwdKernel>(n.name)) dims = k->head_dims;
    if (const auto* k = fa::find_entry<fa::VarlenBwdKernel>(n.name)) dims = k->head_dims;
    if (const auto* k = fa::find_entry<fa::PagedFwdKernel>(n.name)) dims = k->head_dims;
    ASSERT_FALSE(dims.empty()) << "names no registered attention kernel";
    std::string line = n.name + ":";
    for (int d : dims) {
      const size_t bytes = n.bytes(d);
      EXPECT_GT(bytes, 0u) << "D " << d;
      line += " D" + std::to_string(d) + " " + std::to_string(bytes / 1024) + "." +
              std::to_string(bytes % 1024 * 10 / 1024) + " KiB";
    }
    std::cout << line << "\n";
  }
}

// Chapter 06's README prints its rungs' shared memory a block in a table; it must be what they
// register (rounded to whole KiB), so that a reader choosing a GPU from it is not misled.
TEST(Dispatch, Chapter06ReadmeTableIsTheRegisteredNeeds) {
  const std::string text =
      read_file(std::filesystem::path(FA_SOURCE_DIR) / "chapters/06_flash_backward/README.md");
  const size_t table =
      text.find("| shared memory a block (KiB) | D 32 | D 64 | D 96 | D 128 | D 256 |");
  ASSERT_NE(table, std::string::npos) << "the table's header changed";
  const int dims[] = {32, 64, 96, 128, 256};
  int rows = 0;
  for (const char* name : {"06/v2_mma", "06/v3_atomic_dq", "06/v4_bc128_tuned", "06/v5_warp_tiles",
                           "06/t14_d256_tiles"}) {
    SCOPED_TRACE(name);
    const fa::SmemNeed* need = fa::find_entry<fa::SmemNeed>(name);
    const fa::AttentionBwdKernel* k = fa::find_entry<fa::AttentionBwdKernel>(name);
    ASSERT_NE(need, nullptr);
    ASSERT_NE(k, nullptr);
    const size_t at = text.find("| `" + std::string(name) + "` |", table);
    ASSERT_NE(at, std::string::npos) << "no row in the table";
    std::string row = text.substr(at, text.find('\n', at) - at);
    std::string want = "| `" + std::string(name) + "` |";
    for (int d : dims) {
      const bool listed = fa::supports(k->head_dims, d);
      want += listed ? " " + std::to_string((need->bytes(d) + 1023) / 1024) + " |" : " - |";
    }
    EXPECT_EQ(row, want);
    ++rows;
  }
  EXPECT_EQ(rows, 5);
}

// On a GPU with less shared memory a block than an H100's, the dispatch passes over the kernels
// that need more (their launchers would only refuse) and chooses one that fits, or says that
// nothing does. Checked for every kind of problem, head dim and GPU the table knows.
TEST(Dispatch, ChoicesFitTheGpusSharedMemory) {
  int chosen = 0;
  for (int sm : {80, 86, 89, 90, 100, 120})
    for (Op op : {Op::Fwd, Op::Bwd, Op::VarlenFwd, Op::VarlenBwd, Op::PagedFwd})
      for (int d : {32, 64, 80, 96, 128, 192, 256})
        for (int64_t nq : {1, 4096})
          for (bool causal : {false, true}) {
            fa::Problem p = fwd(DType::BF16, d, nq, causal);
            p.op = op;
            const fa::Pick k = fa::pick(p, sm);
            SCOPED_TRACE(p.str() + " on sm_" + std::to_string(sm) + ": " + k.explain(true));
            EXPECT_EQ(k.smem_optin, fa::smem_optin_bytes_of_sm(sm));
            if (!k) continue;
            ++chosen;
            // At the head dim the kernel computes d at (rounded up, for 05/t14 and 06/t16).
            if (const fa::SmemNeed* n = fa::find_entry<fa::SmemNeed>(k.kernel)) {
              const int64_t at = computed_at(k, d);
              EXPECT_GT(n->bytes(int(at)), 0u) << "no need registered at D " << at;
              EXPECT_LE(n->bytes(int(at)), k.smem_optin);
            }
          }
  EXPECT_GT(chosen, 400);
}

TEST(Dispatch, ExplainSaysTheRowAndTheLog) {
  const fa::Pick k = fa::pick(fwd(DType::BF16, 128, 4096, false), 80);
  const std::string text = k.explain();
  EXPECT_NE(text.find("05/v4_swizzled_pipelined (sm_80+)"), std::string::npos) << text;
  EXPECT_NE(text.find("measured: notes/measured/"), std::string::npos) << text;
  EXPECT_EQ(k.explain(true), "05/v4_swizzled_pipelined (sm_80+)");
}

}  // namespace
