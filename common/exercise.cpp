#include "exercise.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>

#include "registry.h"

namespace fa {

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

const std::regex& kernels_marker() {
  static const std::regex r(R"(^\s*//\s*EXERCISE-KERNELS:\s*(.+)$)");
  return r;
}

// The names of a solution's EXERCISE-KERNELS line, in order; empty without one.
std::vector<std::string> marked_kernels(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> kernels;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, kernels_marker())) continue;
    std::stringstream ks(m[1].str());
    for (std::string k; std::getline(ks, k, ',');)
      if (!trim(k).empty()) kernels.push_back(trim(k));
    break;
  }
  return kernels;
}

}  // namespace

std::string exercise_path_for(const std::string& repo_root, const std::string& solution_path) {
  namespace fs = std::filesystem;
  const fs::path p(solution_path);
  if (solution_path.rfind("chapters/", 0) == 0)
    return (p.parent_path() / "exercises" / p.filename()).generic_string();
  // A shared header (common/device/): the student finds its exercise beside the chapter's other
  // exercise files, in the folder of the chapter that introduces it.
  const std::vector<std::string> kernels = marked_kernels(read_all(fs::path(repo_root) / p));
  if (kernels.empty()) return "";
  const std::string prefix = kernels[0].substr(0, kernels[0].find('/')) + "_";
  const fs::path chapters = fs::path(repo_root) / "chapters";
  if (!fs::is_directory(chapters)) return "";
  for (const auto& entry : fs::directory_iterator(chapters)) {
    const std::string folder = entry.path().filename().string();
    if (entry.is_directory() && folder.rfind(prefix, 0) == 0)
      return (fs::path("chapters") / folder / "exercises" / p.filename()).generic_string();
  }
  return "";
}

ExerciseResult make_exercise(const std::string& solution, const std::string& solution_path,
                             const std::string& exercise_path) {
  static const std::regex kBegin(R"(^(\s*)//\s*EXERCISE\(([^)]+)\):\s*(.*)$)");
  static const std::regex kPlaceholder(R"(^\s*//\s*EXERCISE-PLACEHOLDER\s*$)");
  static const std::regex kEnd(R"(^\s*//\s*EXERCISE-END\s*$)");

  ExerciseResult r;
  std::vector<std::string> kernels;
  std::ostringstream out;
  out << "// GENERATED from " << solution_path << " by fa_make_exercise: this is the exercise.\n"
      << "// Fill in every TODO(exercise) block; the tests and benchmarks run your version when "
         "the\n"
      << "// project is configured with -DFA_BUILD_EXERCISES=ON (preset \"exercises\").\n";
  enum { Outside, Solution, Placeholder } state = Outside;
  std::istringstream in(solution);
  std::string line;
  int line_no = 0, begin_line = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::smatch m;
    if (state == Outside) {
      if (std::regex_match(line, m, kernels_marker())) {
        std::stringstream ks(m[1].str());
        std::string k;
        while (std::getline(ks, k, ','))
          if (!trim(k).empty()) kernels.push_back(trim(k));
        out << line << "\n";
      } else if (std::regex_match(line, m, kBegin)) {
        state = Solution;
        begin_line = line_no;
        ++r.todos;
        out << m[1].str() << "// TODO(exercise " << trim(m[2].str()) << "): " << trim(m[3].str())
            << "\n";
      } else if (std::regex_match(line, kPlaceholder) || std::regex_match(line, kEnd)) {
        r.error =
            solution_path + ":" + std::to_string(line_no) + ": marker outside an EXERCISE block";
        return r;
      } else {
        out << line << "\n";
      }
    } else if (std::regex_match(line, kBegin)) {
      r.error = solution_path + ":" + std::to_string(line_no) + ": EXERCISE block inside another";
      return r;
    } else if (std::regex_match(line, kPlaceholder)) {
      if (state == Placeholder) {
        r.error =
            solution_path + ":" + std::to_string(line_no) + ": two EXERCISE-PLACEHOLDER lines";
        return r;
      }
      state = Placeholder;
    } else if (std::regex_match(line, kEnd)) {
      state = Outside;
    } else if (state == Placeholder) {
      // The stand-in the student replaces. In the solution it is commented out ("// code"), so
      // that it does not compile there; the exercise gets it without the comment marker.
      size_t indent = line.find_first_not_of(" \t");
      if (indent != std::string::npos && line.compare(indent, 3, "// ") == 0)
        line.erase(indent, 3);
      else if (indent != std::string::npos && line.compare(indent, 2, "//") == 0)
        line.erase(indent, 2);
      out << line << "\n";
    }  // state == Solution: the lines the student writes are dropped
  }
  if (state != Outside) {
    r.error = solution_path + ":" + std::to_string(begin_line) + ": EXERCISE block never ends";
    return r;
  }
  if (kernels.empty()) {
    r.error = solution_path + ": no '// EXERCISE-KERNELS: name, ...' line";
    return r;
  }
  if (r.todos == 0) {
    r.error = solution_path + ": no EXERCISE(...) block";
    return r;
  }
  out << "\n// Registered so that a failing test names this file (see common/exercise.h).\n"
      << "#include \"registry.h\"\nFA_REGISTER(Exercise, {\"" << exercise_path << "\", {";
  for (size_t i = 0; i < kernels.size(); ++i) out << (i ? ", " : "") << "\"" << kernels[i] << "\"";
  out << "}, " << r.todos << "});\n";
  r.text = out.str();
  r.ok = true;
  return r;
}

void throw_exercise_todo(const std::string& exercise, const std::string& block) {
  std::string file = exercise;
  for (const Exercise& e : registry<Exercise>())
    if (std::find(e.kernels.begin(), e.kernels.end(), exercise) != e.kernels.end()) file = e.name;
  throw ExerciseTodo("TODO in " + file + ": not implemented (TODO(exercise " + block + ") of " +
                     exercise + " is still the stand-in; fill it in)");
}

int unless_exercise_todo(const std::function<int()>& checks, std::ostream& os) {
  try {
    return checks();
  } catch (const ExerciseTodo& e) {
    os << "\n  not checked: " << e.what()
       << "\n  (a CPU exercise: its tests carry the label `exercise`; `ctest -L exercise` in "
          "this build's folder runs them)\n";
    return 0;
  }
}

std::string fnv1a64_hex(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  char out[17];
  std::snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string untouched_exercise(const std::string& kernel) {
  namespace fs = std::filesystem;
#ifdef FA_SOURCE_ROOT  // the tree this library was built from (common/CMakeLists.txt)
  const fs::path root = FA_SOURCE_ROOT;
#else
  const fs::path root;
  return "";
#endif
  static const std::string list = read_all(root / kHandedOut);
  if (list.empty()) return "";
  for (const Exercise& e : registry<Exercise>()) {
    if (std::find(e.kernels.begin(), e.kernels.end(), kernel) == e.kernels.end()) continue;
    // A line of the list: "<hash> <path>".
    std::istringstream lines(list);
    for (std::string hash, path; lines >> hash >> path;)
      if (path == e.name && fs::exists(root / path) && hash == fnv1a64_hex(read_all(root / path)))
        return e.name;
  }
  return "";
}

std::vector<std::string> find_marked_solutions(const std::string& repo_root) {
  namespace fs = std::filesystem;
  std::vector<std::string> found;
  // chapters/, and common/ for a chapter's piece that later chapters build on (common/device/).
  for (const char* top : {"chapters", "common"}) {
    const fs::path folder = fs::path(repo_root) / top;
    if (!fs::exists(folder)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(folder)) {
      if (!entry.is_regular_file()) continue;
      const fs::path& p = entry.path();
      if (p.parent_path().filename() == "exercises") continue;
      std::string ext = p.extension().string();
      if (ext != ".cu" && ext != ".cpp" && ext != ".cuh" && ext != ".h") continue;
      // A marker line, not a mention of one (exercise.h shows one in a comment).
      const std::string text = read_all(p);
      if (text.find("EXERCISE-KERNELS:") == std::string::npos || marked_kernels(text).empty())
        continue;
      found.push_back(fs::relative(p, repo_root).generic_string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace fa
