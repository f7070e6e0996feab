// Chapter 06's training-step check, with every registered backward kernel's gradients.
//
// A toy head (ch06::toy_problem: seq_q = seq_k = 64, the kernel's head dim, not causal and causal)
// learns Q, K, V that fit a teacher's output, by 25 steps of gradient descent, twice: with the
// kernel's dQ, dK, dV, and with float64 reference gradients computed from the same stored (dtype-
// rounded) weights. The weights live in the kernel's dtype and every update is rounded to it, as
// the kernel reads them; O and L come from the CPU float64 forward (O stored in the dtype, L in
// fp32), as a forward kernel would have saved them. Checked:
//   (a) every gradient, at every step, is finite (the outputs are poisoned before each call, so an
//       element the kernel skips shows up here);
//   (b) the loss falls: at most 2 rises, final < 0.5 x initial;
//   (c) the two loss trajectories agree within ch06::trajectory_band(dtype): 1e-5 relative in
//       fp32, 8 units of roundoff in fp16 / bf16 (ch06_cpu_model.cpp says how it was set).
// Each kernel trains at its first listed (dtype, head dim) that it runs on this GPU.
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ch06_cpu_model.h"
#include "check.h"
#include "test_util.h"

namespace {

constexpr int64_t kSeq = 64;  // several tiles for every kernel, as small as a CPU reference likes

// "dK[3 * d + 7] = nan at step 4", or "" when every value is finite.
std::string first_nonfinite(const ch06::Grads& g, int step, int64_t d) {
  const std::pair<const char*, const std::vector<double>*> outs[] = {
      {"dQ", &g.dQ}, {"dK", &g.dK}, {"dV", &g.dV}, {"D", &g.D}};
  for (const auto& [name, v] : outs)
    for (size_t x = 0; x < v->size(); ++x)
      if (!std::isfinite((*v)[x])) {
        std::ostringstream os;
        os << name << "[";
        if (std::string(name) == "D")
          os << x;
        else
          os << int64_t(x) / d << " * d + " << int64_t(x) % d;
        os << "] = " << (*v)[x] << " at step " << step;
        return os.str();
      }
  return "";
}

std::string trajectory(const std::vector<double>& l) {
  std::ostringstream os;
  os << std::scientific << std::setprecision(6);
  for (double x : l) os << " " << x;
  return os.str();
}

class TrainingStep : public ::testing::TestWithParam<std::string> {
 protected:
  const fa::AttentionBwdKernel& kernel() {
    return *fa::find_entry<fa::AttentionBwdKernel>(GetParam());
  }
};

TEST_P(TrainingStep, LossFollowsReferenceGradients) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  const fa::AttentionBwdKernel& kern = kernel();
  const std::string hint = fa::exercise_hint(kern.name);
  std::string refusals;  // why earlier (dtype, head dim) pairs did not run
  for (fa::DType t : kern.dtypes)
    for (int d : kern.head_dims) {
      // Train both cases first: a refusal (fa::Unsupported, or no code for this GPU) comes at the
      // first gradient call, and moves on to the next pair before anything is judged.
      struct Run {
        ch06::ToyProblem p;
        std::vector<double> losses;
        std::string nonfinite;
      };
      std::vector<Run> runs;
      bool refused = false;
      for (bool causal : {false, true}) {
        Run r{ch06::toy_problem(kSeq, d, causal, t), {}, {}};
        const ch06::GradSource gpu = ch06::gpu_grad_source(kern, t);
        int step = 0;
        // The kernel's gradients, with the first non-finite value of the run remembered.
        auto checked = [&](const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<float>& dO,
                           const std::vector<double>& O, const std::vector<double>& L,
                           const fa::AttentionShape& s) {
          ch06::Grads g = gpu(q, k, v, dO, O, L, s);
          if (r.nonfinite.empty()) r.nonfinite = first_nonfinite(g, step, s.head_dim);
          ++step;
          return g;
        };
        try {
          r.losses = ch06::train_toy(r.p, checked);
        } catch (const fa::Error& e) {
          bool unsupported = false;
          const std::string why = fa::kernel_error_message(e, &unsupported);
          if (!unsupported)
            FAIL() << r.p.shape.str() << " " << fa::dtype_name(t) << ": " << why << hint;
          refusals += std::string(refusals.empty() ? "" : "; ") + fa::dtype_name(t) +
                      " D=" + std::to_string(d) + ": " + why;
          refused = true;
          break;
        }
        runs.push_back(std::move(r));
      }
      if (refused) continue;

      for (const Run& r : runs) {
        const std::string what = r.p.shape.str() + " " + fa::dtype_name(t) + ", lr " +
                                 std::to_string(r.p.lr) + ", " + std::to_string(r.p.steps) +
                                 " steps";
        SCOPED_TRACE(what);
        const std::vector<double> ref = ch06::train_toy(r.p, ch06::grads_from_reference);
        const ch06::TrajectoryCheck c = ch06::check_trajectory(r.losses, ref, t);
        // The numbers of a passing run too: what the band is measured against on a real GPU.
        std::cout << "[ training ] " << kern.name << " " << what << ": " << c.str() << "\n";
        const std::string losses = "\n  loss, kernel gradients:   " + trajectory(r.losses) +
                                   "\n  loss, float64 gradients:  " + trajectory(ref) + hint;
        EXPECT_TRUE(r.nonfinite.empty())
            << "the kernel returned a non-finite gradient: " << r.nonfinite << hint;
        EXPECT_TRUE(c.descends())
            << "gradient descent with the kernel's gradients does not lower the loss: " << c.str()
            << losses;
        EXPECT_TRUE(c.agrees()) << "the loss strays from the float64-gradient trajectory: "
                                << c.str() << losses;
      }
      return;  // the first pair that ran is the one checked
    }
  GTEST_SKIP() << kern.name << " ran at none of its (dtype, head dim) pairs here"
               << (refusals.empty() ? std::string(" (it lists none)") : ": " + refusals);
}

INSTANTIATE_TEST_SUITE_P(Registered, TrainingStep,
                         ::testing::ValuesIn(fa::entry_names<fa::AttentionBwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TrainingStep);

}  // namespace
