// The GPU tests share their float64 attention references between processes (ctest runs each
// test in a process of its own; common/reference_cache.h says why and how): under ctest every
// test process keeps them in the folder FA_REFERENCE_CACHE names (the build folder's
// reference_cache/, which ctest empties before the GPU tests and removes after them;
// tests/CMakeLists.txt). Run by hand, without that variable, the process shares nothing.
#include <cstdlib>

#include "reference_cache.h"

namespace {

const bool kSharing = [] {
  const char* folder = std::getenv("FA_REFERENCE_CACHE");
  if (folder != nullptr && *folder != '\0') fa::share_references_in(folder);
  return true;
}();

}  // namespace
