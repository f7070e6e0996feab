// The exercise generator (common/exercise.h): what it cuts, what it refuses, and that every
// committed exercise is exactly what the generator makes of today's solution (so exercise and
// solution never drift). A course that edits the exercises in place can skip the last test with
// `ctest -E ExercisesInSync`.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "exercise.h"

namespace {

const char* kSolution =
    "// EXERCISE-KERNELS: 99/demo\n"
    "int f(int x) {\n"
    "  int y = 0;\n"
    "  // EXERCISE(square): set y to x squared\n"
    "  y = x * x;\n"
    "  // EXERCISE-PLACEHOLDER\n"
    "  // (void)x;\n"
    "  // EXERCISE-END\n"
    "  return y;\n"
    "}\n";

TEST(Exercises, GeneratorCutsTheSolutionAndKeepsThePlaceholder) {
  fa::ExerciseResult r =
      fa::make_exercise(kSolution, "chapters/99/demo.cu", "chapters/99/exercises/demo.cu");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.todos, 1);
  EXPECT_EQ(r.text.find("y = x * x;"), std::string::npos) << "the solution line must be gone";
  EXPECT_NE(r.text.find("  // TODO(exercise square): set y to x squared\n  (void)x;\n"),
            std::string::npos)
      << r.text;
  EXPECT_NE(
      r.text.find("FA_REGISTER(Exercise, {\"chapters/99/exercises/demo.cu\", {\"99/demo\"}, 1});"),
      std::string::npos)
      << r.text;
}

TEST(Exercises, GeneratorRefusesBrokenMarkers) {
  EXPECT_FALSE(
      fa::make_exercise("// EXERCISE-KERNELS: a\n// EXERCISE(x): y\nint z;\n", "s", "e").ok)
      << "a block that never ends";
  EXPECT_FALSE(fa::make_exercise("// EXERCISE(x): y\n// EXERCISE-END\n", "s", "e").ok)
      << "no EXERCISE-KERNELS line";
  EXPECT_FALSE(fa::make_exercise("// EXERCISE-KERNELS: a\n// EXERCISE-END\n", "s", "e").ok)
      << "an END without a block";
}

// A CPU exercise's stand-in throws, naming the exercise (its file, once the exercise file has
// registered itself) and the block left to write.
TEST(Exercises, CpuStandInThrowsAndNamesItsTodo) {
  try {
    fa::exercise_todo<int>("cpu/99_demo", "square");
    FAIL() << "the stand-in returned";
  } catch (const fa::ExerciseTodo& e) {
    EXPECT_NE(
        std::string(e.what()).find("TODO in cpu/99_demo: not implemented (TODO(exercise square)"),
        std::string::npos)
        << e.what();
  }
}

TEST(Exercises, EveryChapterHasAnExercise) {
  std::vector<std::string> solutions = fa::find_marked_solutions(FA_SOURCE_DIR);
  for (const char* chapter :
       {"chapters/00_", "chapters/01_", "chapters/02_", "chapters/03_", "chapters/04_",
        "chapters/05_", "chapters/06_", "chapters/07_", "chapters/08_", "chapters/09_"}) {
    bool found = false;
    for (const std::string& s : solutions) found = found || s.rfind(chapter, 0) == 0;
    EXPECT_TRUE(found) << chapter << "* has no marked solution file";
  }
}

// A rung's exercise stands beside it; a chapter's shared header that later chapters build on lives
// in common/device/, and its exercise goes to the chapter that introduces it, so that the student
// finds it with the chapter's other exercise files and HINTS.md.
TEST(Exercises, ExerciseOfASharedHeaderIsInItsChapter) {
  EXPECT_EQ(fa::exercise_path_for(FA_SOURCE_DIR, "chapters/02_online_softmax/v2_single_read.cu"),
            "chapters/02_online_softmax/exercises/v2_single_read.cu");
  EXPECT_EQ(fa::exercise_path_for(FA_SOURCE_DIR, "common/device/online_softmax.cuh"),
            "chapters/02_online_softmax/exercises/online_softmax.cuh");
  const std::vector<std::string> solutions = fa::find_marked_solutions(FA_SOURCE_DIR);
  EXPECT_NE(std::find(solutions.begin(), solutions.end(), "common/device/online_softmax.cuh"),
            solutions.end());
  EXPECT_EQ(std::find(solutions.begin(), solutions.end(), "common/exercise.h"), solutions.end())
      << "exercise.h shows a marker line in a comment; it marks nothing";
}

TEST(Exercises, ExercisesInSync) {
  namespace fs = std::filesystem;
  // A student release (tests/course/make_release.py) holds the exercises in place of the
  // solutions: there is nothing to generate them from.
  if (fs::exists(fs::path(FA_SOURCE_DIR) / "STUDENT_RELEASE.md"))
    GTEST_SKIP() << "a student release: the solutions are not here";
  for (const std::string& sol : fa::find_marked_solutions(FA_SOURCE_DIR)) {
    std::ifstream in(fs::path(FA_SOURCE_DIR) / sol, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const std::string ex = fa::exercise_path_for(FA_SOURCE_DIR, sol);
    ASSERT_FALSE(ex.empty()) << sol << ": no chapter folder for its EXERCISE-KERNELS line";
    fa::ExerciseResult r = fa::make_exercise(text.str(), sol, ex);
    ASSERT_TRUE(r.ok) << r.error;
    std::ifstream committed(fs::path(FA_SOURCE_DIR) / ex, std::ios::binary);
    ASSERT_TRUE(committed.good()) << ex
                                  << " is missing: run `cmake --build build --target exercises`";
    std::ostringstream have;
    have << committed.rdbuf();
    EXPECT_EQ(have.str(), r.text) << ex << " is stale (its solution " << sol
                                  << " changed): run `cmake --build build --target exercises`";
  }
}

}  // namespace

// A student release lists its exercise files as handed out (make_release.py writes the list with
// the same hash), and a chapter program does not count the failure of a kernel whose exercise file
// is unchanged. The hash must be the same in both languages, and a tree without the list (the
// course's own) counts every failure.
TEST(Exercises, UntouchedExercisesOnlyInARelease) {
  EXPECT_EQ(fa::fnv1a64_hex(""), "cbf29ce484222325");  // FNV-1a's offset basis
  EXPECT_EQ(fa::fnv1a64_hex("a"), "af63dc4c8601ec8c");
  if (std::filesystem::exists(std::filesystem::path(FA_SOURCE_DIR) / fa::kHandedOut))
    GTEST_SKIP() << "a student release: its exercise files may be untouched";
  EXPECT_EQ(fa::untouched_exercise("05/v1_scalar_fp32"), "");
  EXPECT_EQ(fa::untouched_exercise("00/vector_add"), "");
}
