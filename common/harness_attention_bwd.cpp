// harness_attention_bwd.cpp: run an attention backward kernel (chapters 06, 07): the forward
// makes O and L, then dQ, dK, dV and D of the checked heads against the float64 reference (low
// precision: the FlashAttention rule against the naive same-precision backward), TFLOP/s. With
// grouped K/V heads (a kernel that declares gqa) the checked query heads are whole groups, so that
// dK and dV of each checked K/V head are compared against the sum over its group.
#include "harness.h"

#include "buffer.h"
#include "check.h"
#include "gpu.h"
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

namespace {

// The backward's reference of the checked heads: float64 dQ, dK, dV and D, and (for fp16/bf16)
// the same-precision naive ones that set the tolerance.
struct BwdRefs {
  std::vector<double> dQ, dK, dV, D;
  std::vector<float> naive_dQ, naive_dK, naive_dV, naive_D;

  // Shared between the test processes (reference_cache.h).
  static constexpr bool kShared = true;
  template <class F>
  void each(F&& f) {
    f(dQ), f(dK), f(dV), f(D), f(naive_dQ), f(naive_dK), f(naive_dV), f(naive_D);
  }
};

// The forward that makes O and L: the one asked for, else the best for the dtype and head dim,
// or with grouped heads the first registered one that takes them (chapter 07's v5 on an H100).
const AttentionFwdKernel* forward_for(const AttentionShape& s, DType t, const RunOptions& opt) {
  if (!opt.forward_kernel.empty()) return find_entry<AttentionFwdKernel>(opt.forward_kernel);
  return forward_for_backward(s, t);
}

// The checked query heads as whole groups: the K/V heads to check (kv_heads, indices over
// batch * heads_kv) and the query heads that read them, kv * group .. kv * group + group - 1.
std::vector<int64_t> whole_groups(const AttentionShape& s, int64_t requested, double per_head,
                                  std::vector<int64_t>* kv_heads) {
  AttentionShape kv = s;  // one "head" per K/V head, costing its group's heads
  kv.heads = s.kv_heads();
  kv.heads_kv = 0;
  const int64_t g = s.group();
  *kv_heads =
      heads_to_check(kv, requested > 0 ? ceil_div(requested, g) : 0, per_head * g, kRefBudget);
  std::vector<int64_t> heads;
  for (int64_t k : *kv_heads)
    for (int64_t i = 0; i < g; ++i) heads.push_back(k * g + i);
  return heads;
}

}  // namespace

RunResult run_attention_bwd(const AttentionBwdKernel& k, AttentionShape s, DType t,
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
  const AttentionFwdKernel* fwd = forward_for(s, t, opt);
  if (fwd == nullptr) {
    r.status = Status::Unsupported;
    r.message = "no forward kernel to produce O and L for " + std::string(dtype_name(t)) +
                " D=" + std::to_string(s.head_dim) + (s.is_gqa() ? " with grouped K/V heads" : "");
    return r;
  }
  const double per_head = 6.0 * double(s.seq_q) * s.seq_k * s.head_dim * (t == DType::F32 ? 1 : 2);
  std::vector<int64_t> kv_heads;  // the K/V heads whose dK, dV are checked
  const std::vector<int64_t> heads = s.is_gqa()
                                         ? whole_groups(s, opt.check_heads, per_head, &kv_heads)
                                         : heads_to_check(s, opt.check_heads, per_head, kRefBudget);
  if (!s.is_gqa()) kv_heads = heads;
  const int64_t group = s.group();
  AttentionInputs in = make_attention_inputs(s, t, opt, heads, true);
  DeviceBuffer &dq = in.q, &dk = in.k, &dv = in.v, &ddO = in.dout;
  DeviceBuffer dout(s.q_numel() * dtype_size(t)), dlse(s.lse_numel() * sizeof(float));
  DeviceBuffer gq(s.q_numel() * dtype_size(t)), gk(s.k_numel() * dtype_size(t)),
      gv(s.k_numel() * dtype_size(t)), gD(s.lse_numel() * sizeof(float)),
      ws(s.q_numel() * sizeof(float));
  guarded(r, [&] {
    AttentionFwdArgs fa_args;
    fa_args.q = dq.data();
    fa_args.k = dk.data();
    fa_args.v = dv.data();
    fa_args.o = dout.data();
    fa_args.lse = dlse.as<float>();
    fa_args.shape = s;
    fa_args.dtype = t;
    fwd->run(fa_args, nullptr);
    FA_CUDA_CHECK(cudaDeviceSynchronize());

    AttentionBwdArgs a;
    a.q = dq.data();
    a.k = dk.data();
    a.v = dv.data();
    a.o = dout.data();
    a.dout = ddO.data();
    a.lse = dlse.as<float>();
    a.dq = gq.data();
    a.dk = gk.data();
    a.dv = gv.data();
    a.delta = gD.as<float>();
    a.workspace = ws.as<float>();
    a.shape = s;
    a.dtype = t;
    auto launch = [&](cudaStream_t st) {
      FA_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), st));
      k.run(a, st);
    };
    if (opt.check) {
      gq.poison();
      gk.poison();
      gv.poison();
      gD.poison();
      launch(nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> hq = to_host(t, gq, s.q_numel()), hk = to_host(t, gk, s.k_numel()),
                         hv = to_host(t, gv, s.k_numel()),
                         hD = to_host(DType::F32, gD, s.lse_numel());
      const int64_t qh = s.seq_q * s.head_dim, kh = s.seq_k * s.head_dim;
      static LastReference<BwdRefs> last;
      const BwdRefs ref = last.get(ref_inputs(s, t, heads, {}, in), [&] {
        BwdRefs b;
        auto append = [](auto& to, const auto& from) {
          to.insert(to.end(), from.begin(), from.end());
        };
        // dK and dV of a group's K/V head: the sum over its query heads, consecutive in heads.
        auto add_group = [&](auto& to, const auto& from, size_t hi) {
          if (hi % size_t(group) == 0) to.resize(to.size() + from.size(), 0);
          for (size_t i = 0; i < from.size(); ++i) to[to.size() - from.size() + i] += from[i];
        };
        for (size_t hi = 0; hi < heads.size(); ++hi) {
          HeadView h = in.view(s, hi, heads[hi]);
          const float* dO = in.dout_of(s, hi, heads[hi]);
          std::vector<double> a1(qh), a2(kh), a3(kh), a4(s.seq_q);
          attention_backward_ref_head(h, dO, a1.data(), a2.data(), a3.data(), a4.data());
          append(b.dQ, a1);
          add_group(b.dK, a2, hi);
          add_group(b.dV, a3, hi);
          append(b.D, a4);
          if (t != DType::F32) {
            std::vector<float> b1(qh), b2(kh), b3(kh), b4(s.seq_q);
            attention_backward_lowp_head(h, dO, t, b1.data(), b2.data(), b3.data(), b4.data());
            append(b.naive_dQ, b1);
            add_group(b.naive_dK, b2, hi);
            add_group(b.naive_dV, b3, hi);
            append(b.naive_D, b4);
          }
        }
        // A same-precision implementation stores its group sum of dK and dV in the dtype, as the
        // kernel does: round the naive sums once more, or their error would be that of an fp32
        // output (0 where every term is exact, as with one key and one query).
        if (t != DType::F32 && group > 1)
          for (auto* v : {&b.naive_dK, &b.naive_dV})
            for (float& x : *v) x = round_to(t, x);
        return b;
      });
      const std::vector<double>&rq = ref.dQ, &rk = ref.dK, &rv = ref.dV, &rD = ref.D;
      const std::vector<float>&nq = ref.naive_dQ, &nk = ref.naive_dK, &nv = ref.naive_dV,
            &nD = ref.naive_D;
      std::vector<float> xq, xk, xv, xD;
      for (int64_t bh : heads) {
        xq.insert(xq.end(), hq.begin() + bh * qh, hq.begin() + (bh + 1) * qh);
        xD.insert(xD.end(), hD.begin() + bh * s.seq_q, hD.begin() + (bh + 1) * s.seq_q);
      }
      for (int64_t kv : kv_heads) {
        xk.insert(xk.end(), hk.begin() + kv * kh, hk.begin() + (kv + 1) * kh);
        xv.insert(xv.end(), hv.begin() + kv * kh, hv.begin() + (kv + 1) * kh);
      }
      if (int64_t(heads.size()) < s.bh())
        r.note = "checked " + std::to_string(heads.size()) + " of " + std::to_string(s.bh()) +
                 " heads (CPU reference budget)";
      Tolerance tolG = tolerance_grad(t), tolD = tolerance_delta(t);
      if (opt.has_tolerance) tolG = tolD = opt.tolerance;
      bool all = int64_t(heads.size()) == s.bh();
      // kv: dK and dV, indexed by K/V head (heads_kv of them per batch entry).
      auto named = [&](CompareResult c, int64_t rows, bool per_row, bool kv = false) {
        const int64_t n = kv ? int64_t(kv_heads.size()) : int64_t(heads.size());
        if (all) {
          const int64_t h = kv ? s.kv_heads() : s.heads;
          c.dims = per_row ? std::vector<int64_t>{s.batch, h, rows}
                           : std::vector<int64_t>{s.batch, h, rows, s.head_dim};
          c.names = {"b", kv ? "h_kv" : "h", "i", "d"};
        } else {
          c.dims =
              per_row ? std::vector<int64_t>{n, rows} : std::vector<int64_t>{n, rows, s.head_dim};
          c.names = {kv ? "checked-kv-head#" : "checked-head#", "i", "d"};
        }
        return c;
      };
      r.checks = {
          named(compare("dQ", xq.data(), rq.data(), nq.data(), rq.size(), tolG), s.seq_q, false),
          named(compare("dK", xk.data(), rk.data(), nk.data(), rk.size(), tolG), s.seq_k, false,
                true),
          named(compare("dV", xv.data(), rv.data(), nv.data(), rv.size(), tolG), s.seq_k, false,
                true),
          named(compare("D", xD.data(), rD.data(), nD.data(), rD.size(), tolD), s.seq_q, true)};
      finish_checks(r);
    }
    if (opt.time) {
      Timing tm = time_gpu(launch, opt.timing);
      r.ms = tm.median_ms;
      r.tflops = s.bwd_flops() / (r.ms * 1e-3) / 1e12;
    }
  });
  return r;
}

}  // namespace fa
