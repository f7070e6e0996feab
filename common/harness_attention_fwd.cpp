// harness_attention_fwd.cpp: run an attention forward kernel (chapters 05, 07, 08): O and L of
// the checked heads and rows against the float64 reference (low precision: the FlashAttention
// rule against the naive same-precision forward), TFLOP/s, and for decoding shapes GB/s against
// the copy bandwidth.
#include "harness.h"

#include <sstream>

#include "buffer.h"
#include "ceilings.h"
#include "check.h"
#include "harness_attention.h"
#include "harness_run.h"
#include "last_reference.h"
#include "reference.h"
#include "timing.h"

namespace fa {

using harness_detail::AttentionInputs;
using harness_detail::finish_checks;
using harness_detail::gpu_ready;
using harness_detail::guarded;
using harness_detail::heads_to_check;
using harness_detail::kRefBudget;
using harness_detail::make_attention_inputs;
using harness_detail::ref_inputs;
using harness_detail::rows_to_check;

namespace {

// The forward's reference of the checked heads and rows, head after head: float64 O and L, and
// (for fp16/bf16) the same-precision naive O and L that set the tolerance.
struct FwdRefs {
  std::vector<double> O, L;
  std::vector<float> naiveO, naiveL;

  // Shared between the test processes (reference_cache.h).
  static constexpr bool kShared = true;
  template <class F>
  void each(F&& f) {
    f(O), f(L), f(naiveO), f(naiveL);
  }
};

template <class T>
std::vector<T> gather_rows(const std::vector<T>& full, int64_t base,
                           const std::vector<int64_t>& rows, int64_t n_rows, int64_t width) {
  std::vector<T> out;
  if (rows.empty()) {
    out.assign(full.begin() + base, full.begin() + base + n_rows * width);
    return out;
  }
  out.reserve(rows.size() * width);
  for (int64_t i : rows)
    out.insert(out.end(), full.begin() + base + i * width, full.begin() + base + (i + 1) * width);
  return out;
}

}  // namespace

RunResult run_attention_fwd(const AttentionFwdKernel& k, AttentionShape s, DType t,
                            const RunOptions& opt) {
  RunResult r;
  r.kernel = k.name;
  r.shape = s.str();
  r.dtype = dtype_name(t);
  if (!gpu_ready(r, k.min_sm)) return r;
  r.message = missing_version(k, t, s.head_dim);
  if (r.message.empty()) r.message = grouped_heads_refusal(s, k.gqa);
  if (r.message.empty() && s.has_window())
    r.message = "a sliding window is chapter 09's: this kernel takes causal or full attention only";
  if (!r.message.empty()) {
    r.status = Status::Unsupported;
    return r;
  }
  // What the check will compare, decided before drawing: big inputs bring back only these heads.
  const std::vector<int64_t> rows = rows_to_check(s, kRefBudget);
  const int64_t nrows = rows.empty() ? s.seq_q : int64_t(rows.size());
  const double per_head = double(nrows) * s.seq_k * s.head_dim * (t == DType::F32 ? 2 : 3);
  const std::vector<int64_t> heads = heads_to_check(s, opt.check_heads, per_head, kRefBudget);
  AttentionInputs in = make_attention_inputs(s, t, opt, heads, false);
  DeviceBuffer dout(s.q_numel() * dtype_size(t)), dlse(s.lse_numel() * sizeof(float));
  AttentionFwdArgs a;
  a.q = in.q.data();
  a.k = in.k.data();
  a.v = in.v.data();
  a.o = dout.data();
  a.lse = dlse.as<float>();
  a.shape = s;
  a.dtype = t;
  guarded(r, [&] {
    if (opt.check) {
      dout.poison();
      dlse.poison();
      k.run(a, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> o = to_host(t, dout, s.q_numel());
      std::vector<float> lse = to_host(DType::F32, dlse, s.lse_numel());

      static LastReference<FwdRefs> last;
      const FwdRefs ref = last.get(ref_inputs(s, t, heads, rows, in), [&] {
        FwdRefs f;
        for (size_t hi = 0; hi < heads.size(); ++hi) {
          HeadView h = in.view(s, hi, heads[hi]);
          std::vector<double> O(nrows * s.head_dim), L(nrows);
          attention_forward_ref_head(h, rows, O.data(), L.data());
          f.O.insert(f.O.end(), O.begin(), O.end());
          f.L.insert(f.L.end(), L.begin(), L.end());
          if (t != DType::F32) {
            std::vector<float> nO(nrows * s.head_dim), nL(nrows);
            attention_forward_lowp_head(h, t, rows, nO.data(), nL.data());
            f.naiveO.insert(f.naiveO.end(), nO.begin(), nO.end());
            f.naiveL.insert(f.naiveL.end(), nL.begin(), nL.end());
          }
        }
        return f;
      });
      const std::vector<double>&refO = ref.O, &refL = ref.L;
      const std::vector<float>&naiveO = ref.naiveO, &naiveL = ref.naiveL;
      std::vector<float> gotO, gotL;
      for (int64_t bh : heads) {
        std::vector<float> go =
            gather_rows(o, bh * s.seq_q * s.head_dim, rows, s.seq_q, s.head_dim);
        std::vector<float> gl = gather_rows(lse, bh * s.seq_q, rows, s.seq_q, 1);
        gotO.insert(gotO.end(), go.begin(), go.end());
        gotL.insert(gotL.end(), gl.begin(), gl.end());
      }
      if (int64_t(heads.size()) < s.bh() || !rows.empty()) {
        std::ostringstream os;
        os << "checked " << heads.size() << " of " << s.bh() << " heads";
        if (!rows.empty()) os << ", " << rows.size() << " of " << s.seq_q << " query rows each";
        os << " (CPU reference budget)";
        r.note = os.str();
      }
      Tolerance tolO = tolerance_o(t), tolL = tolerance_l(t);
      if (opt.has_tolerance) tolO = tolL = opt.tolerance;
      CompareResult cO = compare("O", gotO.data(), refO.data(), naiveO.data(), refO.size(), tolO);
      CompareResult cL = compare("L", gotL.data(), refL.data(), naiveL.data(), refL.size(), tolL);
      bool all = int64_t(heads.size()) == s.bh() && rows.empty();
      if (all) {
        cO.dims = {s.batch, s.heads, s.seq_q, s.head_dim};
        cO.names = {"b", "h", "i", "d"};
        cL.dims = {s.batch, s.heads, s.seq_q};
        cL.names = {"b", "h", "i"};
      } else {
        cO.dims = {int64_t(heads.size()), nrows, s.head_dim};
        cO.names = {"checked-head#", "checked-row#", "d"};
        cL.dims = {int64_t(heads.size()), nrows};
        cL.names = {"checked-head#", "checked-row#"};
      }
      r.checks = {cO, cL};
      finish_checks(r);
    }
    if (opt.time) {
      Timing tm = time_gpu([&](cudaStream_t st) { k.run(a, st); }, opt.timing);
      r.ms = tm.median_ms;
      r.tflops = s.fwd_flops() / (r.ms * 1e-3) / 1e12;
      if (s.seq_q <= kDecodeSeqQ) {
        // Decoding is memory-bound: GB/s of the minimal traffic, against the copy ceiling.
        r.gbps = attention_fwd_min_bytes(s, t) / (r.ms * 1e-3) / 1e9;
        r.pct = 100.0 * r.gbps / copy_bandwidth_gbps();
        r.pct_of = "copy";
      }
    }
  });
  return r;
}

}  // namespace fa
