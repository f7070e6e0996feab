#include "check.h"

#include <cstdlib>
#include <sstream>

namespace fa {

namespace {
// file:line of a check, the file named relative to the repository: __FILE__ holds the path the
// compiler was given, "../chapters/..." from a build folder inside the repository (Ninja's
// relative paths) or the absolute path on the machine that built the library from a build folder
// elsewhere, and a message must carry neither that machine's folders nor the build folder's
// place (FA_SOURCE_ROOT is the repository root as the build saw it, with a trailing slash;
// common/CMakeLists.txt).
std::string where(const char* file, int line) {
  std::string f = file;
#ifdef FA_SOURCE_ROOT
  const std::string root = FA_SOURCE_ROOT;
  if (f.compare(0, root.size(), root) == 0) f = f.substr(root.size());
#endif
  while (f.compare(0, 3, "../") == 0) f = f.substr(3);
  std::ostringstream os;
  os << f << ":" << line;
  return os.str();
}
}  // namespace

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << where(file, line) << ": CUDA error " << cudaGetErrorName(err) << " ("
     << cudaGetErrorString(err) << ") in " << expr;
  throw Error(os.str());
}

void throw_error(const std::string& msg, const char* file, int line) {
  throw Error(where(file, line) + ": " + msg);
}

void throw_unsupported(const std::string& msg, const char* file, int line) {
  throw Unsupported(msg + " (" + where(file, line) + ")");
}

bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("FA_SYNC_LAUNCHES");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

}  // namespace fa
