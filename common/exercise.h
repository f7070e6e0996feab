// exercise.h: exercises generated from the solutions, so the two never drift.
//
// A solution file marks what the student writes:
//
//   // EXERCISE-KERNELS: 01/v3_warp_shuffle_vec4          (once, near the top: what it registers)
//   ...
//   // EXERCISE(warp-max): reduce v over the warp with __shfl_xor_sync, offsets 16, 8, 4, 2, 1
//   for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(~0u, v, offset));
//   // EXERCISE-PLACEHOLDER
//   // v = v;   (optional, commented out here: code that stands in for the solution so the
//   //           exercise compiles; the generator removes the leading "// ")
//   // EXERCISE-END
//
// make_exercise() turns that into the student's file: every region becomes
// "// TODO(exercise warp-max): <hint>" followed by the placeholder lines, and the file ends with a
// registration (registry.h: Exercise) that names it, so a failing test says
// "TODO in chapters/01_safe_softmax/exercises/v3_warp_shuffle_vec4.cu: not implemented".
// Generated files live in chapters/NN_*/exercises/ (a marked header of common/device/ too: its
// chapter's, exercise_path_for); `cmake --build build --target exercises` regenerates them, and
// the CPU test ExercisesInSync fails when one is stale.
//
// CPU exercises (the CPU models of every chapter, notes/coursework.md) are marked the same way;
// their EXERCISE-KERNELS line names the exercise ("cpu/02_pair_merge") instead of a kernel, and their
// placeholder is a stand-in that throws, so a test of an unfinished model fails and says where:
//   // EXERCISE-PLACEHOLDER
//   // return fa::exercise_todo<MaxSum>("cpu/02_pair_merge", "pair-merge");
#pragma once
#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

namespace fa {

struct ExerciseResult {
  bool ok = false;
  std::string text;   // the exercise file
  std::string error;  // why not, when !ok (unbalanced markers, no EXERCISE-KERNELS line, ...)
  int todos = 0;
};

// solution_path and exercise_path are relative to the repository root (they go into comments
// and the registration).
ExerciseResult make_exercise(const std::string& solution_text, const std::string& solution_path,
                             const std::string& exercise_path);

// Solution files (relative paths) under chapters/ and common/ with an EXERCISE-KERNELS line.
std::vector<std::string> find_marked_solutions(const std::string& repo_root);

// chapters/01_x/v3.cu -> chapters/01_x/exercises/v3.cu. A shared header outside chapters/ is the
// exercise of the chapter that introduces it, the chapter of the first kernel its EXERCISE-KERNELS
// line names: common/device/online_softmax.cuh ("02/v1_online_two_pass, ...") ->
// chapters/02_online_softmax/exercises/online_softmax.cuh. "" when that chapter has no folder.
std::string exercise_path_for(const std::string& repo_root, const std::string& solution_path);

// What the stand-in of an unfinished CPU exercise throws: "TODO in <exercise file>: not
// implemented (TODO(exercise <block>) ...)". The file comes from the exercise's registration.
struct ExerciseTodo : std::logic_error {
  using std::logic_error::logic_error;
};
[[noreturn]] void throw_exercise_todo(const std::string& exercise, const std::string& block);
// The stand-in itself, usable where a value of type T is expected.
template <class T = void>
T exercise_todo(const std::string& exercise, const std::string& block) {
  throw_exercise_todo(exercise, block);
}

// A chapter program's CPU checks, where they call a CPU exercise: `checks` returns its number of
// failures; an unfinished exercise (ExerciseTodo) is reported on `os` as not checked and counts
// as none, so that the exercise build's programs go on to their GPU part. The exercise's own
// tests (label exercise) are what fail until it is written.
int unless_exercise_todo(const std::function<int()>& checks, std::ostream& os);

// A student release lists its exercise files as it hands them out, each with a hash of its bytes
// (kHandedOut at the release's root, written by tests/course/make_release.py). The exercise file
// of `kernel` (the Exercise registration naming it) when that file is still those bytes: the
// kernel fails because its exercise is not written yet, which a chapter program reports as such
// and does not count as a failed check, so that an untouched release's quick start passes on a
// GPU too. "" in the course's own tree (no list), for a kernel no exercise names, and as soon as
// the student changed the file: from then on a wrong answer fails the program as any other.
inline constexpr const char* kHandedOut = "EXERCISES_AS_HANDED_OUT.txt";
std::string untouched_exercise(const std::string& kernel);
// The 64-bit FNV-1a hash of `bytes`, in 16 hex digits: the hash of that list.
std::string fnv1a64_hex(const std::string& bytes);

}  // namespace fa
