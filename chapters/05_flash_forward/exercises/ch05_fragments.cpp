// GENERATED from chapters/05_flash_forward/ch05_fragments.cpp by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// ch05_fragments.cpp: the m16n8k16 fragment maps (see ch05_fragments.h).
// A CPU exercise (notes/coursework.md): every function below.
// EXERCISE-KERNELS: cpu/05_fragments
#include "ch05_fragments.h"

#include "exercise.h"

namespace fa::ch05 {

RowCol a_element(int lane, int reg, int half) {
  const int g = lane / 4, t = lane % 4;
  // TODO(exercise a-fragment): the table for A in ch05_fragments.h as arithmetic: the group and the thread-in-group place the lane inside each 8x8 quarter of A, the register says which quarter, the half which of two neighbouring columns
  return fa::exercise_todo<RowCol>("cpu/05_fragments", "a-fragment");
}

RowCol b_element(int lane, int reg, int half) {
  const int g = lane / 4, t = lane % 4;
  // TODO(exercise b-fragment): the table for B in ch05_fragments.h: B is held by columns, so the group picks the column; the register says which half of k, the thread-in-group and the half place k within it
  return fa::exercise_todo<RowCol>("cpu/05_fragments", "b-fragment");
}

RowCol c_element(int lane, int reg) {
  const int g = lane / 4, t = lane % 4;
  // TODO(exercise c-fragment): the table for C in ch05_fragments.h: four fp32 values per lane, two neighbouring columns in each 8-row half
  return fa::exercise_todo<RowCol>("cpu/05_fragments", "c-fragment");
}

AccSource p_repack(int reg, int half) {
  // TODO(exercise p-repack): P[row][key] must sit in the lane that already holds S[row][key]: find which of the two n8 accumulator tiles, and which accumulator of the same lane, holds the element that a_element gives for this register and half
  return fa::exercise_todo<AccSource>("cpu/05_fragments", "p-repack");
}

}  // namespace fa::ch05

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/05_flash_forward/exercises/ch05_fragments.cpp", {"cpu/05_fragments"}, 4});
