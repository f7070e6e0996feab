// chapter.h: the frame every chapter program shares. A chapter registers its body:
//
//   int run_chapter(const std::vector<std::string>& args);
//   FA_REGISTER(Chapter, {"01", "safe softmax", run_chapter});
//
// and its program is common/chapter_main.cpp built with FA_CHAPTER_NUMBER="01". The tour runs
// every registered chapter in order with its default arguments.
//
// Exit codes: 0 all checks passed (or there was no GPU and the CPU tier passed), 1 a check failed,
// 2 bad command line or another error.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "cli.h"
#include "registry.h"

namespace fa {

int chapter_main(const std::string& number, int argc, char** argv);
int run_chapter(const Chapter& c, const std::vector<std::string>& args);  // catches and reports

// The header every chapter prints: its title, the GPU (or that there is none) and the seed.
void print_chapter_header(std::ostream& os, const std::string& number, const std::string& title,
                          const Cli& cli);

// Printed by a chapter that found no GPU: what it skipped and why.
void print_no_gpu(std::ostream& os, const std::string& what_was_skipped);

std::vector<std::string> split_list(const std::string& s);
[[noreturn]] void throw_unknown_kernel(const std::string& name,
                                       const std::vector<std::string>& choices);

// Kernels of a registry type that `--kernel` selects: all with the chapter's prefix, or the one
// named (throws fa::Error naming the choices when it does not exist).
template <class K> std::vector<const K*> select_kernels(const std::string& prefix,
                                                        const std::string& requested) {
  std::vector<const K*> all = entries_with_prefix<K>(prefix);
  if (requested.empty() || requested == "all") return all;
  std::vector<const K*> out;
  for (const std::string& want : split_list(requested)) {
    const K* k = find_entry<K>(want);
    if (k == nullptr) throw_unknown_kernel(want, entry_names<K>(prefix));
    out.push_back(k);
  }
  return out;
}

}  // namespace fa
