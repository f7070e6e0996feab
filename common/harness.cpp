#include "harness.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>

#include "buffer.h"
#include "ceilings.h"
#include "device_fill.h"
#include "check.h"
#include "gpu.h"
#include "last_reference.h"
#include "reference.h"

namespace fa {

const char* status_name(Status s) {
  switch (s) {
    case Status::Pass:
      return "PASS";
    case Status::Fail:
      return "FAIL";
    case Status::Unsupported:
      return "UNSUPPORTED";
    case Status::NoGpu:
      return "SKIPPED";
  }
  return "?";
}

double RunResult::max_error() const {
  double m = -1;
  for (const CompareResult& c : checks) m = std::max(m, c.max_abs);
  return m;
}

// In an exercise build, a kernel whose file still came from the generator says so.
std::string exercise_hint(const std::string& kernel) {
  for (const Exercise& e : registry<Exercise>())
    for (const std::string& k : e.kernels)
      if (k == kernel)
        return "TODO in " + e.name +
               ": not implemented? This is an exercise build: " + std::to_string(e.todos) +
               " TODO(exercise) block(s) were cut out of that file; fill them in.";
  return "";
}

std::string RunResult::report() const {
  std::ostringstream os;
  os << kernel << " on " << shape << " " << dtype << ": " << status_name(status) << "\n";
  if (status == Status::Fail) {
    std::string hint = exercise_hint(kernel);
    if (!hint.empty()) os << "  " << hint << "\n";
  }
  if (!message.empty()) os << "  " << message << "\n";
  if (!note.empty()) os << "  " << note << "\n";
  for (const CompareResult& c : checks) os << c.report();
  return os.str();
}

bool supports(const std::vector<DType>& dtypes, DType t) {
  return std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end();
}
bool supports(const std::vector<int>& head_dims, int d) {
  return std::find(head_dims.begin(), head_dims.end(), d) != head_dims.end();
}

std::string missing_version(const std::vector<DType>& dtypes, const std::vector<int>& head_dims,
                            DType t, int64_t d) {
  if (supports(dtypes, t) && supports(head_dims, int(d))) return "";
  return "this kernel has no " + std::string(dtype_name(t)) + " D=" + std::to_string(d) +
         " version";
}

std::string kernel_error_message(const Error& e, bool* unsupported) {
  std::string what = e.what();
  *unsupported = dynamic_cast<const Unsupported*>(&e) != nullptr;
  if (what.find("cudaErrorNoKernelImageForDevice") != std::string::npos) {
    *unsupported = true;
    what += " (rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(gpu_info().sm) + ")";
  }
  return what;
}

std::string grouped_heads_refusal(const AttentionShape& s, bool takes_gqa) {
  if (!s.valid_heads())
    return "heads (" + std::to_string(s.heads) + ") must be a multiple of heads_kv (" +
           std::to_string(s.heads_kv) + ")";
  if (s.is_gqa() && !takes_gqa)
    return "this kernel takes heads_kv == heads only (no grouped-query attention)";
  return "";
}

double attention_fwd_min_bytes(const AttentionShape& s, DType t) {
  return double(2 * s.q_numel() + 2 * s.k_numel()) * dtype_size(t) + double(s.lse_numel()) * 4.0;
}

const AttentionFwdKernel* best_forward_kernel(DType t, int d) {
  const AttentionFwdKernel* best = nullptr;
  for (const AttentionFwdKernel* k : entries_with_prefix<AttentionFwdKernel>("05/"))
    if (supports(k->dtypes, t) && supports(k->head_dims, d) && gpu_skip_reason(k->min_sm).empty())
      best = k;
  return best;
}

const AttentionFwdKernel* forward_for_backward(DType t, int d) {
  if (const AttentionFwdKernel* k = best_forward_kernel(t, d)) return k;
  const AttentionFwdKernel* any = nullptr;
  for (const AttentionFwdKernel* k : entries_with_prefix<AttentionFwdKernel>(""))
    if (!k->decoding && k->name.rfind("ref/", 0) != 0 && supports(k->dtypes, t) &&
        supports(k->head_dims, d) && gpu_skip_reason(k->min_sm).empty())
      any = k;
  return any;
}

namespace {

// Common start of every run: is there a GPU that can take this kernel?
bool gpu_ready(RunResult& r, int min_sm) {
  std::string why = gpu_skip_reason(min_sm);
  if (why.empty()) return true;
  r.status = have_gpu() ? Status::Unsupported : Status::NoGpu;
  r.message = why;
  return false;
}

// Run `body`; an fa::Unsupported from the kernel becomes an UNSUPPORTED row with its message.
template <class F>
void guarded(RunResult& r, F body) {
  try {
    body();
  } catch (const Error& e) {
    // fa::Unsupported becomes UNSUPPORTED; any other error (a CUDA error) is a failed run,
    // reported with its file and line, except one that gets a hint and counts as UNSUPPORTED:
    // the binary holds no code for this GPU (built for another architecture).
    bool unsupported = false;
    r.message = kernel_error_message(e, &unsupported);
    r.status = unsupported ? Status::Unsupported : Status::Fail;
  }
}

void finish_checks(RunResult& r) {
  for (const CompareResult& c : r.checks)
    if (!c.ok) r.status = Status::Fail;
}

std::vector<float> draw(int64_t n, uint64_t seed, uint64_t stream, const RunOptions& opt, DType t) {
  std::vector<float> v = random_normal(n, derive_seed(seed, stream), opt.input_mean, opt.input_std);
  round_in_place(t, v);
  return v;
}

// An input tensor on the device. Checked runs draw it on the host (the reference needs the
// values); timing-only runs fill it on the GPU, which is much faster at benchmark sizes.
DeviceBuffer make_input(DType t, int64_t n, uint64_t stream, const RunOptions& opt,
                        std::vector<float>* host, bool need_host = false) {
  if (opt.check || need_host) {
    *host = draw(n, opt.seed, stream, opt, t);
    return to_device(t, *host);
  }
  DeviceBuffer b(n * dtype_size(t));
  fill_random_device(t, b.data(), n, derive_seed(opt.seed, stream), opt.input_mean, opt.input_std);
  return b;
}

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

// Appends `count` elements, from element `offset` on, of a device tensor to `out`.
void append_slice(DType t, const DeviceBuffer& b, int64_t offset, int64_t count,
                  std::vector<float>& out) {
  std::vector<uint8_t> bytes(count * dtype_size(t));
  FA_CUDA_CHECK(cudaMemcpy(bytes.data(),
                           static_cast<const char*>(b.data()) + offset * dtype_size(t),
                           bytes.size(), cudaMemcpyDeviceToHost));
  std::vector<float> v = decode(t, bytes.data(), count);
  out.insert(out.end(), v.begin(), v.end());
}

AttentionInputs make_attention_inputs(const AttentionShape& s, DType t, const RunOptions& opt,
                                      const std::vector<int64_t>& heads, bool with_dout) {
  AttentionInputs in;
  const int64_t total = 2 * s.k_numel() + s.q_numel() * (with_dout ? 2 : 1);
  in.sliced = opt.check && total > kHostDrawLimit;
  RunOptions on_device = opt;
  if (in.sliced) on_device.check = false;  // make_input then fills on the GPU
  in.q = make_input(t, s.q_numel(), 1, on_device, &in.hq);
  in.k = make_input(t, s.k_numel(), 2, on_device, &in.hk);
  in.v = make_input(t, s.k_numel(), 3, on_device, &in.hv);
  if (with_dout) in.dout = make_input(t, s.q_numel(), 4, on_device, &in.hdo);
  if (in.sliced) {
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const int64_t qh = s.seq_q * s.head_dim, kh = s.seq_k * s.head_dim;
    for (int64_t bh : heads) {
      append_slice(t, in.q, bh * qh, qh, in.hq);
      append_slice(t, in.k, s.kv_index(bh) * kh, kh, in.hk);
      append_slice(t, in.v, s.kv_index(bh) * kh, kh, in.hv);
      if (with_dout) append_slice(t, in.dout, bh * qh, qh, in.hdo);
    }
  }
  return in;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
RunResult run_softmax(const SoftmaxKernel& k, SoftmaxShape s, const RunOptions& opt) {
  RunResult r;
  r.kernel = k.name;
  r.shape = s.str();
  r.dtype = "fp32";
  r.passes = k.reads + 1;
  if (!gpu_ready(r, k.min_sm)) return r;
  std::vector<float> x;
  DeviceBuffer dx;
  if (opt.check || opt.softmax_input_hook) {
    x = draw(s.numel(), opt.seed, 1, opt, DType::F32);
    if (opt.softmax_input_hook) opt.softmax_input_hook(x, s);
    dx = to_device(DType::F32, x);
  } else {
    dx = make_input(DType::F32, s.numel(), 1, opt, &x);
  }
  DeviceBuffer dy(s.numel() * sizeof(float));
  guarded(r, [&] {
    if (opt.check) {
      dy.poison();
      k.run(dx.as<float>(), dy.as<float>(), s, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> y = to_host(DType::F32, dy, s.numel());
      std::vector<double> ref = softmax_rows_ref(x.data(), s);
      Tolerance tol = opt.has_tolerance ? opt.tolerance : Tolerance::allclose(1e-9, 2e-5);
      CompareResult c = compare("y", y.data(), ref.data(), nullptr, s.numel(), tol);
      c.dims = {s.rows, s.cols};
      c.names = {"row", "col"};
      r.checks.push_back(c);
      finish_checks(r);
    }
    if (opt.time) {
      Timing t = time_gpu([&](cudaStream_t st) { k.run(dx.as<float>(), dy.as<float>(), s, st); },
                          opt.timing);
      r.ms = t.median_ms;
      r.gbps = 2.0 * s.numel() * sizeof(float) / (r.ms * 1e-3) / 1e9;
      r.pct = 100.0 * r.gbps / copy_bandwidth_gbps();
      r.pct_of = "copy";
    }
  });
  return r;
}

// ---------------------------------------------------------------------------------------------
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
        c = compare_allclose("C", C.data(), ref.data(), s.M * s.N, 1e-4 * sk, 1e-4);
      } else {
        std::vector<float> naive = gemm_naive_fp32(A.data(), B.data(), s);
        c = compare_flash_rule("C", C.data(), ref.data(), naive.data(), s.M * s.N, 2.0, 1e-4 * sk);
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

// ---------------------------------------------------------------------------------------------
RunResult run_transpose(const TransposeKernel& k, TransposeShape s, const RunOptions& opt) {
  RunResult r;
  r.kernel = k.name;
  r.shape = s.str();
  r.dtype = "fp32";
  if (!gpu_ready(r, k.min_sm)) return r;
  std::vector<float> x;
  DeviceBuffer din = make_input(DType::F32, s.numel(), 1, opt, &x), dout(s.numel() * sizeof(float));
  guarded(r, [&] {
    if (opt.check) {
      dout.poison();
      k.run(din.as<float>(), dout.as<float>(), s, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> y = to_host(DType::F32, dout, s.numel());
      std::vector<double> ref(static_cast<size_t>(s.numel()));
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t j = 0; j < s.cols; ++j) ref[j * s.rows + i] = x[i * s.cols + j];
      CompareResult c = compare_allclose("out", y.data(), ref.data(), s.numel(), 0.0, 0.0);
      c.dims = {s.cols, s.rows};
      c.names = {"row", "col"};
      r.checks.push_back(c);
      finish_checks(r);
    }
    if (opt.time) {
      Timing t = time_gpu([&](cudaStream_t st) { k.run(din.as<float>(), dout.as<float>(), s, st); },
                          opt.timing);
      r.ms = t.median_ms;
      r.gbps = 2.0 * s.numel() * sizeof(float) / (r.ms * 1e-3) / 1e9;
      r.pct = 100.0 * r.gbps / copy_bandwidth_gbps();
      r.pct_of = "copy";
    }
  });
  return r;
}

// ---------------------------------------------------------------------------------------------
namespace {

// Which heads to check: all of them while the CPU reference stays cheap, else a spread sample.
std::vector<int64_t> heads_to_check(const AttentionShape& s, int64_t requested,
                                    double cost_per_head, double budget) {
  int64_t n = s.bh();
  int64_t want = requested > 0 ? requested
                               : std::max<int64_t>(1, static_cast<int64_t>(budget / cost_per_head));
  std::vector<int64_t> heads;
  if (want >= n) {
    for (int64_t i = 0; i < n; ++i) heads.push_back(i);
    return heads;
  }
  want = std::max<int64_t>(want, std::min<int64_t>(n, 2));
  for (int64_t j = 0; j < want; ++j) {
    int64_t h = want == 1 ? 0 : j * (n - 1) / (want - 1);  // first, ..., last
    if (heads.empty() || heads.back() != h) heads.push_back(h);
  }
  return heads;
}

// Query rows to check per head: all, or the first, middle and last blocks of 128 (these hold the
// tile boundaries, the causal diagonal's start and the ragged tail).
std::vector<int64_t> rows_to_check(const AttentionShape& s, double budget) {
  double cost = double(s.seq_q) * s.seq_k * s.head_dim;
  std::vector<int64_t> rows;
  if (cost <= budget) return rows;  // empty = all
  const int64_t block = 128;
  auto add = [&](int64_t from) {
    for (int64_t i = std::max<int64_t>(0, from); i < std::min(s.seq_q, from + block); ++i)
      if (rows.empty() || rows.back() < i) rows.push_back(i);
  };
  add(0);
  add(s.seq_q / 2 - block / 2);
  add(s.seq_q - block);
  return rows;
}

constexpr double kRefBudget = 4e9;  // multiply-adds the CPU reference may spend per check

// ---- One reference per set of inputs (last_reference.h says why) -----------------------------
RefInputs ref_inputs(const AttentionShape& s, DType t, const std::vector<int64_t>& heads,
                     const std::vector<int64_t>& rows, const AttentionInputs& in) {
  std::ostringstream os;
  os << s.str() << " causal " << s.causal << " scale " << std::hexfloat << s.scale << " heads_kv "
     << s.heads_kv << " " << dtype_name(t) << " heads";
  for (int64_t h : heads) os << " " << h;
  os << " rows";
  for (int64_t r : rows) os << " " << r;
  os << (in.sliced ? " sliced" : " whole");
  return {os.str(), {in.hq, in.hk, in.hv, in.hdo}};
}

// The forward's reference of the checked heads and rows, head after head: float64 O and L, and
// (for fp16/bf16) the same-precision naive O and L that set the tolerance.
struct FwdRefs {
  std::vector<double> O, L;
  std::vector<float> naiveO, naiveL;
};
// The backward's: float64 dQ, dK, dV, D, and the naive ones.
struct BwdRefs {
  std::vector<double> dQ, dK, dV, D;
  std::vector<float> naive_dQ, naive_dK, naive_dV, naive_D;
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
  r.message = missing_version(k.dtypes, k.head_dims, t, s.head_dim);
  if (r.message.empty()) r.message = grouped_heads_refusal(s, k.gqa);
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
      Tolerance tolO =
          t == DType::F32 ? Tolerance::allclose(1e-4, 1e-4) : Tolerance::flash(2.0, 1e-4);
      Tolerance tolL =
          t == DType::F32 ? Tolerance::allclose(1e-4, 1e-5) : Tolerance::flash(2.0, 1e-4);
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

// ---------------------------------------------------------------------------------------------
RunResult run_attention_bwd(const AttentionBwdKernel& k, AttentionShape s, DType t,
                            const RunOptions& opt) {
  RunResult r;
  r.kernel = k.name;
  r.shape = s.str();
  r.dtype = dtype_name(t);
  if (!gpu_ready(r, k.min_sm)) return r;
  r.message = missing_version(k.dtypes, k.head_dims, t, s.head_dim);
  if (r.message.empty()) r.message = grouped_heads_refusal(s, false);  // no backward takes GQA
  if (!r.message.empty()) {
    r.status = Status::Unsupported;
    return r;
  }
  const AttentionFwdKernel* fwd = opt.forward_kernel.empty()
                                      ? forward_for_backward(t, int(s.head_dim))
                                      : find_entry<AttentionFwdKernel>(opt.forward_kernel);
  if (fwd == nullptr) {
    r.status = Status::Unsupported;
    r.message = "no forward kernel to produce O and L for " + std::string(dtype_name(t)) +
                " D=" + std::to_string(s.head_dim);
    return r;
  }
  const double per_head = 6.0 * double(s.seq_q) * s.seq_k * s.head_dim * (t == DType::F32 ? 1 : 2);
  const std::vector<int64_t> heads = heads_to_check(s, opt.check_heads, per_head, kRefBudget);
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
        for (size_t hi = 0; hi < heads.size(); ++hi) {
          HeadView h = in.view(s, hi, heads[hi]);
          const float* dO = in.dout_of(s, hi, heads[hi]);
          std::vector<double> a1(qh), a2(kh), a3(kh), a4(s.seq_q);
          attention_backward_ref_head(h, dO, a1.data(), a2.data(), a3.data(), a4.data());
          append(b.dQ, a1);
          append(b.dK, a2);
          append(b.dV, a3);
          append(b.D, a4);
          if (t != DType::F32) {
            std::vector<float> b1(qh), b2(kh), b3(kh), b4(s.seq_q);
            attention_backward_lowp_head(h, dO, t, b1.data(), b2.data(), b3.data(), b4.data());
            append(b.naive_dQ, b1);
            append(b.naive_dK, b2);
            append(b.naive_dV, b3);
            append(b.naive_D, b4);
          }
        }
        return b;
      });
      const std::vector<double>&rq = ref.dQ, &rk = ref.dK, &rv = ref.dV, &rD = ref.D;
      const std::vector<float>&nq = ref.naive_dQ, &nk = ref.naive_dK, &nv = ref.naive_dV,
            &nD = ref.naive_D;
      std::vector<float> xq, xk, xv, xD;
      for (int64_t bh : heads) {
        xq.insert(xq.end(), hq.begin() + bh * qh, hq.begin() + (bh + 1) * qh);
        xk.insert(xk.end(), hk.begin() + bh * kh, hk.begin() + (bh + 1) * kh);
        xv.insert(xv.end(), hv.begin() + bh * kh, hv.begin() + (bh + 1) * kh);
        xD.insert(xD.end(), hD.begin() + bh * s.seq_q, hD.begin() + (bh + 1) * s.seq_q);
      }
      if (int64_t(heads.size()) < s.bh())
        r.note = "checked " + std::to_string(heads.size()) + " of " + std::to_string(s.bh()) +
                 " heads (CPU reference budget)";
      Tolerance tolG =
          t == DType::F32 ? Tolerance::allclose(2e-4, 1e-3) : Tolerance::flash(3.0, 1e-4);
      Tolerance tolD =
          t == DType::F32 ? Tolerance::allclose(1e-4, 1e-4) : Tolerance::flash(3.0, 1e-4);
      if (opt.has_tolerance) tolG = tolD = opt.tolerance;
      bool all = int64_t(heads.size()) == s.bh();
      auto named = [&](CompareResult c, int64_t rows, bool per_row) {
        if (all) {
          c.dims = per_row ? std::vector<int64_t>{s.batch, s.heads, rows}
                           : std::vector<int64_t>{s.batch, s.heads, rows, s.head_dim};
          c.names = {"b", "h", "i", "d"};
        } else {
          c.dims = per_row ? std::vector<int64_t>{int64_t(heads.size()), rows}
                           : std::vector<int64_t>{int64_t(heads.size()), rows, s.head_dim};
          c.names = {"checked-head#", "i", "d"};
        }
        return c;
      };
      r.checks = {
          named(compare("dQ", xq.data(), rq.data(), nq.data(), rq.size(), tolG), s.seq_q, false),
          named(compare("dK", xk.data(), rk.data(), nk.data(), rk.size(), tolG), s.seq_k, false),
          named(compare("dV", xv.data(), rv.data(), nv.data(), rv.size(), tolG), s.seq_k, false),
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

// ---------------------------------------------------------------------------------------------
void print_table(std::ostream& os, const std::string& title, const std::vector<RunResult>& rows) {
  os << "\n== " << title << " ==\n";
  size_t wk = 6, ws = 5;
  for (const RunResult& r : rows) {
    wk = std::max(wk, r.kernel.size());
    ws = std::max(ws, r.shape.size());
  }
  auto pad = [&](const std::string& s, size_t w) {
    os << s;
    for (size_t i = s.size(); i < w + 2; ++i) os << ' ';
  };
  pad("kernel", wk);
  pad("shape", ws);
  os << "dtype  " << std::setw(10) << "ms" << std::setw(11) << "TFLOP/s" << std::setw(10) << "GB/s"
     << std::setw(13) << "% of ceiling" << std::setw(7) << "passes" << std::setw(11) << "max err"
     << "  status\n";
  for (const RunResult& r : rows) {
    pad(r.kernel, wk);
    pad(r.shape, ws);
    pad(r.dtype, 5);
    auto num = [&](double v, int w, int prec) {
      if (v < 0)
        os << std::setw(w) << "-";
      else
        os << std::setw(w) << std::fixed << std::setprecision(prec) << v;
    };
    num(r.ms, 10, 4);
    num(r.tflops, 11, 1);
    num(r.gbps, 10, 0);
    if (r.pct >= 0) {
      std::ostringstream p;
      p << std::fixed << std::setprecision(1) << r.pct << "% " << r.pct_of;
      os << std::setw(13) << p.str();
    } else {
      os << std::setw(13) << "-";
    }
    if (r.passes > 0)
      os << std::setw(7) << r.passes;
    else
      os << std::setw(7) << "-";
    double e = r.max_error();
    if (e < 0)
      os << std::setw(11) << "-";
    else
      os << std::setw(11) << std::scientific << std::setprecision(2) << e;
    os << std::defaultfloat << "  " << status_name(r.status);
    if (r.status == Status::Unsupported || r.status == Status::NoGpu)
      os << " (" << r.message << ")";
    os << "\n";
  }
}

int print_failures(std::ostream& os, const std::vector<RunResult>& rows) {
  int failures = 0;
  for (const RunResult& r : rows)
    if (r.status == Status::Fail) {
      ++failures;
      os << "\n" << r.report();
    }
  return failures;
}

}  // namespace fa
