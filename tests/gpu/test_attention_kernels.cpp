// Every registered attention kernel, forward (chapter 05) and backward (chapter 06), in each dtype
// and head dim it lists: ragged lengths, seq_q != seq_k both ways, causal on and off (bottom-right
// aligned, including rows that see no key), a non-default scale, inputs scaled up 5x, fresh inputs
// on several runs, batch*heads beyond 65535, and (label long) a tensor past 2^31 elements.
// Grouped K/V heads (GQA, MQA): the ragged shapes again for every kernel that declares gqa (the
// backward's dK and dV summed over each group), and a refusal from every kernel that does not.
// A variant this GPU cannot take (UNSUPPORTED) is skipped alone and the others still run
// (VariantTest, test_util.h); each test prints "ran N of M variants".
#include "test_util.h"

namespace {

using fa::AttentionShape;

fa::RunOptions check_only(uint64_t seed) {
  fa::RunOptions o;
  o.seed = seed;
  o.time = false;
  return o;
}

// Ragged (seq_q, seq_k) pairs: lengths that are no multiple of any tile (17, 113, 127, 129, 203,
// 1023, 1025), seq_q < seq_k and seq_q > seq_k (the latter leaves causal rows that see no key),
// and 1 x 1.
const std::vector<std::pair<int64_t, int64_t>> kRagged = {
    {1, 1}, {17, 17}, {113, 203}, {203, 113}, {127, 129}, {512, 256}, {1023, 1023}, {1025, 1025}};

// Grouped K/V heads: 8 query heads over 4 (pairs), 2 (GQA) and 1 (MQA) K/V heads. With 8 heads
// and three groupings a shape costs the CPU reference 8x what RaggedShapesCausalAndNot's 3 heads
// do, so the default label takes the ragged shapes up to 203 and the Long* tests (label
// gpu-long) the three past a tile of 128 by several tiles.
const std::vector<int64_t> kKvHeads = {4, 2, 1};
const std::vector<std::pair<int64_t, int64_t>> kRaggedGrouped(kRagged.begin(), kRagged.begin() + 5);
const std::vector<std::pair<int64_t, int64_t>> kRaggedGroupedLong(kRagged.begin() + 5,
                                                                  kRagged.end());

template <class K>
std::vector<std::pair<fa::DType, int>> variants(const K& k) {
  std::vector<std::pair<fa::DType, int>> out;
  for (fa::DType t : k.dtypes)
    for (int d : k.head_dims) out.push_back({t, d});
  return out;
}

// The ragged shapes with grouped K/V heads on a kernel that declares gqa (forward or backward,
// `run` its harness runner); any other kernel must refuse them, never run them (it would read
// the wrong K/V heads).
template <class K, class Run>
void grouped_kv_heads(const K& kernel, Run run,
                      const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  if (!kernel.gqa) {
    for (auto [t, d] : variants(kernel)) {
      fa::RunResult r = run(kernel, {2, 8, 17, 17, d, true, 0.0f, 2}, t, check_only(1));
      EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    }
    return;
  }
  for (auto [t, d] : variants(kernel))
    for (auto [nq, nk] : shapes)
      for (bool causal : {false, true})
        for (int64_t hkv : kKvHeads) {
          AttentionShape s{2, 8, nq, nk, d, causal, 0.0f, hkv};
          SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
          FA_EXPECT_PASS(run(kernel, s, t, check_only(nq * 3 + nk + hkv)));
        }
}

// ---------------------------------------------------------------------------------------------
class AttentionFwdKernels : public VariantTest {
 protected:
  const fa::AttentionFwdKernel& kernel() {
    return *fa::find_entry<fa::AttentionFwdKernel>(GetParam());
  }
};

TEST_P(AttentionFwdKernels, RaggedShapesCausalAndNot) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    for (auto [nq, nk] : kRagged)
      for (bool causal : {false, true}) {
        AttentionShape s{2, 3, nq, nk, d, causal, 0.0f};
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, t, check_only(nq * 7 + nk)));
      }
}

// A kernel that declares gqa on the ragged shapes with grouped K/V heads; any other must refuse.
TEST_P(AttentionFwdKernels, GroupedKvHeads) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  grouped_kv_heads(kernel(), fa::run_attention_fwd, kRaggedGrouped);
}

TEST_P(AttentionFwdKernels, LongGroupedKvHeads) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  if (!kernel().gqa)
    GTEST_SKIP() << "takes no grouped K/V heads (GroupedKvHeads checks it refuses)";
  grouped_kv_heads(kernel(), fa::run_attention_fwd, kRaggedGroupedLong);
}

TEST_P(AttentionFwdKernels, NonDefaultScaleAndLargeInputs) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel())) {
    AttentionShape s{1, 2, 300, 257, d, true, 0.37f};
    FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, t, check_only(11)));
    fa::RunOptions big = check_only(12);
    big.input_std = 5.0f;  // scores 25x larger: the running max must do its job
    big.input_mean = 2.5f;
    if (t == fa::DType::F32) {
      // Scores reach ~250 here; fp32 rounds them to ~1e-5 and the softmax passes that on, so a
      // correct fp32 kernel is off by up to ~5e-4 (measured on an H100, 2026-11-21). The 16-bit
      // rule adapts by itself; the fixed fp32 tolerance is widened for this test alone.
      big.has_tolerance = true;
      big.tolerance = fa::Tolerance::allclose(1e-3, 1e-3);
    }
    s.scale = 0.0f;
    FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, t, big));
  }
}

// A racy kernel can pass one run: several runs with fresh inputs in every variant, and the long
// 4097 (one past a power of two, so every tile loop has a one-row tail) in the first and last.
TEST_P(AttentionFwdKernels, FreshInputsEveryRun) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto all = variants(kernel());
  for (auto [t, d] : all)
    for (uint64_t seed = 1; seed <= 3; ++seed)
      FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), {2, 2, 1025, 1025, d, seed == 2, 0.0f}, t,
                                           check_only(seed)));
  FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), {1, 2, 4097, 4097, all.front().second, true, 0.0f},
                                       all.front().first, check_only(4)));
  FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), {1, 2, 4097, 4097, all.back().second, false, 0.0f},
                                       all.back().first, check_only(5)));
}

TEST_P(AttentionFwdKernels, ManyHeadsBeyondGridLimit) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).front();
  fa::RunOptions o = check_only(13);
  o.check_heads = 3;  // first, middle and last (b, h): the ones a grid-limit bug would break
  FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), {70000, 1, 17, 17, d, true, 0.0f}, t, o));
}

TEST_P(AttentionFwdKernels, LongTensorPast2to31Elements) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).back();
  // 2^31 / (seq * d) heads, plus a few: q has more than 2^31 elements.
  int64_t seq = 1024, heads = (int64_t(1) << 31) / (seq * d) + 3;
  if (fa::gpu_info().global_mem < size_t(8) * heads * seq * d * fa::dtype_size(t))
    GTEST_SKIP() << "not enough GPU memory for a >2^31-element tensor";
  fa::RunOptions o = check_only(14);
  o.check_heads = 2;  // the first and the last head: past 2^31 lives there
  FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), {1, heads, seq, seq, d, false, 0.0f}, t, o));
}

INSTANTIATE_TEST_SUITE_P(Registered, AttentionFwdKernels,
                         ::testing::ValuesIn(fa::entry_names<fa::AttentionFwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttentionFwdKernels);

// ---------------------------------------------------------------------------------------------
class AttentionBwdKernels : public VariantTest {
 protected:
  const fa::AttentionBwdKernel& kernel() {
    return *fa::find_entry<fa::AttentionBwdKernel>(GetParam());
  }
};

TEST_P(AttentionBwdKernels, RaggedShapesCausalAndNot) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    for (auto [nq, nk] : kRagged)
      for (bool causal : {false, true}) {
        AttentionShape s{1, 2, nq, nk, d, causal, 0.0f};
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        FA_EXPECT_PASS(fa::run_attention_bwd(kernel(), s, t, check_only(nq * 5 + nk)));
      }
}

// dK and dV of each K/V head summed over its group, against the reference's sum (the harness
// checks whole groups); a kernel that does not declare gqa must refuse.
TEST_P(AttentionBwdKernels, GroupedKvHeads) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  grouped_kv_heads(kernel(), fa::run_attention_bwd, kRaggedGrouped);
  if (!kernel().gqa) return;
  // Small grids split each group among blocks (chapter 07's backward rungs: parts summed by a
  // second kernel); a grid that fills an H100 (16 x 2 K/V heads x 8 key tiles) keeps a group in
  // one block.
  fa::RunOptions o = check_only(24);
  o.check_heads = 4;  // one whole group
  for (auto [t, d] : variants(kernel()))
    FA_EXPECT_PASS(fa::run_attention_bwd(kernel(), {16, 8, 1024, 1024, d, true, 0.0f, 2}, t, o));
}

TEST_P(AttentionBwdKernels, LongGroupedKvHeads) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  if (!kernel().gqa)
    GTEST_SKIP() << "takes no grouped K/V heads (GroupedKvHeads checks it refuses)";
  grouped_kv_heads(kernel(), fa::run_attention_bwd, kRaggedGroupedLong);
}

TEST_P(AttentionBwdKernels, NonDefaultScale) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    FA_EXPECT_PASS(
        fa::run_attention_bwd(kernel(), {2, 2, 200, 333, d, true, 0.29f}, t, check_only(21)));
}

TEST_P(AttentionBwdKernels, ManyHeadsBeyondGridLimit) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).front();
  fa::RunOptions o = check_only(22);
  o.check_heads = 3;
  FA_EXPECT_PASS(fa::run_attention_bwd(kernel(), {70000, 1, 17, 17, d, true, 0.0f}, t, o));
}

// More key blocks per head than an H100 has SMs (32768 keys: 256 blocks of 128), and few query
// tiles against many key blocks (100 x 8000): the shapes where a kernel that orders the work of
// a head's blocks (07/bwd_v3_deterministic) takes its other paths. One head checked.
TEST_P(AttentionBwdKernels, LongManyKeyBlocksPerHead) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).front();
  fa::RunOptions o = check_only(23);
  o.check_heads = 1;
  for (const AttentionShape& s : {AttentionShape{1, 2, 1024, 32768, d, false, 0.0f},
                                  AttentionShape{1, 2, 100, 8000, d, false, 0.0f},
                                  AttentionShape{1, 2, 100, 8000, d, true, 0.0f}}) {
    SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
    FA_EXPECT_PASS(fa::run_attention_bwd(kernel(), s, t, o));
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, AttentionBwdKernels,
                         ::testing::ValuesIn(fa::entry_names<fa::AttentionBwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttentionBwdKernels);

}  // namespace
