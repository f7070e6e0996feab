// harness_gemm.cpp: run a GEMM kernel (chapter 03): C = A B in fp32 from fp32, fp16 or bf16
// inputs, checked against the float64 reference (low precision: against the naive fp32 GEMM's
// error too), TFLOP/s.
#include "harness.h"

#include <algorithm>
#include <cmath>

#include "buffer.h"
#include "check.h"
#include "harness_run.h"
#include "reference.h"
#include "timing.h"
#include "tolerances.h"

namespace fa {

using harness_detail::finish_checks;
using harness_detail::gpu_ready;
using harness_detail::guarded;
using harness_detail::make_input;

RunResult run_gemm(const GemmKernel& k, GemmShape s, DType t, const RunOptions& opt) {
  RunResult r;
  r.kernel = k.name;
  r.shape = s.str();
  r.dtype = dtype_name(t);
  if (!gpu_ready(r, k.min_sm)) return r;
  if (!supports(k.dtypes, t)) {
    r.status = Status::Unsupported;
    r.message = std::string("this kernel does not take ") + dtype_name(t);
    return r;
  }
  std::vector<float> A, B;
  DeviceBuffer dA = make_input(t, s.M * s.K, 1, opt, &A), dB = make_input(t, s.K * s.N, 2, opt, &B);
  DeviceBuffer dC(s.M * s.N * sizeof(float));
  guarded(r, [&] {
    if (opt.check) {
      dC.poison();
      k.run(dA.data(), dB.data(), dC.as<float>(), s, t, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> C = to_host(DType::F32, dC, s.M * s.N);
      std::vector<double> ref = gemm_ref(A.data(), B.data(), s);
      double sk = std::sqrt(double(std::max<int64_t>(s.K, 1)));
      CompareResult c;
      if (opt.has_tolerance) {
        std::vector<float> naive;
        if (opt.tolerance.rule == Tolerance::Rule::FlashRule)
          naive = gemm_naive_fp32(A.data(), B.data(), s);
        c = compare("C", C.data(), ref.data(), naive.data(), s.M * s.N, opt.tolerance);
      } else if (t == DType::F32) {
        c = compare_allclose("C", C.data(), ref.data(), s.M * s.N, tol::kGemmAtolPerSqrtK * sk,
                             tol::kGemmRtol);
      } else {
        std::vector<float> naive = gemm_naive_fp32(A.data(), B.data(), s);
        c = compare_flash_rule("C", C.data(), ref.data(), naive.data(), s.M * s.N,
                               tol::kGemmFlashFactor, tol::kGemmAtolPerSqrtK * sk);
      }
      c.dims = {s.M, s.N};
      c.names = {"i", "j"};
      r.checks.push_back(c);
      finish_checks(r);
    }
    if (opt.time) {
      Timing tm =
          time_gpu([&](cudaStream_t st) { k.run(dA.data(), dB.data(), dC.as<float>(), s, t, st); },
                   opt.timing);
      r.ms = tm.median_ms;
      r.tflops = s.flops() / (r.ms * 1e-3) / 1e12;
    }
  });
  return r;
}

}  // namespace fa
