// Chapter 07's tile-range arithmetic (kv_tiles.h) against a brute-force definition: a Q tile
// visits exactly the K/V tiles in which some real row sees some key, and skips the mask exactly on
// the tiles whose every key is seen by every real row; both sets are prefixes. Bottom-right
// causal alignment, seq_q != seq_k both ways, ragged lengths, the tile sizes the kernels use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <tuple>
#include <vector>

#include "kv_tiles.h"

namespace {

TEST(Ch07Tiles, MatchesBruteForce) {
  for (bool causal : {false, true})
    for (int64_t seq_q : {1, 2, 17, 63, 64, 65, 127, 128, 129, 255, 300})
      for (int64_t seq_k : {1, 2, 17, 63, 64, 65, 127, 128, 129, 255, 300})
        for (int64_t br : {64, 128})
          for (int64_t bc : {64, 128})
            for (int64_t q0 = 0; q0 < seq_q; q0 += br) {
              const fa::ch07::KvTiles got = fa::ch07::kv_tiles(q0, br, seq_q, seq_k, bc, causal);
              const fa::ch07::KvTiles want =
                  fa::ch07::kv_tiles_brute_force(q0, br, seq_q, seq_k, bc, causal);
              ASSERT_EQ(got.visit, want.visit)
                  << "seq_q " << seq_q << " seq_k " << seq_k << " Br " << br << " Bc " << bc
                  << " q0 " << q0 << " causal " << causal;
              ASSERT_EQ(got.unmasked, want.unmasked)
                  << "seq_q " << seq_q << " seq_k " << seq_k << " Br " << br << " Bc " << bc
                  << " q0 " << q0 << " causal " << causal;
            }
}

TEST(Ch07Tiles, RowsThatSeeNoKey) {
  // Causal with seq_q > seq_k: the first seq_q - seq_k rows see nothing.
  EXPECT_EQ(fa::ch07::last_visible_key(0, 300, 100, true), -1);
  EXPECT_EQ(fa::ch07::last_visible_key(199, 300, 100, true), -1);
  EXPECT_EQ(fa::ch07::last_visible_key(200, 300, 100, true), 0);
  EXPECT_EQ(fa::ch07::last_visible_key(299, 300, 100, true), 99);
  // A whole Q tile of such rows loads nothing (the kernel writes O = 0, L = -inf).
  const fa::ch07::KvTiles none = fa::ch07::kv_tiles(64, 64, 300, 100, 128, true);
  EXPECT_EQ(none.visit, 0);
  EXPECT_EQ(none.unmasked, 0);
  // Non-causal: every tile, the last one masked when seq_k is ragged.
  const fa::ch07::KvTiles all = fa::ch07::kv_tiles(0, 64, 10, 1000, 128, false);
  EXPECT_EQ(all.visit, 8);
  EXPECT_EQ(all.unmasked, 7);
}

// 07/t68_half_last_key_tile's rule (half_last_tile) against its definition: a consumer's 64 rows
// of a 128-row work tile leave the second half of the tile's last K/V tile unseen exactly when no
// real row sees a key there. Ragged lengths, seq_q != seq_k both ways, causal or not.
TEST(Ch07Tiles, HalfLastTileMatchesBruteForce) {
  constexpr int64_t kBr = 128, kRows = 64;
  for (bool causal : {false, true})
    for (int64_t seq_q : {1, 17, 63, 64, 65, 127, 128, 129, 191, 192, 300, 1000})
      for (int64_t seq_k : {1, 17, 63, 64, 65, 127, 128, 129, 191, 192, 300, 1000})
        for (int64_t bc : {64, 128})
          for (int64_t q0 = 0; q0 < seq_q; q0 += kBr) {
            const int64_t visit = fa::ch07::kv_tiles(q0, kBr, seq_q, seq_k, bc, causal).visit;
            if (visit == 0) continue;  // no turns at all
            for (int64_t row0 = q0; row0 < q0 + kBr; row0 += kRows) {
              bool unseen = true;  // no real row sees a key of the last tile's second half
              for (int64_t i = row0; i < row0 + kRows && i < seq_q; ++i)
                for (int64_t j = (visit - 1) * bc + bc / 2; j < visit * bc; ++j)
                  unseen = unseen && !(j < seq_k && (!causal || j <= i + seq_k - seq_q));
              ASSERT_EQ(fa::ch07::half_last_tile(row0, kRows, seq_q, seq_k, bc, causal, visit),
                        unseen)
                  << "seq_q " << seq_q << " seq_k " << seq_k << " Bc " << bc << " row0 " << row0
                  << " causal " << causal;
            }
          }
}

// What t68 saves, counted in 64 x 64 blocks of S (its header): a causal head at N 512 (Br = Bc =
// 128) computes 40 blocks under t60 and 36 under t68, which are exactly the visible ones; 144 and
// 136 at N 1024.
TEST(Ch07Tiles, HalfLastTileSavesTheMaskedHalves) {
  constexpr int64_t kBr = 128, kBc = 128, kRows = 64;
  for (const auto& [n, whole, half] :
       {std::tuple<int64_t, int64_t, int64_t>{512, 40, 36}, {1024, 144, 136}}) {
    int64_t t60 = 0, t68 = 0, visible = 0;
    for (int64_t q0 = 0; q0 < n; q0 += kBr) {
      const int64_t visit = fa::ch07::kv_tiles(q0, kBr, n, n, kBc, true).visit;
      for (int64_t row0 = q0; row0 < q0 + kBr; row0 += kRows) {
        t60 += 2 * visit;
        t68 += 2 * visit - (fa::ch07::half_last_tile(row0, kRows, n, n, kBc, true, visit) ? 1 : 0);
        visible += (row0 + kRows) / 64;  // its last row sees keys 0 .. row0 + 63
      }
    }
    EXPECT_EQ(t60, whole) << "N " << n;
    EXPECT_EQ(t68, half) << "N " << n;
    EXPECT_EQ(t68, visible) << "N " << n;
  }
}

// The head-group launch order (07/bwd_v6_head_groups) visits every (unit, key tile) block
// once; inside a group the key tiles never go down; a group of one unit is head by head.
TEST(Ch07Tiles, HeadGroupPlaceIsAnOrderOfEveryBlock) {
  for (int64_t n_units : {1, 3, 7, 8, 64, 100})
    for (int64_t n_kt : {1, 2, 8, 32})
      for (int64_t units : {1, 2, 4, 8, 16}) {
        std::vector<int> seen(size_t(n_units * n_kt), 0);
        int64_t last_group = -1, last_kt = 0;
        for (int64_t b = 0; b < n_units * n_kt; ++b) {
          const fa::ch07::BlockPlace p = fa::ch07::head_group_place(b, n_kt, n_units, units);
          ASSERT_TRUE(p.unit >= 0 && p.unit < n_units && p.kt >= 0 && p.kt < n_kt)
              << "b " << b << " units " << units;
          ++seen[size_t(p.unit * n_kt + p.kt)];
          const int64_t group = p.unit / units;
          if (group == last_group) EXPECT_GE(p.kt, last_kt) << "b " << b;
          last_group = group;
          last_kt = p.kt;
          if (units == 1) {
            EXPECT_EQ(p.unit, b / n_kt);
            EXPECT_EQ(p.kt, b % n_kt);
          }
        }
        for (int c : seen) ASSERT_EQ(c, 1) << "units " << units << " n_kt " << n_kt;
      }
}

TEST(Ch07Tiles, HeadGroupUnits) {
  // An H200 (132 SMs, one dK/dV block each) at D 128, 128-key tiles: about two waves a group.
  EXPECT_EQ(fa::ch07::head_group_units(32, 132, 64), 8);   // N 4096, B 4, H 16
  EXPECT_EQ(fa::ch07::head_group_units(64, 132, 32), 4);   // N 8192
  EXPECT_EQ(fa::ch07::head_group_units(8, 132, 256), 32);  // N 1024
  EXPECT_EQ(fa::ch07::head_group_units(128, 132, 16), 2);  // N 16384
  EXPECT_EQ(fa::ch07::head_group_units(8, 132, 3), 2);     // never more than the units
  EXPECT_EQ(fa::ch07::head_group_units(1024, 132, 64), 1);
  // Units that walk several query heads (grouped K/V heads) weigh as many blocks of one head.
  EXPECT_EQ(fa::ch07::head_group_units(32, 132, 16, 4), 2);  // N 4096, H 32, H_kv 8, split 1
  EXPECT_EQ(fa::ch07::head_group_units(32, 132, 16, 2), 4);  // H_kv 4, split 2
  EXPECT_EQ(fa::ch07::head_group_units(32, 132, 8, 8), 1);   // H_kv 4, split 1: head by head
}

// The model behind the step's prediction: blocks handed out in launch order to the slot that
// frees first; a block's time is its Q tiles plus two (its K/V tile, its dK and dV). Causally, at
// the protocol's shapes (B = 16384 / N, H 16, Br 64, Bc 128, 132 slots), the head-group order ends
// within 2.5% of the average slot's work, and head by head 5-8% past it.
TEST(Ch07Tiles, HeadGroupOrderEndsNearTheAverage) {
  const int64_t slots = 132;
  for (int64_t n : {1024, 2048, 4096, 8192}) {
    const int64_t n_units = 16384 / n * 16, n_kt = n / 128, n_qt = n / 64;
    auto end = [&](int64_t units) {
      std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
      for (int64_t i = 0; i < slots; ++i) free_at.push(0.0);
      double last = 0.0;
      for (int64_t b = 0; b < n_units * n_kt; ++b) {
        const int64_t kt = fa::ch07::head_group_place(b, n_kt, n_units, units).kt;
        const double t = free_at.top() + double(n_qt - 2 * kt) + 2.0;
        free_at.pop();
        free_at.push(t);
        last = std::max(last, t);
      }
      return last;
    };
    double work = 0.0;
    for (int64_t kt = 0; kt < n_kt; ++kt) work += double(n_qt - 2 * kt) + 2.0;
    const double average = work * double(n_units) / double(slots);
    const double grouped = end(fa::ch07::head_group_units(n_kt, slots, n_units)), by_head = end(1);
    EXPECT_LE(grouped, 1.025 * average) << "N " << n;
    EXPECT_GE(by_head, 1.05 * average) << "N " << n;
  }
}

// The model behind the predictions of 07/t65, t66 and t67: a block's time is the strips (64
// rows x a key tile) its consumers compute. Returns the average block's strips, the busiest
// block's under v5's static deal (block b takes units b, b + 132, ...; causally a unit pairs a
// head's longest and shortest query tile) and when the list schedule ends (t66: query tiles
// heaviest first in sections of heads whose K and V fit 25 MiB, half an H100's L2, each to the
// block that frees first). own_ranges: each consumer walks the key tiles its own rows see (t65),
// not the block's. B = 16384 / N, H = 2048 / D, 132 blocks.
struct ScheduleModel {
  double average, dealt, listed;
};
ScheduleModel schedule_model(int64_t n, bool causal, int64_t d, int64_t br, int64_t bc,
                             bool own_ranges) {
  const int64_t blocks = 132, rows = 64;
  const int64_t heads = 16384 / n * (2048 / d), tiles = (n + br - 1) / br;
  std::vector<double> strips(size_t(tiles), 0.0);  // a query tile's work
  for (int64_t qt = 0; qt < tiles; ++qt) {
    const int64_t block_range = fa::ch07::kv_tiles(qt * br, br, n, n, bc, causal).visit;
    for (int64_t row0 = qt * br; row0 < qt * br + br && row0 < n; row0 += rows)
      strips[size_t(qt)] +=
          double(own_ranges ? fa::ch07::kv_tiles(row0, rows, n, n, bc, causal).visit : block_range);
  }
  double work = 0.0;
  for (double w : strips) work += w;
  ScheduleModel m;
  m.average = work * double(heads) / double(blocks);

  const int64_t per_head = causal ? (tiles + 1) / 2 : tiles;
  std::vector<double> dealt(size_t(blocks), 0.0);
  for (int64_t u = 0; u < per_head * heads; ++u) {
    const int64_t r = u % per_head, first = causal ? tiles - 1 - r : r;
    const bool pair = causal && r < tiles - 1 - r;
    dealt[size_t(u % blocks)] += strips[size_t(first)] + (pair ? strips[size_t(r)] : 0.0);
  }
  m.dealt = *std::max_element(dealt.begin(), dealt.end());

  int64_t section = 1;
  while (2 * section <= heads && 2 * section * n * 4 * d <= (int64_t(25) << 20)) section *= 2;
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int64_t i = 0; i < blocks; ++i) free_at.push(0.0);
  m.listed = 0.0;
  for (int64_t x = 0; x < tiles * heads; ++x) {
    const int64_t rank = fa::ch07::head_group_place(x, tiles, heads, section).kt;
    const double t = free_at.top() + strips[size_t(causal ? tiles - 1 - rank : rank)];
    free_at.pop();
    free_at.push(t);
    m.listed = std::max(m.listed, t);
  }
  return m;
}

// D 64, three consumers on 192-row tiles, 128-key tiles, each consumer its own key tiles (t65):
// v5's static deal leaves the busiest block 7-29% past the average causally and 16% at full N 512
// and 1024; the list schedule (t66) ends within 2% of it.
TEST(Ch07Tiles, ListScheduleOfQueryTilesEndsNearTheAverage) {
  for (bool causal : {true, false})
    for (int64_t n : {512, 1024, 2048, 4096, 8192, 16384}) {
      const ScheduleModel m = schedule_model(n, causal, 64, 192, 128, true);
      EXPECT_LE(m.listed, 1.02 * m.average) << "N " << n << (causal ? " causal" : " full");
      if (causal) EXPECT_GE(m.dealt, 1.07 * m.average) << "N " << n;
      if (!causal && n <= 1024) EXPECT_GE(m.dealt, 1.15 * m.average) << "N " << n;
    }
}

// D 128, two consumers on 128-row tiles, 176-key tiles (t56, t67): causally the pairs differ by a
// key tile, and the static deal leaves the busiest block 9-15% past the average up to N 2048 and
// 3% after; the list schedule ends within 2.5% of it. On full rows every unit is the same and
// both end at the busiest block's 16 units of an average 15.5.
TEST(Ch07Tiles, ListScheduleOfWideKeyTilesAtD128) {
  for (bool causal : {true, false})
    for (int64_t n : {512, 1024, 2048, 4096, 8192, 16384}) {
      const ScheduleModel m = schedule_model(n, causal, 128, 128, 176, false);
      if (causal) {
        EXPECT_LE(m.listed, 1.025 * m.average) << "N " << n;
        EXPECT_GE(m.dealt, (n <= 2048 ? 1.08 : 1.03) * m.average) << "N " << n;
      } else {
        EXPECT_LE(m.listed, m.dealt) << "N " << n;
        EXPECT_NEAR(m.dealt / m.average, 16.0 / 15.5, 0.002) << "N " << n;
      }
    }
}

}  // namespace
