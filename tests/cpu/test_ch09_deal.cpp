// The static deal of 09/hopper_v6_varlen_heaviest_first (ch09_deal.h), on the CPU:
//  * serpentine_unit hands every unit to exactly one block, and each block's units grow from
//    round to round (the kernel's cursor over cu_seqlens only moves forward);
//  * heaviest_first is a permutation of the sequences in order of their units' cost, ties in
//    batch order, sequences without queries last, and empty past kMaxOrdered;
//  * the list-scheduling model of the kernel's header: on the long batch of fa_bench and
//    compare_serving.py (15 sequences of 260-4456 tokens, 132 blocks, t52's 176-key tiles at
//    D 128) v6's deal leaves the busiest block at most 7% (causal) and 2% (full) above the mean,
//    where v3's deal (sequence after sequence, block b taking units b, b + G, ...) leaves 13% and
//    7% (notes/figures/fig_varlen_deal.py draws the same numbers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "ch09_deal.h"

namespace {

using fa::ch09::heaviest_first;
using fa::ch09::kMaxOrdered;
using fa::ch09::serpentine_unit;

constexpr int64_t kBr = 128, kBc = 176;  // t52's tiles at D 128
constexpr uint32_t kSms = 132;           // an H100's persistent blocks

const std::vector<int64_t> kLongLengths = {3889, 3645, 260,  664,  2387, 2661, 1843, 2414,
                                           853,  3344, 2827, 2019, 4456, 1052, 454};

fa::VarlenShape batch(const std::vector<int64_t>& lengths, bool causal) {
  fa::VarlenShape s;
  s.seqlens_q = s.seqlens_k = lengths;
  s.heads = 16;
  s.head_dim = 128;
  s.causal = causal;
  return s;
}

TEST(Ch09Deal, SerpentineDealsEveryUnitOnceInGrowingOrder) {
  for (uint32_t blocks : {1u, 3u, 132u})
    for (uint32_t units : {1u, 5u, 131u, 132u, 133u, 264u, 1000u, 2055u}) {
      SCOPED_TRACE(testing::Message() << units << " units, " << blocks << " blocks");
      std::vector<int> dealt(units, 0);
      for (uint32_t b = 0; b < blocks; ++b) {
        uint32_t last = 0;
        for (uint32_t k = 0;; ++k) {
          const uint32_t u = serpentine_unit(k, b, blocks);
          if (u >= units) {
            // No later round of this block holds a unit: the kernel's loop stops here.
            for (uint32_t later = k + 1; later < k + 4; ++later)
              ASSERT_GE(serpentine_unit(later, b, blocks), units);
            break;
          }
          if (k > 0) ASSERT_GT(u, last) << "block " << b << " round " << k;
          last = u;
          ++dealt[u];
        }
      }
      for (uint32_t u = 0; u < units; ++u) ASSERT_EQ(dealt[u], 1) << "unit " << u;
    }
}

TEST(Ch09Deal, HeaviestFirstSortsTheSequencesByTheirUnitsCost) {
  for (bool causal : {false, true}) {
    const fa::VarlenShape s = batch({300, 0, 4096, 17, 300, 1, 4096, 129}, causal);
    const std::vector<int> order = heaviest_first(s, kBr, kBc);
    ASSERT_EQ(order.size(), s.seqlens_q.size());
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], int(i)) << "a permutation";
    for (size_t i = 1; i < order.size(); ++i) {
      const int64_t a = fa::ch09::unit_cost(s, size_t(order[i - 1]), kBr, kBc);
      const int64_t b = fa::ch09::unit_cost(s, size_t(order[i]), kBr, kBc);
      ASSERT_GE(a, b) << "position " << i;
      if (a == b) EXPECT_LT(order[i - 1], order[i]) << "ties keep the batch order";
    }
    EXPECT_EQ(order.front(), 2);  // the first of the two longest
    EXPECT_EQ(order.back(), 1);   // no queries, no units: last
  }
  // Past kMaxOrdered sequences the kernel keeps the batch order.
  const fa::VarlenShape many = batch(std::vector<int64_t>(kMaxOrdered + 1, 64), true);
  EXPECT_TRUE(heaviest_first(many, kBr, kBc).empty());
  const fa::VarlenShape most = batch(std::vector<int64_t>(kMaxOrdered, 64), true);
  EXPECT_EQ(heaviest_first(most, kBr, kBc).size(), size_t(kMaxOrdered));
}

// Every unit's cost in the model (key tiles visited plus one per query tile), numbered as the
// kernels number them: the sequences in `order`, each head's units in turn (t52's: a query tile,
// causal the pair of tiles n - 1 - r and r).
std::vector<int64_t> unit_costs(const fa::VarlenShape& s, const std::vector<int>& order) {
  std::vector<int64_t> out;
  for (int b : order) {
    const int64_t seq_q = s.seqlens_q[size_t(b)], seq_k = s.seqlens_k[size_t(b)];
    const int64_t n = (seq_q + kBr - 1) / kBr;
    auto tile = [&](int64_t q) {
      return fa::ch07::kv_tiles(q * kBr, kBr, seq_q, seq_k, kBc, s.causal).visit + 1;
    };
    std::vector<int64_t> head;
    for (int64_t r = 0; r < (s.causal ? (n + 1) / 2 : n); ++r)
      head.push_back(tile(n - 1 - r) + (s.causal && r < n - 1 - r ? tile(r) : 0));
    for (int64_t h = 0; h < s.heads; ++h) out.insert(out.end(), head.begin(), head.end());
  }
  return out;
}

// The busiest block's work over the mean when block b takes the units deal(k, b) says.
template <class Deal>
double busiest_over_mean(const std::vector<int64_t>& costs, Deal deal) {
  std::vector<int64_t> load(kSms, 0);
  for (uint32_t b = 0; b < kSms; ++b)
    for (uint32_t k = 0, u; (u = deal(k, b)) < costs.size(); ++k) load[b] += costs[u];
  const double mean = double(std::accumulate(load.begin(), load.end(), int64_t(0))) / kSms;
  return double(*std::max_element(load.begin(), load.end())) / mean;
}

TEST(Ch09Deal, HeaviestFirstBalancesTheLongBatch) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    const fa::VarlenShape s = batch(kLongLengths, causal);
    std::vector<int> natural(kLongLengths.size());
    std::iota(natural.begin(), natural.end(), 0);
    const double v3 = busiest_over_mean(unit_costs(s, natural),
                                        [](uint32_t k, uint32_t b) { return k * kSms + b; });
    const double v6 =
        busiest_over_mean(unit_costs(s, heaviest_first(s, kBr, kBc)),
                          [](uint32_t k, uint32_t b) { return serpentine_unit(k, b, kSms); });
    EXPECT_GT(v3, causal ? 1.12 : 1.06) << "v3's deal, the header's model";
    EXPECT_LT(v6, causal ? 1.07 : 1.02) << "v6's deal";
  }
}

}  // namespace
