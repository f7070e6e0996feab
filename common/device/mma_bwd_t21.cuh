// mma_bwd_t21.cuh: chapter 06's backward at every head dim up to 256, 06/t21_d256_any_head_dim
// (chapter 06's tuning appendix: 06/v5's warp tiles with a 64-key block at D 256 (t14), one Q and
// one dO buffer so that 147 KiB fit an A100 (t18), rows of d <= 256 elements in global memory
// computed at 256 (t19), rows that are no whole number of 16-byte chunks copied, added and stored
// element by element (t21)), as the pieces t21 adds to 06/v5's (mma_bwd_v5.cuh, whose
// keys_times_cols takes the 64-key P and dS tiles' pitch as a parameter): its tile, its shared
// memory, the row loader and the stores for rows of d, and the conversion of dQ's last 1-3
// elements.
//
// Read them in chapter 06's tuning appendix first (chapters/06_flash_backward/tuning/, the steps
// t14, t18, t19 and t21 as switches of one kernel, ch06_warp_tiles_kernel.cuh). Chapter 09's
// backward at the head dims above 128 (09/bwd_v5_window_d256) is 09/bwd_v2_window on these pieces
// and calls them; what it keeps in its file is its parameters, its kernel and its launch.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention_tiles.cuh"  // fa::tiles::copy_chunk_by_elements (05/t15)
#include "mma.cuh"
#include "mma_bwd_v5.cuh"

namespace fa::ch06::t21 {

using fa::ch06::v5::kBr;
using fa::ch06::v5::kPad;
using fa::ch06::v5::kThreads;
using fa::ch06::v5::swizzled_offset;

// ---- the tile (t14, t18) --------------------------------------------------------------------
// One instance: every head dim up to 256 is computed at 256. A block holds 64 keys (FlashAttention-
// 2's tile at D 256: 128 keys of K and V alone would take 128 KiB), Q tiles of kBr = 64 queries,
// 8 warps: S and dP in warp tiles of 32 queries x 16 keys (2 x 4 warps), dK and dV in 32 keys x 64
// columns (2 warps along the keys, 4 along the columns), dQ in 32 queries x 64 columns.
constexpr int kD256 = 256;
constexpr int kKeys = 64;             // keys per block
constexpr int kKeyShift = 1;          // dK, dV: 1 << kKeyShift warps of 32 keys each
constexpr int kLdP64 = kKeys + kPad;  // a row of the P or dS tile: 64 keys + padding (16-bit)
constexpr int kTileRows = kD256;      // a row of the Q, K, V, dO tiles: 256 elements, swizzled

// Shared memory: K, V, one Q and one dO buffer (t18: the next Q tile's copies run under dQ only),
// L and D double-buffered, the P and dS tiles. 147 KiB: an A100's 163 KiB hold it.
constexpr int smem_bytes() {
  return (2 * kKeys + 2 * kBr) * kTileRows * 2 + 4 * kBr * int(sizeof(float)) +
         2 * kBr * kLdP64 * 2;
}
static_assert(smem_bytes() == 150528, "147 KiB, as 06/t18 and t21");

// ---- rows of d (t19, t21) -------------------------------------------------------------------
// Rows [row0, row0 + ROWS) of a [seq, d] row-major matrix into a swizzled tile of rows of D >= d
// elements; the chunks at or past d, and the rows at or past seq, zero-filled (nothing is read for
// them). d a multiple of 8: 16 bytes per cp.async (a chunk lies wholly inside the row or wholly
// past it, every row starts at a 16-byte boundary). kAnyLength (t21), where d is no multiple of 8:
// the rows are not 16-byte aligned, and each chunk is copied element by element, synchronously,
// zeros past d. A kernel compiled without it (t19's code) is the faster one for multiples of 8:
// the launcher picks the instance by d.
template <class T, int D, int ROWS, bool kAnyLength>
__device__ __forceinline__ void load_rows_of_d(T* s, const T* g, int64_t row0, int64_t seq, int d,
                                               int tid) {
  constexpr int kChunksPerRow = D / 8;
#pragma unroll
  for (int c = tid; c < ROWS * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, cc = c % kChunksPerRow;
    const bool valid = row0 + r < seq && cc * 8 < d;
    const T* src = valid ? g + (row0 + r) * int64_t(d) + cc * 8 : g;
    if constexpr (kAnyLength) {
      fa::tiles::copy_chunk_by_elements(s + swizzled_offset<D>(r, cc), valid ? src : nullptr,
                                        d - cc * 8);
    } else {
      fa::mma::cp_async_16(s + swizzled_offset<D>(r, cc), src, valid);
    }
  }
}

// A 16 x DC fp32 accumulator, times `mul`, into rows r0 + g, r0 + g + 8 and columns col0 ..
// col0 + DC - 1 of a [seq, d] matrix: rows at or past seq (with packing, the next sequence's) and
// columns at or past d (zero: the products of zero columns) are not written. d a multiple of 8:
// the two adjacent columns 2t, 2t + 1 of an 8-column group are both below d or both past it, one
// 4-byte store. kAnyLength (d no multiple of 8): a row may start at an odd element, each element
// on its own.
template <class T, int DC, bool kAnyLength>
__device__ __forceinline__ void store_rows_of_d(T* out, const float (&acc)[DC / 8][4], int64_t r0,
                                                int col0, int64_t seq, float mul, int d, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = r0 + g + 8 * h;
    if (row >= seq) continue;
    T* dst = out + row * int64_t(d) + col0 + 2 * t;
#pragma unroll
    for (int nt = 0; nt < DC / 8; ++nt) {
      const uint32_t pair = fa::mma::pack2<T>(acc[nt][2 * h] * mul, acc[nt][2 * h + 1] * mul);
      if constexpr (kAnyLength) {
        const int col = col0 + 8 * nt + 2 * t;
        unsigned short* const e = reinterpret_cast<unsigned short*>(dst + 8 * nt);
        if (col < d) e[0] = static_cast<unsigned short>(pair & 0xffffu);
        if (col + 1 < d) e[1] = static_cast<unsigned short>(pair >> 16);
      } else if (col0 + 8 * nt < d) {
        *reinterpret_cast<uint32_t*>(dst + 8 * nt) = pair;
      }
    }
  }
}

}  // namespace fa::ch06::t21

// The conversion is a kernel: each translation unit that includes this header compiles its own.
namespace {

// dQ's last n < 4 elements, from `first` on: mma_bwd_v5.cuh's convert_dq_kernel converts groups of
// four, and a head dim that is no multiple of 8 can leave 1-3 past the last group.
template <class T>
__global__ void convert_dq_tail_kernel(const float* __restrict__ acc, T* __restrict__ dq,
                                       int64_t first, int n, float scale) {
  if (int(threadIdx.x) < n) {
    const int64_t i = first + threadIdx.x;
    reinterpret_cast<unsigned short*>(dq)[i] =
        static_cast<unsigned short>(fa::mma::pack2<T>(acc[i] * scale, 0.0f) & 0xffffu);
  }
}

}  // namespace
