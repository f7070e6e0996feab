// Chapter 09's arithmetic on the CPU: the sliding window (visible_key_range, the pair counts, the
// float64 reference), the varlen and paged shapes, the tile ranges of ch09_band.h against brute
// force, and the serving runners' refusals that need no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "ch09_band.h"
#include "check.h"
#include "gpu.h"
#include "harness.h"
#include "random.h"
#include "reference.h"
#include "shapes.h"

namespace {

// The window written as a predicate, from shapes.h's words: with d(i) = i + seq_k - seq_q,
// query i sees key j when j is a key, d(i) - left <= j (left >= 0), and j <= d(i) (causal) or
// j <= d(i) + right (right >= 0).
bool sees(int64_t i, int64_t j, int64_t seq_q, int64_t seq_k, bool causal, int64_t left,
          int64_t right) {
  const int64_t d = i + seq_k - seq_q;
  if (j < 0 || j >= seq_k) return false;
  if (left >= 0 && j < d - left) return false;
  if (causal) return j <= d;
  return right < 0 || j <= d + right;
}

const int64_t kLengths[] = {0, 1, 2, 5, 17, 40};
const int64_t kLefts[] = {-1, 0, 1, 3, 16};
const int64_t kRights[] = {-1, 0, 2, 16};

TEST(ServingWindow, VisibleKeyRangeIsTheBruteForceInterval) {
  for (int64_t sq : kLengths)
    for (int64_t sk : kLengths)
      for (bool causal : {false, true})
        for (int64_t left : kLefts)
          for (int64_t right : kRights)
            for (int64_t i = 0; i < sq; ++i) {
              int64_t first = -1, last = -1, count = 0;
              for (int64_t j = 0; j < sk; ++j)
                if (sees(i, j, sq, sk, causal, left, right)) {
                  if (first < 0) first = j;
                  last = j;
                  ++count;
                }
              ASSERT_EQ(count, count > 0 ? last - first + 1 : 0) << "not an interval";
              const fa::KeyRange r = fa::visible_key_range(i, sq, sk, causal, left, right);
              SCOPED_TRACE(::testing::Message()
                           << "i " << i << " seq_q " << sq << " seq_k " << sk << " causal "
                           << causal << " window (" << left << ", " << right << ")");
              EXPECT_EQ(r.count(), count);
              if (count > 0) {
                EXPECT_EQ(r.first, first);
                EXPECT_EQ(r.last, last);
              }
            }
}

TEST(ServingWindow, VisiblePairsMatchBruteForce) {
  for (int64_t sq : kLengths)
    for (int64_t sk : kLengths)
      for (bool causal : {false, true})
        for (int64_t left : kLefts)
          for (int64_t right : kRights) {
            fa::AttentionShape s{2, 3, sq, sk, 64, causal, 0.0f, 0, left, right};
            int64_t pairs = 0;
            for (int64_t i = 0; i < sq; ++i)
              for (int64_t j = 0; j < sk; ++j) pairs += sees(i, j, sq, sk, causal, left, right);
            EXPECT_EQ(s.visible_pairs(), pairs) << s.str();
            EXPECT_DOUBLE_EQ(s.fwd_flops(), 4.0 * 6 * 64 * pairs) << s.str();
          }
}

TEST(ServingWindow, HasWindowOnlyWhenNarrowerThanTheMask) {
  fa::AttentionShape s{1, 1, 10, 10, 64, true};
  EXPECT_FALSE(s.has_window());
  s.window_right = 5;  // not read under causal masking
  EXPECT_FALSE(s.has_window());
  s.window_left = 3;
  EXPECT_TRUE(s.has_window());
  s = fa::AttentionShape{1, 1, 10, 10, 64, false};
  s.window_right = 0;
  EXPECT_TRUE(s.has_window());
}

// The float64 reference with a window against a direct double loop over the band.
TEST(ServingWindow, ReferenceIsTheSoftmaxOverTheBand) {
  const int64_t d = 16;
  struct Case {
    int64_t sq, sk;
    bool causal;
    int64_t left, right;
  };
  for (const Case& c :
       {Case{17, 17, true, 4, -1}, Case{9, 30, false, 3, 5}, Case{30, 9, true, 2, -1},
        Case{20, 20, false, 0, 0}, Case{12, 40, false, -1, 0}}) {
    std::vector<float> q = fa::random_normal(c.sq * d, 1), k = fa::random_normal(c.sk * d, 2),
                       v = fa::random_normal(c.sk * d, 3);
    fa::HeadView h;
    h.q = q.data();
    h.k = k.data();
    h.v = v.data();
    h.seq_q = c.sq;
    h.seq_k = c.sk;
    h.d = d;
    h.causal = c.causal;
    h.scale = 0.25;
    h.window_left = c.left;
    h.window_right = c.right;
    std::vector<double> O(c.sq * d), L(c.sq);
    fa::attention_forward_ref_head(h, {}, O.data(), L.data());
    for (int64_t i = 0; i < c.sq; ++i) {
      std::vector<double> s(c.sk, -std::numeric_limits<double>::infinity());
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < c.sk; ++j)
        if (sees(i, j, c.sq, c.sk, c.causal, c.left, c.right)) {
          double dot = 0;
          for (int64_t x = 0; x < d; ++x) dot += double(q[i * d + x]) * k[j * d + x];
          s[j] = 0.25 * dot;
          m = std::max(m, s[j]);
        }
      if (m == -std::numeric_limits<double>::infinity()) {  // sees no key
        EXPECT_EQ(L[i], m) << i;
        for (int64_t x = 0; x < d; ++x) EXPECT_EQ(O[i * d + x], 0.0);
        continue;
      }
      double l = 0;
      for (int64_t j = 0; j < c.sk; ++j) l += std::exp(s[j] - m);
      EXPECT_NEAR(L[i], m + std::log(l), 1e-12) << i;
      for (int64_t x = 0; x < d; ++x) {
        double o = 0;
        for (int64_t j = 0; j < c.sk; ++j) o += std::exp(s[j] - m) / l * v[j * d + x];
        EXPECT_NEAR(O[i * d + x], o, 1e-12) << i << " " << x;
      }
    }
  }
}

// ---- Varlen and paged shapes ---------------------------------------------------------------------
TEST(ServingVarlenShape, TotalsOffsetsAndPadding) {
  fa::VarlenShape s;
  s.seqlens_q = {1, 17, 0, 127, 129};
  s.seqlens_k = {1000, 17, 5, 0, 300};
  s.heads = 8;
  s.heads_kv = 2;
  s.head_dim = 128;
  s.causal = true;
  EXPECT_EQ(s.batch(), 5);
  EXPECT_EQ(s.total_q(), 274);
  EXPECT_EQ(s.total_k(), 1322);
  EXPECT_EQ(s.max_seq_q(), 129);
  EXPECT_EQ(s.max_seq_k(), 1000);
  EXPECT_EQ(s.cu_seqlens_q(), (std::vector<int32_t>{0, 1, 18, 18, 145, 274}));
  EXPECT_EQ(s.cu_seqlens_k(), (std::vector<int32_t>{0, 1000, 1017, 1022, 1022, 1322}));
  EXPECT_EQ(s.q_numel(), 8 * 274 * 128);
  EXPECT_EQ(s.k_numel(), 2 * 1322 * 128);
  EXPECT_EQ(s.lse_numel(), 8 * 274);
  EXPECT_TRUE(s.is_gqa());
  const fa::AttentionShape p = s.padded();
  EXPECT_EQ(p.batch, 5);
  EXPECT_EQ(p.seq_q, 129);
  EXPECT_EQ(p.seq_k, 1000);
  EXPECT_EQ(p.heads, 8);
  EXPECT_EQ(p.kv_heads(), 2);
  EXPECT_TRUE(p.causal);
  int64_t pairs = 0;
  for (int64_t b = 0; b < s.batch(); ++b) {
    const fa::AttentionShape one = s.sequence(b);
    EXPECT_EQ(one.batch, 1);
    EXPECT_EQ(one.seq_q, s.seqlens_q[b]);
    EXPECT_EQ(one.seq_k, s.seqlens_k[b]);
    for (int64_t i = 0; i < one.seq_q; ++i)
      for (int64_t j = 0; j < one.seq_k; ++j)
        pairs += sees(i, j, one.seq_q, one.seq_k, true, -1, -1);
  }
  EXPECT_EQ(s.visible_pairs(), pairs);
  EXPECT_DOUBLE_EQ(s.fwd_flops(), 4.0 * 8 * 128 * pairs);
  EXPECT_DOUBLE_EQ(s.bwd_flops(), 2.5 * s.fwd_flops());
}

TEST(ServingVarlenShape, WindowIsEverySequences) {
  fa::VarlenShape s;
  s.seqlens_q = {0, 40, 17};
  s.seqlens_k = {3, 40, 30};
  s.window_left = 3;
  s.window_right = 2;
  EXPECT_TRUE(s.has_window());
  int64_t pairs = 0;
  for (int64_t b = 0; b < s.batch(); ++b) {
    EXPECT_EQ(s.sequence(b).window_left, 3);
    EXPECT_EQ(s.sequence(b).window_right, 2);
    for (int64_t i = 0; i < s.seqlens_q[b]; ++i)
      for (int64_t j = 0; j < s.seqlens_k[b]; ++j)
        pairs += sees(i, j, s.seqlens_q[b], s.seqlens_k[b], false, 3, 2);
  }
  EXPECT_EQ(s.visible_pairs(), pairs);
}

TEST(ServingPagedShape, MinBytesCountsEachSequencesKeysOnce) {
  fa::PagedShape s;
  s.seqlens_k = {1, 17, 1000, 0, 4097};
  s.heads = 8;
  s.heads_kv = 2;
  s.head_dim = 128;
  s.seq_q = 4;
  s.page_size = 64;
  const double keys = 1 + 17 + 1000 + 0 + 4097;
  for (int64_t es : {2, 4}) {
    const double q = 5.0 * 8 * 4 * 128;  // Q read and O written: 2 x this
    EXPECT_DOUBLE_EQ(s.min_bytes(es), es * (2 * q + 2 * keys * 2 * 128) + 4.0 * 5 * 8 * 4);
  }
  EXPECT_EQ(s.max_seq_k(), 4097);
  EXPECT_EQ(s.q_numel(), 5 * 8 * 4 * 128);
  EXPECT_EQ(s.lse_numel(), 5 * 8 * 4);
  int64_t pairs = 0;
  for (int64_t b = 0; b < s.batch(); ++b) {
    EXPECT_EQ(s.sequence(b).seq_k, s.seqlens_k[b]);
    EXPECT_EQ(s.sequence(b).seq_q, 4);
    pairs += 4 * s.seqlens_k[b];  // not causal: every query sees every key
  }
  EXPECT_EQ(s.visible_pairs(), pairs);
  s.num_pages = 100;
  EXPECT_EQ(s.page_numel(), 100 * 2 * 64 * 128);
}

// ---- ch09_band.h against brute force ---------------------------------------------------------------
struct BandCase {
  int64_t sq, sk;
  bool causal;
  int64_t left, right;
};

std::vector<BandCase> band_cases() {
  std::vector<BandCase> out;
  for (int64_t sq : {1, 5, 17, 40, 70, 130})
    for (int64_t sk : {1, 5, 17, 40, 70, 130})
      for (bool causal : {false, true})
        for (int64_t left : {-1, 0, 3, 16, 63, 100})
          for (int64_t right : {-1, 0, 5, 64}) {
            if (causal && right != -1) continue;  // right is not read under causal masking
            out.push_back({sq, sk, causal, left, right});
          }
  return out;
}

TEST(ServingBandTiles, KeyTilesAreExactlyTheTilesWithAVisiblePair) {
  for (const BandCase& c : band_cases()) {
    const fa::ch09::Band band = fa::ch09::Band::make(c.sq, c.sk, c.causal, c.left, c.right);
    for (int64_t Br : {16, 64})
      for (int64_t Bc : {16, 64})
        for (int64_t i0 = 0; i0 < c.sq; i0 += Br) {
          int64_t begin = -1, end = -1;  // the tiles holding a visible pair of rows [i0, i0 + Br)
          for (int64_t jt = 0; jt * Bc < c.sk; ++jt) {
            bool any = false;
            for (int64_t i = i0; i < std::min(i0 + Br, c.sq); ++i)
              for (int64_t j = jt * Bc; j < std::min((jt + 1) * Bc, c.sk); ++j)
                any = any || sees(i, j, c.sq, c.sk, c.causal, c.left, c.right);
            if (any) {
              ASSERT_TRUE(begin < 0 || end == jt) << "the visible tiles are not contiguous";
              if (begin < 0) begin = jt;
              end = jt + 1;
            }
          }
          const fa::ch09::TileRange r = fa::ch09::key_tiles(band, i0, i0 + Br, Bc);
          SCOPED_TRACE(::testing::Message()
                       << "seq_q " << c.sq << " seq_k " << c.sk << " causal " << c.causal
                       << " window (" << c.left << ", " << c.right << ") Br " << Br << " Bc " << Bc
                       << " rows from " << i0);
          if (begin < 0) {
            EXPECT_LE(r.end, r.begin) << "no visible pair, yet tiles " << r.begin << ".." << r.end;
          } else {
            EXPECT_EQ(r.begin, begin);
            EXPECT_EQ(r.end, end);
          }
        }
  }
}

TEST(ServingBandTiles, QueryTilesAreExactlyTheTilesWithAVisiblePair) {
  for (const BandCase& c : band_cases()) {
    const fa::ch09::Band band = fa::ch09::Band::make(c.sq, c.sk, c.causal, c.left, c.right);
    for (int64_t Br : {16, 64})
      for (int64_t Bc : {16, 64})
        for (int64_t j0 = 0; j0 < c.sk; j0 += Bc) {
          int64_t begin = -1, end = -1;
          for (int64_t it = 0; it * Br < c.sq; ++it) {
            bool any = false;
            for (int64_t j = j0; j < std::min(j0 + Bc, c.sk); ++j)
              for (int64_t i = it * Br; i < std::min((it + 1) * Br, c.sq); ++i)
                any = any || sees(i, j, c.sq, c.sk, c.causal, c.left, c.right);
            if (any) {
              ASSERT_TRUE(begin < 0 || end == it) << "the visible tiles are not contiguous";
              if (begin < 0) begin = it;
              end = it + 1;
            }
          }
          const fa::ch09::TileRange r = fa::ch09::query_tiles(band, j0, j0 + Bc, Br);
          SCOPED_TRACE(::testing::Message()
                       << "seq_q " << c.sq << " seq_k " << c.sk << " causal " << c.causal
                       << " window (" << c.left << ", " << c.right << ") Br " << Br << " Bc " << Bc
                       << " keys from " << j0);
          if (begin < 0) {
            EXPECT_LE(r.end, r.begin) << "no visible pair, yet tiles " << r.begin << ".." << r.end;
          } else {
            EXPECT_EQ(r.begin, begin);
            EXPECT_EQ(r.end, end);
          }
        }
  }
}

// A tile needs a mask exactly when one of its pairs (rows [i0, i0 + Br) x keys [j0, j0 + Bc),
// the parts past the sequence included) is hidden.
TEST(ServingBandTiles, TileNeedsMaskIsExact) {
  for (const BandCase& c : band_cases()) {
    const fa::ch09::Band band = fa::ch09::Band::make(c.sq, c.sk, c.causal, c.left, c.right);
    for (int64_t Br : {16, 64})
      for (int64_t Bc : {16, 64})
        for (int64_t i0 = 0; i0 < c.sq; i0 += Br)
          for (int64_t j0 = 0; j0 < c.sk; j0 += Bc) {
            bool hidden = false;
            for (int64_t i = i0; i < i0 + Br && !hidden; ++i)
              for (int64_t j = j0; j < j0 + Bc && !hidden; ++j)
                hidden = i >= c.sq || !sees(i, j, c.sq, c.sk, c.causal, c.left, c.right);
            EXPECT_EQ(fa::ch09::tile_needs_mask(band, i0, i0 + Br, j0, j0 + Bc), hidden)
                << "seq_q " << c.sq << " seq_k " << c.sk << " causal " << c.causal << " window ("
                << c.left << ", " << c.right << ") tile rows " << i0 << "+" << Br << " keys " << j0
                << "+" << Bc;
          }
  }
}

// ---- The runners without a GPU ------------------------------------------------------------------
// Kernels that must never run here: without a GPU the runner stops at NoGpu, and with one at the
// refusal (they list no dtype).
void never_varlen_fwd(const fa::VarlenFwdArgs&, cudaStream_t) {
  std::abort();
}
void never_varlen_bwd(const fa::VarlenBwdArgs&, cudaStream_t) {
  std::abort();
}
void never_paged_fwd(const fa::PagedFwdArgs&, cudaStream_t) {
  std::abort();
}
void never_append(const fa::PagedAppendArgs&, cudaStream_t) {
  std::abort();
}
void never_fixed(const fa::AttentionFwdArgs&, cudaStream_t) {
  std::abort();
}

fa::Status expected_status() {
  return fa::have_gpu() ? fa::Status::Unsupported : fa::Status::NoGpu;
}

fa::VarlenShape small_varlen() {
  fa::VarlenShape s;
  s.seqlens_q = {3, 0, 17};
  s.seqlens_k = {5, 2, 17};
  s.heads = 2;
  return s;
}

fa::PagedShape small_paged() {
  fa::PagedShape s;
  s.seqlens_k = {3, 70, 17};
  s.heads = 4;
  s.heads_kv = 2;
  s.seq_q = 2;
  s.page_size = 16;
  return s;
}

TEST(ServingRunners, NoGpuOrRefusedWithoutRunningTheKernel) {
  fa::VarlenFwdKernel vf{"test/never", never_varlen_fwd, "", {}, {64}, 80};
  fa::VarlenBwdKernel vb{"test/never", never_varlen_bwd, "", {}, {64}, 80};
  fa::PagedFwdKernel pf{"test/never", never_paged_fwd, "", {}, {128}, {16}, 80};
  fa::PagedAppendKernel pa{"test/never", never_append, "", {}, 80};
  fa::AttentionFwdKernel af{"test/never", never_fixed, "", {}, {64}, 80};
  const fa::DType t = fa::DType::BF16;
  for (fa::RunResult r :
       {fa::run_varlen_fwd(vf, small_varlen(), t), fa::run_varlen_bwd(vb, small_varlen(), t),
        fa::time_varlen_padded(af, small_varlen(), t),
        fa::time_varlen_per_sequence(af, small_varlen(), t),
        fa::run_paged_fwd(pf, small_paged(), t), fa::run_paged_append(pa, small_paged(), t)}) {
    EXPECT_EQ(r.status, expected_status()) << r.report();
    EXPECT_FALSE(r.message.empty()) << r.report();
  }
}

TEST(ServingRunners, MalformedShapesAreUsageErrors) {
  fa::VarlenFwdKernel vf{"test/never", never_varlen_fwd, "", {}, {64}, 80};
  fa::PagedAppendKernel pa{"test/never", never_append, "", {}, 80};
  fa::VarlenShape s = small_varlen();
  s.seqlens_k.pop_back();  // one length short
  EXPECT_THROW(fa::run_varlen_fwd(vf, s, fa::DType::BF16), fa::UsageError);
  s = small_varlen();
  s.seqlens_q[0] = -1;
  EXPECT_THROW(fa::run_varlen_fwd(vf, s, fa::DType::BF16), fa::UsageError);
  fa::PagedShape p = small_paged();
  p.seq_q = 4;  // sequence 0 holds 3 keys: fewer than the 4 new ones
  EXPECT_THROW(fa::run_paged_append(pa, p, fa::DType::BF16), fa::UsageError);
  p = small_paged();
  p.max_pages = 1;  // sequence 1 needs 5 pages of 16
  EXPECT_THROW(fa::run_paged_append(pa, p, fa::DType::BF16), fa::UsageError);
}

}  // namespace
