// ch05_fragments.cpp: the m16n8k16 fragment maps (see ch05_fragments.h).
// A CPU exercise (notes/coursework.md): every function below.
// EXERCISE-KERNELS: cpu/05_fragments
#include "ch05_fragments.h"

#include "exercise.h"

namespace fa::ch05 {

RowCol a_element(int lane, int reg, int half) {
  const int g = lane / 4, t = lane % 4;
  // EXERCISE(a-fragment): the table for A in ch05_fragments.h as arithmetic: the group and the thread-in-group place the lane inside each 8x8 quarter of A, the register says which quarter, the half which of two neighbouring columns
  return {g + 8 * (reg % 2), 2 * t + half + 8 * (reg / 2)};
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<RowCol>("cpu/05_fragments", "a-fragment");
  // EXERCISE-END
}

RowCol b_element(int lane, int reg, int half) {
  const int g = lane / 4, t = lane % 4;
  // EXERCISE(b-fragment): the table for B in ch05_fragments.h: B is held by columns, so the group picks the column; the register says which half of k, the thread-in-group and the half place k within it
  return {2 * t + half + 8 * reg, g};
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<RowCol>("cpu/05_fragments", "b-fragment");
  // EXERCISE-END
}

RowCol c_element(int lane, int reg) {
  const int g = lane / 4, t = lane % 4;
  // EXERCISE(c-fragment): the table for C in ch05_fragments.h: four fp32 values per lane, two neighbouring columns in each 8-row half
  return {g + 8 * (reg / 2), 2 * t + reg % 2};
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<RowCol>("cpu/05_fragments", "c-fragment");
  // EXERCISE-END
}

AccSource p_repack(int reg, int half) {
  // EXERCISE(p-repack): P[row][key] must sit in the lane that already holds S[row][key]: find which of the two n8 accumulator tiles, and which accumulator of the same lane, holds the element that a_element gives for this register and half
  return {reg / 2, 2 * (reg % 2) + half};
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<AccSource>("cpu/05_fragments", "p-repack");
  // EXERCISE-END
}

}  // namespace fa::ch05
