// The m16n8k16 fragment maps of chapter 05 (chapters/05_flash_forward/ch05_fragments.h): which lane,
// register and half hold which element of A, B and C, and the repack of P from S's accumulators
// into an A fragment. A CPU exercise: the suite is CpuExercise* (label exercise).
//
// Three independent statements of the same layout are compared: the PTX ISA's table (known
// elements, written out below), the owner formulas of notes/figures/fig_mma_fragments.py (which
// draws the figure, copied here as a_owner, b_owner, c_owner), and the register order in which
// 05/v2_mma.cu packs P (p_frag[] built from s[2 kk] and s[2 kk + 1]).
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "ch05_fragments.h"

namespace {

using fa::ch05::a_element;
using fa::ch05::AccSource;
using fa::ch05::b_element;
using fa::ch05::c_element;
using fa::ch05::kARegs;
using fa::ch05::kBRegs;
using fa::ch05::kCRegs;
using fa::ch05::kWarpLanes;
using fa::ch05::p_repack;
using fa::ch05::RowCol;

// fig_mma_fragments.py's owners: (lane, register) holding an element. C's second value is the
// first of the two accumulators c[i], c[i + 1] that hold the row's pair of columns.
std::pair<int, int> a_owner(int row, int col) {
  return {4 * (row % 8) + (col % 8) / 2, row / 8 + 2 * (col / 8)};
}
std::pair<int, int> b_owner(int k, int n) {
  return {4 * n + (k % 8) / 2, k / 8};
}
std::pair<int, int> c_owner(int row, int col) {
  return {4 * (row % 8) + col / 2, 2 * (row / 8)};
}

TEST(CpuExerciseCh05Fragments, KnownElementsOfThePtxTable) {
  // Lane 5: g = 1, t = 1 (the lane the figure outlines).
  EXPECT_EQ(a_element(5, 0, 0), (RowCol{1, 2}));
  EXPECT_EQ(a_element(5, 0, 1), (RowCol{1, 3}));
  EXPECT_EQ(a_element(5, 1, 0), (RowCol{9, 2}));
  EXPECT_EQ(a_element(5, 2, 1), (RowCol{1, 11}));
  EXPECT_EQ(a_element(5, 3, 0), (RowCol{9, 10}));
  EXPECT_EQ(b_element(5, 0, 0), (RowCol{2, 1}));
  EXPECT_EQ(b_element(5, 1, 1), (RowCol{11, 1}));
  EXPECT_EQ(c_element(5, 0), (RowCol{1, 2}));
  EXPECT_EQ(c_element(5, 1), (RowCol{1, 3}));
  EXPECT_EQ(c_element(5, 2), (RowCol{9, 2}));
  // Lane 0 starts every fragment at the origin; lane 31 (g = 7, t = 3) ends it.
  EXPECT_EQ(a_element(0, 0, 0), (RowCol{0, 0}));
  EXPECT_EQ(b_element(0, 0, 0), (RowCol{0, 0}));
  EXPECT_EQ(c_element(0, 0), (RowCol{0, 0}));
  EXPECT_EQ(a_element(31, 3, 1), (RowCol{15, 15}));
  EXPECT_EQ(b_element(31, 1, 1), (RowCol{15, 7}));
  EXPECT_EQ(c_element(31, 3), (RowCol{15, 7}));
}

// Every element of each matrix is held exactly once across the warp.
TEST(CpuExerciseCh05Fragments, EachFragmentCoversItsMatrixOnce) {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    for (int reg = 0; reg < kARegs; ++reg)
      for (int half = 0; half < 2; ++half) {
        const RowCol e = a_element(lane, reg, half);
        ASSERT_TRUE(e.row >= 0 && e.row < 16 && e.col >= 0 && e.col < 16)
            << "A lane " << lane << " reg " << reg << " half " << half;
        EXPECT_TRUE(a.insert({e.row, e.col}).second) << "A[" << e.row << "][" << e.col << "] twice";
      }
    for (int reg = 0; reg < kBRegs; ++reg)
      for (int half = 0; half < 2; ++half) {
        const RowCol e = b_element(lane, reg, half);
        ASSERT_TRUE(e.row >= 0 && e.row < 16 && e.col >= 0 && e.col < 8)
            << "B lane " << lane << " reg " << reg << " half " << half;
        EXPECT_TRUE(b.insert({e.row, e.col}).second) << "B[" << e.row << "][" << e.col << "] twice";
      }
    for (int reg = 0; reg < kCRegs; ++reg) {
      const RowCol e = c_element(lane, reg);
      ASSERT_TRUE(e.row >= 0 && e.row < 16 && e.col >= 0 && e.col < 8)
          << "C lane " << lane << " reg " << reg;
      EXPECT_TRUE(c.insert({e.row, e.col}).second) << "C[" << e.row << "][" << e.col << "] twice";
    }
  }
  EXPECT_EQ(a.size(), 16u * 16u);
  EXPECT_EQ(b.size(), 16u * 8u);
  EXPECT_EQ(c.size(), 16u * 8u);
}

// The maps are the inverses of the figure's owner formulas; a 16-bit pair is two neighbouring
// columns of A (rows k of B), low half first, and C's registers come in pairs of columns.
TEST(CpuExerciseCh05Fragments, AgreeWithTheFigure) {
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    for (int reg = 0; reg < kARegs; ++reg)
      for (int half = 0; half < 2; ++half) {
        const RowCol e = a_element(lane, reg, half);
        EXPECT_EQ(a_owner(e.row, e.col), std::make_pair(lane, reg)) << "A lane " << lane;
        EXPECT_EQ(e.col % 2, half) << "A lane " << lane << " reg " << reg;
      }
    for (int reg = 0; reg < kBRegs; ++reg)
      for (int half = 0; half < 2; ++half) {
        const RowCol e = b_element(lane, reg, half);
        EXPECT_EQ(b_owner(e.row, e.col), std::make_pair(lane, reg)) << "B lane " << lane;
        EXPECT_EQ(e.row % 2, half) << "B lane " << lane << " reg " << reg;
      }
    for (int reg = 0; reg < kCRegs; ++reg) {
      const RowCol e = c_element(lane, reg);
      EXPECT_EQ(c_owner(e.row, e.col), std::make_pair(lane, reg - reg % 2)) << "C lane " << lane;
      EXPECT_EQ(e.col % 2, reg % 2) << "C lane " << lane << " reg " << reg;
    }
  }
}

// P's A fragment for a 16-key slice takes each value from an accumulator of the same lane that
// holds the same (row, key) of S: no value moves between lanes.
TEST(CpuExerciseCh05Fragments, PRepackStaysInTheLane) {
  std::set<std::pair<int, int>> used;
  for (int reg = 0; reg < kARegs; ++reg)
    for (int half = 0; half < 2; ++half) {
      const AccSource src = p_repack(reg, half);
      ASSERT_TRUE(src.tile >= 0 && src.tile < 2 && src.acc >= 0 && src.acc < kCRegs)
          << "reg " << reg << " half " << half;
      EXPECT_TRUE(used.insert({src.tile, src.acc}).second) << "an accumulator used twice";
      for (int lane = 0; lane < kWarpLanes; ++lane) {
        const RowCol p = a_element(lane, reg, half), s = c_element(lane, src.acc);
        EXPECT_EQ(p, (RowCol{s.row, s.col + 8 * src.tile}))
            << "lane " << lane << " reg " << reg << " half " << half;
      }
    }
  // 05/v2_mma.cu: p_frag[r] = pack2(s[2 kk + r / 2][2 (r % 2)], s[2 kk + r / 2][2 (r % 2) + 1]).
  const AccSource kernel[kARegs][2] = {
      {{0, 0}, {0, 1}}, {{0, 2}, {0, 3}}, {{1, 0}, {1, 1}}, {{1, 2}, {1, 3}}};
  for (int reg = 0; reg < kARegs; ++reg)
    for (int half = 0; half < 2; ++half)
      EXPECT_EQ(p_repack(reg, half), kernel[reg][half]) << "reg " << reg << " half " << half;
}

}  // namespace
