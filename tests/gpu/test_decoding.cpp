// Decoding and grouped-query attention on the GPU: every registered forward kernel that declares
// gqa or decoding (chapter 08) on long K/V caches against the float64 reference: seq_q 1, 2 and 16,
// ragged seq_k from 1 to 131072, K/V groups of 1, 4 and 8 query heads and MQA, causal
// (bottom-right) and not, batch * heads beyond 65535, and (label long) K/V past 2^31 elements.
// Big inputs are drawn on the GPU and a spread sample of heads is checked (the harness says which).
// A decoding kernel that takes every head dim runs those off the step of 8 on the same caches.
// Every other kernel must refuse grouped shapes, never run them.
#include "test_util.h"

namespace {

using fa::AttentionShape;

fa::RunOptions check_only(uint64_t seed, int64_t heads = 0) {
  fa::RunOptions o;
  o.seed = seed;
  o.time = false;
  o.check_heads = heads;
  return o;
}

std::vector<std::string> decoding_kernels() {
  std::vector<std::string> out;
  for (const fa::AttentionFwdKernel* k : fa::entries_with_prefix<fa::AttentionFwdKernel>(""))
    if (k->gqa || k->decoding) out.push_back(k->name);
  return out;
}

class DecodingKernels : public VariantTest {
 protected:
  const fa::AttentionFwdKernel& kernel() {
    return *fa::find_entry<fa::AttentionFwdKernel>(GetParam());
  }
  // K/V heads for 8 query heads: groups of 1, 4 and 8 (MQA); only 8 for a kernel without GQA.
  std::vector<int64_t> kv_heads() {
    return kernel().gqa ? std::vector<int64_t>{8, 2, 1} : std::vector<int64_t>{8};
  }
  int dim(int want) {
    return fa::supports(kernel().head_dims, want) ? want : kernel().head_dims.back();
  }
};

// seq_k 32785 = 32768 + 17: a ragged tail after many full splits.
TEST_P(DecodingKernels, RaggedCacheLengthsAndGroups) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  const fa::DType t =
      fa::supports(kernel().dtypes, fa::DType::BF16) ? fa::DType::BF16 : kernel().dtypes.front();
  for (int d : {dim(128), dim(64)})
    for (int64_t nq : {1, 2, 16})
      for (int64_t nk : {1, 17, 1000, 32785})
        for (int64_t hkv : kv_heads())
          for (bool causal : {false, true}) {
            AttentionShape s{2, 8, nq, nk, d, causal, 0.0f, hkv};
            SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
            FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, t, check_only(nq * 31 + nk, 3)));
          }
}

TEST_P(DecodingKernels, EveryDtype) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (fa::DType t : kernel().dtypes)
    for (int64_t nq : {1, 16})
      for (int64_t nk : {1000, 32785})
        for (bool causal : {false, true}) {
          AttentionShape s{2, 8, nq, nk, dim(128), causal, 0.0f, kv_heads().back()};
          SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
          FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, t, check_only(nk + nq, 3)));
        }
}

TEST_P(DecodingKernels, Cache131072Keys) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  const fa::DType t = kernel().dtypes.back();
  for (int64_t hkv : {int64_t(16), kernel().gqa ? int64_t(4) : int64_t(16)})
    for (int64_t nq : {1, 2})
      for (bool causal : {false, true}) {
        AttentionShape s{1, 16, nq, 131072, dim(128), causal, 0.0f, hkv};
        SCOPED_TRACE(s.str());
        FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, t, check_only(7 + nq, 2)));
      }
}

// More query rows than one block holds: groups of 4 heads times seq_q past 16, and seq_q > seq_k
// (causal rows that see no key).
TEST_P(DecodingKernels, ManyRowsPerKvHead) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  const fa::DType t = kernel().dtypes.back();
  for (AttentionShape s : {AttentionShape{1, 8, 300, 257, dim(64), true, 0.0f, 2},
                           AttentionShape{2, 4, 33, 1025, dim(128), false, 0.0f, 1},
                           AttentionShape{1, 8, 40, 9, dim(64), true, 0.0f, 2}}) {
    if (!kernel().gqa) s.heads_kv = 0;
    SCOPED_TRACE(s.str());
    FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, t, check_only(s.seq_q)));
  }
}

TEST_P(DecodingKernels, ManyHeadsBeyondGridLimit) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  AttentionShape s{35000, 4, 1, 17, dim(64), true, 0.0f, kernel().gqa ? 2 : 0};  // 140000 heads
  FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, kernel().dtypes.back(), check_only(90, 3)));
}

// K and V past 2^31 elements: 132 K/V heads of 131072 keys x 128.
TEST_P(DecodingKernels, LongCachePast2to31Elements) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  const fa::DType t = kernel().dtypes.back();
  AttentionShape s{1, 132, 1, 131072, dim(128), false, 0.0f, 0};
  if (fa::gpu_info().global_mem < size_t(3) * s.k_numel() * fa::dtype_size(t))
    GTEST_SKIP() << "not enough GPU memory for K/V past 2^31 elements";
  FA_EXPECT_PASS(fa::run_attention_fwd(kernel(), s, t, check_only(91, 2)));
}

INSTANTIATE_TEST_SUITE_P(Registered, DecodingKernels, ::testing::ValuesIn(decoding_kernels()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DecodingKernels);

// A decoding kernel that takes every head dim (head_dim_step 1: chapter 08's t08) on the head dims
// off the step of 8 that it takes (kOffTheStep, test_util.h) and D 1, 7 and 9 (a row shorter than
// one 16-byte chunk, and one chunk and a bit): long ragged caches cut into many splits, so that the
// partials and their merge carry rows of d too; groups of 1, 4 and 8; causal and not.
std::vector<std::string> decoding_kernels_any_head_dim() {
  std::vector<std::string> out;
  for (const fa::AttentionFwdKernel* k : fa::entries_with_prefix<fa::AttentionFwdKernel>(""))
    if (k->decoding && k->rounds_head_dim && k->head_dim_step == 1) out.push_back(k->name);
  return out;
}

class DecodingAnyHeadDim : public DecodingKernels {};

TEST_P(DecodingAnyHeadDim, HeadDimsOffTheStepOnLongCaches) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  std::vector<int> dims = {1, 7, 9};
  for (int d : kOffTheStep)
    if (fa::takes_head_dim(kernel(), d)) dims.push_back(d);
  for (fa::DType t : kernel().dtypes)
    for (int d : dims)
      for (int64_t nq : {1, 16})
        for (int64_t nk : {17, 32785})
          for (int64_t hkv : kv_heads())
            for (bool causal : {false, true}) {
              if (t != kernel().dtypes.back() && (nk != 32785 || hkv != 2)) continue;
              AttentionShape s{2, 8, nq, nk, d, causal, 0.0f, hkv};
              SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
              // A refusal fails: the registration says the kernel takes these head dims.
              const fa::RunResult r =
                  fa::run_attention_fwd(kernel(), s, t, check_only(uint64_t(d * 7 + nq + nk), 3));
              if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message << FA_SKIP_NOTE;
              EXPECT_EQ(r.status, fa::Status::Pass) << r.report();
            }
  // An odd number of rows (one sequence, one or three heads, one query) over a few splits: at an
  // odd d the partials of O take an odd number of floats, and the (m, l) pairs after them must
  // still be 8-byte aligned.
  for (int d : {59, 7})
    for (int64_t heads : {1, 3})
      for (int64_t nk : {200, 600, 1000, 3000}) {
        AttentionShape s{1, heads, 1, nk, d, false, 0.0f, heads};
        SCOPED_TRACE(s.str());
        const fa::RunResult r = fa::run_attention_fwd(kernel(), s, kernel().dtypes.back(),
                                                      check_only(uint64_t(nk + heads + d)));
        if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message << FA_SKIP_NOTE;
        EXPECT_EQ(r.status, fa::Status::Pass) << r.report();
      }
}

INSTANTIATE_TEST_SUITE_P(Registered, DecodingAnyHeadDim,
                         ::testing::ValuesIn(decoding_kernels_any_head_dim()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DecodingAnyHeadDim);

// ---------------------------------------------------------------------------------------------
// A kernel that does not declare gqa is never run on a grouped shape (it would read the wrong K/V
// heads), forward or backward.
TEST(GroupedQueryRefusal, KernelsWithoutGqaAreUnsupported) {
  FA_SKIP_WITHOUT_GPU(70);
  int refused = 0;
  for (const fa::AttentionFwdKernel* k : fa::entries_with_prefix<fa::AttentionFwdKernel>("")) {
    if (k->gqa || !fa::gpu_skip_reason(k->min_sm).empty()) continue;
    AttentionShape s{1, 4, 3, 17, k->head_dims.front(), false, 0.0f, 2};
    fa::RunResult r = fa::run_attention_fwd(*k, s, k->dtypes.front(), check_only(92));
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    EXPECT_NE(r.message.find("heads_kv"), std::string::npos) << r.message;
    ++refused;
  }
  for (const fa::AttentionBwdKernel* k : fa::entries_with_prefix<fa::AttentionBwdKernel>("")) {
    if (k->gqa || !fa::gpu_skip_reason(k->min_sm).empty()) continue;
    AttentionShape s{1, 4, 3, 17, k->head_dims.front(), false, 0.0f, 2};
    fa::RunResult r = fa::run_attention_bwd(*k, s, k->dtypes.front(), check_only(93));
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    ++refused;
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
