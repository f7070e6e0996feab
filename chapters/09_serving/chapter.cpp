// Chapter 09: attention as it is served — variable-length batches, sliding windows, a paged KV
// cache. (The program body is being written; for now it lists the chapter's kernels.)
#include <iostream>
#include <string>
#include <vector>

#include "chapter.h"
#include "registry.h"

namespace {

int run_chapter09(const std::vector<std::string>& /*args*/) {
  for (const auto* k : fa::entries_with_prefix<fa::VarlenFwdKernel>("09/")) std::cout << k->name << "\n";
  for (const auto* k : fa::entries_with_prefix<fa::VarlenBwdKernel>("09/")) std::cout << k->name << "\n";
  for (const auto* k : fa::entries_with_prefix<fa::PagedFwdKernel>("09/")) std::cout << k->name << "\n";
  for (const auto* k : fa::entries_with_prefix<fa::PagedAppendKernel>("09/")) std::cout << k->name << "\n";
  return 0;
}

}  // namespace

FA_REGISTER(Chapter, {"09", "serving: variable-length batches, sliding windows, a paged KV cache",
                      run_chapter09});
