// ch04_bank_model.h: 04/v3_smem_padded on paper. Shared memory is 32 banks of 4-byte words: the
// 32 lanes of a warp are served in one pass when their words sit in 32 different banks (or are
// the same word), and in k passes when one bank has k different words to give. The transpose's
// tile is read down a column in the write phase, so its row length decides the banks: this model
// counts them, and follows each thread of the write phase to the output element it writes.
// A CPU exercise (notes/coursework.md): the three functions of ch04_bank_model.cpp.
#pragma once
#include <cstdint>
#include <vector>

namespace fa::ch04 {

constexpr int kBanks = 32;
// The transposes' tile and thread shape (ch04_transpose.cuh, which only CUDA files can include): a
// block of 32 x 8 threads moves a 32 x 32 tile in 4 passes of 8 rows.
constexpr int kModelTile = 32, kModelRowsPerPass = 8, kModelPasses = kModelTile / kModelRowsPerPass;

// The bank that serves 4-byte word `word` of shared memory.
int bank_of(int64_t word);

// How many passes a warp needs when lane l reads word words[l] (32 entries): the largest number
// of DIFFERENT words any one bank must deliver (1: conflict-free; lanes reading the same word are
// served together, a broadcast).
int conflict_ways(const std::vector<int64_t>& words);

// The words lane tx = 0..31 reads in the write phase, tile[tx][y], of a float tile of 32 rows of
// 32 + pad floats (pad = 0: v2_smem's tile, pad = 1: v3_smem_padded's).
std::vector<int64_t> column_read_words(int pad, int y);

// The write phase of thread (tx, ty) at pass `pass` (rows ty, ty + 8, ... of the tile, as in
// ch04_transpose.cuh), for the tile whose first input element is (r0, c0) of a rows x cols input:
// the offset it writes in the cols x rows output (-1 when that element is outside), and the tile
// element it reads there, tile[tile_row][tile_col] (loaded from input (r0 + tile_row, c0 + tile_col)).
struct TransposedWrite {
  int64_t out = -1;
  int tile_row = 0, tile_col = 0;
};
TransposedWrite transposed_write(int64_t r0, int64_t c0, int tx, int ty, int pass, int64_t rows,
                                 int64_t cols);

}  // namespace fa::ch04
