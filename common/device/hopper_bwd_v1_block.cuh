// hopper_bwd_v1_block.cuh: chapter 07's first Hopper backward, 07/bwd_v1_tma_wgmma, as the pieces
// of its block a later rung uses instead of copying: two consumer warpgroups and two stages, how
// the warpgroups share the work at each head dim (Split), and the shared-memory layouts of its
// dK/dV and dQ kernels.
//
// Read them in 07/bwd_v1 first (chapters/07_flash_hopper/sm90a/bwd_v1_tma_wgmma.cu): it carries
// its own copy, so that the rung reads top to bottom. Chapter 09's Hopper backwards
// (09/hopper_bwd_v1_varlen, hopper_bwd_v2_window) are each 07/bwd_v1 plus one idea (packed
// offsets, the window's tiles) and use these pieces; their kernels stay in their files, 07/bwd_v1's
// turns written out in them (moved into functions, the turns compiled to other machine code, which
// only a GPU run could show to be as fast). The rungs compile to the machine code they had when
// each carried a copy of these pieces (the cubins' kernel sections compared, CUDA 13.0, sm_90a).
#pragma once
#include "hopper_attention.cuh"  // kRowsPerWarpgroup, kSwizzleCols, kAtomBytes

namespace fa::ch07::bwd_v1 {

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStages = 2;
constexpr int kWgRows = kRowsPerWarpgroup;  // 64: wgmma M, the rows one warpgroup owns

// How a block's two warpgroups share its work at head dim D (see "D = 256" in 07/bwd_v1's header).
//   D <= 128: each warpgroup owns 64 rows of the block's 128 (keys in dkdv, queries in dq) and
//             all D columns of their gradient.
//   D  > 128: the block holds 64 rows; both warpgroups compute the same S^T and dP^T (S and dP)
//             over all D columns, and warpgroup w accumulates columns 128 w .. 128 w + 127 of
//             the gradient. The accumulators are then those of D = 128.
template <int D>
struct Split {
  static constexpr int kAccCols = D <= 128 ? D : 128;  // N of dV, dK, dQ per warpgroup
  static constexpr int kParts = D / kAccCols;          // column parts: 1, or 2 at D = 256
  static constexpr int kRows = kParts == 1 ? kWarpgroups * kWgRows : kWgRows;  // rows per block
  static_assert(kParts == 1 || kParts == kWarpgroups, "one column part per warpgroup");
  static_assert(kParts * kAccCols == D && kAccCols % kSwizzleCols == 0,
                "parts tile D and start on a 64-column strip");
  // Warpgroup wg's first row within the block's tile, and its first gradient column.
  __device__ static int row_off(int wg) { return kParts == 1 ? wg * kWgRows : 0; }
  __device__ static int col0(int wg) { return kParts == 1 ? 0 : wg * kAccCols; }
};

// ---- dK, dV --------------------------------------------------------------------------------------
template <int D>
constexpr int kKvBc = Split<D>::kRows;  // keys per block: 128, or 64 at D = 256
constexpr int kKvBr = 64;               // queries per streamed tile: N of S^T and dP^T

template <int D>
struct DkdvSmem {
  static constexpr int kKVBytes = kKvBc<D> * D * 2;  // K or V
  static constexpr int kQBytes = kKvBr * D * 2;      // Q or dO, one stage
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKVBytes;
  static constexpr int kQOffset = 2 * kKVBytes;                    // stage s at + s * kQBytes
  static constexpr int kdOOffset = kQOffset + kStages * kQBytes;   // stage s at + s * kQBytes
  static constexpr int kLOffset = kdOOffset + kStages * kQBytes;   // float [kStages][kKvBr]
  static constexpr int kDOffset = kLOffset + kStages * kKvBr * 4;  // float [kStages][kKvBr]
  static constexpr int kBarOffset = kDOffset + kStages * kKvBr * 4;
  static constexpr int kBytes = kBarOffset + (1 + kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kKVBytes % kAtomBytes == 0 && kQBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "the most dynamic shared memory a block may opt in to");
};

// ---- dQ ------------------------------------------------------------------------------------------
template <int D>
constexpr int kQBr = Split<D>::kRows;  // queries per block: 128, or 64 at D = 256
constexpr int kQBc = 64;               // keys per streamed K/V tile: N of S and dP

template <int D>
struct DqSmem {
  static constexpr int kQBytes = kQBr<D> * D * 2;  // Q or dO
  static constexpr int kKVBytes = kQBc * D * 2;    // K or V, one stage
  static constexpr int kQOffset = 0;
  static constexpr int kdOOffset = kQBytes;
  static constexpr int kKOffset = 2 * kQBytes;                    // stage s at + s * kKVBytes
  static constexpr int kVOffset = kKOffset + kStages * kKVBytes;  // stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (1 + kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kKVBytes % kAtomBytes == 0 && kQBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "the most dynamic shared memory a block may opt in to");
};

}  // namespace fa::ch07::bwd_v1
