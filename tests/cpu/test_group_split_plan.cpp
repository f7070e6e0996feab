// The split of a grouped backward's full attention (common/group_split_plan.h, full_split): split
// 1 wherever t20's grid fills the GPU's resident blocks, the split whose waves end soonest where it
// does not. The shapes are the gqa rows' (B 2, H 32, D 128, 128-key tiles) on 132 SMs holding one
// block each (06/t22 and 09/bwd_v6 at D 128: 155 KiB of shared memory a block).
#include <gtest/gtest.h>

#include <cstdint>

#include "group_split_plan.h"

namespace {

constexpr int64_t kSlots = 132;  // an H100's or H200's SMs, one block each
constexpr int64_t kBatch = 2, kHeads = 32, kKeyTile = 128;

// full_split for H_kv K/V heads and N keys: the grid at split 1 is key tiles x batch x heads_kv.
int split_for(int64_t heads_kv, int64_t n, int64_t slots = kSlots) {
  const int64_t blocks = (n + kKeyTile - 1) / kKeyTile * kBatch * heads_kv;
  return fa::ch06::full_split(int(kHeads / heads_kv), blocks, slots);
}

TEST(GroupSplitPlan, ShortGridsSplitTheGroup) {
  // MQA at N 4096: 64 blocks of 32 heads idle half the GPU; 128 blocks of 16 fill one wave.
  EXPECT_EQ(split_for(1, 4096), 2);
  // Shorter still, N 1024: 16 blocks of 32 heads, one wave; split 8 gives 128 blocks of 4 heads,
  // one wave, an eighth of the time (16 and 32 tie with it and add more parts).
  EXPECT_EQ(split_for(1, 1024), 8);
}

TEST(GroupSplitPlan, GridsThatFillTheGpuKeepTheWalk) {
  EXPECT_EQ(split_for(1, 8192), 1);  // 128 blocks of 32 heads: one wave, as split 2's two of 16
  EXPECT_EQ(split_for(4, 4096), 1);  // 256 blocks of 8 heads: 2 waves, as 4 waves of 4
  EXPECT_EQ(split_for(8, 4096), 1);  // 512 blocks of 4 heads
  EXPECT_EQ(split_for(8, 8192), 1);
  EXPECT_EQ(split_for(32, 4096), 1);  // MHA: a group of one has nothing to split
}

TEST(GroupSplitPlan, MoreBlocksAnSmMeansFewerSplits) {
  // Two blocks an SM (264 slots): MQA at N 8192 (128 blocks) splits in two, one wave of 256.
  EXPECT_EQ(split_for(1, 8192, 2 * kSlots), 2);
  EXPECT_EQ(split_for(1, 4096, 2 * kSlots), 4);
}

TEST(GroupSplitPlan, OnlyDivisorsOfTheGroup) {
  // A group of 6 (H 6, H_kv 1), 8 blocks at split 1 on 132 slots: 6 divides it (48 blocks, one wave
  // of one head); 4 and 5 are never taken.
  EXPECT_EQ(fa::ch06::full_split(6, 8, kSlots), 6);
  EXPECT_EQ(fa::ch06::full_split(1, 8, kSlots), 1);
  EXPECT_EQ(fa::ch06::full_split(6, 0, kSlots), 1);  // no blocks: nothing to split
  EXPECT_EQ(fa::ch06::full_split(4, 8, 0), 1);       // no slots reported: one wave a block
}

}  // namespace
