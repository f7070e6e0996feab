// split_kv_plan.cpp: the split-KV launch plan (see split_kv_plan.h).
#include "split_kv_plan.h"

#include <algorithm>

namespace fa {
namespace ch08 {

SplitPlan plan_split_kv(const AttentionShape& s, int64_t key_tile, int64_t resident_blocks) {
  SplitPlan p;
  const int64_t rows = s.group() * s.seq_q;
  while (p.rows_per_block < std::min(rows, kMaxRows)) p.rows_per_block *= 2;
  p.row_tiles = std::max<int64_t>(1, ceil_div(rows, p.rows_per_block));
  p.base_blocks = s.batch * s.kv_heads() * p.row_tiles;
  // The time of the grid is about (waves of resident blocks) x (keys per block): with S splits,
  // ceil(base * S / resident) / S in units of one unsplit block. Take the smallest S within 5% of
  // the best: 256 heads on 396 slots take S = 3 (768 blocks, 97% of two waves), where S = 1 would
  // leave a third of the slots empty and S = 2 would run a second, two-thirds empty, wave. Why not
  // the best S itself: the model counts neither a block's fixed cost nor the merge of more
  // partials, and the best S ran 0.90-0.96x this choice on the three decode shapes (08/v6, H200,
  // notes/measured/h200-2026-12-03/decode_split_rule.md).
  const int64_t max_splits = std::max<int64_t>(1, ceil_div(s.seq_k, 4 * key_tile));
  const int64_t slots = std::max<int64_t>(1, resident_blocks);
  auto cost = [&](int64_t S) { return double(ceil_div(p.base_blocks * S, slots)) / double(S); };
  double best = cost(1);
  for (int64_t S = 2; S <= max_splits; ++S) best = std::min(best, cost(S));
  p.num_splits = 1;
  while (cost(p.num_splits) > 1.05 * best) ++p.num_splits;
  // Whole key tiles per split, and no empty split: recount after rounding the length up.
  const int64_t keys = std::max<int64_t>(1, s.seq_k);
  p.split_len = ceil_div(ceil_div(keys, p.num_splits), key_tile) * key_tile;
  p.num_splits = ceil_div(keys, p.split_len);
  p.blocks = p.base_blocks * p.num_splits;
  return p;
}

}  // namespace ch08
}  // namespace fa
