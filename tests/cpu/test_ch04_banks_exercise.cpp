// Chapter 04's CPU exercise (notes/coursework.md): shared-memory banks and 04/v3_smem_padded's
// write phase, in ch04_bank_model.cpp. The column read of the write phase takes gcd(32 + pad, 32)
// passes (32 for v2_smem's unpadded tile, 1 for v3's padding column); rows and broadcasts take one;
// and the write phase of every thread of every tile writes each element of the transposed output
// exactly once, from the tile element that holds its mirror, with a warp's 32 stores consecutive.
// Suite CpuExercise* (label exercise).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ch04_bank_model.h"

namespace {

using fa::ch04::kBanks;

TEST(CpuExerciseCh04Banks, EachWordHasItsBank) {
  EXPECT_EQ(fa::ch04::bank_of(0), 0);
  EXPECT_EQ(fa::ch04::bank_of(31), 31);
  EXPECT_EQ(fa::ch04::bank_of(32), 0);
  EXPECT_EQ(fa::ch04::bank_of(33 * 7), 7);
  EXPECT_EQ(fa::ch04::bank_of((int64_t(1) << 33) + 5), 5);
}

TEST(CpuExerciseCh04Banks, RowsAndBroadcastsTakeOnePass) {
  std::vector<int64_t> row(kBanks), same(kBanks, 77), two(kBanks);
  std::iota(row.begin(), row.end(), int64_t(64));
  for (int l = 0; l < kBanks; ++l) two[l] = l % 2 == 0 ? 5 : 5 + 32;  // two words of bank 5
  EXPECT_EQ(fa::ch04::conflict_ways(row), 1);
  EXPECT_EQ(fa::ch04::conflict_ways(same), 1);
  EXPECT_EQ(fa::ch04::conflict_ways(two), 2);
}

TEST(CpuExerciseCh04Banks, PaddingDecidesTheColumnRead) {
  for (int pad = 0; pad <= 8; ++pad)
    for (int y : {0, 13, 31}) {
      const int want = std::gcd(fa::ch04::kModelTile + pad, kBanks);
      EXPECT_EQ(fa::ch04::conflict_ways(fa::ch04::column_read_words(pad, y)), want)
          << "pad " << pad << ", column " << y;
    }
  EXPECT_EQ(fa::ch04::conflict_ways(fa::ch04::column_read_words(0, 0)), 32);  // v2_smem
  EXPECT_EQ(fa::ch04::conflict_ways(fa::ch04::column_read_words(1, 0)), 1);   // v3_smem_padded
}

TEST(CpuExerciseCh04Banks, TheWritePhaseTransposesEveryElementOnce) {
  using fa::ch04::kModelTile;
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{1, 1}, {33, 70}, {64, 32}, {5, 100}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    std::vector<int> written(static_cast<size_t>(rows * cols), 0);
    for (int64_t r0 = 0; r0 < rows; r0 += kModelTile)
      for (int64_t c0 = 0; c0 < cols; c0 += kModelTile)
        for (int pass = 0; pass < fa::ch04::kModelPasses; ++pass)
          for (int ty = 0; ty < fa::ch04::kModelRowsPerPass; ++ty)
            for (int tx = 0; tx < kModelTile; ++tx) {
              const fa::ch04::TransposedWrite w =
                  fa::ch04::transposed_write(r0, c0, tx, ty, pass, rows, cols);
              if (w.out < 0) continue;
              ASSERT_LT(w.out, rows * cols);
              ++written[static_cast<size_t>(w.out)];
              // out[orow][ocol] = in[ocol][orow], and the tile element came from input
              // (r0 + tile_row, c0 + tile_col).
              const int64_t orow = w.out / rows, ocol = w.out % rows;
              EXPECT_EQ(ocol, r0 + w.tile_row);
              EXPECT_EQ(orow, c0 + w.tile_col);
            }
    for (size_t e = 0; e < written.size(); ++e) ASSERT_EQ(written[e], 1) << "output " << e;
  }
}

TEST(CpuExerciseCh04Banks, AWarpsStoresAreConsecutiveAndItsReadsAColumn) {
  const int64_t rows = 96, cols = 96;
  for (int pass = 0; pass < fa::ch04::kModelPasses; ++pass) {
    const fa::ch04::TransposedWrite first =
        fa::ch04::transposed_write(32, 64, 0, 3, pass, rows, cols);
    std::vector<int64_t> words(kBanks);
    for (int tx = 0; tx < kBanks; ++tx) {
      const fa::ch04::TransposedWrite w =
          fa::ch04::transposed_write(32, 64, tx, 3, pass, rows, cols);
      EXPECT_EQ(w.out, first.out + tx) << "lane " << tx;
      // The word of tile[tile_row][tile_col] in v3's padded tile (rows of 33 floats).
      words[tx] = int64_t(w.tile_row) * (fa::ch04::kModelTile + 1) + w.tile_col;
    }
    EXPECT_EQ(fa::ch04::conflict_ways(words), 1) << "the padded tile's column read, pass " << pass;
  }
}

}  // namespace
