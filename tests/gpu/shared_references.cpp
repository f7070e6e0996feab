// The GPU tests share their float64 attention references between processes (ctest runs each
// test in a process of its own; common/reference_cache.h says why and how): every test process
// keeps them in the build folder's reference_cache/, which ctest empties before the GPU tests and
// removes after them (tests/CMakeLists.txt).
#include "reference_cache.h"

namespace {

const bool kSharing = [] {
  fa::share_references_in(FA_REFERENCE_CACHE_DIR);
  return true;
}();

}  // namespace
