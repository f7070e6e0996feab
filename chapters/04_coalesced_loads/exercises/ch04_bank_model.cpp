// GENERATED from chapters/04_coalesced_loads/ch04_bank_model.cpp by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// ch04_bank_model.cpp: shared-memory banks and the transpose's write phase on the CPU (see
// ch04_bank_model.h).
// A CPU exercise (notes/coursework.md): the bank of a word, the passes of a warp's access, and the
// transposed write.
// EXERCISE-KERNELS: cpu/04_banks
#include "ch04_bank_model.h"

#include <algorithm>
#include <map>
#include <set>

#include "check.h"
#include "exercise.h"

namespace fa::ch04 {

int bank_of(int64_t word) {
  // TODO(exercise bank): consecutive 4-byte words sit in consecutive banks, and the 33rd word is in the first bank again
  return fa::exercise_todo<int>("cpu/04_banks", "bank");
}

int conflict_ways(const std::vector<int64_t>& words) {
  FA_REQUIRE(words.size() == size_t(kBanks), "conflict_ways: one word per lane of a warp");
  // TODO(exercise conflict-ways): group the DIFFERENT words the warp asks for by their bank; the busiest bank decides the number of passes (a word several lanes read is delivered once)
  return fa::exercise_todo<int>("cpu/04_banks", "conflict-ways");
}

std::vector<int64_t> column_read_words(int pad, int y) {
  std::vector<int64_t> words(kBanks);
  for (int tx = 0; tx < kBanks; ++tx) words[tx] = int64_t(tx) * (kModelTile + pad) + y;
  return words;
}

TransposedWrite transposed_write(int64_t r0, int64_t c0, int tx, int ty, int pass, int64_t rows,
                                 int64_t cols) {
  TransposedWrite w;
  // TODO(exercise transposed-write): the tile goes to its mirrored place, output rows c0.. and columns r0..; consecutive threads (tx) must still write consecutive output addresses, so the transposition happens in which tile element a thread reads, not in where it writes
  (void)r0, (void)c0, (void)tx, (void)ty, (void)pass, (void)rows, (void)cols;
  return fa::exercise_todo<TransposedWrite>("cpu/04_banks", "transposed-write");
  return w;
}

}  // namespace fa::ch04

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/04_coalesced_loads/exercises/ch04_bank_model.cpp", {"cpu/04_banks"}, 3});
