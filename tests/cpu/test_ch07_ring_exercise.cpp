// Chapter 07's CPU exercise (notes/coursework.md): 07/v1_tma_wgmma's K/V ring in ch07_ring.cpp,
// the stage and wait parity of each tile and the parity rule of mbarrier.try_wait. The ring is
// played for rings of 1 to 4 stages over 64 tiles, each fill in flight or landed when the consumer
// waits: every wait must return exactly once its own tile has landed, never before (a race) and
// never not at all (a hang). Suite CpuExercise* (label exercise).
#include <gtest/gtest.h>

#include "ch07_ring.h"

namespace {

TEST(CpuExerciseCh07Ring, TheParityRuleOfAWait) {
  // A fresh barrier is in phase 0: a wait for parity 0 blocks, one for parity 1 returns at once.
  EXPECT_FALSE(fa::ch07::mbar_wait_returns(0, 0));
  EXPECT_TRUE(fa::ch07::mbar_wait_returns(0, 1));
  EXPECT_TRUE(fa::ch07::mbar_wait_returns(1, 0));  // phase 0 completed
  EXPECT_FALSE(fa::ch07::mbar_wait_returns(1, 1));
  EXPECT_TRUE(fa::ch07::mbar_wait_returns(1001, 0));
  EXPECT_FALSE(fa::ch07::mbar_wait_returns(1002, 0));
}

TEST(CpuExerciseCh07Ring, EachTileHasItsStageAndRound) {
  for (int stages = 1; stages <= 4; ++stages)
    for (int64_t j = 0; j < 64; ++j) {
      const fa::ch07::RingSlot s = fa::ch07::kv_ring_slot(j, stages);
      EXPECT_EQ(s.stage, j % stages) << "tile " << j << ", " << stages << " stages";
      // Consecutive fills of one stage alternate their parity.
      if (j >= stages) EXPECT_NE(s.parity, fa::ch07::kv_ring_slot(j - stages, stages).parity);
    }
  EXPECT_EQ(fa::ch07::kv_ring_slot(0, 2).parity, 0) << "the first fill completes phase 0";
}

TEST(CpuExerciseCh07Ring, EveryWaitReturnsOnItsOwnTile) {
  for (int stages = 1; stages <= 4; ++stages)
    for (int64_t j = 0; j < 64; ++j)
      for (bool landed : {false, true}) {
        const fa::ch07::WaitOutcome w = fa::ch07::play_ring_wait(j, stages, landed);
        EXPECT_EQ(w, fa::ch07::WaitOutcome::Correct)
            << "tile " << j << " of a " << stages << "-stage ring, fill "
            << (landed ? "landed" : "in flight") << ": the wait " << fa::ch07::outcome_name(w);
      }
}

}  // namespace
