#include "check.h"

#include <cstdlib>
#include <sstream>

namespace fa {

namespace {
std::string where(const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line;
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
