// The tour: runs every chapter in order, at its default sizes, and ends with one summary line per
// chapter. Each chapter prints its own kernel ladder (correctness and speed of every version,
// with the copy-bandwidth and cuBLAS reference rows). Without a GPU each chapter runs its CPU tier
// and names what it skipped; the tour still exits 0 if nothing failed.
//
//   tour                    every chapter
//   tour 01 05              only these chapters
#include <iostream>
#include <string>
#include <vector>

#include "chapter.h"
#include "gpu.h"

int main(int argc, char** argv) {
  std::vector<std::string> wanted(argv + 1, argv + argc);
  for (const std::string& w : wanted)
    if (w == "--help" || w == "-h") {
      std::cout << "usage: tour [chapter numbers...]\nRuns every chapter program in order at its "
                   "default sizes.\n";
      return 0;
    }
  std::cout << "FlashAttention from scratch: the tour\nGPU: " << fa::describe_gpu() << "\n";
  struct Row {
    std::string number, title;
    int code;
  };
  std::vector<Row> rows;
  for (const fa::Chapter* c : fa::chapters_in_order()) {
    bool take = wanted.empty();
    for (const std::string& w : wanted) take = take || w == c->number;
    if (!take) continue;
    rows.push_back({c->number, c->title, fa::run_chapter(*c, {})});
  }
  int failed = 0;
  std::cout << "\n== Tour summary ==\n";
  for (const Row& r : rows) {
    std::cout << "  " << r.number << "  " << r.title;
    for (size_t i = r.title.size(); i < 40; ++i) std::cout << ' ';
    std::cout << (r.code == 0 ? "ok" : r.code == 1 ? "CHECK FAILED" : "ERROR") << "\n";
    if (r.code != 0) ++failed;
  }
  if (!fa::have_gpu())
    std::cout << "No GPU here: every GPU kernel was skipped; the CPU tier ran.\n";
  return failed == 0 ? 0 : 1;
}
