// split_kv_plan.h: the launch plan of the split-KV ("flash-decoding") forward: how many key ranges
// (splits) each query row is cut into, and the grid that follows. Host code: chapter 08 introduces
// it (plan_split_kv; notes/08_decoding.md, "How many splits"), and every split-KV kernel follows
// it, chapter 08's rungs and chapter 09's paged decode; that is why it lives here and not in
// chapter 08's folder. The CPU model of the split's arithmetic stays in chapter 08
// (chapters/08_decoding/ch08_split_kv.h).
//
// A block of a split kernel owns one K/V head of one sequence, a tile of at most kMaxRows query
// rows that read it (the rows of all `group` query heads that share the K/V head: GQA's saving is
// that K/V are loaded once for all of them), and one split: a contiguous range of keys.
#pragma once
#include <cstdint>

#include "shapes.h"

namespace fa {
namespace ch08 {

constexpr int64_t kMaxRows = 16;  // query rows per block (group * seq_q rows are tiled by this)

struct SplitPlan {
  int64_t rows_per_block = 1;  // power of two >= min(group * seq_q, kMaxRows)
  int64_t row_tiles = 1;       // ceil(group * seq_q / rows_per_block)
  int64_t base_blocks = 1;     // batch * heads_kv * row_tiles: the grid without splitting
  int64_t num_splits = 1;      // key ranges per row
  int64_t split_len = 1;       // keys per split, a multiple of the key tile
  int64_t blocks = 1;          // base_blocks * num_splits
};

// The plan for `s`: key_tile keys are loaded per step; `resident_blocks` is how many blocks of the
// kernel the GPU holds at once (SMs x blocks per SM). The split count makes the grid fill whole
// waves of resident blocks (the fewest splits within 5% of the best waves x keys-per-block), and
// stays at most seq_k / (4 key tiles) (each split also costs a partial write and a merge). Splits
// are whole key tiles, and none is empty.
SplitPlan plan_split_kv(const AttentionShape& s, int64_t key_tile, int64_t resident_blocks);

}  // namespace ch08
}  // namespace fa
