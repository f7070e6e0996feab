// A kernel's registration (its dtypes and head_dims) and its dispatch (the switch over head_dim
// that picks an instantiation) are two lists. Every other test skips an UNSUPPORTED run, so a head
// dim that is registered but has no instantiation would only ever be skipped. Here every
// registered attention kernel, forward and backward, runs every dtype and head dim it registers on
// a tiny shape, and a refusal FAILS unless this GPU is the reason: too little shared memory, too
// old (the harness's min_sm, or an sm_90a kernel off Hopper), or a binary built for another GPU.
#include <regex>

#include "test_util.h"

namespace {

using fa::AttentionShape;

// A backward's refusal for want of a forward that makes O and L, where a registered forward takes
// the dtype and head dim but none of those runs on this GPU.
constexpr const char* kNoForwardHere = "a registered forward takes it, but none runs on this GPU";

// The refusals that are about this GPU, not the kernel's lists: the kernels say "more than this
// GPU allows" (shared memory) or "compute capability 9.0 ... only" (sm_90a), the harness "needs
// sm_NN or newer" (min_sm) and "rebuild with -DCMAKE_CUDA_ARCHITECTURES" (no code for this GPU),
// and the backward test kNoForwardHere.
bool gpu_is_the_reason(const std::string& message) {
  static const std::regex gpu(
      "more than this GPU allows|compute capability [0-9.]+ .*only|needs sm_[0-9]+ or newer|"
      "rebuild with -DCMAKE_CUDA_ARCHITECTURES|" +
      std::string(kNoForwardHere));
  return std::regex_search(message, gpu);
}

// The kernels' own words for "no instantiation of this head dim" (the default of their dispatch).
bool no_instantiation(const std::string& message) {
  static const std::regex missing(
      "not instantiated|has no head_dim|takes head dims|has head dims|no [a-z0-9]+ D=[0-9]+ "
      "version");
  return std::regex_search(message, missing);
}

fa::RunOptions check_only() {
  fa::RunOptions o;
  o.seed = 29;
  o.time = false;
  return o;
}

// One run per registered (dtype, head dim): PASS, or UNSUPPORTED for a reason about this GPU.
template <class K, class Run>
void every_registered_variant(const K& k, Run run) {
  FA_SKIP_WITHOUT_GPU(k.min_sm);
  int ran = 0, total = 0;
  std::string gpu_refusals;
  for (fa::DType t : k.dtypes)
    for (int d : k.head_dims) {
      ++total;
      const fa::RunResult r = run(k, AttentionShape{1, 2, 33, 47, d, true, 0.0f}, t);
      const std::string what = k.name + " " + fa::dtype_name(t) + " D=" + std::to_string(d);
      if (r.status == fa::Status::NoGpu) GTEST_SKIP() << r.message << FA_SKIP_NOTE;
      if (r.status == fa::Status::Unsupported && gpu_is_the_reason(r.message)) {
        std::cout << "[ variant  ] " << what << ": UNSUPPORTED on this GPU: " << r.message << "\n";
        gpu_refusals += (gpu_refusals.empty() ? "" : "; ") + what + ": " + r.message;
        continue;
      }
      ++ran;
      if (r.status == fa::Status::Unsupported)
        ADD_FAILURE() << what << " is registered, but the kernel refused it: " << r.message
                      << (no_instantiation(r.message)
                              ? "\n(its dispatch has no instantiation for this head dim or "
                                "dtype: add one, or drop it from the registration)"
                              : "");
      else
        EXPECT_EQ(r.status, fa::Status::Pass) << what << "\n" << r.report();
    }
  std::cout << "[ variants ] " << k.name << ": ran " << ran << " of " << total << " variants\n";
  if (ran == 0) GTEST_SKIP() << k.name << " ran none of its variants here: " << gpu_refusals;
}

class RegisteredFwdHeadDims : public ::testing::TestWithParam<std::string> {};
class RegisteredBwdHeadDims : public ::testing::TestWithParam<std::string> {};

TEST_P(RegisteredFwdHeadDims, EveryRegisteredDtypeAndHeadDimRuns) {
  every_registered_variant(*fa::find_entry<fa::AttentionFwdKernel>(GetParam()),
                           [](const fa::AttentionFwdKernel& k, AttentionShape s, fa::DType t) {
                             return fa::run_attention_fwd(k, s, t, check_only());
                           });
}

TEST_P(RegisteredBwdHeadDims, EveryRegisteredDtypeAndHeadDimRuns) {
  every_registered_variant(
      *fa::find_entry<fa::AttentionBwdKernel>(GetParam()),
      [](const fa::AttentionBwdKernel& k, AttentionShape s, fa::DType t) {
        fa::RunResult r = fa::run_attention_bwd(k, s, t, check_only());
        // No forward for O and L: a registry gap when no forward lists
        // (t, D) at all, this GPU's when one does but cannot run here.
        if (r.status == fa::Status::Unsupported && r.message.rfind("no forward kernel", 0) == 0) {
          bool listed = false;
          for (const fa::AttentionFwdKernel* f :
               fa::entries_with_prefix<fa::AttentionFwdKernel>(""))
            listed = listed ||
                     (fa::supports(f->dtypes, t) && fa::supports(f->head_dims, int(s.head_dim)));
          if (listed) r.message += " (" + std::string(kNoForwardHere) + ")";
        }
        return r;
      });
}

INSTANTIATE_TEST_SUITE_P(Registered, RegisteredFwdHeadDims,
                         ::testing::ValuesIn(fa::entry_names<fa::AttentionFwdKernel>()),
                         RegistryNamePrinter());
INSTANTIATE_TEST_SUITE_P(Registered, RegisteredBwdHeadDims,
                         ::testing::ValuesIn(fa::entry_names<fa::AttentionBwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RegisteredFwdHeadDims);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RegisteredBwdHeadDims);

}  // namespace
