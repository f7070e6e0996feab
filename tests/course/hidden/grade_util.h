// grade_util.h: what the hidden (instructor) tests share.
//
// Which kernel a test runs. The grader grades a wrong kernel by substitution:
//   FA_GRADE_SUBSTITUTE="05/v1_scalar_fp32=mutant/05_causal_off_by_one,07/v1_tma_wgmma=..."
// makes every hidden test of 05/v1_scalar_fp32 run the mutant instead (tests/mutants/mutants.h:
// fa::find_mutant), keeping the test's name, so the grader scores the mutant exactly where it
// would score the student's kernel. The right-hand side may also name a registered kernel: the
// grader's self-test grades the reference rung as the submission of an assignment
// ("05/user_next_rung=05/v3_fa2_warp_layout"). A name on the left that is not registered (an
// assignment nobody submitted) gets its tests only through a substitution.
//
// Variants. A hidden test runs every (dtype, head dim) the kernel lists; an UNSUPPORTED variant is
// counted and the test goes on with the next one (never a skip of the whole test), and a test in
// which no variant ran FAILS: a kernel that refuses everything scores nothing.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu.h"
#include "harness.h"
#include "mutants.h"
#include "registry.h"

namespace fa::grade {

// The kernels each family grades: the exercises (their solutions are the marked files, see
// common/exercise.h) ...
inline const std::vector<std::string>& exercise_kernels() {
  static const std::vector<std::string> names = {
      "01/v3_warp_shuffle_vec4", "02/v2_single_read", "03/v2_smem_tiled", "04/v3_smem_padded",
      "05/v1_scalar_fp32",       "06/v1_fp32",        "07/v1_tma_wgmma",  "08/v1_split_kv"};
  return names;
}
// ... and the build-the-next-rung assignments, which a student registers under this name.
constexpr const char* kAssignmentSuffix = "/user_next_rung";

// FA_GRADE_SUBSTITUTE parsed: kernel name -> the name of what runs in its place.
inline std::map<std::string, std::string> substitutions() {
  std::map<std::string, std::string> out;
  const char* env = std::getenv("FA_GRADE_SUBSTITUTE");
  std::stringstream ss(env ? env : "");
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq != std::string::npos && eq > 0) out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

// The kernel a test of `name` runs: the substitute (a mutant first, else a registered kernel), or
// the registered kernel itself. nullptr when neither exists.
template <class K>
const K* kernel_for(const std::string& name) {
  const auto subs = substitutions();
  const auto it = subs.find(name);
  if (it == subs.end()) return find_entry<K>(name);
  if (const K* m = find_mutant<K>(it->second)) return m;
  return find_entry<K>(it->second);
}

// The test parameters of a family of kernel type K: each exercise kernel of that type, every
// registered "*/user_next_rung" of that type, and every substituted name that resolves to a K.
// `keep` selects within the family (e.g. the decoding kernels).
template <class K>
std::vector<std::string> graded_names(bool (*keep)(const K&) = nullptr) {
  std::set<std::string> names(exercise_kernels().begin(), exercise_kernels().end());
  for (const std::string& n : entry_names<K>())
    if (n.find(kAssignmentSuffix) != std::string::npos) names.insert(n);
  for (const auto& [from, to] : substitutions()) names.insert(from);
  std::vector<std::string> out;
  for (const std::string& n : names) {
    const K* k = kernel_for<K>(n);
    if (k != nullptr && (keep == nullptr || keep(*k))) out.push_back(n);
  }
  return out;
}

// Counts the variants a test ran and those the kernel refused.
struct Tally {
  int ran = 0, unsupported = 0;
  std::string why;  // the last refusal
  void add(const RunResult& r) {
    if (r.status == Status::Unsupported) {
      ++unsupported;
      why = r.message;
      return;
    }
    ++ran;
    EXPECT_EQ(r.status, Status::Pass) << r.report() << exercise_hint(r.kernel);
  }
  // At the end of a test: nothing ran = a failure (a kernel that refuses every input is no answer).
  void finish() const {
    std::cout << "[ variants ] " << ran << " ran, " << unsupported << " unsupported\n";
    EXPECT_GT(ran, 0) << "no variant ran: the kernel refused every one (" << why << ")";
  }
};

inline RunOptions check_only(uint64_t seed) {
  RunOptions o;
  o.seed = seed;
  o.time = false;
  return o;
}

// Every (dtype, head dim) a kernel lists.
template <class K>
std::vector<std::pair<DType, int>> variants(const K& k) {
  std::vector<std::pair<DType, int>> out;
  for (DType t : k.dtypes)
    for (int d : k.head_dims) out.push_back({t, d});
  return out;
}

}  // namespace fa::grade

// Skip when there is no suitable GPU: the grader reports the check as "not graded: no GPU".
#define FA_GRADE_SKIP_WITHOUT_GPU(min_sm)                            \
  do {                                                               \
    const std::string fa_why_ = ::fa::gpu_skip_reason(min_sm);       \
    if (!fa_why_.empty()) GTEST_SKIP() << "not graded: " << fa_why_; \
  } while (0)

// A registry name ("05/v1_scalar_fp32") as a test-parameter name ("05_v1_scalar_fp32"), as in
// tests/test_util.h, so the grader's filters read alike for both suites.
struct GradeNamePrinter {
  template <class P>
  std::string operator()(const testing::TestParamInfo<P>& info) const {
    std::string s = info.param;
    for (char& c : s)
      if (!isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
  }
};

// The fixture of a family: the kernel of the parameter (or its substitute), or a failure.
template <class K>
class GradedKernel : public ::testing::TestWithParam<std::string> {
 protected:
  const K& kernel() {
    const K* k = ::fa::grade::kernel_for<K>(GetParam());
    if (k == nullptr) throw std::runtime_error("no kernel or mutant named for " + GetParam());
    return *k;
  }
};
