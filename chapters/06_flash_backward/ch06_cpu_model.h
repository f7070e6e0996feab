// ch06_cpu_model.h: the FlashAttention-2 backward pass, made executable on the CPU.
//
// Two implementations of the same gradients, both in float64 from the float inputs a kernel sees:
//
//  * standard_backward: the derivation "by hand", with the whole N x N matrix P materialised
//      P = softmax(scale Q K^T),  dV = P^T dO,  dP = dO V^T,  dS = P o (dP - D),
//      dQ = scale dS K,  dK = scale dS^T Q,  D_i = rowsum(dO_i o O_i).
//    This is what fa::attention_backward_ref computes (with Eigen); ours is plain loops.
//
//  * flash_backward_tiled: the algorithm the GPU kernels implement, with explicit block loops.
//    It never holds more than one Br x Bc tile of S, P, dP, dS at a time and recomputes P from
//    the saved log-sum-exp L instead of storing it:
//      preprocess:  D_i = rowsum(dO_i o O_i)
//      dK, dV:      for each K/V tile (Bc rows), loop over the Q tiles (Br rows) that can see it
//      dQ:          for each Q tile, loop over the K/V tiles it can see
//
// The tests (tests/cpu/test_ch06_*.cpp) check the two against each other and against the float64
// reference, and run a few steps of gradient descent with each. The same training steps run with
// a GPU kernel's gradients (gpu_grad_source, at the end of this header) in the chapter program and
// in tests/gpu/test_training_step.cpp, for every registered backward kernel.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dtype.h"
#include "shapes.h"

namespace fa {
struct AttentionBwdKernel;
}

namespace ch06 {

struct Grads {
  std::vector<double> dQ, dK, dV, D;  // layouts of q, k, v and L
};

struct TileSizes {
  int64_t Br = 16;  // query rows per tile
  int64_t Bc = 16;  // key rows per tile
};

// Everything below takes whole tensors, [batch, heads, seq, head_dim] row-major, like the kernels.

// The forward the backward needs: O and L = logsumexp_j(scale q_i . k_j) (-inf for a row that
// sees no key, whose O is 0). Plain loops, float64.
void forward(const float* q, const float* k, const float* v, const fa::AttentionShape& s,
             std::vector<double>& O, std::vector<double>& L);

// The standard backward with P materialised (one head at a time).
Grads standard_backward(const float* q, const float* k, const float* v, const float* dO,
                        const fa::AttentionShape& s);

// The tiled FlashAttention-2 backward. O and L come from the forward (they are what the forward
// kernel saved). Fully masked tiles are skipped, exactly as the kernels skip them.
Grads flash_backward_tiled(const float* q, const float* k, const float* v, const float* dO,
                           const double* O, const double* L, const fa::AttentionShape& s,
                           TileSizes tiles);

// rowsum(P o dP) for every query row: the quantity D_i = rowsum(dO_i o O_i) stands in for.
std::vector<double> rowsum_p_dp(const float* q, const float* k, const float* v, const float* dO,
                                const fa::AttentionShape& s);

// ---- A training step: learn Q, K, V of one head so that attention(Q, K, V) fits a target O*. --
// loss = 0.5 ||O - O*||^2, so dL/dO = O - O*; the gradient source turns (q, k, v, dO, O, L) into
// dQ, dK, dV. Parameters are stored as `dtype` values (what a kernel reads): drawn, then rounded to
// it, and each float64 update w - lr g is rounded to it again, as a 16-bit training step stores its
// weights. dO is rounded to `dtype` too. The loss, O and L are float64 from those stored values.
struct ToyProblem {
  fa::AttentionShape shape{1, 1, 8, 8, 4, false, 0.0f};
  int steps = 20;
  double lr = 0.5;
  uint64_t seed = 6;
  fa::DType dtype = fa::DType::F32;  // fp32: the float storage of the original toy, unchanged
};
// The toy generalised to one head of seq_q = seq_k = n and head dim d, stored as t, with the step
// count and learning rate that halve its loss in float64 (tests/gpu/test_training_step.cpp and the
// chapter program use it with a kernel's head dim, e.g. n = 64).
ToyProblem toy_problem(int64_t n, int64_t d, bool causal, fa::DType t);
using GradSource = std::function<Grads(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, const std::vector<float>& dO,
                                       const std::vector<double>& O, const std::vector<double>& L,
                                       const fa::AttentionShape& s)>;
// Returns the loss before each step and after the last (steps + 1 values).
std::vector<double> train_toy(const ToyProblem& p, const GradSource& grads);

// Gradient sources for train_toy.
Grads grads_from_tiled(const std::vector<float>& q, const std::vector<float>& k,
                       const std::vector<float>& v, const std::vector<float>& dO,
                       const std::vector<double>& O, const std::vector<double>& L,
                       const fa::AttentionShape& s);
Grads grads_from_reference(const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<float>& dO,
                           const std::vector<double>& O, const std::vector<double>& L,
                           const fa::AttentionShape& s);

// ---- The same steps with a GPU kernel's gradients ----------------------------------------------
// Gradients from a registered backward kernel, run on dtype t at shape s. q, k, v and dO are
// uploaded as t (train_toy has rounded them already, so this is exact); O and L come from the CPU
// forward, uploaded as the values a forward kernel would have saved: O rounded to t, L as fp32.
// The workspace is zeroed and the outputs poisoned (NaN) first, as the harness does, so an element
// the kernel never writes comes back non-finite. Throws fa::Error (fa::Unsupported when the kernel
// refuses the input) like any kernel run.
Grads grads_from_gpu(const fa::AttentionBwdKernel& kern, fa::DType t, const std::vector<float>& q,
                     const std::vector<float>& k, const std::vector<float>& v,
                     const std::vector<float>& dO, const std::vector<double>& O,
                     const std::vector<double>& L, const fa::AttentionShape& s);
GradSource gpu_grad_source(const fa::AttentionBwdKernel& kern, fa::DType t);

// How far the loss trajectory with a kernel's gradients may stray from the one with float64
// gradients, as a relative difference of the losses at the same step (see the .cpp for how each
// band follows from the dtype's unit roundoff).
double trajectory_band(fa::DType t);

// One trajectory judged against the reference one (both from train_toy, same problem).
struct TrajectoryCheck {
  double max_rel_diff = 0;  // max over steps of |loss - ref| / ref (infinite if a loss is not)
  int worst_step = 0;
  int rises = 0;           // steps at which the loss went up
  double final_ratio = 0;  // last loss / first loss
  double band = 0;         // trajectory_band(dtype)
  double u = 0;            // the dtype's unit roundoff, to state the band in
  int max_rises = 2;       // gradient descent with a sound gradient lowers the loss almost always
  double max_final_ratio = 0.5;  // the steps must at least halve the loss
  bool agrees() const { return max_rel_diff <= band; }
  bool descends() const { return rises <= max_rises && final_ratio < max_final_ratio; }
  bool ok() const { return agrees() && descends(); }
  std::string str() const;  // one line: the numbers and the limits
};
TrajectoryCheck check_trajectory(const std::vector<double>& losses, const std::vector<double>& ref,
                                 fa::DType t);

}  // namespace ch06
