// test_util.h: what the GPU tests share.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "exercise.h"
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

// Head dims between the Hopper instances 64, 128 and 256 (multiples of 8) that a kernel which
// rounds head dims up (rounds_head_dim, registry.h) takes without listing them.
inline const std::vector<int> kBetweenInstances = {40, 80, 96, 160, 192, 224};
// Head dims that are no multiple of 8: only a kernel that rounds every head dim (head_dim_step 1,
// registry.h) takes them; every other kernel refuses them. 201: above 128, where such a kernel
// computes at 256.
inline const std::vector<int> kOffTheStep = {59, 111, 201};
// Those of kBetweenInstances and kOffTheStep that kernel k takes without listing them.
template <class K>
std::vector<int> rounded_dims(const K& k) {
  std::vector<int> out;
  for (const std::vector<int>* list : {&kBetweenInstances, &kOffTheStep})
    for (int d : *list)
      if (!fa::supports(k.head_dims, d) && fa::takes_head_dim(k, d)) out.push_back(d);
  return out;
}

// The head dims an attention kernel runs under the sanitizers: those it lists, and for a kernel
// that rounds head dims up (rounds_head_dim, registry.h) one between instances for each instance
// it rounds to, among 80, 192 and 160 (160 where 192 is an instance, as in 07/t52), whose stores
// must stay inside rows of the real head dim; and those of kOffTheStep (59, 111, 201) it takes.
template <class K>
std::vector<int> sanitized_dims(const K& k) {
  std::vector<int> dims = k.head_dims;
  if (!k.rounds_head_dim) return dims;
  std::vector<int64_t> rounded_to;  // the instances a head dim below is already rounded up to
  for (int d : {80, 192, 160}) {
    if (fa::supports(k.head_dims, d) || !fa::takes_head_dim(k, d)) continue;
    const int64_t at = fa::computed_head_dim(k, d);
    if (std::find(rounded_to.begin(), rounded_to.end(), at) != rounded_to.end()) continue;
    rounded_to.push_back(at);
    dims.push_back(d);
  }
  // A kernel that takes every head dim copies rows that are not 16-byte aligned element by
  // element: those paths too, at the head dims off the step it takes.
  for (int d : kOffTheStep)
    if (fa::takes_head_dim(k, d)) dims.push_back(d);
  return dims;
}

// A registry name ("05/v1_scalar_fp32") as a test-parameter name ("05_v1_scalar_fp32").
// FA_SANITIZE_ONLY=07/,08/ (comma-separated name prefixes) limits the sanitizer's small runs
// (SanitizeSmall*) to those kernels: a sanitizer multiplies a kernel's time by 10-100x, and after
// changing one chapter that chapter's kernels are the ones to re-check. Unset: every kernel.
inline bool sanitize_selected(const std::string& name) {
  const char* only = std::getenv("FA_SANITIZE_ONLY");
  if (only == nullptr || *only == '\0') return true;
  const std::string list = only;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string prefix = list.substr(at, comma - at);
    if (!prefix.empty() && name.rfind(prefix, 0) == 0) return true;
    at = comma + 1;
  }
  return false;
}

// In a student release, a kernel whose exercise file is still as handed out (common/exercise.h):
// the harness fails it without a launch, and its own tests (label gpu-exercise) say so. A test
// that runs it only beside other kernels (a smoke test, a mutant's correct twin) leaves it out
// and prints why; true when `name` is to be left out.
inline bool exercise_not_written(const std::string& name) {
  const std::string todo = ::fa::untouched_exercise(name);
  if (!todo.empty())
    std::printf("  left out %s: its exercise is not written yet (TODO in %s)\n", name.c_str(),
                todo.c_str());
  return !todo.empty();
}

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

// Every variant of a test runs, whatever the others did. A variant is one harness run (a dtype,
// head dim and shape); one the kernel or this GPU cannot take (UNSUPPORTED, e.g. a head dim that
// needs more shared memory than an A100 has) is skipped alone, with its reason printed, and the
// variants after it still run. At the end of the test the tally prints "ran N of M variants" and
// the test is skipped only when none ran. A fixture that derives from VariantTest gets this; in
// any other test FA_EXPECT_PASS skips the whole test at the first UNSUPPORTED run.
class VariantTally {
 public:
  // The tally of the test running now, or nullptr outside a VariantTest.
  static VariantTally*& current() {
    static VariantTally* now = nullptr;
    return now;
  }
  // Counts a run; false when it did not run (UNSUPPORTED), after recording why.
  bool ran(const ::fa::RunResult& r) {
    ++total_;
    if (r.status != ::fa::Status::Unsupported) {
      ++ran_;
      return true;
    }
    for (Reason& w : reasons_)
      if (w.message == r.message) {
        ++w.runs;
        return false;
      }
    reasons_.push_back({r.message, r.shape + " " + r.dtype, 1});
    return false;
  }
  // Prints the count and the reasons; returns the skip message when no variant ran, else "".
  std::string finish(const std::string& test) const {
    if (total_ == 0) return "";
    ::testing::Test::RecordProperty("variants", total_);
    ::testing::Test::RecordProperty("variants_ran", ran_);
    std::string why;
    for (const Reason& w : reasons_) {
      why += (why.empty() ? "" : "; ") + std::to_string(w.runs) + " x " + w.message;
      std::cout << "[ variant  ] " << test << ": UNSUPPORTED " << w.runs << " run"
                << (w.runs == 1 ? "" : "s") << " (first " << w.first << "): " << w.message << "\n";
    }
    if (!why.empty()) ::testing::Test::RecordProperty("unsupported", why);
    std::cout << "[ variants ] " << test << ": ran " << ran_ << " of " << total_ << " variants\n";
    if (ran_ > 0) return "";
    return "ran none of its " + std::to_string(total_) + " variants: " + why + FA_SKIP_NOTE;
  }

 private:
  struct Reason {
    std::string message, first;
    int runs = 0;
  };
  int total_ = 0, ran_ = 0;
  std::vector<Reason> reasons_;
};

// A test over registered kernels (GetParam() is the registry name) whose FA_EXPECT_PASS runs are
// tallied per variant.
class VariantTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { VariantTally::current() = &tally_; }
  void TearDown() override {
    VariantTally::current() = nullptr;
    if (IsSkipped()) return;  // skipped before any variant (no GPU, not enough memory)
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string why =
        tally_.finish(std::string(info->test_suite_name()) + "." + info->name());
    if (!why.empty()) GTEST_SKIP() << why;
  }

 private:
  VariantTally tally_;
};

// Expect a harness run to pass. NoGpu skips the test at once. An UNSUPPORTED run (the kernel
// refused the input with a clear message) skips that variant in a VariantTest (above), and the
// whole test elsewhere; a FAIL is a failure either way.
#define FA_EXPECT_PASS(result_expr)                                                         \
  do {                                                                                      \
    ::fa::RunResult fa_r_ = (result_expr);                                                  \
    if (fa_r_.status == ::fa::Status::NoGpu) GTEST_SKIP() << fa_r_.message << FA_SKIP_NOTE; \
    if (::VariantTally* fa_t_ = ::VariantTally::current()) {                                \
      if (!fa_t_->ran(fa_r_)) break;                                                        \
    } else if (fa_r_.status == ::fa::Status::Unsupported) {                                 \
      GTEST_SKIP() << fa_r_.message;                                                        \
    }                                                                                       \
    EXPECT_EQ(fa_r_.status, ::fa::Status::Pass) << fa_r_.report();                          \
  } while (0)
