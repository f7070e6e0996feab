// ch05_fragments.h: who holds which element of mma.sync.aligned.m16n8k16, as plain functions.
//
// One warp of 32 lanes computes D = A B + C: A is 16x16 (row-major, 16-bit values), B is 16x8
// (k rows, n columns; column-major, 16-bit), C and D are 16x8 in fp32. Each lane holds a fixed
// piece of every operand in its registers; the layouts are the PTX ISA's ("Matrix Fragments for
// mma.m16n8k16 with floating point type"), as common/device/mma.cuh states them and
// notes/figures/fig_mma_fragments.svg draws them (notes/figures/fig_mma_fragments.py computes the
// same owners). With g = lane / 4 (the group, 0..7) and t = lane % 4 (the thread in the group):
//
//   A: 4 registers of two 16-bit halves (the low half is the lower column)
//      a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   B: 2 registers of two 16-bit halves (the low half is the lower k)
//      b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   C, D: 4 fp32 registers
//      c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
//
// The point of chapter 05's tensor-core kernels (05/v2_mma.cu onwards): S = Q K^T comes out as C
// fragments of n8 tiles, and P V needs P as an A fragment of k16 slices. The lane that holds
// S[row][col] in the accumulators is the lane that must hold P[row][col] in the A fragment, so
// P is repacked in registers (two fp32 accumulators into one 16-bit pair), with no shuffle and no
// shared memory. p_repack says which accumulator each half of P's A fragment comes from.
//
// A CPU exercise (notes/coursework.md): the four functions below; tests/cpu/test_ch05_fragments.cpp
// checks them.
#pragma once

namespace fa::ch05 {

constexpr int kWarpLanes = 32;
constexpr int kARegs = 4;  // 32-bit registers per lane: A 16x16 of 16-bit values
constexpr int kBRegs = 2;  // B 16x8 of 16-bit values
constexpr int kCRegs = 4;  // C/D 16x8 of fp32

struct RowCol {
  int row = 0;  // for B: k
  int col = 0;  // for B: n
  bool operator==(const RowCol& o) const { return row == o.row && col == o.col; }
};

// lane 0..31, reg 0..kARegs-1, half 0 (low 16 bits) or 1 (high 16 bits) -> the element of A.
RowCol a_element(int lane, int reg, int half);
// lane 0..31, reg 0..kBRegs-1, half 0 or 1 -> the element of B, as (k, n).
RowCol b_element(int lane, int reg, int half);
// lane 0..31, reg 0..kCRegs-1 -> the element of C (or D).
RowCol c_element(int lane, int reg);

// P's A fragment for the keys 16 kk .. 16 kk + 15 of a row tile is built from the accumulators of
// the two n8 tiles 2 kk (keys 0-7 of the slice) and 2 kk + 1 (keys 8-15), in the SAME lane:
// register `reg`, half `half` of the A fragment is accumulator c[acc] of n8 tile 2 kk + tile.
struct AccSource {
  int tile = 0;  // 0 or 1: which of the two n8 accumulator tiles
  int acc = 0;   // 0..3: which fp32 accumulator of that tile
  bool operator==(const AccSource& o) const { return tile == o.tile && acc == o.acc; }
};
AccSource p_repack(int reg, int half);

}  // namespace fa::ch05
