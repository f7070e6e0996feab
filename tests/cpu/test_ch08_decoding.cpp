// Chapter 08 on the CPU: grouped-query attention in the float64 reference (against a brute-force
// loop and against repeated K/V heads), the split-KV model (splitting a row's keys and merging the
// (m, l, o) partials equals the whole row), and the launch plan. The merge is a CPU exercise: the
// split-KV model's tests are in a CpuExercise* suite (label exercise, notes/coursework.md).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ch08_split_kv.h"
#include "check.h"
#include "cpu_inputs.h"
#include "random.h"
#include "reference.h"

namespace {

using fa::AttentionShape;

using fa_test::draw;
using fa_test::Inputs;

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol) << what << " at " << i;
  }
}

TEST(GroupedQueryShapes, HeadsKvCountsAndMapping) {
  AttentionShape mha{2, 8, 3, 5, 16, false, 0.0f};
  EXPECT_FALSE(mha.is_gqa());
  EXPECT_EQ(mha.kv_heads(), 8);
  EXPECT_EQ(mha.k_numel(), 2 * 8 * 5 * 16);
  AttentionShape gqa = mha;
  gqa.heads_kv = 2;
  EXPECT_TRUE(gqa.is_gqa());
  EXPECT_TRUE(gqa.valid_heads());
  EXPECT_EQ(gqa.group(), 4);
  EXPECT_EQ(gqa.k_numel(), 2 * 2 * 5 * 16);
  EXPECT_EQ(gqa.q_numel(), mha.q_numel());
  // Query head h of sequence b reads K/V head b * heads_kv + h / group.
  EXPECT_EQ(gqa.kv_index(0), 0);
  EXPECT_EQ(gqa.kv_index(3), 0);
  EXPECT_EQ(gqa.kv_index(4), 1);
  EXPECT_EQ(gqa.kv_index(8 + 7), 3);
  EXPECT_NE(gqa.str().find("Hkv2"), std::string::npos);
  gqa.heads_kv = 3;
  EXPECT_FALSE(gqa.valid_heads());
  // No heads: refused (a kernel checks valid_heads before it computes the group), not 0 % 0.
  AttentionShape none = mha;
  none.heads = 0;
  EXPECT_FALSE(none.valid_heads());
  none.heads_kv = -1;
  EXPECT_FALSE(none.valid_heads());
}

// O and L of every row by the definition, with the K/V head of each query head written out.
void brute_force(const AttentionShape& s, const Inputs& in, std::vector<double>& O,
                 std::vector<double>& L) {
  const int64_t D = s.head_dim, group = s.heads / s.kv_heads();
  O.assign(s.q_numel(), 0.0);
  L.assign(s.lse_numel(), -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kvh = h / group;
      const float* K = in.k.data() + (b * s.kv_heads() + kvh) * s.seq_k * D;
      const float* V = in.v.data() + (b * s.kv_heads() + kvh) * s.seq_k * D;
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const float* q = in.q.data() + ((b * s.heads + h) * s.seq_q + i) * D;
        const int64_t row = (b * s.heads + h) * s.seq_q + i;
        std::vector<double> sc;
        for (int64_t j = 0; j < s.seq_k; ++j) {
          if (s.causal && j > i + s.seq_k - s.seq_q) break;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[d]) * K[j * D + d];
          sc.push_back(dot * s.softmax_scale());
        }
        if (sc.empty()) continue;
        double m = sc[0], l = 0;
        for (double x : sc) m = std::max(m, x);
        for (double x : sc) l += std::exp(x - m);
        for (size_t j = 0; j < sc.size(); ++j)
          for (int64_t d = 0; d < D; ++d) O[row * D + d] += std::exp(sc[j] - m) / l * V[j * D + d];
        L[row] = m + std::log(l);
      }
    }
}

TEST(GroupedQueryReference, MatchesBruteForce) {
  for (int64_t hkv : {int64_t(4), int64_t(2), int64_t(1)})
    for (bool causal : {false, true}) {
      AttentionShape s{2, 4, 7, 5, 8, causal, 0.0f, hkv};  // seq_q > seq_k: rows that see no key
      SCOPED_TRACE(s.str());
      Inputs in = draw(s, 40 + hkv);
      fa::AttentionFwdRef ref = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), s);
      std::vector<double> O, L;
      brute_force(s, in, O, L);
      expect_close(ref.O, O, 1e-12, "O");
      expect_close(ref.L, L, 1e-12, "L");
    }
}

// The inputs of grouped shape `gqa` with K and V repeated over each group: the same problem as
// multi-head attention (heads_kv = heads).
Inputs repeat_kv(const AttentionShape& gqa, const Inputs& in) {
  Inputs rep{in.q, {}, {}};
  const int64_t per_head = gqa.seq_k * gqa.head_dim;
  for (int64_t bh = 0; bh < gqa.bh(); ++bh) {
    const int64_t kv = gqa.kv_index(bh);
    rep.k.insert(rep.k.end(), in.k.begin() + kv * per_head, in.k.begin() + (kv + 1) * per_head);
    rep.v.insert(rep.v.end(), in.v.begin() + kv * per_head, in.v.begin() + (kv + 1) * per_head);
  }
  return rep;
}

TEST(GroupedQueryReference, EqualsRepeatedKvHeads) {
  AttentionShape gqa{2, 6, 3, 11, 8, true, 0.0f, 2};
  Inputs in = draw(gqa, 50);
  AttentionShape mha = gqa;
  mha.heads_kv = 0;
  const Inputs rep = repeat_kv(gqa, in);
  fa::AttentionFwdRef a = fa::attention_forward_ref(in.q.data(), in.k.data(), in.v.data(), gqa);
  fa::AttentionFwdRef b = fa::attention_forward_ref(rep.q.data(), rep.k.data(), rep.v.data(), mha);
  expect_close(a.O, b.O, 0.0, "O");
  expect_close(a.L, b.L, 0.0, "L");
}

// The grouped backward is the multi-head one on K and V repeated over the group, with dK and dV
// of each K/V head the sum over its group's query heads (what a grouped backward kernel computes).
TEST(GroupedQueryReference, BackwardSumsOverTheGroup) {
  AttentionShape gqa{2, 6, 5, 7, 8, true, 0.0f, 2};
  Inputs in = draw(gqa, 60);
  std::vector<float> dO = fa::random_normal(gqa.q_numel(), 61);
  AttentionShape mha = gqa;
  mha.heads_kv = 0;
  const Inputs rep = repeat_kv(gqa, in);
  const int64_t per_head = gqa.seq_k * gqa.head_dim;
  fa::AttentionBwdRef a =
      fa::attention_backward_ref(in.q.data(), in.k.data(), in.v.data(), dO.data(), gqa);
  fa::AttentionBwdRef b =
      fa::attention_backward_ref(rep.q.data(), rep.k.data(), rep.v.data(), dO.data(), mha);
  expect_close(a.dQ, b.dQ, 0.0, "dQ");
  expect_close(a.D, b.D, 0.0, "D");
  std::vector<double> dk(a.dK.size(), 0.0), dv(a.dV.size(), 0.0);
  for (int64_t bh = 0; bh < mha.bh(); ++bh)
    for (int64_t i = 0; i < per_head; ++i) {
      dk[gqa.kv_index(bh) * per_head + i] += b.dK[bh * per_head + i];
      dv[gqa.kv_index(bh) * per_head + i] += b.dV[bh * per_head + i];
    }
  expect_close(a.dK, dk, 1e-12, "dK");
  expect_close(a.dV, dv, 1e-12, "dV");
}

// ---- The split-KV model ------------------------------------------------------------------------
TEST(CpuExerciseCh08SplitKv, SplittingAndMergingEqualsTheWholeRow) {
  for (AttentionShape s : {AttentionShape{1, 4, 1, 1000, 16, false, 0.0f, 1},
                           AttentionShape{1, 8, 2, 1000, 16, true, 0.0f, 2},
                           AttentionShape{1, 2, 16, 17, 16, true, 0.0f, 0},
                           AttentionShape{1, 2, 20, 9, 16, true, 0.0f, 0}})
    for (int64_t split_len : {int64_t(1), int64_t(7), int64_t(64), int64_t(333), int64_t(5000)}) {
      SCOPED_TRACE(s.str() + " split_len " + std::to_string(split_len));
      Inputs in = draw(s, 70 + split_len);
      for (int64_t bh = 0; bh < s.bh(); ++bh) {
        fa::HeadView h = fa::head_view(s, in.q.data(), in.k.data(), in.v.data(), bh);
        std::vector<double> O(s.seq_q * s.head_dim), L(s.seq_q), rO(O.size()), rL(L.size());
        fa::ch08::split_kv_forward_head(h, split_len, O.data(), L.data());
        fa::attention_forward_ref_head(h, {}, rO.data(), rL.data());
        expect_close(O, rO, 1e-12, "O");
        expect_close(L, rL, 1e-12, "L");
      }
    }
}

// 08/v4_block_stream and v5: each warp's keys are every fourth 16-key slice of its split; the block folds its
// four warps, then the splits are merged. Ragged tails, splits shorter than a tile, warps that see
// no key, causal rows.
TEST(CpuExerciseCh08SplitKv, InterleavedWarpSlicesEqualTheWholeRow) {
  for (AttentionShape s : {AttentionShape{1, 4, 1, 1000, 16, false, 0.0f, 1},
                           AttentionShape{1, 8, 2, 1000, 16, true, 0.0f, 2},
                           AttentionShape{1, 2, 16, 17, 16, true, 0.0f, 0},
                           AttentionShape{1, 2, 3, 40, 16, false, 0.0f, 0}})
    for (int64_t split_len : {int64_t(64), int64_t(128), int64_t(320), int64_t(5000)}) {
      SCOPED_TRACE(s.str() + " split_len " + std::to_string(split_len));
      Inputs in = draw(s, 90 + split_len);
      for (int64_t bh = 0; bh < s.bh(); ++bh) {
        fa::HeadView h = fa::head_view(s, in.q.data(), in.k.data(), in.v.data(), bh);
        std::vector<double> O(s.seq_q * s.head_dim), L(s.seq_q), rO(O.size()), rL(L.size());
        fa::ch08::block_stream_forward_head(h, split_len, /*tile=*/64, /*warps=*/4, O.data(),
                                            L.data());
        fa::attention_forward_ref_head(h, {}, rO.data(), rL.data());
        expect_close(O, rO, 1e-12, "O");
        expect_close(L, rL, 1e-12, "L");
      }
    }
}

TEST(CpuExerciseCh08SplitKv, MergeIsAssociativeWithAnEmptyIdentity) {
  AttentionShape s{1, 1, 1, 90, 8, false, 0.0f};
  Inputs in = draw(s, 80);
  fa::HeadView h = fa::head_view(s, in.q.data(), in.k.data(), in.v.data(), 0);
  const fa::ch08::Partial a = fa::ch08::partial_over_keys(h, 0, 0, 30),
                          b = fa::ch08::partial_over_keys(h, 0, 30, 50),
                          c = fa::ch08::partial_over_keys(h, 0, 50, 90),
                          e = fa::ch08::partial_over_keys(h, 0, 90, 90);  // no key: identity
  EXPECT_EQ(e.m, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(e.l, 0.0);
  const fa::ch08::Partial left = merge(merge(a, b), c), right = merge(a, merge(b, c)),
                          whole = fa::ch08::partial_over_keys(h, 0, 0, 90),
                          with_e = merge(e, merge(left, e));
  for (const fa::ch08::Partial* p : {&right, &whole, &with_e}) {
    EXPECT_NEAR(p->m, left.m, 1e-12);
    EXPECT_NEAR(p->l, left.l, 1e-12 * left.l);
    for (size_t d = 0; d < left.o.size(); ++d)
      EXPECT_NEAR(p->o[d], left.o[d], 1e-12 * std::fabs(left.o[d]) + 1e-12);
  }
}

TEST(SplitKvPlan, FillsOneWaveWithWholeTilesAndNoEmptySplit) {
  const int64_t tile = 64, resident = 132 * 3;
  for (AttentionShape s : {AttentionShape{8, 32, 1, 32768, 128, false, 0.0f, 0},
                           AttentionShape{8, 32, 1, 32768, 128, false, 0.0f, 8},
                           AttentionShape{1, 16, 1, 131072, 128, false, 0.0f, 0},
                           AttentionShape{2, 8, 16, 32785, 128, true, 0.0f, 1},
                           AttentionShape{4, 16, 2, 17, 64, false, 0.0f, 4},
                           AttentionShape{1, 1, 1, 1, 64, false, 0.0f, 0},
                           AttentionShape{70000, 1, 17, 17, 64, true, 0.0f, 0}}) {
    SCOPED_TRACE(s.str());
    const fa::ch08::SplitPlan p = fa::ch08::plan_split_kv(s, tile, resident);
    const int64_t rows = s.group() * s.seq_q;
    EXPECT_GE(p.rows_per_block, std::min<int64_t>(rows, fa::ch08::kMaxRows));
    EXPECT_LE(p.rows_per_block, fa::ch08::kMaxRows);
    EXPECT_EQ(p.row_tiles * p.rows_per_block >= rows, true);
    EXPECT_EQ(p.base_blocks, s.batch * s.kv_heads() * p.row_tiles);
    EXPECT_EQ(p.split_len % tile, 0);
    EXPECT_GE(p.num_splits * p.split_len, s.seq_k);        // every key in some split
    EXPECT_LT((p.num_splits - 1) * p.split_len, s.seq_k);  // and no split empty
    EXPECT_EQ(p.blocks, p.base_blocks * p.num_splits);
    if (p.num_splits > 1) {
      EXPECT_GE(p.split_len, 2 * tile);  // 4 tiles, less the rounding to whole tiles
      EXPECT_LE(p.num_splits, fa::ceil_div(s.seq_k, 4 * tile));
    }
  }
  // The decode shapes of the benchmark fill at least 90% of the waves they run.
  for (AttentionShape s : {AttentionShape{8, 32, 1, 32768, 128, false, 0.0f, 0},
                           AttentionShape{8, 32, 1, 32768, 128, false, 0.0f, 8},
                           AttentionShape{1, 16, 1, 131072, 128, false, 0.0f, 0}}) {
    const fa::ch08::SplitPlan p = fa::ch08::plan_split_kv(s, tile, resident);
    const int64_t waves = fa::ceil_div(p.blocks, resident);
    EXPECT_GE(double(p.blocks), 0.9 * double(waves * resident)) << s.str();
  }
}

}  // namespace
