// fa_make_exercise: writes chapters/NN_*/exercises/<file> for every solution file that carries
// EXERCISE markers (see exercise.h; a marked header of common/device/ too, into its chapter's
// exercises/).
//
//   fa_make_exercise <repo-root>           regenerate every exercise
//   fa_make_exercise <repo-root> --check   exit 1 and list the exercises that are stale
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "exercise.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: fa_make_exercise <repo-root> [--check]\n";
    return argc < 2 ? 2 : 0;
  }
  namespace fs = std::filesystem;
  const std::string root = argv[1];
  const bool check = argc > 2 && std::string(argv[2]) == "--check";
  int stale = 0, errors = 0;
  for (const std::string& sol : fa::find_marked_solutions(root)) {
    std::ifstream in(fs::path(root) / sol, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const std::string ex = fa::exercise_path_for(root, sol);
    if (ex.empty()) {
      std::cerr << "error: " << sol << ": no chapter folder for the first kernel of its "
                << "EXERCISE-KERNELS line (its exercise goes there)\n";
      ++errors;
      continue;
    }
    fa::ExerciseResult r = fa::make_exercise(text.str(), sol, ex);
    if (!r.ok) {
      std::cerr << "error: " << r.error << "\n";
      ++errors;
      continue;
    }
    fs::path out_path = fs::path(root) / ex;
    std::ifstream old(out_path, std::ios::binary);
    std::ostringstream old_text;
    old_text << old.rdbuf();
    if (old_text.str() == r.text) continue;
    if (check) {
      std::cout << "stale: " << ex << " (from " << sol << ")\n";
      ++stale;
      continue;
    }
    fs::create_directories(out_path.parent_path());
    std::ofstream(out_path, std::ios::binary) << r.text;
    std::cout << "wrote " << ex << " (" << r.todos << " TODO blocks)\n";
  }
  return errors ? 2 : stale ? 1 : 0;
}
