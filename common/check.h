// check.h: every CUDA call and every kernel launch is checked, and a failure names the file and
// line it came from. These checks are exceptions, not assert(): they survive Release builds.
#pragma once
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace fa {

// Something went wrong: a CUDA error, a bad argument, a failed requirement.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The user asked for something the program cannot do: a misspelt option, an unknown kernel, a
// size that does not fit. Programs print these as "<program>: error: <message>" and exit 2, with
// no file and line (the user's input is the cause, not this code); every other Error keeps its
// file:line, because the cause is in the code or the CUDA runtime.
struct UsageError : Error {
  using Error::Error;
};

// A kernel was asked for something it was not built for (a head dim with no instantiation, a
// dtype it does not take, a GPU too old for its instructions). The harness reports these as
// UNSUPPORTED with the message, never as a wrong answer.
struct Unsupported : Error {
  using Error::Error;
};

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_error(const std::string& msg, const char* file, int line);
[[noreturn]] void throw_unsupported(const std::string& msg, const char* file, int line);

// When the environment variable FA_SYNC_LAUNCHES=1 is set, FA_CHECK_LAUNCH also waits for the
// kernel, so an asynchronous fault (an illegal address) is reported at the launch that caused it.
bool sync_after_launch();

}  // namespace fa

#define FA_CUDA_CHECK(expr)                                                                 \
  do {                                                                                      \
    cudaError_t fa_err_ = (expr);                                                           \
    if (fa_err_ != cudaSuccess) ::fa::throw_cuda_error(fa_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// Use right after every <<<...>>> launch.
#define FA_CHECK_LAUNCH()                                                  \
  do {                                                                     \
    FA_CUDA_CHECK(cudaGetLastError());                                     \
    if (::fa::sync_after_launch()) FA_CUDA_CHECK(cudaDeviceSynchronize()); \
  } while (0)

// A precondition that must hold in Release builds too.
#define FA_REQUIRE(cond, msg)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::fa::throw_error(std::string("requirement failed (" #cond "): ") + (msg), __FILE__, \
                        __LINE__);                                                         \
  } while (0)

// Input the kernel does not handle: a clear, catchable refusal instead of a wrong answer.
#define FA_UNSUPPORTED_IF(cond, msg)                              \
  do {                                                            \
    if (cond) ::fa::throw_unsupported((msg), __FILE__, __LINE__); \
  } while (0)
