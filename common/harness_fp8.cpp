// harness_fp8.cpp: run an FP8 (e4m3) attention forward (AttentionFwdFp8Kernel, registry.h) on one
// shape: quantise on the host with fp8.h, upload the codes and scales, poison O and L, run, check
// with fp8.h's accuracy rule, time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "buffer.h"
#include "check.h"
#include "fp8.h"
#include "harness.h"
#include "harness_attention.h"
#include "harness_run.h"
#include "reference.h"
#include "timing.h"

namespace fa {

using harness_detail::draw;
using harness_detail::finish_checks;
using harness_detail::gpu_ready;
using harness_detail::guarded;
using harness_detail::heads_to_check;
using harness_detail::kRefBudget;

namespace {

// Why the kernel cannot take shape s with these options ("" when it can).
std::string fp8_refusal(const AttentionFwdFp8Kernel& k, const AttentionShape& s,
                        const Fp8RunOptions& opt) {
  if (!supports(k.head_dims, int(s.head_dim)))
    return "this kernel has no e4m3 D=" + std::to_string(s.head_dim) + " version";
  if (s.is_gqa()) return "the FP8 forward takes heads_kv == heads only";
  if (s.has_window())
    return "a sliding window is chapter 09's: the FP8 forward takes causal or full attention only";
  if (opt.rotate && (s.head_dim & (s.head_dim - 1)) != 0)
    return "the Hadamard rotation needs a power-of-two head dim";
  if (k.block_rows_q < 1 || k.block_rows_kv < 1) return "the kernel declares no block sizes";
  return "";
}

// The quantised inputs of a whole problem, laid out as AttentionFwdFp8Args wants them, and the
// Fp8Head of each checked head (what the references read).
struct Fp8Inputs {
  std::vector<uint8_t> q, k, vt;
  std::vector<float> q_scale, k_scale, v_scale;
  std::vector<Fp8Head> checked;  // one per entry of `heads`
};

Fp8Inputs quantize_problem(const AttentionShape& s, const AttentionFwdFp8Kernel& kern,
                           const Fp8RunOptions& opt, const std::vector<int64_t>& heads) {
  const int64_t D = s.head_dim, stride = fp8_vt_stride(s.seq_k);
  const int64_t q_blocks = ceil_div(s.seq_q, kern.block_rows_q);
  const int64_t kv_blocks = ceil_div(s.seq_k, kern.block_rows_kv);
  // Three independent draws of the fp32 values (no rounding: quantisation is the only rounding).
  std::vector<float> hq = draw(s.q_numel(), opt.seed, 0, opt, DType::F32);
  std::vector<float> hk = draw(s.k_numel(), opt.seed, 1, opt, DType::F32);
  std::vector<float> hv = draw(s.k_numel(), opt.seed, 2, opt, DType::F32);
  if (opt.input_hook) opt.input_hook(hq, hk, hv, s);
  Fp8Inputs in;
  in.q.resize(size_t(s.q_numel()));
  in.k.resize(size_t(s.k_numel()));
  in.vt.resize(size_t(s.bh() * D * stride));
  in.q_scale.resize(size_t(s.bh() * q_blocks));
  in.k_scale.resize(size_t(s.bh() * kv_blocks));
  in.v_scale.resize(size_t(s.bh() * kv_blocks));
  in.checked.resize(heads.size());
  for (int64_t bh = 0; bh < s.bh(); ++bh) {
    const HeadView h = head_view(s, hq.data(), hk.data(), hv.data(), bh);
    Fp8Head f =
        quantize_head(h, kern.block_rows_q, kern.block_rows_kv, opt.rotate, opt.rotation_seed);
    std::copy(f.q.codes.begin(), f.q.codes.end(), in.q.begin() + bh * s.seq_q * D);
    std::copy(f.k.codes.begin(), f.k.codes.end(), in.k.begin() + bh * s.seq_k * D);
    fp8_transpose_v(f.v.codes.data(), s.seq_k, D, in.vt.data() + bh * D * stride, kern.vt_p_order);
    std::copy(f.q.scales.begin(), f.q.scales.end(), in.q_scale.begin() + bh * q_blocks);
    std::copy(f.k.scales.begin(), f.k.scales.end(), in.k_scale.begin() + bh * kv_blocks);
    std::copy(f.v.scales.begin(), f.v.scales.end(), in.v_scale.begin() + bh * kv_blocks);
    const auto at = std::find(heads.begin(), heads.end(), bh);
    if (at != heads.end()) in.checked[size_t(at - heads.begin())] = std::move(f);
  }
  return in;
}

template <class T>
DeviceBuffer upload_vector(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

}  // namespace

RunResult run_attention_fwd_fp8(const AttentionFwdFp8Kernel& k, AttentionShape s,
                                const Fp8RunOptions& opt) {
  RunResult r;
  r.kernel = k.name;
  r.shape = s.str() + (opt.rotate ? " rotated" : "");
  r.dtype = "e4m3";
  if (!gpu_ready(r, k.min_sm)) return r;
  FA_REQUIRE(s.batch >= 0 && s.heads >= 0 && s.seq_q >= 0 && s.seq_k >= 0 && s.head_dim >= 1,
             "run_attention_fwd_fp8: negative size");
  r.message = fp8_refusal(k, s, opt);
  if (!r.message.empty()) {
    r.status = Status::Unsupported;
    return r;
  }
  // Every query row of the checked heads: the naive FP8 forward has no row selection. Two float64
  // and one fp32 pass over the head's pairs.
  const double per_head = double(s.seq_q) * double(s.seq_k) * double(s.head_dim) * 3;
  const std::vector<int64_t> heads =
      opt.check ? heads_to_check(s, opt.check_heads, per_head, kRefBudget) : std::vector<int64_t>{};
  guarded(r, [&] {
    const Fp8Inputs in = quantize_problem(s, k, opt, heads);
    DeviceBuffer dq = upload_vector(in.q), dk = upload_vector(in.k), dvt = upload_vector(in.vt);
    DeviceBuffer dqs = upload_vector(in.q_scale), dks = upload_vector(in.k_scale),
                 dvs = upload_vector(in.v_scale);
    DeviceBuffer dout(std::max<int64_t>(s.q_numel() * 2, 16));
    DeviceBuffer dlse(std::max<int64_t>(s.lse_numel() * int64_t(sizeof(float)), 16));
    AttentionFwdFp8Args a;
    a.q = dq.as<uint8_t>();
    a.k = dk.as<uint8_t>();
    a.vt = dvt.as<uint8_t>();
    a.q_scale = dqs.as<float>();
    a.k_scale = dks.as<float>();
    a.v_scale = dvs.as<float>();
    a.p_scale = kFp8PScale;
    a.o = dout.data();
    a.lse = dlse.as<float>();
    a.shape = s;
    a.block_rows_q = k.block_rows_q;
    a.block_rows_kv = k.block_rows_kv;
    if (opt.check) {
      dout.poison();
      dlse.poison();
      k.run(a, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> o = to_host(DType::BF16, dout, size_t(s.q_numel()));
      const std::vector<float> lse = to_host(DType::F32, dlse, size_t(s.lse_numel()));
      const int64_t D = s.head_dim;
      std::vector<double> refO, refL;
      std::vector<float> naiveO, naiveL, gotO, gotL;
      double accumulator_bound = 0.0;  // over the checked heads (fp8.h's rule)
      for (size_t hi = 0; hi < heads.size(); ++hi) {
        const Fp8Head& f = in.checked[hi];
        // The float64 reference on exactly the values the kernel multiplies (fp8.h's rule).
        const Fp8Dequantized deq = fp8_dequantized_view(f);
        accumulator_bound = std::max(accumulator_bound, fp8_accumulator_bound(deq.view));
        std::vector<double> O(size_t(s.seq_q * D)), L(size_t(s.seq_q));
        attention_forward_ref_head(deq.view, {}, O.data(), L.data());
        std::vector<float> nO(size_t(s.seq_q * D)), nL(size_t(s.seq_q));
        attention_forward_fp8_naive_head(f, nO.data(), nL.data());
        round_in_place(DType::BF16, nO);  // the kernel's O is bf16 (fp8.h, the rule)
        refO.insert(refO.end(), O.begin(), O.end());
        refL.insert(refL.end(), L.begin(), L.end());
        naiveO.insert(naiveO.end(), nO.begin(), nO.end());
        naiveL.insert(naiveL.end(), nL.begin(), nL.end());
        const int64_t bh = heads[hi];
        gotO.insert(gotO.end(), o.begin() + bh * s.seq_q * D, o.begin() + (bh + 1) * s.seq_q * D);
        gotL.insert(gotL.end(), lse.begin() + bh * s.seq_q, lse.begin() + (bh + 1) * s.seq_q);
      }
      if (int64_t(heads.size()) < s.bh()) {
        std::ostringstream os;
        os << "checked " << heads.size() << " of " << s.bh() << " heads (CPU reference budget)";
        r.note = os.str();
      }
      // fp8.h's rule: the bf16 floor plus the FP8 accumulator's error in S (delta), which moves L
      // by delta and O by about delta |O|.
      double maxO = 0.0;
      for (double v : refO)
        if (std::isfinite(v)) maxO = std::max(maxO, std::fabs(v));
      const double delta = kFp8AccumulatorRel * accumulator_bound;
      const Tolerance tolO = opt.has_tolerance ? opt.tolerance
                                               : Tolerance::flash(tol::kFlashFwdFactor,
                                                                  tol::kFlashFloor + delta * maxO);
      const Tolerance tolL = opt.has_tolerance
                                 ? opt.tolerance
                                 : Tolerance::flash(tol::kFlashFwdFactor, tol::kFlashFloor + delta);
      CompareResult cO =
          compare("O", gotO.data(), refO.data(), naiveO.data(), int64_t(refO.size()), tolO);
      CompareResult cL =
          compare("L", gotL.data(), refL.data(), naiveL.data(), int64_t(refL.size()), tolL);
      cO.dims = {int64_t(heads.size()), s.seq_q, D};
      cO.names = {"checked-head#", "i", "d"};
      cL.dims = {int64_t(heads.size()), s.seq_q};
      cL.names = {"checked-head#", "i"};
      r.checks = {cO, cL};
      finish_checks(r);
    }
    if (opt.time) {
      Timing tm = time_gpu([&](cudaStream_t st) { k.run(a, st); }, opt.timing);
      r.ms = tm.median_ms;
      r.tflops = s.fwd_flops() / (r.ms * 1e-3) / 1e12;
    }
  });
  return r;
}

}  // namespace fa
