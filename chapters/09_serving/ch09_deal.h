// ch09_deal.h: the static deal of 09/hopper_v6_varlen_heaviest_first, the order in which a
// persistent block takes the work units of a packed batch. Host and device: the kernel, the CPU
// model and the tests call these same functions.
//
// 09/hopper_v3 numbers the units sequence after sequence and block b of G takes units b, b + G,
// b + 2G, ...: round k of the deal hands units kG .. kG + G - 1 to blocks 0 .. G - 1. On a batch of
// uneven sequences that deal is uneven too (notes/figures/fig_varlen_deal.py): a round that
// straddles a long and a short sequence gives the low blocks the long sequence's units, and the
// next round does the same. v6 deals as a list scheduler would, heaviest first, without one:
//   * the sequences are numbered in the order of their units' cost, heaviest first (a unit's
//     cost: the key tiles its query tiles visit, plus one per query tile for its start and end;
//     within one sequence every unit costs about the same), so that each round's G units cost
//     about alike and the last rounds hold the cheapest;
//   * round k is dealt to blocks 0 .. G - 1 when k is even and G - 1 .. 0 when it is odd, so that
//     the block that drew the heaviest unit of one round draws the lightest of the next (dealt
//     the same way each round, block 0 would draw the heaviest of every round).
// A block's units still grow from one round to the next (the cursor over cu_seqlens only moves
// forward), and every unit is dealt exactly once (tests/cpu/test_ch09_deal.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kv_tiles.h"
#include "shapes.h"

namespace fa::ch09 {

// Sequences the kernel's parameters carry in their deal order; a batch of more takes v3's order
// (sequence after sequence): so many sequences are short, and their units alike.
constexpr int kMaxOrdered = 1024;

// The unit block `block` of `blocks` takes in its round `round`: rounds alternate direction. The
// caller stops at the first unit past the last (a block's units only grow, so none follows).
FA_HD uint32_t serpentine_unit(uint32_t round, uint32_t block, uint32_t blocks) {
  return round * blocks + ((round & 1u) ? blocks - 1u - block : block);
}

// The cost of sequence b's heaviest unit per head, in the model's units (key tiles visited plus
// one per query tile): a query tile, or causal the pair of its last and first query tiles, as
// v3 numbers them. -1 for a sequence without queries (no units).
inline int64_t unit_cost(const VarlenShape& s, size_t b, int64_t br, int64_t bc) {
  const int64_t seq_q = s.seqlens_q[b], seq_k = s.seqlens_k[b];
  const int64_t tiles = (seq_q + br - 1) / br;
  if (tiles == 0) return -1;
  int64_t cost = fa::ch07::kv_tiles((tiles - 1) * br, br, seq_q, seq_k, bc, s.causal).visit + 1;
  if (s.causal && tiles > 1) cost += fa::ch07::kv_tiles(0, br, seq_q, seq_k, bc, true).visit + 1;
  return cost;
}

// The sequences in deal order, heaviest unit first (ties in batch order), or empty where the
// batch has more than kMaxOrdered sequences (the kernel then takes them in batch order).
inline std::vector<int> heaviest_first(const VarlenShape& s, int64_t br, int64_t bc) {
  const size_t batch = s.seqlens_q.size();
  if (batch > size_t(kMaxOrdered)) return {};
  std::vector<int64_t> cost(batch);
  for (size_t b = 0; b < batch; ++b) cost[b] = unit_cost(s, b, br, bc);
  std::vector<int> order(batch);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return cost[x] > cost[y]; });
  return order;
}

}  // namespace fa::ch09
