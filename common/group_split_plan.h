// group_split_plan.h: how many blocks share a K/V tile's group in a grouped backward before sm_90
// at full attention (chapter 06's tuning step t22, 06/t22_group_split, and the chapter 09 packed
// backwards that take its split through common/device/group_split.cuh). Host code, here so that
// the CPU tier can check the choice (tests/cpu/test_group_split_plan.cpp), and t22's split_of
// and the chapter 09 kernels run the one it checks.
//
// Every block of a full backward does the same work: one K/V tile against every query tile of
// group / split query heads. The grid therefore runs in waves of `slots` blocks (the SMs times the
// blocks one SM holds), and its time is the number of waves times one block's walk.
#pragma once
#include <cstdint>

namespace fa::ch06 {

// `blocks`: the grid at split 1 (key tiles x batch x heads_kv); `slots`: the blocks the GPU holds
// at once. The divisor of `group` whose waves end soonest; ties to the smaller split, which adds
// fewer dK and dV parts. MQA at B 2, N 4096, D 128 on 132 SMs holding one block each: 64 blocks at
// split 1 (one wave of 32 heads) against 128 at split 2 (one wave of 16): 2.
inline int full_split(int group, int64_t blocks, int64_t slots) {
  if (slots < 1) slots = 1;
  int best = 1;
  int64_t best_time = -1;
  for (int split = 1; split <= group; ++split) {
    if (group % split != 0) continue;
    const int64_t waves = (blocks * split + slots - 1) / slots;
    const int64_t time = waves * (group / split);
    if (best_time < 0 || time < best_time) best = split, best_time = time;
  }
  return best;
}

}  // namespace fa::ch06
