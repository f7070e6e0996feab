// Chapter 09 on the GPU: every registered varlen forward and backward, paged attention and
// append kernel ("09/...") in each dtype and head dim it lists, against the float64 reference of
// each sequence alone (harness_serving.cpp). Varlen batches mix lengths that are no multiple of
// any tile (1, 17, 127, 129, 1000, 5000) with empty sequences, seq_k equal to and different from
// seq_q, causal and not, sliding windows for the kernels that take one, grouped K/V heads for the
// kernels that take them, more than 65535 heads, and (label long) a packed Q past 2^31 elements.
// Paged: shuffled pages of 16, 64 and 256 keys, ragged caches (an empty one too), decoding and a
// chunk of 200 queries. Append: every element of both pools compared bit for bit. A variant the
// kernel or this GPU cannot take (UNSUPPORTED) is skipped alone; each test prints "ran N of M".
// SanitizeSmallServing.*: the same kernels on tiny shapes, for the compute-sanitizer runs.
#include <algorithm>
#include <cstdlib>
#include <exception>

#include "ch09_deal.h"  // kMaxOrdered
#include "test_util.h"

namespace {

using fa::DType;
using fa::PagedShape;
using fa::VarlenShape;

fa::RunOptions check_only(uint64_t seed, int64_t heads = 0) {
  fa::RunOptions o;
  o.seed = seed;
  o.time = false;
  o.check_heads = heads;
  return o;
}

template <class K>
std::vector<std::string> chapter09() {
  std::vector<std::string> out;
  for (const K* k : fa::entries_with_prefix<K>("09/")) out.push_back(k->name);
  return out;
}

template <class K>
std::vector<std::pair<DType, int>> variants(const K& k) {
  std::vector<std::pair<DType, int>> out;
  for (DType t : k.dtypes)
    for (int d : k.head_dims) out.push_back({t, d});
  return out;
}

VarlenShape varlen(std::vector<int64_t> q, std::vector<int64_t> k, int64_t heads, int64_t d,
                   bool causal, int64_t left = -1, int64_t right = -1, int64_t heads_kv = 0) {
  VarlenShape s;
  s.seqlens_q = std::move(q);
  s.seqlens_k = std::move(k);
  s.heads = heads;
  s.heads_kv = heads_kv;
  s.head_dim = d;
  s.causal = causal;
  s.window_left = left;
  s.window_right = right;
  return s;
}

// Ragged batches: equal query and key lengths (self-attention of a packed batch, an empty
// sequence among them), and key lengths other than the query lengths: seq_k > seq_q (a prefix
// cache), seq_q > seq_k (causal rows that see no key), keys without queries and queries without
// keys (O = 0, L = -inf).
const std::vector<int64_t> kMixed = {1, 17, 0, 127, 129, 1000, 5000};
const std::vector<int64_t> kMixedShort = {1, 17, 0, 127, 129, 1000};
const std::vector<int64_t> kQ = {1, 17, 129, 0, 300, 40}, kK = {1000, 17, 300, 5, 129, 0};

// The windows of FlashAttention's (left, right), with and without causal masking.
struct Window {
  int64_t left, right;
  bool causal;
};
const std::vector<Window> kWindows = {
    {-1, -1, true}, {0, 0, false}, {16, -1, true}, {100, 50, false}, {127, 0, false}};

// ---------------------------------------------------------------------------------------------
class VarlenFwdKernels : public VariantTest {
 protected:
  const fa::VarlenFwdKernel& kernel() { return *fa::find_entry<fa::VarlenFwdKernel>(GetParam()); }
};

TEST_P(VarlenFwdKernels, MixedLengthsCausalAndNot) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    for (bool causal : {false, true}) {
      for (const VarlenShape& s :
           {varlen(kMixed, kMixed, 4, d, causal), varlen(kQ, kK, 4, d, causal)}) {
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        FA_EXPECT_PASS(fa::run_varlen_fwd(kernel(), s, t, check_only(s.total_q() + causal)));
      }
    }
}

TEST_P(VarlenFwdKernels, SlidingWindows) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    for (const Window& w : kWindows)
      for (const VarlenShape& s :
           {varlen(kMixedShort, kMixedShort, 4, d, w.causal, w.left, w.right),
            varlen(kQ, kK, 4, d, w.causal, w.left, w.right)}) {
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        fa::RunResult r =
            fa::run_varlen_fwd(kernel(), s, t, check_only(200 + w.left + 7 * w.right));
        if (!kernel().window && s.has_window()) {  // must refuse, never run
          if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message;
          EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
          continue;
        }
        FA_EXPECT_PASS(r);
      }
}

// Windows many key tiles wide: a query tile then visits tiles masked at both of the band's edges
// and unmasked ones between them (kWindows' fit in one or two tiles), in sequences long enough
// that the band leaves whole tiles out on the left. Every head dim (each has its own key tile
// width), one dtype, grouped K/V heads where the kernel takes them.
TEST_P(VarlenFwdKernels, WideWindowsWithUnmaskedTiles) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  if (!kernel().window) GTEST_SKIP() << kernel().name << " takes no window (SlidingWindows)";
  const DType t = kernel().dtypes.front();
  for (int d : kernel().head_dims)
    for (const Window& w :
         {Window{800, -1, true}, Window{600, 400, false}, Window{-1, 700, false}}) {
      const VarlenShape s = varlen({2500, 1, 1200, 777}, {2500, 1, 1500, 777}, 4, d, w.causal,
                                   w.left, w.right, kernel().gqa ? 2 : 0);
      SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
      FA_EXPECT_PASS(fa::run_varlen_fwd(kernel(), s, t, check_only(d + w.left, 2)));
    }
}

TEST_P(VarlenFwdKernels, GroupedKvHeads) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    for (bool causal : {false, true}) {
      const int64_t left = kernel().window ? 100 : -1;  // one windowed case where it takes one
      for (const VarlenShape& s : {varlen(kMixedShort, kMixedShort, 8, d, causal, -1, -1, 2),
                                   varlen(kQ, kK, 8, d, causal, left, -1, 2)}) {
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        fa::RunResult r = fa::run_varlen_fwd(kernel(), s, t, check_only(31 + causal));
        if (!kernel().gqa) {
          if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message;
          EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
          continue;
        }
        FA_EXPECT_PASS(r);
      }
    }
}

// More sequences than 09/hopper_v6's deal order holds (kMaxOrdered: past it the kernel takes them
// in batch order, as v3), short and uneven (0 to 250 tokens, empty ones among them).
TEST_P(VarlenFwdKernels, ManyShortSequences) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).front();
  std::vector<int64_t> lengths(size_t(fa::ch09::kMaxOrdered) + 76);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = int64_t((i * 37) % 251);
  for (bool causal : {false, true}) {
    const VarlenShape s = varlen(lengths, lengths, 2, d, causal);
    SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
    FA_EXPECT_PASS(fa::run_varlen_fwd(kernel(), s, t, check_only(81 + causal, 1)));
  }
}

// More heads than a grid's y or z dimension holds (65535): the first, middle and last checked.
TEST_P(VarlenFwdKernels, ManyHeadsBeyondGridLimit) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).front();
  const VarlenShape s = varlen({17, 1}, {17, 5}, 70000, d, true);
  FA_EXPECT_PASS(fa::run_varlen_fwd(kernel(), s, t, check_only(41, 3)));
}

TEST_P(VarlenFwdKernels, FreshInputsEveryRun) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).back();
  for (uint64_t seed = 1; seed <= 3; ++seed)
    FA_EXPECT_PASS(fa::run_varlen_fwd(kernel(),
                                      varlen({513, 1025, 3}, {513, 1025, 3}, 2, d, seed == 2), t,
                                      check_only(100 + seed)));
}

// A packed Q (and O) past 2^31 elements: 32 heads x D x four sequences of about 2^31 / (32 D) / 4
// tokens; the keys stay short so that the reference of the sampled rows stays cheap. The last
// head's rows start past 2^31: a 32-bit offset breaks them.
TEST_P(VarlenFwdKernels, LongPackedBatchPast2to31Elements) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).back();
  const int64_t heads = 32, len = (int64_t(1) << 31) / (heads * d) / 4 + 1000;
  for (bool causal : {false, true}) {
    const VarlenShape s = varlen({len, len, len, len}, {1024, 1000, 1, 4096}, heads, d, causal);
    ASSERT_GT(s.q_numel(), int64_t(1) << 31);
    if (fa::gpu_info().global_mem < size_t(3) * s.q_numel() * fa::dtype_size(t))
      GTEST_SKIP() << "not enough GPU memory for a packed Q past 2^31 elements";
    SCOPED_TRACE(s.str());
    FA_EXPECT_PASS(fa::run_varlen_fwd(kernel(), s, t, check_only(51 + causal, 2)));
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, VarlenFwdKernels,
                         ::testing::ValuesIn(chapter09<fa::VarlenFwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VarlenFwdKernels);

// ---------------------------------------------------------------------------------------------
class VarlenBwdKernels : public VariantTest {
 protected:
  const fa::VarlenBwdKernel& kernel() { return *fa::find_entry<fa::VarlenBwdKernel>(GetParam()); }
};

// Smaller than the forward's: the backward's reference computes every row of a checked sequence.
const std::vector<int64_t> kBwd = {1, 17, 0, 127, 129, 513};
const std::vector<int64_t> kBwdQ = {1, 17, 129, 0, 200}, kBwdK = {300, 17, 129, 5, 0};

// Head dims between the instances (rounds_head_dim): a kernel that rounds runs each on a ragged
// packed batch, causal and not, with a window and grouped K/V heads where it takes them (the
// backward's shapes, for both directions); head dims off the step of 8 are refused with the
// reason, unless the kernel rounds every head dim (head_dim_step 1: 09/v3_varlen_any_head_dim, v4,
// bwd_v3 to bwd_v8), which runs D 59, 111 (and 201 up to 256) as the others. A kernel that does not round refuses
// D 80.
template <class K, class Run>
void rounded_head_dims(const K& k, Run run) {
  FA_SKIP_WITHOUT_GPU(k.min_sm);
  if (!k.rounds_head_dim) {
    const fa::RunResult r = run(varlen({17}, {17}, 2, 80, true), k.dtypes.front(), 5);
    if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message;
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    return;
  }
  const std::vector<int> dims = rounded_dims(k);
  ASSERT_FALSE(dims.empty()) << k.name << " rounds head dims but takes none of the test's";
  for (DType t : k.dtypes)
    for (int d : dims)
      for (bool causal : {false, true}) {
        std::vector<VarlenShape> shapes = {varlen(kBwdQ, kBwdK, 2, d, causal)};
        if (k.window) shapes.push_back(varlen(kBwd, kBwd, 2, d, causal, 100, causal ? -1 : 50));
        if (k.gqa) shapes.push_back(varlen(kBwdQ, kBwdK, 4, d, causal, -1, -1, 1));
        for (const VarlenShape& s : shapes) {
          SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
          FA_EXPECT_PASS(run(s, t, uint64_t(d * 3 + causal)));
        }
      }
  if (fa::head_dim_step(k) == 1) {  // takes kOffTheStep (above); refuses past its largest instance
    const fa::RunResult r =
        run(varlen({33, 5}, {47, 9}, 2, k.head_dims.back() + 1, true), k.dtypes.front(), 3);
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    return;
  }
  for (int d : {59, 111}) {
    const fa::RunResult r = run(varlen({33, 5}, {47, 9}, 2, d, true), k.dtypes.front(), 3);
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    EXPECT_NE(r.message.find("multiples of 8"), std::string::npos) << r.message;
  }
}

TEST_P(VarlenFwdKernels, RoundedHeadDims) {
  rounded_head_dims(kernel(), [&](const VarlenShape& s, DType t, uint64_t seed) {
    return fa::run_varlen_fwd(kernel(), s, t, check_only(seed));
  });
}

TEST_P(VarlenBwdKernels, RoundedHeadDims) {
  rounded_head_dims(kernel(), [&](const VarlenShape& s, DType t, uint64_t seed) {
    return fa::run_varlen_bwd(kernel(), s, t, check_only(seed));
  });
}

TEST_P(VarlenBwdKernels, MixedLengthsCausalAndNot) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    for (bool causal : {false, true})
      for (const VarlenShape& s :
           {varlen(kBwd, kBwd, 2, d, causal), varlen(kBwdQ, kBwdK, 2, d, causal)}) {
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        FA_EXPECT_PASS(fa::run_varlen_bwd(kernel(), s, t, check_only(s.total_k() + causal)));
      }
}

// A kernel that takes both a window and grouped K/V heads (09/bwd_v7_window_grouped) runs every
// window with a group of 2 as well.
TEST_P(VarlenBwdKernels, SlidingWindows) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    for (const Window& w : kWindows) {
      std::vector<VarlenShape> shapes = {varlen(kBwd, kBwd, 2, d, w.causal, w.left, w.right),
                                         varlen(kBwdQ, kBwdK, 2, d, w.causal, w.left, w.right)};
      if (kernel().window && kernel().gqa)
        shapes.push_back(varlen(kBwdQ, kBwdK, 4, d, w.causal, w.left, w.right, 2));
      for (const VarlenShape& s : shapes) {
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        fa::RunResult r =
            fa::run_varlen_bwd(kernel(), s, t, check_only(300 + w.left + 5 * w.right));
        if (!kernel().window && s.has_window()) {
          if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message;
          EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
          continue;
        }
        FA_EXPECT_PASS(r);
      }
    }
}

// Grouped K/V heads (a group of 4, and MQA): dK and dV of each K/V head against the sum over
// its group (the harness checks whole groups). A kernel that does not take them refuses.
TEST_P(VarlenBwdKernels, GroupedKvHeads) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  if (!kernel().gqa) {
    auto [t, d] = variants(kernel()).front();
    fa::RunResult r =
        fa::run_varlen_bwd(kernel(), varlen({17}, {17}, 4, d, false, -1, -1, 2), t, check_only(61));
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    return;
  }
  for (auto [t, d] : variants(kernel()))
    for (bool causal : {false, true}) {
      const int64_t left = kernel().window ? 100 : -1;  // one windowed case where it takes one
      for (const VarlenShape& s : {varlen(kBwd, kBwd, 8, d, causal, -1, -1, 2),
                                   varlen(kBwdQ, kBwdK, 4, d, causal, left, -1, 1)}) {
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        FA_EXPECT_PASS(fa::run_varlen_bwd(kernel(), s, t, check_only(63 + causal)));
      }
    }
}

TEST_P(VarlenBwdKernels, ManyHeadsBeyondGridLimit) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).front();
  FA_EXPECT_PASS(
      fa::run_varlen_bwd(kernel(), varlen({17, 1}, {17, 5}, 70000, d, true), t, check_only(62, 3)));
}

// The forward's lengths, up to 5000, for the backward too: its reference computes every row of
// a checked sequence (about a minute of CPU for one head), so it is a long test with one head.
TEST_P(VarlenBwdKernels, LongMixedLengthsUpTo5000) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).back();
  const std::vector<int64_t> lengths = {1, 17, 0, 127, 129, 1000, 5000};
  for (bool causal : {false, true}) {
    const VarlenShape s = varlen(lengths, lengths, 2, d, causal);
    SCOPED_TRACE(s.str());
    FA_EXPECT_PASS(fa::run_varlen_bwd(kernel(), s, t, check_only(91 + causal, 1)));
  }
}

// A packed batch past 2^31 elements of Q, dO, dQ (and of the fp32 workspace): 32 heads of many
// sequences of 256 tokens, short enough that the reference of the sampled sequences stays cheap.
// The last head's rows start past 2^31: a 32-bit offset (or a 32-bit dQ atomic address) breaks.
TEST_P(VarlenBwdKernels, LongPackedBatchPast2to31Elements) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).back();
  const int64_t heads = 32, len = 256, seqs = (int64_t(1) << 31) / (heads * d) / len + 100;
  const std::vector<int64_t> lengths(static_cast<size_t>(seqs), len);
  const VarlenShape s = varlen(lengths, lengths, heads, d, true);
  ASSERT_GT(s.q_numel(), int64_t(1) << 31);
  // q, k, v, o, dO, dQ, dK, dV in the dtype and the fp32 workspace: about 12 Q-sized buffers.
  if (fa::gpu_info().global_mem < size_t(12) * s.q_numel() * fa::dtype_size(t))
    GTEST_SKIP() << "not enough GPU memory for a packed batch past 2^31 elements";
  SCOPED_TRACE(s.str());
  FA_EXPECT_PASS(fa::run_varlen_bwd(kernel(), s, t, check_only(71, 2)));
}

INSTANTIATE_TEST_SUITE_P(Registered, VarlenBwdKernels,
                         ::testing::ValuesIn(chapter09<fa::VarlenBwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VarlenBwdKernels);

// ---------------------------------------------------------------------------------------------
PagedShape paged(std::vector<int64_t> lens, int64_t heads, int64_t heads_kv, int64_t d,
                 int64_t seq_q, int64_t page, bool causal) {
  PagedShape s;
  s.seqlens_k = std::move(lens);
  s.heads = heads;
  s.heads_kv = heads_kv;
  s.head_dim = d;
  s.seq_q = seq_q;
  s.page_size = page;
  s.causal = causal;
  return s;
}

// Ragged caches: one key, a partial page, a page boundary plus one, one past a power of two, and
// an empty cache (its rows see no key: O = 0, L = -inf).
const std::vector<int64_t> kCache = {1, 17, 1000, 0, 129, 4097};

class PagedFwdKernels : public VariantTest {
 protected:
  const fa::PagedFwdKernel& kernel() { return *fa::find_entry<fa::PagedFwdKernel>(GetParam()); }
  std::vector<int64_t> page_sizes() {
    std::vector<int64_t> out;
    for (int64_t p : {16, 64, 256})
      if (std::find(kernel().page_sizes.begin(), kernel().page_sizes.end(), p) !=
          kernel().page_sizes.end())
        out.push_back(p);
    return out;
  }
  // heads_kv for a test that groups the heads: hkv where the kernel takes grouped K/V heads,
  // else one K/V head per query head (09/hopper_paged_prefill; the refusal has its own test).
  int64_t kv(int64_t hkv, int64_t heads) { return kernel().gqa ? hkv : heads; }
};

TEST_P(PagedFwdKernels, DecodingOverShuffledPages) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (auto [t, d] : variants(kernel()))
    for (int64_t page : page_sizes())
      for (int64_t hkv : {2, 8})
        for (int64_t nq : {1, 4})
          for (bool causal : {false, true}) {
            if (kv(hkv, 8) != hkv) continue;  // grouped: only where the kernel takes it
            const PagedShape s = paged(kCache, 8, hkv, d, nq, page, causal);
            SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
            FA_EXPECT_PASS(fa::run_paged_fwd(kernel(), s, t, check_only(page + nq * 3 + hkv)));
          }
}

// A page pool past 2^31 elements (K and V each): 32 sequences of about 2^31 / (8 D) / 32 keys over
// 8 K/V heads, in pages of the kernel's largest size, one query per head. The shuffled table puts
// about half of every sequence's pages past 2^31 elements into the pool: a 32-bit page offset
// breaks them. Why 32 sequences of 66,560 keys and not 4 of 528,384: a kernel that walks all of a
// sequence's keys in one pass adds one m16n8k16 product into O per 16 keys, and the tensor core
// truncates that fp32 sum instead of rounding it; over 528,384 keys the bias reaches 0.2% of O
// (measured on an H100, notes/09_serving.md, "A cache of half a million keys"), past the rule's
// bound, while L (summed on the CUDA cores) stays exact. This test is about addresses.
TEST_P(PagedFwdKernels, LongPagePoolPast2to31Elements) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).back();
  const int64_t hkv = 8, seqs = 32, keys = (int64_t(1) << 31) / (hkv * d) / seqs + 1024;
  const PagedShape s =
      paged(std::vector<int64_t>(seqs, keys), 8, hkv, d, 1, page_sizes().back(), true);
  const int64_t pool = seqs * keys * hkv * d;  // elements of K (and of V) at least
  ASSERT_GT(pool, int64_t(1) << 31);
  if (fa::gpu_info().global_mem < size_t(3) * pool * fa::dtype_size(t))
    GTEST_SKIP() << "not enough GPU memory for a page pool past 2^31 elements";
  SCOPED_TRACE(s.str());
  FA_EXPECT_PASS(fa::run_paged_fwd(kernel(), s, t, check_only(81, 2)));
}

// A cache of 131072 keys beside a short one, in pages of the kernel's largest size: one query row
// (decoding) and 17, grouped (4 query heads a K/V head), causal and not, at D 128 (or the kernel's
// largest head dim below it). The accuracy test of a long cache: a single-pass kernel adds 8192
// P V products of 16 keys into O (the truncation above grows with their number), a split kernel
// merges its splits' partial sums. The rule's bound is the naive same-precision error's.
TEST_P(PagedFwdKernels, Cache131072Keys) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  const fa::PagedFwdKernel& k = kernel();
  const DType t = k.dtypes.back();
  int d = k.head_dims.front();
  for (int x : k.head_dims)
    if (x <= 128) d = x;
  for (int64_t nq : {int64_t(1), int64_t(fa::kDecodeSeqQ + 1)})
    for (bool causal : {false, true}) {
      const PagedShape s = paged({131072, 1000}, 16, kv(4, 16), d, nq, page_sizes().back(), causal);
      SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
      FA_EXPECT_PASS(fa::run_paged_fwd(k, s, t, check_only(uint64_t(nq + causal), 2)));
    }
}

// A chunked prefill: 200 new queries per sequence against its cache (the first of them see no
// key in the shorter caches when causal). A decoding kernel is correct for every seq_q but not
// written for long chunks: it gets 17 queries, one past kDecodeSeqQ.
TEST_P(PagedFwdKernels, ChunkOfQueries) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  const int64_t chunk = kernel().decoding ? fa::kDecodeSeqQ + 1 : 200;
  for (auto [t, d] : variants(kernel()))
    for (int64_t page : page_sizes())
      for (bool causal : {false, true}) {
        const PagedShape s = paged(kCache, 8, kv(2, 8), d, chunk, page, causal);
        SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
        // Four of the eight heads, two per K/V head: the reference of 200 rows x 5243 keys x 8
        // heads would be most of the test's time.
        FA_EXPECT_PASS(fa::run_paged_fwd(kernel(), s, t, check_only(page + causal, 4)));
      }
}

// Head dims between the instances (rounds_head_dim): a kernel that rounds runs each over shuffled
// pages of every size it takes, decoding (one query row, grouped and not) and a chunk of queries
// past the decoding rows, causal and not; head dims off the step of 8 are refused with the reason,
// unless the kernel rounds every head dim (head_dim_step 1: 09/paged_v3_prefill_any_head_dim,
// 09/paged_v4_decode_any_head_dim),
// which runs D 59, 111 and 201 as the others. A kernel that does not round refuses D 80.
TEST_P(PagedFwdKernels, RoundedHeadDims) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  const fa::PagedFwdKernel& k = kernel();
  if (!k.rounds_head_dim) {
    const fa::RunResult r = fa::run_paged_fwd(
        k, paged({100}, 4, 4, 80, 1, page_sizes().front(), false), k.dtypes.front(), check_only(5));
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    return;
  }
  const std::vector<int> dims = rounded_dims(k);
  ASSERT_FALSE(dims.empty()) << k.name << " rounds head dims but takes none of the test's";
  const int64_t chunk = k.decoding ? fa::kDecodeSeqQ + 1 : 200;
  for (DType t : k.dtypes)
    for (int d : dims)
      for (int64_t page : page_sizes())
        for (bool causal : {false, true}) {
          const std::vector<PagedShape> shapes = {
              paged(kCache, 8, kv(2, 8), d, 1, page, causal),
              paged(kCache, 8, 8, d, 1, page, causal),
              paged(kCache, 8, kv(2, 8), d, chunk, page, causal)};
          for (const PagedShape& s : shapes) {
            SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
            FA_EXPECT_PASS(fa::run_paged_fwd(k, s, t, check_only(uint64_t(d + page + causal), 4)));
          }
        }
  if (fa::head_dim_step(k) == 1) {  // takes kOffTheStep (above); refuses past its largest instance
    // An odd number of query rows over a few splits at an odd d (a decoding kernel's partials of
    // O then take an odd number of floats; the (m, l) pairs after them stay 8-byte aligned).
    for (const PagedShape& s : {paged({600}, 1, 1, 59, 1, page_sizes().front(), false),
                                paged({1000, 3, 200}, 3, 3, 59, 1, page_sizes().back(), false)}) {
      SCOPED_TRACE(s.str());
      FA_EXPECT_PASS(fa::run_paged_fwd(k, s, k.dtypes.back(), check_only(59 + s.heads, 2)));
    }
    const fa::RunResult r = fa::run_paged_fwd(
        k, paged({33, 5}, 4, kv(2, 4), k.head_dims.back() + 1, 1, page_sizes().front(), true),
        k.dtypes.front(), check_only(3));
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    return;
  }
  for (int d : {59, 111}) {
    const fa::RunResult r =
        fa::run_paged_fwd(k, paged({33, 5}, 4, kv(2, 4), d, 1, page_sizes().front(), true),
                          k.dtypes.front(), check_only(3));
    EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
    EXPECT_NE(r.message.find("multiples of 8"), std::string::npos) << r.message;
  }
}

// A kernel that does not declare grouped K/V heads refuses them, naming why, and never runs.
TEST_P(PagedFwdKernels, GroupedHeadsRefusedUnlessDeclared) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  if (kernel().gqa) GTEST_SKIP() << kernel().name << " takes grouped K/V heads (tested above)";
  auto [t, d] = variants(kernel()).front();
  const fa::RunResult r = fa::run_paged_fwd(
      kernel(), paged({100, 7}, 4, 2, d, 3, page_sizes().front(), true), t, check_only(73));
  EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
  EXPECT_NE(r.message.find("grouped"), std::string::npos) << r.message;
}

TEST_P(PagedFwdKernels, UnlistedPageSizeIsRefused) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  auto [t, d] = variants(kernel()).front();
  int64_t odd = 48;
  while (std::find(kernel().page_sizes.begin(), kernel().page_sizes.end(), odd) !=
         kernel().page_sizes.end())
    ++odd;
  fa::RunResult r =
      fa::run_paged_fwd(kernel(), paged({100}, 4, 4, d, 1, odd, false), t, check_only(71));
  EXPECT_EQ(r.status, fa::Status::Unsupported) << r.report();
}

INSTANTIATE_TEST_SUITE_P(Registered, PagedFwdKernels,
                         ::testing::ValuesIn(chapter09<fa::PagedFwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PagedFwdKernels);

// ---------------------------------------------------------------------------------------------
class PagedAppendKernels : public VariantTest {
 protected:
  const fa::PagedAppendKernel& kernel() {
    return *fa::find_entry<fa::PagedAppendKernel>(GetParam());
  }
};

// New keys that fill a page exactly (64), cross a page boundary (7 new keys ending at 17 with
// pages of 16), start a page, or are the whole sequence (7 of 7).
TEST_P(PagedAppendKernels, EveryElementExact) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (DType t : kernel().dtypes)
    for (int64_t d : {64, 128})
      for (int64_t page : {16, 64})
        for (int64_t hkv : {2, 8})
          for (int64_t nq : {1, 7}) {
            const PagedShape s = paged({7, 17, 1000, 64, 129, 4097}, 8, hkv, d, nq, page, false);
            SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
            FA_EXPECT_PASS(fa::run_paged_append(kernel(), s, t, check_only(page + nq + hkv)));
          }
}

// Every head dim up to 256: rows of 64 to 512 bytes copy by a group of threads per row, rows of
// other whole 16-byte chunks (D 40, 80, 96, ...) and rows of none (D 59, 111) by units of k_new.
TEST_P(PagedAppendKernels, EveryHeadDim) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (DType t : kernel().dtypes)
    for (int64_t d : {32, 40, 59, 80, 96, 111, 160, 192, 224, 256}) {
      const PagedShape s = paged({7, 17, 1000, 129}, 8, 2, d, 7, 16, false);
      SCOPED_TRACE(s.str() + " " + fa::dtype_name(t));
      FA_EXPECT_PASS(fa::run_paged_append(kernel(), s, t, check_only(uint64_t(d))));
    }
}

INSTANTIATE_TEST_SUITE_P(Registered, PagedAppendKernels,
                         ::testing::ValuesIn(chapter09<fa::PagedAppendKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PagedAppendKernels);

// ---------------------------------------------------------------------------------------------
// The fixed-length kernels on a varlen batch (timed only): both runners run and report a rate,
// and a windowed batch is refused (no fixed-length kernel takes a window).
TEST(VarlenWithFixedLengthKernels, PaddedAndPerSequenceRun) {
  FA_SKIP_WITHOUT_GPU(80);
  const fa::AttentionFwdKernel* k = fa::best_forward_kernel(DType::BF16, 128);
  if (k == nullptr) GTEST_SKIP() << "no chapter 05 forward takes bf16 D=128 on this GPU";
  fa::RunOptions o;
  o.check = false;
  o.timing.warmup = 1;
  o.timing.repeats = 3;
  const VarlenShape s = varlen(kMixed, kMixed, 4, 128, true);
  for (fa::RunResult r : {fa::time_varlen_padded(*k, s, DType::BF16, o),
                          fa::time_varlen_per_sequence(*k, s, DType::BF16, o)}) {
    EXPECT_EQ(r.status, fa::Status::Pass) << r.report();
    EXPECT_GT(r.ms, 0) << r.report();
    EXPECT_GT(r.tflops, 0) << r.report();
  }
  const VarlenShape w = varlen(kMixed, kMixed, 4, 128, true, 64);
  EXPECT_EQ(fa::time_varlen_padded(*k, w, DType::BF16, o).status, fa::Status::Unsupported);
  EXPECT_EQ(fa::time_varlen_per_sequence(*k, w, DType::BF16, o).status, fa::Status::Unsupported);
}

// ---------------------------------------------------------------------------------------------
// SanitizeSmallServing.*: chapter 09's kernels once per tiny ragged shape, small enough for
// compute-sanitizer (the "sanitize" ctest tests run fa_gpu_tests --gtest_filter=SanitizeSmall*,
// tests/CMakeLists.txt). FA_SANITIZE_ONLY=09/ limits them (sanitize_selected, test_util.h).

// A failed check or an exception fails the test; the remaining kernels still run. Each case is
// named in the log, so a sanitizer run shows which kernels and shapes it covered.
template <class F>
void sanitize_case(const std::string& what, F body) {
  std::printf("  case %s\n", what.c_str());
  try {
    fa::RunResult r = body();
    if (r.status == fa::Status::Fail) ADD_FAILURE() << what << "\n" << r.report();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw: " << e.what();
  }
}

// Every chapter 09 kernel of kind K once per tiny ragged packed batch: each head dim it lists
// (and rounds, sanitized_dims), causal, with a window where it takes one, and with grouped K/V
// heads (MQA) where it takes them.
template <class K, class Run>
void sanitize_varlen(Run run) {
  for (const K* k : fa::entries_with_prefix<K>("09/")) {
    if (!sanitize_selected(k->name) || !fa::gpu_skip_reason(k->min_sm).empty() ||
        exercise_not_written(k->name))
      continue;
    for (DType t : k->dtypes)
      for (int d : sanitized_dims(*k))
        for (int64_t left : {int64_t(-1), k->window ? int64_t(5) : int64_t(-1)}) {
          std::vector<VarlenShape> shapes = {
              varlen({17, 0, 33}, {33, 5, 17}, 2, d, true, left, -1)};
          if (k->gqa) shapes.push_back(varlen({17, 0, 33}, {33, 5, 17}, 4, d, true, left, -1, 1));
          for (const VarlenShape& s : shapes)
            sanitize_case(k->name + " " + s.str(), [&] { return run(*k, s, t); });
        }
  }
}

TEST(SanitizeSmallServing, VarlenKernels) {
  FA_SKIP_WITHOUT_GPU(80);
  sanitize_varlen<fa::VarlenFwdKernel>(
      [](const fa::VarlenFwdKernel& k, const VarlenShape& s, DType t) {
        return fa::run_varlen_fwd(k, s, t, check_only(1));
      });
  sanitize_varlen<fa::VarlenBwdKernel>(
      [](const fa::VarlenBwdKernel& k, const VarlenShape& s, DType t) {
        return fa::run_varlen_bwd(k, s, t, check_only(2));
      });
}

TEST(SanitizeSmallServing, PagedKernels) {
  FA_SKIP_WITHOUT_GPU(70);
  for (const fa::PagedFwdKernel* k : fa::entries_with_prefix<fa::PagedFwdKernel>("09/")) {
    if (!sanitize_selected(k->name) || !fa::gpu_skip_reason(k->min_sm).empty() ||
        exercise_not_written(k->name))
      continue;
    for (DType t : k->dtypes)
      for (int d : sanitized_dims(*k)) {
        const PagedShape s =
            paged({17, 0, 33}, 4, k->gqa ? 2 : 4, d, 2, k->page_sizes.front(), true);
        sanitize_case(k->name + " " + s.str(),
                      [&] { return fa::run_paged_fwd(*k, s, t, check_only(3)); });
      }
  }
  for (const fa::PagedAppendKernel* k : fa::entries_with_prefix<fa::PagedAppendKernel>("09/")) {
    if (!sanitize_selected(k->name) || !fa::gpu_skip_reason(k->min_sm).empty() ||
        exercise_not_written(k->name))
      continue;
    for (DType t : k->dtypes)
      for (int64_t d : {64, 80, 59}) {  // by rows, by 16-byte chunks, by elements
        const PagedShape s = paged({17, 3, 33}, 4, 2, d, 3, 16, false);
        sanitize_case(k->name + " " + s.str(),
                      [&] { return fa::run_paged_append(*k, s, t, check_only(4)); });
      }
  }
}

}  // namespace
