// harness_attention.h: what the attention runners (harness_attention_fwd.cpp and
// harness_attention_bwd.cpp) share: the inputs of a run, on the device and the host slices the
// CPU reference reads, which heads and query rows a check compares within the reference's budget,
// and the key under which the last reference is kept (last_reference.h). Internal to the harness.
#pragma once
#include <cstdint>
#include <vector>

#include "buffer.h"
#include "dtype.h"
#include "harness.h"
#include "last_reference.h"
#include "reference.h"
#include "shapes.h"
#include "tolerances.h"

namespace fa {

// The default tolerance of each attention output (tolerances.h has the numbers and says why):
// fp32 by allclose, fp16 and bf16 by FlashAttention's rule. A run's --tolerance replaces them.
inline Tolerance tolerance_o(DType t) {
  return t == DType::F32 ? Tolerance::allclose(tol::kFp32OAtol, tol::kFp32ORtol)
                         : Tolerance::flash(tol::kFlashFwdFactor, tol::kFlashFloor);
}
inline Tolerance tolerance_l(DType t) {
  return t == DType::F32 ? Tolerance::allclose(tol::kFp32LAtol, tol::kFp32LRtol)
                         : Tolerance::flash(tol::kFlashFwdFactor, tol::kFlashFloor);
}
inline Tolerance tolerance_grad(DType t) {  // dQ, dK, dV
  return t == DType::F32 ? Tolerance::allclose(tol::kFp32GradAtol, tol::kFp32GradRtol)
                         : Tolerance::flash(tol::kFlashBwdFactor, tol::kFlashFloor);
}
inline Tolerance tolerance_delta(DType t) {  // D = rowsum(dO o O)
  return t == DType::F32 ? Tolerance::allclose(tol::kFp32DeltaAtol, tol::kFp32DeltaRtol)
                         : Tolerance::flash(tol::kFlashBwdFactor, tol::kFlashFloor);
}

}  // namespace fa

namespace fa::harness_detail {

// Attention inputs above this many elements (q, k, v and dO together) are drawn on the GPU even
// for checked runs, and only the slices of the checked heads come back to the host: drawing
// 2 x 10^9 values on the CPU (B 8, H 32, seq_k 32768, D 128) took minutes, the reference that
// reads a few heads of them milliseconds. Below it, inputs are drawn on the host as always.
constexpr int64_t kHostDrawLimit = int64_t(1) << 25;

// The inputs of one attention run: on the device, and on the host what the CPU reference reads,
// either the whole tensors (small problems) or the Q (and dO) slices of the checked heads and the
// K/V slices of the K/V heads they read.
struct AttentionInputs {
  DeviceBuffer q, k, v, dout;
  std::vector<float> hq, hk, hv, hdo;
  bool sliced = false;

  // The reference's view of the i-th checked head, whose index is bh.
  HeadView view(const AttentionShape& s, size_t i, int64_t bh) const {
    if (!sliced) return head_view(s, hq.data(), hk.data(), hv.data(), bh);
    AttentionShape one = s;  // one head's slices, laid out as a B = H = 1 problem
    one.batch = one.heads = 1;
    one.heads_kv = 0;
    return head_view(one, hq.data() + i * s.seq_q * s.head_dim,
                     hk.data() + i * s.seq_k * s.head_dim, hv.data() + i * s.seq_k * s.head_dim, 0);
  }
  const float* dout_of(const AttentionShape& s, size_t i, int64_t bh) const {
    return hdo.data() + (sliced ? int64_t(i) : bh) * s.seq_q * s.head_dim;
  }
};

// Draws q, k, v (and dO when with_dout) for one run; the host keeps what the checked heads need.
AttentionInputs make_attention_inputs(const AttentionShape& s, DType t, const RunOptions& opt,
                                      const std::vector<int64_t>& heads, bool with_dout);

// Which heads to check: all of them while the CPU reference stays cheap, else a spread sample.
std::vector<int64_t> heads_to_check(const AttentionShape& s, int64_t requested,
                                    double cost_per_head, double budget);

// Query rows to check per head: all, or the first, middle and last blocks of 128 (these hold the
// tile boundaries, the causal diagonal's start and the ragged tail).
std::vector<int64_t> rows_to_check(const AttentionShape& s, double budget);

constexpr double kRefBudget = 4e9;  // multiply-adds the CPU reference may spend per check

// The key of the last reference (last_reference.h): a ladder's kernels, checked on the same
// inputs, share one reference.
RefInputs ref_inputs(const AttentionShape& s, DType t, const std::vector<int64_t>& heads,
                     const std::vector<int64_t>& rows, const AttentionInputs& in);

}  // namespace fa::harness_detail
