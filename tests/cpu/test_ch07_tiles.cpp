// Chapter 07's tile-range arithmetic (kv_tiles.h) against a brute-force definition: a Q tile
// visits exactly the K/V tiles in which some real row sees some key, and skips the mask exactly on
// the tiles whose every key is seen by every real row; both sets are prefixes. Bottom-right
// causal alignment, seq_q != seq_k both ways, ragged lengths, the tile sizes the kernels use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
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

// The model behind 07/t65's and t66's predictions (D 64: three consumers of 64 rows, query tiles
// of 192 rows, key tiles of 128, 132 blocks; B = 16384 / N, H 32): a block's time is the strips
// (64 rows x 128 keys) its consumers compute, each consumer the key tiles its own rows see (t65).
// v5's static deal (block b takes units b, b + 132, ...; causally a unit pairs a head's longest
// and shortest tile) leaves the busiest block 7-29% past the average causally and 16% at full
// N 512 and 1024; the list schedule (t66: query tiles heaviest first in sections of heads, the
// head-group order, each to the block that frees first) ends within 2% of it.
TEST(Ch07Tiles, ListScheduleOfQueryTilesEndsNearTheAverage) {
  const int64_t blocks = 132, br = 192, rows = 64, bc = 128;
  for (bool causal : {true, false})
    for (int64_t n : {512, 1024, 2048, 4096, 8192, 16384}) {
      const int64_t heads = 16384 / n * 32, tiles = (n + br - 1) / br;
      std::vector<double> strips(size_t(tiles), 0.0);  // a query tile's work
      for (int64_t qt = 0; qt < tiles; ++qt)
        for (int64_t row0 = qt * br; row0 < qt * br + br && row0 < n; row0 += rows)
          strips[size_t(qt)] += double(fa::ch07::kv_tiles(row0, rows, n, n, bc, causal).visit);
      double work = 0.0;
      for (double w : strips) work += w;
      const double average = work * double(heads) / double(blocks);

      // v5's static deal, t65's units.
      const int64_t per_head = causal ? (tiles + 1) / 2 : tiles;
      std::vector<double> dealt(size_t(blocks), 0.0);
      for (int64_t u = 0; u < per_head * heads; ++u) {
        const int64_t r = u % per_head, first = causal ? tiles - 1 - r : r;
        const bool pair = causal && r < tiles - 1 - r;
        dealt[size_t(u % blocks)] += strips[size_t(first)] + (pair ? strips[size_t(r)] : 0.0);
      }
      const double busiest = *std::max_element(dealt.begin(), dealt.end());

      // t66's list schedule; sections of heads whose K and V fit 25 MiB (half an H100's L2).
      int64_t section = 1;
      while (2 * section <= heads && 2 * section * n * 256 <= (int64_t(25) << 20)) section *= 2;
      std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
      for (int64_t i = 0; i < blocks; ++i) free_at.push(0.0);
      double last = 0.0;
      for (int64_t x = 0; x < tiles * heads; ++x) {
        const int64_t rank = fa::ch07::head_group_place(x, tiles, heads, section).kt;
        const double t = free_at.top() + strips[size_t(causal ? tiles - 1 - rank : rank)];
        free_at.pop();
        free_at.push(t);
        last = std::max(last, t);
      }
      EXPECT_LE(last, 1.02 * average) << "N " << n << (causal ? " causal" : " full");
      if (causal) EXPECT_GE(busiest, 1.07 * average) << "N " << n;
      if (!causal && n <= 1024) EXPECT_GE(busiest, 1.15 * average) << "N " << n;
    }
}

}  // namespace
