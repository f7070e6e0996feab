// The tour: runs every chapter in order, at its default sizes, and ends with one summary line per
// chapter. Each chapter prints its own kernel ladder (correctness and speed of every version,
// with the copy-bandwidth and cuBLAS reference rows). Without a GPU each chapter runs its CPU tier
// and names what it skipped; the summary says so chapter by chapter, and the tour still exits 0
// if nothing failed. Chapter 07's own kernels need an H100 or H200 and a build for compute
// capability 9.0; on another GPU its tables list them as unsupported beside the 05/v5 peer.
//
//   tour                    every chapter
//   tour 01 05              only these chapters
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "chapter.h"
#include "gpu.h"

int main(int argc, char** argv) {
  const std::vector<const fa::Chapter*> chapters = fa::chapters_in_order();
  std::string numbers;
  for (const fa::Chapter* c : chapters) numbers += " " + c->number;
  const std::vector<std::string> wanted(argv + 1, argv + argc);
  for (const std::string& w : wanted) {
    if (w == "--help" || w == "-h") {
      std::cout << "usage: tour [chapter numbers...]\nRuns the chapter programs in order at their "
                   "default sizes (all of them, or the ones named).\n\nchapters:\n";
      for (const fa::Chapter* c : chapters)
        std::cout << "  " << c->number << "  " << c->title << "\n";
      std::cout << "\nexample:\n  " << fa::printed_command("tour.help").line() << "\n";
      return 0;
    }
    bool known = false;
    for (const fa::Chapter* c : chapters) known = known || w == c->number;
    if (!known) {
      std::cerr << "tour: error: no chapter '" << w << "'; the chapters are" << numbers
                << " (tour --help)\n";
      return 2;
    }
  }
  std::cout << "FlashAttention from scratch: the tour\nGPU: " << fa::describe_gpu() << "\n";
  struct Row {
    std::string number, title, skipped;
    int code;
  };
  std::vector<Row> rows;
  for (const fa::Chapter* c : chapters) {
    bool take = wanted.empty();
    for (const std::string& w : wanted) take = take || w == c->number;
    if (!take) continue;
    const int code = fa::run_chapter(*c, {}, "tour: chapter " + c->number);
    rows.push_back({c->number, c->title, fa::skipped_without_gpu(), code});
  }
  int failed = 0;
  std::cout << "\n== Tour summary ==\n";
  size_t width = 0;  // the longest title, so that the verdicts line up
  for (const Row& r : rows) width = std::max(width, r.title.size());
  for (const Row& r : rows) {
    std::cout << "  " << r.number << "  " << r.title
              << std::string(width + 2 - r.title.size(), ' ');
    if (r.code == 1)
      std::cout << "CHECK FAILED";
    else if (r.code != 0)
      std::cout << "ERROR";
    else if (!r.skipped.empty())
      std::cout << "CPU tier ok; GPU part skipped: " << r.skipped;
    else
      std::cout << "ok: CPU tier and GPU kernels";
    std::cout << "\n";
    if (r.code != 0) ++failed;
  }
  if (!fa::have_gpu())
    std::cout << "No GPU here (" << fa::gpu_info().why_absent
              << "): only the CPU tier ran; no kernel was checked or timed.\n";
  return failed == 0 ? 0 : 1;
}
