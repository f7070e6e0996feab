// Mutation tests: the harness must catch wrong kernels. Each mutant in tests/mutants/ makes one
// classic mistake and sits in the mutant list (mutants.h, never the main registry); handed
// straight to the harness, it must come back FAIL with a report that names the first mismatching
// element, or, for the mistakes of chapter 07 that can deadlock, FAIL or hang (run in a child
// process with a time limit). Each mutant has a correct twin that must PASS on the same shapes, so
// a rejection is caused by the mistake: for the hand-written mutants a kernel built the same way
// (wrapped in an ad-hoc registry struct), for those of chapters 07, 08 and 09 the real rung the
// mutant was generated from. Shapes are ragged, causal where it matters.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "mutants.h"
#include "test_util.h"

// Set by tests/mutants/CMakeLists.txt where chapter 07's (sm_90a) mutants are built.
#ifndef FA_HAVE_SM90A_MUTANTS
#define FA_HAVE_SM90A_MUTANTS 0
#endif

namespace {

using fa::AttentionShape;
using fa::DType;

fa::RunOptions check_only(uint64_t seed = 20261121) {
  fa::RunOptions o;
  o.seed = seed;
  o.time = false;
  return o;
}

fa::SoftmaxKernel softmax(const std::string& name, fa::SoftmaxFn fn) {
  return fa::SoftmaxKernel{"mutant/" + name, fn, "deliberately wrong (or its twin)", 2, 70};
}
fa::AttentionFwdKernel fwd(const std::string& name, fa::AttentionFwdFn fn,
                           std::vector<DType> dtypes = {DType::F32}) {
  return fa::AttentionFwdKernel{"mutant/" + name,    fn, "deliberately wrong (or its twin)", dtypes,
                                {mutants::kHeadDim}, 70};
}
fa::AttentionBwdKernel bwd(const std::string& name, fa::AttentionBwdFn fn) {
  return fa::AttentionBwdKernel{"mutant/" + name,
                                fn,
                                "deliberately wrong (or its twin)",
                                {DType::F32},
                                {mutants::kHeadDim},
                                70,
                                false};
}

// A registered mutant (mutants.h), by name. Every name used here must be registered: a missing
// one is a broken build, not a skip, except in a student release, which leaves out the mutants
// made from its exercise rungs (tests/mutants/CMakeLists.txt).
#ifndef FA_STUDENT_RELEASE
#define FA_STUDENT_RELEASE 0
#endif
#define FA_GET_MUTANT(var, Type, name)                                                        \
  const Type* var = fa::find_mutant<Type>(name);                                              \
  if (var == nullptr && FA_STUDENT_RELEASE)                                                   \
    GTEST_SKIP() << (name) << " is not built in a student release (its rung is an exercise)"; \
  ASSERT_NE(var, nullptr) << (name) << " is not in the mutant list (tests/mutants/)"

// A run that could not happen (UNSUPPORTED, e.g. no forward kernel registered to feed the
// backward) skips the test instead of counting as a rejection.
#define FA_SKIP_IF_NOT_RUN(r)                                                     \
  do {                                                                            \
    if ((r).status == fa::Status::Unsupported || (r).status == fa::Status::NoGpu) \
      GTEST_SKIP() << (r).message;                                                \
  } while (0)

// The harness rejected the run, and its report says where and by how much.
void expect_rejected(const fa::RunResult& r) {
  EXPECT_EQ(r.status, fa::Status::Fail) << "the harness ACCEPTED a wrong kernel:\n" << r.report();
  const std::string rep = r.report();
  EXPECT_FALSE(rep.empty());
  EXPECT_NE(rep.find("first mismatch at ["), std::string::npos) << rep;
  EXPECT_NE(rep.find("max abs error"), std::string::npos) << rep;
  EXPECT_NE(rep.find("tolerance"), std::string::npos) << rep;
  std::cout << "[ rejected ] as it should be:\n" << rep;
}

const AttentionShape kRaggedCausal{1, 2, 113, 203, mutants::kHeadDim, true, 0.0f};

// ---- softmax -------------------------------------------------------------------------------------
TEST(MutantSoftmax, CorrectTwinPasses) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::SoftmaxKernel k = softmax("softmax_online_correct", mutants::softmax_online_correct);
  FA_EXPECT_PASS(fa::run_softmax(k, {113, 203}, check_only()));
  fa::RunOptions big = check_only(5);
  big.input_mean = 1e4f;
  FA_EXPECT_PASS(fa::run_softmax(k, {113, 203}, big));
}

// (a) Lesson: exp(x) overflows past 88.7; subtracting the row max costs nothing and fixes it.
TEST(MutantSoftmax, NoMaxSubtractionIsRejectedOnOffsetInputs) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_GET_MUTANT(mutant, fa::SoftmaxKernel, "mutant/01_no_max_subtraction");
  fa::RunOptions big = check_only(5);
  big.input_mean = 1e4f;  // the generic tests' InputsOffsetBy1e4 case
  fa::RunResult r = fa::run_softmax(*mutant, {113, 203}, big);
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
}

// (b) Lesson: when the running max grows, the sum so far must be rescaled by exp(m_old - m_new).
TEST(MutantSoftmax, OnlineWithoutRescaleIsRejected) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_GET_MUTANT(mutant, fa::SoftmaxKernel, "mutant/02_online_no_rescale");
  fa::RunResult r = fa::run_softmax(*mutant, {113, 203}, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
}

// ---- attention forward ----------------------------------------------------------------------------
TEST(MutantAttentionFwd, CorrectTwinPasses) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::AttentionFwdKernel k =
      fwd("attn_fwd_correct", mutants::attn_fwd_correct, {DType::F32, DType::F16});
  for (bool causal : {false, true}) {
    AttentionShape s = kRaggedCausal;
    s.causal = causal;
    FA_EXPECT_PASS(fa::run_attention_fwd(k, s, DType::F32, check_only()));
    AttentionShape wide{1, 1, 203, 113, mutants::kHeadDim, causal, 0.0f};  // rows with no key
    FA_EXPECT_PASS(fa::run_attention_fwd(k, wide, DType::F32, check_only()));
  }
}

// (c) Lesson: with bottom-right alignment query i sees keys j <= i + seq_k - seq_q, not one more.
TEST(MutantAttentionFwd, CausalOffByOneIsRejected) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_GET_MUTANT(mutant, fa::AttentionFwdKernel, "mutant/05_causal_off_by_one");
  fa::RunResult r = fa::run_attention_fwd(*mutant, kRaggedCausal, DType::F32, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
}

// (e) Lesson: fp16 inputs are fine, an fp16 accumulator is not. The twin (fp32 accumulator, same
// fp16 inputs) passes the FlashAttention 2x rule; the mutant's error grows with the sequence.
const AttentionShape kLongF16{1, 2, 2048, 2048, mutants::kHeadDim, false, 0.0f};

TEST(MutantAttentionFwd, Fp16InputsWithFp32AccumulatorPass) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_EXPECT_PASS(
      fa::run_attention_fwd(fwd("attn_fwd_correct", mutants::attn_fwd_correct, {DType::F16}),
                            kLongF16, DType::F16, check_only()));
}

TEST(MutantAttentionFwd, HalfAccumulatorIsRejectedOnLongSequences) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_GET_MUTANT(mutant, fa::AttentionFwdKernel, "mutant/05_half_accumulator");
  fa::RunResult r = fa::run_attention_fwd(*mutant, kLongF16, DType::F16, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
  EXPECT_NE(r.report().find("naive same-precision"), std::string::npos) << r.report();
}

// (f) Lesson: launch ceil(n / tile) blocks and guard the tail, never floor(n / tile).
TEST(MutantAttentionFwd, SkippedTailRowsAreRejectedAsPoison) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_GET_MUTANT(mutant, fa::AttentionFwdKernel, "mutant/05_skips_tail_rows");
  fa::RunResult r = fa::run_attention_fwd(*mutant, kRaggedCausal, DType::F32, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
  // Rows 64..112 of the first head are the first ones left unwritten.
  EXPECT_NE(r.report().find("[b=0, h=0, i=64"), std::string::npos) << r.report();
  EXPECT_NE(r.report().find("poison"), std::string::npos) << r.report();
}

TEST(MutantAttentionFwd, TiledWithBothBarriersPasses) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::AttentionFwdKernel k = fwd("attn_fwd_tiled_synced", mutants::attn_fwd_tiled_synced);
  FA_EXPECT_PASS(fa::run_attention_fwd(k, kRaggedCausal, DType::F32, check_only()));
  AttentionShape full = kRaggedCausal;
  full.causal = false;
  FA_EXPECT_PASS(fa::run_attention_fwd(k, full, DType::F32, check_only()));
}

// (d) Lesson: a race may give the right answer on the run you test. The ctest test
// sanitize_racecheck_finds_missing_syncthreads runs this under compute-sanitizer --tool racecheck,
// which must report the hazard; here we only note whether the race showed up in the numbers.
TEST(MutantRace, MissingSyncthreadsIsRejectedOrNoted) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_GET_MUTANT(mutant, fa::AttentionFwdKernel, "mutant/05_tiled_missing_sync");
  fa::AttentionFwdKernel k = *mutant;
  int rejected = 0;
  const int runs = 3;
  for (int run = 0; run < runs; ++run) {
    fa::RunResult r = fa::run_attention_fwd(k, kRaggedCausal, DType::F32, check_only(100 + run));
    ASSERT_NE(r.status, fa::Status::Unsupported) << r.message;
    if (r.status == fa::Status::Fail) {
      ++rejected;
      EXPECT_NE(r.report().find("first mismatch at ["), std::string::npos) << r.report();
    }
  }
  if (rejected == 0)
    std::cout << "[   note   ] the racy kernel passed " << runs << " checked runs: the race did "
              << "not corrupt these results. Races are nondeterministic; the real check is "
              << "`ctest -L sanitize -R racecheck_finds` (compute-sanitizer --tool racecheck).\n";
  else
    std::cout << "[ rejected ] the race corrupted " << rejected << " of " << runs << " runs\n";
}

// ---- attention backward ----------------------------------------------------------------------------
// O and L come from the best registered forward kernel (chapter 05): without one, these skip.
TEST(MutantAttentionBwd, CorrectTwinPasses) {
  FA_SKIP_WITHOUT_GPU(70);
  fa::AttentionBwdKernel k = bwd("attn_bwd_correct", mutants::attn_bwd_correct);
  FA_EXPECT_PASS(fa::run_attention_bwd(k, kRaggedCausal, DType::F32, check_only()));
  AttentionShape wide{1, 1, 203, 113, mutants::kHeadDim, true, 0.0f};
  FA_EXPECT_PASS(fa::run_attention_bwd(k, wide, DType::F32, check_only()));
}

// (g) Lesson: D = rowsum(dO * O); the backward's preprocessing step reads O, the forward's output.
TEST(MutantAttentionBwd, DeltaFromWrongTensorIsRejected) {
  FA_SKIP_WITHOUT_GPU(70);
  FA_GET_MUTANT(mutant, fa::AttentionBwdKernel, "mutant/06_delta_from_dout");
  fa::RunResult r = fa::run_attention_bwd(*mutant, kRaggedCausal, DType::F32, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
  EXPECT_NE(r.report().find("D: FAIL"), std::string::npos) << r.report();
}

// ---- the mutant list ------------------------------------------------------------------------------
// Every mutant is registered under its name, and none leaks into the main registry (which the
// chapter programs, the generic tests and the benchmarks iterate). Runs without a GPU.
TEST(MutantList, EveryMutantIsRegisteredAndNoneIsInTheMainRegistry) {
  if (FA_STUDENT_RELEASE)
    GTEST_SKIP() << "a student release leaves out the exercise rungs' mutants";
  std::vector<std::string> fwd_names = {
      "mutant/05_causal_off_by_one",  "mutant/05_half_accumulator", "mutant/05_skips_tail_rows",
      "mutant/05_tiled_missing_sync", "mutant/08_merge_no_rescale", "mutant/08_lse_in_log2",
      "mutant/08_gqa_wrong_kv_head"};
#if FA_HAVE_SM90A_MUTANTS
  for (const char* n : {"mutant/07_wrong_barrier_parity", "mutant/07_missing_turn_handover",
                        "mutant/07_o_not_rescaled"})
    fwd_names.push_back(n);
#endif
  for (const std::string& n : fwd_names)
    EXPECT_NE(fa::find_mutant<fa::AttentionFwdKernel>(n), nullptr) << n;
  for (const char* n : {"mutant/01_no_max_subtraction", "mutant/02_online_no_rescale"})
    EXPECT_NE(fa::find_mutant<fa::SoftmaxKernel>(n), nullptr) << n;
  EXPECT_NE(fa::find_mutant<fa::AttentionBwdKernel>("mutant/06_delta_from_dout"), nullptr);
  for (const char* n : {"mutant/09_window_off_by_one", "mutant/09_offsets_as_lengths"})
    EXPECT_NE(fa::find_mutant<fa::VarlenFwdKernel>(n), nullptr) << n;
  EXPECT_NE(fa::find_mutant<fa::PagedFwdKernel>("mutant/09_loader_ignores_block_table"), nullptr);
  EXPECT_EQ(fa::mutants<fa::AttentionFwdKernel>().size(), fwd_names.size());
  EXPECT_EQ(fa::mutants<fa::VarlenFwdKernel>().size(), 2u);
  EXPECT_EQ(fa::mutants<fa::PagedFwdKernel>().size(), 1u);
  auto none_in_main = [](const auto& list) {
    for (const auto& m : list) {
      EXPECT_EQ(m.name.rfind("mutant/", 0), 0u) << m.name;
      EXPECT_EQ(fa::find_entry<std::decay_t<decltype(m)>>(m.name), nullptr) << m.name;
    }
  };
  none_in_main(fa::mutants<fa::AttentionFwdKernel>());
  none_in_main(fa::mutants<fa::SoftmaxKernel>());
  none_in_main(fa::mutants<fa::AttentionBwdKernel>());
  none_in_main(fa::mutants<fa::VarlenFwdKernel>());
  none_in_main(fa::mutants<fa::PagedFwdKernel>());
  for (const fa::AttentionFwdKernel& k : fa::registry<fa::AttentionFwdKernel>())
    EXPECT_NE(k.name.rfind("mutant/", 0), 0u) << k.name << " is in the main registry";
}

// ---- chapters 07 and 08: the rungs with one line changed ------------------------------------------
// The correct twin of each is the real rung (main registry), run on the same shapes.
const fa::AttentionFwdKernel* rung(const std::string& name) {
  const fa::AttentionFwdKernel* k = fa::find_entry<fa::AttentionFwdKernel>(name);
  EXPECT_NE(k, nullptr) << name << " is not registered";
  return k;
}

// 08/v1_split_kv cuts 4096 keys of 2 heads into many splits (the merge runs); 100 keys of 2 heads
// into one split (the split kernel writes O and L itself, no merge). 08/v3_mma_split on grouped
// heads: 8 query heads over 2 K/V heads (a mistake in the head map is invisible with 1 K/V head or
// group 1).
const AttentionShape kDecodeSplits{1, 2, 1, 4096, 64, false, 0.0f, 2};
const AttentionShape kDecodeOneSplit{1, 2, 3, 100, 64, true, 0.0f, 2};
const AttentionShape kDecodeGrouped{2, 8, 3, 517, 64, true, 0.0f, 2};

TEST(Mutant08, RungsPassWhereTheirMutantsAreRejected) {
  FA_SKIP_WITHOUT_GPU(80);
  if (exercise_not_written("08/v1_split_kv") || exercise_not_written("08/v3_mma_split"))
    GTEST_SKIP() << "the rungs' exercise is not written yet (a student release)";
  const fa::AttentionFwdKernel* v1 = rung("08/v1_split_kv");
  const fa::AttentionFwdKernel* v3 = rung("08/v3_mma_split");
  ASSERT_TRUE(v1 != nullptr && v3 != nullptr);
  for (DType t : {DType::F32, DType::F16}) {
    FA_EXPECT_PASS(fa::run_attention_fwd(*v1, kDecodeSplits, t, check_only()));
    FA_EXPECT_PASS(fa::run_attention_fwd(*v1, kDecodeOneSplit, t, check_only()));
  }
  FA_EXPECT_PASS(fa::run_attention_fwd(*v3, kDecodeGrouped, DType::F16, check_only()));
}

// Lesson: each split's o was summed against its own max; the merge rescales it by e^(m_s - M)
// exactly as it rescales l. Adding the o's as they are is wrong as soon as two splits' maxima differ.
TEST(Mutant08, MergeWithoutRescaleIsRejected) {
  FA_SKIP_WITHOUT_GPU(80);
  FA_GET_MUTANT(mutant, fa::AttentionFwdKernel, "mutant/08_merge_no_rescale");
  for (DType t : {DType::F32, DType::F16}) {
    fa::RunResult r = fa::run_attention_fwd(*mutant, kDecodeSplits, t, check_only());
    FA_SKIP_IF_NOT_RUN(r);
    expect_rejected(r);
    EXPECT_NE(r.report().find("O: FAIL"), std::string::npos) << r.report();
  }
}

// Lesson: the kernel keeps m in log2 units (exp2 with log2(e) folded into the scale); the L it
// writes must be in natural-log units, (m + log2 l) * ln 2, as the backward reads it.
TEST(Mutant08, LseLeftInLog2IsRejected) {
  FA_SKIP_WITHOUT_GPU(80);
  FA_GET_MUTANT(mutant, fa::AttentionFwdKernel, "mutant/08_lse_in_log2");
  fa::RunResult r = fa::run_attention_fwd(*mutant, kDecodeOneSplit, DType::F32, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
  EXPECT_NE(r.report().find("L: FAIL"), std::string::npos) << r.report();
}

// Lesson: query head h reads K/V head h / group (the group's heads are consecutive), not h % H_kv.
TEST(Mutant08, GqaWrongKvHeadIsRejected) {
  FA_SKIP_WITHOUT_GPU(80);
  FA_GET_MUTANT(mutant, fa::AttentionFwdKernel, "mutant/08_gqa_wrong_kv_head");
  fa::RunResult r = fa::run_attention_fwd(*mutant, kDecodeGrouped, DType::F16, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
}

// ---- chapter 09: the rungs with one line changed, through the serving harness ---------------------
// Each twin is the rung itself, on the same shapes, in bf16 at head dim 128 (both listed by every
// rung here).
template <class K>
const K* rung09(const std::string& name) {
  const K* k = fa::find_entry<K>(name);
  EXPECT_NE(k, nullptr) << name << " is not registered";
  return k;
}

fa::VarlenShape varlen09(std::vector<int64_t> lens, bool causal, int64_t left = -1,
                         int64_t right = -1) {
  fa::VarlenShape s;
  s.seqlens_q = lens;
  s.seqlens_k = std::move(lens);
  s.heads = 2;
  s.head_dim = 128;
  s.causal = causal;
  s.window_left = left;
  s.window_right = right;
  return s;
}

fa::PagedShape paged09(int64_t page_size) {
  fa::PagedShape s;
  s.seqlens_k = {17, 1000, 129, 0, 300};
  s.heads = 8;
  s.heads_kv = 2;
  s.head_dim = 128;
  s.seq_q = 1;
  s.page_size = page_size;
  return s;
}

// Ragged self-attention batches for 09/v1_varlen. The longest sequence is the last and a whole
// number of 128-row Q tiles (256): read as lengths, the offsets make every sequence after the
// first longer than it is, and the rows the mutant then reads and writes stay inside each head's
// slab (row cu[b] + r with r < 256 <= total - cu[b]), so the mistake shows as wrong values, never
// as an access outside the buffers. Causal: a row's last key i + seq_k - seq_q moves with the
// wrong seq_q, so every sequence after the first is wrong in its own rows.
const std::vector<int64_t> kVarlenLens = {17, 129, 0, 100, 256};
// 09/v2_window: windows whose left edge cuts into every long row, causal and not.
const std::vector<fa::VarlenShape> kWindowShapes = {
    varlen09({1, 17, 0, 127, 129, 1000}, true, 16),
    varlen09({1, 17, 0, 127, 129, 1000}, false, 100, 50)};

TEST(Mutant09, RungsPassWhereTheirMutantsAreRejected) {
  FA_SKIP_WITHOUT_GPU(80);
  const auto* v1 = rung09<fa::VarlenFwdKernel>("09/v1_varlen");
  const auto* v2 = rung09<fa::VarlenFwdKernel>("09/v2_window");
  const auto* paged = rung09<fa::PagedFwdKernel>("09/paged_v1_decode");
  ASSERT_TRUE(v1 != nullptr && v2 != nullptr && paged != nullptr);
  FA_EXPECT_PASS(fa::run_varlen_fwd(*v1, varlen09(kVarlenLens, true), DType::BF16, check_only()));
  for (const fa::VarlenShape& s : kWindowShapes)
    FA_EXPECT_PASS(fa::run_varlen_fwd(*v2, s, DType::BF16, check_only()));
  if (exercise_not_written(paged->name)) return;
  for (int64_t page : {16, 64, 256})
    FA_EXPECT_PASS(fa::run_paged_fwd(*paged, paged09(page), DType::BF16, check_only()));
}

// Lesson: key j of a sequence is in page block_table[b][j / page_size], wherever the allocator put
// it; j / page_size alone is only the page's place in the sequence. The harness hands out every
// sequence's pages in a shuffled order and poisons the spare ones, so the mistake cannot pass.
TEST(Mutant09, LoaderIgnoringTheBlockTableIsRejected) {
  FA_SKIP_WITHOUT_GPU(80);
  FA_GET_MUTANT(mutant, fa::PagedFwdKernel, "mutant/09_loader_ignores_block_table");
  for (int64_t page : {16, 64, 256}) {
    fa::RunResult r = fa::run_paged_fwd(*mutant, paged09(page), DType::BF16, check_only());
    FA_SKIP_IF_NOT_RUN(r);
    expect_rejected(r);
  }
}

// Lesson: a window is two inequalities per row, d(i) - left <= j <= d(i) + right; one key too many
// at the left edge is a small error in every row the edge cuts into, well past the 2x rule.
TEST(Mutant09, WindowOffByOneIsRejected) {
  FA_SKIP_WITHOUT_GPU(80);
  FA_GET_MUTANT(mutant, fa::VarlenFwdKernel, "mutant/09_window_off_by_one");
  for (const fa::VarlenShape& s : kWindowShapes) {
    fa::RunResult r = fa::run_varlen_fwd(*mutant, s, DType::BF16, check_only());
    FA_SKIP_IF_NOT_RUN(r);
    expect_rejected(r);
  }
}

// Lesson: cu_seqlens are cumulative: sequence b's length is cu[b + 1] - cu[b]. Read as a length,
// cu[b + 1] is right for the first sequence only, which is why a test batch needs several.
TEST(Mutant09, OffsetsReadAsLengthsAreRejected) {
  FA_SKIP_WITHOUT_GPU(80);
  FA_GET_MUTANT(mutant, fa::VarlenFwdKernel, "mutant/09_offsets_as_lengths");
  fa::RunResult r =
      fa::run_varlen_fwd(*mutant, varlen09(kVarlenLens, true), DType::BF16, check_only());
  FA_SKIP_IF_NOT_RUN(r);
  expect_rejected(r);
}

// Chapter 07's mutants need an sm_90a build and a compute capability 9.0 GPU.
#define FA_SKIP_WITHOUT_SM90A()                                                       \
  do {                                                                                \
    if (!FA_HAVE_SM90A_MUTANTS)                                                       \
      GTEST_SKIP() << "chapter 07's mutants are built only for CUDA architecture 90"; \
    FA_SKIP_WITHOUT_GPU(90);                                                          \
  } while (0)

// Several key tiles per block (Bc = 128): a mistake that shows only from the second tile on
// (the rescale, the ring's second round) is visible. Causal and ragged too.
const AttentionShape kHopper{1, 4, 640, 640, 64, false, 0.0f};
const AttentionShape kHopperRaggedCausal{2, 2, 333, 517, 128, true, 0.0f};

TEST(Mutant07, RungsPassWhereTheirMutantsAreRejected) {
  FA_SKIP_WITHOUT_SM90A();
  for (const char* name : {"07/v1_tma_wgmma", "07/v3_pingpong"}) {
    if (exercise_not_written(name)) continue;
    const fa::AttentionFwdKernel* k = rung(name);
    ASSERT_NE(k, nullptr);
    for (const AttentionShape& s : {kHopper, kHopperRaggedCausal})
      FA_EXPECT_PASS(fa::run_attention_fwd(*k, s, DType::BF16, check_only()));
  }
}

// Lesson: the online softmax rescales l AND O by alpha = 2^(m_old - m_new) whenever the row max
// moves; with one key tile the mistake is invisible (alpha multiplies zeros).
TEST(Mutant07, ONotRescaledIsRejected) {
  FA_SKIP_WITHOUT_SM90A();
  FA_GET_MUTANT(mutant, fa::AttentionFwdKernel, "mutant/07_o_not_rescaled");
  for (const AttentionShape& s : {kHopper, kHopperRaggedCausal}) {
    fa::RunResult r = fa::run_attention_fwd(*mutant, s, DType::BF16, check_only());
    FA_SKIP_IF_NOT_RUN(r);
    expect_rejected(r);
  }
}

// ---- mistakes that can deadlock: run in a child process with a time limit ------------------------
// A wrong mbarrier parity returns before the data has landed (a race: FAIL, most likely) or waits
// for a phase that only this tile's own release would start (a hang); a missing turn hand-over
// leaves the other consumer waiting on its named barrier for ever. A hung kernel never returns to
// the harness, so this program runs itself again (the same test, told by FA_MUTANT_CHILD which
// kernel and shape to check) under `timeout`: exit 0 = PASS, 3 = FAIL, 4 = not run, 124 = hung.
constexpr int kChildPass = 0, kChildFail = 3, kChildNotRun = 4, kChildTimedOut = 124;

int child_seconds() {
  const char* e = std::getenv("FA_MUTANT_TIMEOUT_S");
  return e != nullptr && std::atoi(e) > 0 ? std::atoi(e) : 20;
}

// In the child: run `kernel` (a mutant or a registered rung) on the shape and exit with its code.
// In the parent: nothing (returns false).
bool run_as_child() {
  const char* spec = std::getenv("FA_MUTANT_CHILD");
  if (spec == nullptr) return false;
  char name[128] = {0};
  long long b = 0, h = 0, sq = 0, sk = 0, d = 0;
  int causal = 0;
  int code = kChildNotRun;
  if (std::sscanf(spec, "%127[^,],%lld,%lld,%lld,%lld,%lld,%d", name, &b, &h, &sq, &sk, &d,
                  &causal) == 7) {
    const fa::AttentionFwdKernel* k = fa::find_mutant<fa::AttentionFwdKernel>(name);
    if (k == nullptr) k = fa::find_entry<fa::AttentionFwdKernel>(name);
    if (k != nullptr) {
      const AttentionShape s{b, h, sq, sk, d, causal != 0, 0.0f};
      const fa::RunResult r = fa::run_attention_fwd(*k, s, DType::BF16, check_only());
      std::cout << "child: " << name << " " << fa::status_name(r.status) << "\n" << r.report();
      code = r.status == fa::Status::Pass   ? kChildPass
             : r.status == fa::Status::Fail ? kChildFail
                                            : kChildNotRun;
    } else {
      std::cout << "child: no kernel named " << name << "\n";
    }
  }
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

struct ChildRun {
  int code = -1;
  std::string output;
};

// Runs `kernel` on `s` (bf16) in a child process of this program, killed after child_seconds().
ChildRun run_in_child(const std::string& kernel, const AttentionShape& s) {
  ChildRun c;
  char exe[4096] = {0};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return c;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = std::string(info->test_suite_name()) + "." + info->name();
  const std::string log =
      ::testing::TempDir() + "fa_mutant_child_" + std::to_string(getpid()) + ".log";
  std::ostringstream cmd;
  cmd << "FA_MUTANT_CHILD='" << kernel << "," << s.batch << "," << s.heads << "," << s.seq_q << ","
      << s.seq_k << "," << s.head_dim << "," << (s.causal ? 1 : 0) << "' timeout -k 5 "
      << child_seconds() << " '" << exe << "' --gtest_filter='" << filter << "' > '" << log
      << "' 2>&1";
  const int rc = std::system(cmd.str().c_str());
  c.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + (WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
  std::ifstream in(log);
  c.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(log.c_str());
  return c;
}

// The child mechanism itself: the real rung run in a child passes (so a child's FAIL or time-out
// below is the mutant's doing).
TEST(Mutant07, RungRunInAChildPasses) {
  if (run_as_child()) return;
  FA_SKIP_WITHOUT_SM90A();
  if (std::system("timeout --version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "no `timeout` command (coreutils): cannot bound a child's run";
  if (exercise_not_written("07/v1_tma_wgmma"))
    GTEST_SKIP() << "07/v1_tma_wgmma's exercise is not written yet (a student release)";
  const ChildRun c = run_in_child("07/v1_tma_wgmma", kHopper);
  EXPECT_EQ(c.code, kChildPass) << c.output;
}

// Runs the mutant in a child and expects FAIL or a hang, never PASS.
void expect_rejected_or_hung(const std::string& mutant, const AttentionShape& s) {
  if (std::system("timeout --version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "no `timeout` command (coreutils): cannot bound a child's run";
  const ChildRun c = run_in_child(mutant, s);
  if (c.code == kChildNotRun) GTEST_SKIP() << c.output;
  EXPECT_NE(c.code, kChildPass) << "the harness ACCEPTED " << mutant << ":\n" << c.output;
  if (c.code == kChildTimedOut || c.code == 128 + 9)
    std::cout << "[ rejected ] " << mutant << " hung; killed after " << child_seconds() << " s\n";
  else
    std::cout << "[ rejected ] " << mutant << " (child exit " << c.code << "):\n" << c.output;
}

// Lesson: stage s is filled for tiles s, s + kStages, ...; the wait names the parity of the
// stage's round, (j / kStages) & 1, not of the tile, j & 1.
TEST(Mutant07, WrongBarrierParityIsRejectedOrHangs) {
  if (run_as_child()) return;
  FA_SKIP_WITHOUT_SM90A();
  FA_GET_MUTANT(m, fa::AttentionFwdKernel, "mutant/07_wrong_barrier_parity");
  (void)m;
  expect_rejected_or_hung("mutant/07_wrong_barrier_parity", kHopper);
}

// Lesson: every bar.sync of the turn barrier needs its bar.arrive; without the hand-over the other
// consumer waits for ever (the kernel hangs on every shape with a key tile).
TEST(Mutant07, MissingTurnHandoverHangs) {
  if (run_as_child()) return;
  FA_SKIP_WITHOUT_SM90A();
  FA_GET_MUTANT(m, fa::AttentionFwdKernel, "mutant/07_missing_turn_handover");
  (void)m;
  expect_rejected_or_hung("mutant/07_missing_turn_handover", kHopper);
}

}  // namespace
