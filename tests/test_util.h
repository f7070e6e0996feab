// test_util.h: what the GPU tests share.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "gpu.h"
#include "harness.h"

// In the exercise build each GPU test checks a student's kernel: a skip there means the exercise
// was not checked at all, which a skip reason must not leave to guesswork.
#if defined(FA_EXERCISE_BUILD)
#define FA_SKIP_NOTE " (exercises can only be checked on a GPU: this one was not checked)"
#else
#define FA_SKIP_NOTE ""
#endif

// Skip (reported as skipped by ctest) when there is no GPU or it is older than min_sm.
#define FA_SKIP_WITHOUT_GPU(min_sm)                                \
  do {                                                             \
    std::string fa_why_ = ::fa::gpu_skip_reason(min_sm);           \
    if (!fa_why_.empty()) GTEST_SKIP() << fa_why_ << FA_SKIP_NOTE; \
  } while (0)

// A registry name ("05/v1_scalar_fp32") as a test-parameter name ("05_v1_scalar_fp32").
inline std::string test_name_of(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}
struct RegistryNamePrinter {
  template <class P>
  std::string operator()(const testing::TestParamInfo<P>& info) const {
    return test_name_of(info.param);
  }
};

// Expect a harness run to pass; an UNSUPPORTED run (the kernel refused the input with a clear
// message) is a skip, not a failure.
#define FA_EXPECT_PASS(result_expr)                                                               \
  do {                                                                                            \
    ::fa::RunResult fa_r_ = (result_expr);                                                        \
    if (fa_r_.status == ::fa::Status::Unsupported || fa_r_.status == ::fa::Status::NoGpu)         \
      GTEST_SKIP() << fa_r_.message << (fa_r_.status == ::fa::Status::NoGpu ? FA_SKIP_NOTE : ""); \
    EXPECT_EQ(fa_r_.status, ::fa::Status::Pass) << fa_r_.report();                                \
  } while (0)
