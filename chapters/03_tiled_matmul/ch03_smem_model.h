// ch03_smem_model.h: 03/v2_smem_tiled on paper. Its grid of 32 x 32 blocks is run here block by
// block and thread by thread: at each step of K every thread stages one element of the A tile and
// one of the B tile (smem_tile_load), and after the barrier every thread multiplies a row of the
// A tile by a column of the B tile. The CPU can then count what the kernel's layout promises: each
// element of A and B read from memory once per block row (or column) of C, and the 32 threads of a
// warp (consecutive tx) reading consecutive addresses.
// A CPU exercise (notes/coursework.md): the load and the tile product of ch03_smem_model.cpp.
#pragma once
#include <cstdint>
#include <vector>

namespace fa::ch03 {

// 03/v2_smem_tiled's kTile: a block of 32 x 32 threads, tiles of 32 x 32.
constexpr int kSmemTile = 32;

// What thread (ty, tx) of block (by, bx) stages at the step that starts at k0: the element of A
// for As[ty][tx] and the element of B for Bs[ty][tx], as row-major offsets into A [M, K] and
// B [K, N], or -1 where the tile sticks out of the matrix (the kernel stores a zero there).
struct TileLoad {
  int64_t a = -1, b = -1;
};
TileLoad smem_tile_load(int64_t by, int64_t bx, int ty, int tx, int64_t k0, int64_t M, int64_t N,
                        int64_t K);

// C [M, N] = A B, fp32 accumulation, computed as the kernel computes it: every block, every step
// of K, the tiles staged through smem_tile_load. *reads_of_a and *reads_of_b (when given, sized
// M*K and K*N) count how often each element of A and B was loaded from memory.
std::vector<float> smem_tiled_gemm(const float* A, const float* B, int64_t M, int64_t N, int64_t K,
                                   std::vector<int>* reads_of_a = nullptr,
                                   std::vector<int>* reads_of_b = nullptr);

}  // namespace fa::ch03
