// fa_python.cpp: the C ABI of libfa_python.so (see fa_python.h). The library links every
// chapter's kernels, so the registry here is the one the chapter programs and tests see.
//
// Every entry point catches every exception and turns it into a code and a message. The
// messages are the harness's own (common/harness.h, common/gpu.h, common/chapter.h): an unknown
// kernel lists the registered ones, a missing dtype or head dim reads "this kernel has no bf16
// D=80 version", an old GPU "... is sm_75; this kernel needs sm_80 or newer", and a kernel's
// fa::Unsupported or CUDA error arrives as the harness would report it.
#include "fa_python.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <climits>
#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "chapter.h"  // describe_kernel, dtype_list, throw_unknown_kernel
#include "check.h"
#include "dispatch.h"
#include "fp8.h"  // kFp8PScale
#include "gpu.h"
#include "harness.h"  // missing_version, kernel_error_message, supports
#include "registry.h"

namespace {

thread_local std::string g_error;
thread_local std::string g_pick;  // fa_py_pick_result()

// A refusal that is not the caller's mistake: no GPU, or no version of the kernel for it.
struct NoGpu : fa::Error {
  using fa::Error::Error;
};

template <class F>
int guarded(F body) {
  g_error.clear();
  try {
    body();
    return FA_PY_OK;
  } catch (const fa::UsageError& e) {
    g_error = e.what();
    return FA_PY_USAGE;
  } catch (const NoGpu& e) {
    g_error = e.what();
    return FA_PY_NO_GPU;
  } catch (const fa::Error& e) {
    bool unsupported = false;
    g_error = fa::kernel_error_message(e, &unsupported);
    return unsupported ? FA_PY_UNSUPPORTED : FA_PY_ERROR;
  } catch (const std::exception& e) {
    g_error = e.what();
    return FA_PY_ERROR;
  } catch (...) {
    g_error = "unknown C++ exception";
    return FA_PY_ERROR;
  }
}

std::string str_or_empty(const char* s) {
  return s != nullptr ? std::string(s) : std::string();
}

fa::DType read_dtype(const char* name) {
  const std::string s = str_or_empty(name);
  if (s == "fp32") return fa::DType::F32;
  if (s == "fp16") return fa::DType::F16;
  if (s == "bf16") return fa::DType::BF16;
  throw fa::UsageError("unknown dtype '" + s + "' (expected fp32, fp16 or bf16)");
}

template <class K>
const K& find_kernel(const char* name) {
  const std::string n = str_or_empty(name);
  const K* k = fa::find_entry<K>(n);
  if (k == nullptr) fa::throw_unknown_kernel(n, fa::entry_names<K>());
  return *k;
}

// The harness's order: is there a GPU that can take the kernel, then does the kernel have a
// version for this dtype and head dim (run_attention_fwd / run_attention_bwd).
template <class K>
void require_runnable(const K& k, fa::DType t, int64_t head_dim) {
  const std::string why = fa::gpu_skip_reason(k.min_sm);
  if (!why.empty()) {
    if (!fa::have_gpu()) throw NoGpu(why);
    throw fa::Unsupported(why);
  }
  const std::string missing = fa::missing_version(k, t, head_dim);
  if (!missing.empty()) throw fa::Unsupported(missing);
}

fa::AttentionShape read_shape(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_k,
                              int64_t head_dim, float scale, int causal) {
  if (batch < 1 || heads < 1 || seq_q < 1 || seq_k < 1 || head_dim < 1) {
    std::ostringstream os;
    os << "batch, heads, seq_q, seq_k and head_dim must be at least 1 (got " << batch << ", "
       << heads << ", " << seq_q << ", " << seq_k << ", " << head_dim << ")";
    throw fa::UsageError(os.str());
  }
  if (!std::isfinite(scale) || scale < 0.0f)  // NaN, inf or negative: refuse rather than guess
    throw fa::UsageError("scale must be a finite number > 0 (0 means 1/sqrt(head_dim))");
  fa::AttentionShape s;
  s.batch = batch;
  s.heads = heads;
  s.seq_q = seq_q;
  s.seq_k = seq_k;
  s.head_dim = head_dim;
  s.scale = scale;
  s.causal = causal != 0;
  return s;
}

void require_pointer(const void* p, const char* what) {
  if (p == nullptr) throw fa::UsageError(std::string(what) + " is a null pointer");
}

// Makes `device` current for the call and restores the caller's device afterwards, so that a
// PyTorch process sharing this CUDA runtime keeps its own current device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) FA_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

std::string head_dims_list(const std::vector<int>& dims) {
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
  return out;
}

// ---- Grouped heads, windows, pages: the refusals, in the harness's words ------------------------

constexpr const char* kNoGqa =
    "this kernel takes heads_kv == heads only (no grouped-query attention)";
constexpr const char* kNoWindowFixed =
    "a sliding window is chapter 09's: this kernel takes causal or full attention only";
constexpr const char* kNoWindow =
    "this kernel takes no sliding window (causal or full attention only)";

// heads_kv (0 = heads) must divide heads; returns it as the shapes store it.
int64_t read_heads_kv(int64_t heads, int64_t heads_kv) {
  if (heads_kv < 0 || heads_kv > heads || (heads_kv > 0 && heads % heads_kv != 0))
    throw fa::UsageError("heads (" + std::to_string(heads) + ") must be a multiple of heads_kv (" +
                         std::to_string(heads_kv) + ")");
  return heads_kv;
}

void check_scale(float scale) {
  if (!std::isfinite(scale) || scale < 0.0f)  // NaN, inf or negative: refuse rather than guess
    throw fa::UsageError("scale must be a finite number > 0 (0 means 1/sqrt(head_dim))");
}

void check_window(int64_t window_left, int64_t window_right) {
  if (window_left < -1 || window_right < -1)
    throw fa::UsageError("window_left and window_right must be >= 0, or -1 for unlimited (got " +
                         std::to_string(window_left) + ", " + std::to_string(window_right) + ")");
}

// The GPU check of require_runnable, for the append kernel (which has no head dims).
void require_gpu(int min_sm) {
  const std::string why = fa::gpu_skip_reason(min_sm);
  if (why.empty()) return;
  if (!fa::have_gpu()) throw NoGpu(why);
  throw fa::Unsupported(why);
}

void require_page_size(const fa::PagedFwdKernel& k, int64_t page_size) {
  for (int p : k.page_sizes)
    if (p == page_size) return;
  throw fa::Unsupported("this kernel has no version for pages of " + std::to_string(page_size) +
                        " keys (it takes " + head_dims_list(k.page_sizes) + ")");
}

void require_append_dtype(const fa::PagedAppendKernel& k, fa::DType t) {
  if (!fa::supports(k.dtypes, t))
    throw fa::Unsupported("this kernel has no " + std::string(fa::dtype_name(t)) + " version");
}

// Lengths from the host copy of the cumulative offsets: batch + 1 entries, starting at 0, never
// decreasing, the last below 2^31 (the kernels read them as int32).
std::vector<int64_t> read_lengths(const int64_t* cu, int64_t batch, const char* what) {
  require_pointer(cu, what);
  const std::string w(what);
  if (cu[0] != 0) throw fa::UsageError(w + "[0] must be 0 (got " + std::to_string(cu[0]) + ")");
  std::vector<int64_t> lengths(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b])
      throw fa::UsageError(w + " must not decrease (entry " + std::to_string(b + 1) + " is " +
                           std::to_string(cu[b + 1]) + " after " + std::to_string(cu[b]) + ")");
    lengths[static_cast<size_t>(b)] = cu[b + 1] - cu[b];
  }
  if (cu[batch] > INT32_MAX)
    throw fa::UsageError(w + ": " + std::to_string(cu[batch]) +
                         " tokens in all; the offsets are int32, at most 2^31 - 1");
  return lengths;
}

fa::VarlenShape read_varlen_shape(const int64_t* host_cu_q, const int64_t* host_cu_k, int64_t batch,
                                  int64_t heads, int64_t heads_kv, int64_t head_dim, float scale,
                                  int causal, int64_t window_left, int64_t window_right) {
  if (batch < 1 || heads < 1 || head_dim < 1) {
    std::ostringstream os;
    os << "batch, heads and head_dim must be at least 1 (got " << batch << ", " << heads << ", "
       << head_dim << ")";
    throw fa::UsageError(os.str());
  }
  check_scale(scale);
  check_window(window_left, window_right);
  fa::VarlenShape s;
  s.seqlens_q = read_lengths(host_cu_q, batch, "host_cu_seqlens_q");
  s.seqlens_k = read_lengths(host_cu_k, batch, "host_cu_seqlens_k");
  s.heads = heads;
  s.heads_kv = read_heads_kv(heads, heads_kv);
  s.head_dim = head_dim;
  s.causal = causal != 0;
  s.scale = scale;
  s.window_left = window_left;
  s.window_right = window_right;
  return s;
}

fa::PagedShape read_paged_shape(const int64_t* host_seqlens_k, int64_t batch, int64_t heads,
                                int64_t heads_kv, int64_t seq_q, int64_t head_dim,
                                int64_t page_size, int64_t num_pages, int64_t max_pages,
                                float scale, int causal) {
  if (batch < 1 || heads < 1 || seq_q < 1 || head_dim < 1 || page_size < 1 || num_pages < 1 ||
      max_pages < 1) {
    std::ostringstream os;
    os << "batch, heads, seq_q, head_dim, page_size, num_pages and max_pages must be at least 1 "
          "(got "
       << batch << ", " << heads << ", " << seq_q << ", " << head_dim << ", " << page_size << ", "
       << num_pages << ", " << max_pages << ")";
    throw fa::UsageError(os.str());
  }
  check_scale(scale);
  require_pointer(host_seqlens_k, "host_seqlens_k");
  fa::PagedShape s;
  s.seqlens_k.assign(host_seqlens_k, host_seqlens_k + batch);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = s.seqlens_k[static_cast<size_t>(b)];
    if (n < 0 || n > max_pages * page_size || n > INT32_MAX)
      throw fa::UsageError("seqlens_k[" + std::to_string(b) + "] = " + std::to_string(n) +
                           " does not fit a block table row of " + std::to_string(max_pages) +
                           " pages of " + std::to_string(page_size) + " keys");
  }
  s.heads = heads;
  s.heads_kv = read_heads_kv(heads, heads_kv);
  s.head_dim = head_dim;
  s.seq_q = seq_q;
  s.page_size = page_size;
  s.num_pages = num_pages;
  s.max_pages = max_pages;
  s.causal = causal != 0;
  s.scale = scale;
  return s;
}

// The harness's checks for an FP8 kernel (run_attention_fwd_fp8, fp8_refusal), in its order and
// words: a GPU that can take it, then a version for the head dim and the kernel's block sizes.
void require_fp8_runnable(const fa::AttentionFwdFp8Kernel& k, int64_t head_dim) {
  require_gpu(k.min_sm);
  if (head_dim > INT_MAX || !fa::supports(k.head_dims, int(head_dim)))
    throw fa::Unsupported("this kernel has no e4m3 D=" + std::to_string(head_dim) + " version");
  if (k.block_rows_q < 1 || k.block_rows_kv < 1)
    throw fa::Unsupported("the kernel declares no block sizes");
}

std::string serving_flags(bool gqa, bool window, bool decoding, bool deterministic) {
  std::string out;
  auto add = [&](bool on, const char* f) {
    if (on) out += (out.empty() ? "" : ",") + std::string(f);
  };
  add(gqa, "gqa");
  add(window, "window");
  add(decoding, "decoding");
  add(!deterministic, "nondeterministic");
  return out;
}

}  // namespace

extern "C" {

int fa_py_api_version(void) {
  return FA_PY_API_VERSION;
}

const char* fa_py_last_error(void) {
  return g_error.c_str();
}

const char* fa_py_list_kernels(void) {
  static const std::string table = [] {
    std::ostringstream os;
    for (const fa::AttentionFwdKernel* k : fa::entries_with_prefix<fa::AttentionFwdKernel>(""))
      os << "fwd\t" << k->name << "\t" << fa::dtype_list(k->dtypes) << "\t"
         << head_dims_list(k->head_dims) << "\t" << k->min_sm << "\t1\t" << k->about << "\n";
    for (const fa::AttentionBwdKernel* k : fa::entries_with_prefix<fa::AttentionBwdKernel>(""))
      os << "bwd\t" << k->name << "\t" << fa::dtype_list(k->dtypes) << "\t"
         << head_dims_list(k->head_dims) << "\t" << k->min_sm << "\t" << (k->deterministic ? 1 : 0)
         << "\t" << k->about << "\n";
    return os.str();
  }();
  return table.c_str();
}

const char* fa_py_describe_gpu(void) {
  static const std::string text = fa::describe_gpu();
  return text.c_str();
}

int fa_py_supported(const char* kind, const char* name, const char* dtype, int64_t head_dim) {
  return guarded([&] {
    const std::string k = str_or_empty(kind);
    if (k == "fwd") {
      const fa::AttentionFwdKernel& kernel = find_kernel<fa::AttentionFwdKernel>(name);
      require_runnable(kernel, read_dtype(dtype), head_dim);
    } else if (k == "bwd") {
      const fa::AttentionBwdKernel& kernel = find_kernel<fa::AttentionBwdKernel>(name);
      require_runnable(kernel, read_dtype(dtype), head_dim);
    } else {
      throw fa::UsageError("kind must be \"fwd\" or \"bwd\", not \"" + k + "\"");
    }
  });
}

int fa_py_attention_fwd(const char* name, const void* q, const void* k, const void* v, void* o,
                        float* lse, int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_k,
                        int64_t head_dim, const char* dtype, float scale, int causal, int device,
                        void* stream) {
  return guarded([&] {
    const fa::AttentionFwdKernel& kernel = find_kernel<fa::AttentionFwdKernel>(name);
    const fa::DType t = read_dtype(dtype);
    fa::AttentionFwdArgs a;
    a.shape = read_shape(batch, heads, seq_q, seq_k, head_dim, scale, causal);
    require_pointer(q, "q");
    require_pointer(k, "k");
    require_pointer(v, "v");
    require_pointer(o, "o");
    require_pointer(lse, "lse");
    require_runnable(kernel, t, head_dim);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    a.dtype = t;
    DeviceGuard guard(device);
    kernel.run(a, static_cast<cudaStream_t>(stream));
  });
}

// fa_py_attention_bwd and fa_py_attention_bwd_gqa: heads_kv 0 is heads (no grouping).
static int attention_bwd(const char* name, const void* q, const void* k, const void* v,
                         const void* o, const void* dout, const float* lse, void* dq, void* dk,
                         void* dv, float* delta, float* workspace, int64_t batch, int64_t heads,
                         int64_t heads_kv, int64_t seq_q, int64_t seq_k, int64_t head_dim,
                         const char* dtype, float scale, int causal, int device, void* stream) {
  return guarded([&] {
    const fa::AttentionBwdKernel& kernel = find_kernel<fa::AttentionBwdKernel>(name);
    const fa::DType t = read_dtype(dtype);
    fa::AttentionBwdArgs a;
    a.shape = read_shape(batch, heads, seq_q, seq_k, head_dim, scale, causal);
    a.shape.heads_kv = read_heads_kv(heads, heads_kv);
    require_pointer(q, "q");
    require_pointer(k, "k");
    require_pointer(v, "v");
    require_pointer(o, "o");
    require_pointer(dout, "dout");
    require_pointer(lse, "lse");
    require_pointer(dq, "dq");
    require_pointer(dk, "dk");
    require_pointer(dv, "dv");
    require_pointer(delta, "delta");
    require_pointer(workspace, "workspace");
    require_runnable(kernel, t, head_dim);
    if (a.shape.is_gqa() && !kernel.gqa) throw fa::Unsupported(kNoGqa);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.dout = dout;
    a.lse = lse;
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    a.delta = delta;
    a.workspace = workspace;
    a.dtype = t;
    DeviceGuard guard(device);
    // The kernels that add dQ into the workspace need it zero. A memset from here costs the host
    // a few microseconds; a torch.zeros in Python cost about 30 (bench/host_overhead.py).
    FA_CUDA_CHECK(cudaMemsetAsync(workspace, 0, a.shape.q_numel() * sizeof(float),
                                  static_cast<cudaStream_t>(stream)));
    kernel.run(a, static_cast<cudaStream_t>(stream));
  });
}

int fa_py_attention_bwd(const char* name, const void* q, const void* k, const void* v,
                        const void* o, const void* dout, const float* lse, void* dq, void* dk,
                        void* dv, float* delta, float* workspace, int64_t batch, int64_t heads,
                        int64_t seq_q, int64_t seq_k, int64_t head_dim, const char* dtype,
                        float scale, int causal, int device, void* stream) {
  return attention_bwd(name, q, k, v, o, dout, lse, dq, dk, dv, delta, workspace, batch, heads, 0,
                       seq_q, seq_k, head_dim, dtype, scale, causal, device, stream);
}

int fa_py_attention_bwd_gqa(const char* name, const void* q, const void* k, const void* v,
                            const void* o, const void* dout, const float* lse, void* dq, void* dk,
                            void* dv, float* delta, float* workspace, int64_t batch, int64_t heads,
                            int64_t heads_kv, int64_t seq_q, int64_t seq_k, int64_t head_dim,
                            const char* dtype, float scale, int causal, int device, void* stream) {
  return attention_bwd(name, q, k, v, o, dout, lse, dq, dk, dv, delta, workspace, batch, heads,
                       heads_kv, seq_q, seq_k, head_dim, dtype, scale, causal, device, stream);
}

int fa_py_attention_fwd_gqa(const char* name, const void* q, const void* k, const void* v, void* o,
                            float* lse, int64_t batch, int64_t heads, int64_t heads_kv,
                            int64_t seq_q, int64_t seq_k, int64_t head_dim, const char* dtype,
                            float scale, int causal, int device, void* stream) {
  return guarded([&] {
    const fa::AttentionFwdKernel& kernel = find_kernel<fa::AttentionFwdKernel>(name);
    const fa::DType t = read_dtype(dtype);
    fa::AttentionFwdArgs a;
    a.shape = read_shape(batch, heads, seq_q, seq_k, head_dim, scale, causal);
    a.shape.heads_kv = read_heads_kv(heads, heads_kv);
    require_pointer(q, "q");
    require_pointer(k, "k");
    require_pointer(v, "v");
    require_pointer(o, "o");
    require_pointer(lse, "lse");
    require_runnable(kernel, t, head_dim);
    if (a.shape.is_gqa() && !kernel.gqa) throw fa::Unsupported(kNoGqa);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    a.dtype = t;
    DeviceGuard guard(device);
    kernel.run(a, static_cast<cudaStream_t>(stream));
  });
}

const char* fa_py_list_serving_kernels(void) {
  static const std::string table = [] {
    std::ostringstream os;
    for (const fa::VarlenFwdKernel* k : fa::entries_with_prefix<fa::VarlenFwdKernel>(""))
      os << "varlen_fwd\t" << k->name << "\t" << fa::dtype_list(k->dtypes) << "\t"
         << head_dims_list(k->head_dims) << "\t" << k->min_sm << "\t"
         << serving_flags(k->gqa, k->window, false, true) << "\t\t\t" << k->about << "\n";
    for (const fa::VarlenBwdKernel* k : fa::entries_with_prefix<fa::VarlenBwdKernel>(""))
      os << "varlen_bwd\t" << k->name << "\t" << fa::dtype_list(k->dtypes) << "\t"
         << head_dims_list(k->head_dims) << "\t" << k->min_sm << "\t"
         << serving_flags(k->gqa, k->window, false, k->deterministic) << "\t\t" << k->forward
         << "\t" << k->about << "\n";
    for (const fa::PagedFwdKernel* k : fa::entries_with_prefix<fa::PagedFwdKernel>(""))
      os << "paged_fwd\t" << k->name << "\t" << fa::dtype_list(k->dtypes) << "\t"
         << head_dims_list(k->head_dims) << "\t" << k->min_sm << "\t"
         << serving_flags(k->gqa, false, k->decoding, true) << "\t" << head_dims_list(k->page_sizes)
         << "\t\t" << k->about << "\n";
    for (const fa::PagedAppendKernel* k : fa::entries_with_prefix<fa::PagedAppendKernel>(""))
      os << "append\t" << k->name << "\t" << fa::dtype_list(k->dtypes) << "\t\t" << k->min_sm
         << "\t\t\t\t" << k->about << "\n";
    return os.str();
  }();
  return table.c_str();
}

int fa_py_supported_ex(const char* kind, const char* name, const char* dtype, int64_t head_dim,
                       int gqa, int window, int64_t page_size) {
  return guarded([&] {
    const std::string k = str_or_empty(kind);
    // The kernel first, then the dtype: the order (and so the message) of fa_py_supported.
    auto t = [&] { return read_dtype(dtype); };
    if (k == "fwd") {
      const auto& kernel = find_kernel<fa::AttentionFwdKernel>(name);
      require_runnable(kernel, t(), head_dim);
      if (gqa && !kernel.gqa) throw fa::Unsupported(kNoGqa);
      if (window) throw fa::Unsupported(kNoWindowFixed);
    } else if (k == "bwd") {
      const auto& kernel = find_kernel<fa::AttentionBwdKernel>(name);
      require_runnable(kernel, t(), head_dim);
      if (gqa && !kernel.gqa) throw fa::Unsupported(kNoGqa);
      if (window) throw fa::Unsupported(kNoWindowFixed);
    } else if (k == "varlen_fwd") {
      const auto& kernel = find_kernel<fa::VarlenFwdKernel>(name);
      require_runnable(kernel, t(), head_dim);
      if (gqa && !kernel.gqa) throw fa::Unsupported(kNoGqa);
      if (window && !kernel.window) throw fa::Unsupported(kNoWindow);
    } else if (k == "varlen_bwd") {
      const auto& kernel = find_kernel<fa::VarlenBwdKernel>(name);
      require_runnable(kernel, t(), head_dim);
      if (gqa && !kernel.gqa) throw fa::Unsupported(kNoGqa);
      if (window && !kernel.window) throw fa::Unsupported(kNoWindow);
    } else if (k == "paged_fwd") {
      const auto& kernel = find_kernel<fa::PagedFwdKernel>(name);
      require_runnable(kernel, t(), head_dim);
      if (gqa && !kernel.gqa) throw fa::Unsupported(kNoGqa);
      if (window) throw fa::Unsupported(kNoWindow);
      if (page_size != 0) require_page_size(kernel, page_size);
    } else if (k == "append") {
      const auto& kernel = find_kernel<fa::PagedAppendKernel>(name);
      require_gpu(kernel.min_sm);
      require_append_dtype(kernel, t());
    } else {
      throw fa::UsageError(
          "kind must be fwd, bwd, varlen_fwd, varlen_bwd, paged_fwd or append, not \"" + k + "\"");
    }
  });
}

int fa_py_varlen_fwd(const char* name, const void* q, const void* k, const void* v, void* o,
                     float* lse, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                     const int64_t* host_cu_seqlens_q, const int64_t* host_cu_seqlens_k,
                     int64_t batch, int64_t heads, int64_t heads_kv, int64_t head_dim,
                     const char* dtype, float scale, int causal, int64_t window_left,
                     int64_t window_right, int device, void* stream) {
  return guarded([&] {
    const fa::VarlenFwdKernel& kernel = find_kernel<fa::VarlenFwdKernel>(name);
    const fa::DType t = read_dtype(dtype);
    fa::VarlenFwdArgs a;
    a.shape = read_varlen_shape(host_cu_seqlens_q, host_cu_seqlens_k, batch, heads, heads_kv,
                                head_dim, scale, causal, window_left, window_right);
    require_pointer(cu_seqlens_q, "cu_seqlens_q");
    require_pointer(cu_seqlens_k, "cu_seqlens_k");
    // An empty tensor may have no storage: pointers are required only where there are rows.
    if (a.shape.total_q() > 0) {
      require_pointer(q, "q");
      require_pointer(o, "o");
      require_pointer(lse, "lse");
    }
    if (a.shape.total_k() > 0) {
      require_pointer(k, "k");
      require_pointer(v, "v");
    }
    require_runnable(kernel, t, head_dim);
    if (a.shape.is_gqa() && !kernel.gqa) throw fa::Unsupported(kNoGqa);
    if (a.shape.has_window() && !kernel.window) throw fa::Unsupported(kNoWindow);
    if (a.shape.total_q() == 0) return;  // no query row: nothing to compute
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    a.cu_seqlens_q = cu_seqlens_q;
    a.cu_seqlens_k = cu_seqlens_k;
    a.dtype = t;
    DeviceGuard guard(device);
    kernel.run(a, static_cast<cudaStream_t>(stream));
  });
}

int fa_py_varlen_bwd(const char* name, const void* q, const void* k, const void* v, const void* o,
                     const void* dout, const float* lse, void* dq, void* dk, void* dv, float* delta,
                     float* workspace, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                     const int64_t* host_cu_seqlens_q, const int64_t* host_cu_seqlens_k,
                     int64_t batch, int64_t heads, int64_t heads_kv, int64_t head_dim,
                     const char* dtype, float scale, int causal, int64_t window_left,
                     int64_t window_right, int device, void* stream) {
  return guarded([&] {
    const fa::VarlenBwdKernel& kernel = find_kernel<fa::VarlenBwdKernel>(name);
    const fa::DType t = read_dtype(dtype);
    fa::VarlenBwdArgs a;
    a.shape = read_varlen_shape(host_cu_seqlens_q, host_cu_seqlens_k, batch, heads, heads_kv,
                                head_dim, scale, causal, window_left, window_right);
    require_pointer(cu_seqlens_q, "cu_seqlens_q");
    require_pointer(cu_seqlens_k, "cu_seqlens_k");
    if (a.shape.total_q() > 0) {
      require_pointer(q, "q");
      require_pointer(o, "o");
      require_pointer(dout, "dout");
      require_pointer(lse, "lse");
      require_pointer(dq, "dq");
      require_pointer(delta, "delta");
      require_pointer(workspace, "workspace");
    }
    if (a.shape.total_k() > 0) {
      require_pointer(k, "k");
      require_pointer(v, "v");
      require_pointer(dk, "dk");
      require_pointer(dv, "dv");
    }
    require_runnable(kernel, t, head_dim);
    if (a.shape.is_gqa() && !kernel.gqa) throw fa::Unsupported(kNoGqa);
    if (a.shape.has_window() && !kernel.window) throw fa::Unsupported(kNoWindow);
    DeviceGuard guard(device);
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (a.shape.total_q() ==
        0) {  // no query: every key's gradient is 0 (all-zero bits in fp16/bf16)
      const size_t bytes = static_cast<size_t>(a.shape.k_numel()) * fa::dtype_size(t);
      if (bytes > 0) {
        FA_CUDA_CHECK(cudaMemsetAsync(dk, 0, bytes, st));
        FA_CUDA_CHECK(cudaMemsetAsync(dv, 0, bytes, st));
      }
      return;
    }
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.dout = dout;
    a.lse = lse;
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    a.delta = delta;
    a.workspace = workspace;
    a.cu_seqlens_q = cu_seqlens_q;
    a.cu_seqlens_k = cu_seqlens_k;
    a.dtype = t;
    kernel.run(a, st);
  });
}

int fa_py_paged_fwd(const char* name, const void* q, const void* k_pages, const void* v_pages,
                    void* o, float* lse, const int32_t* block_table, const int32_t* seqlens_k,
                    const int64_t* host_seqlens_k, int64_t batch, int64_t heads, int64_t heads_kv,
                    int64_t seq_q, int64_t head_dim, int64_t page_size, int64_t num_pages,
                    int64_t max_pages, const char* dtype, float scale, int causal, int device,
                    void* stream) {
  return guarded([&] {
    const fa::PagedFwdKernel& kernel = find_kernel<fa::PagedFwdKernel>(name);
    const fa::DType t = read_dtype(dtype);
    fa::PagedFwdArgs a;
    a.shape = read_paged_shape(host_seqlens_k, batch, heads, heads_kv, seq_q, head_dim, page_size,
                               num_pages, max_pages, scale, causal);
    require_pointer(q, "q");
    require_pointer(k_pages, "k_pages");
    require_pointer(v_pages, "v_pages");
    require_pointer(o, "o");
    require_pointer(lse, "lse");
    require_pointer(block_table, "block_table");
    require_pointer(seqlens_k, "seqlens_k");
    require_runnable(kernel, t, head_dim);
    require_page_size(kernel, page_size);
    if (a.shape.kv_heads() != a.shape.heads && !kernel.gqa) throw fa::Unsupported(kNoGqa);
    a.q = q;
    a.k_pages = k_pages;
    a.v_pages = v_pages;
    a.o = o;
    a.lse = lse;
    a.block_table = block_table;
    a.seqlens_k = seqlens_k;
    a.dtype = t;
    DeviceGuard guard(device);
    kernel.run(a, static_cast<cudaStream_t>(stream));
  });
}

int fa_py_paged_append(const char* name, const void* k_new, const void* v_new, void* k_pages,
                       void* v_pages, const int32_t* block_table, const int32_t* seqlens_k,
                       const int64_t* host_seqlens_k, int64_t batch, int64_t heads_kv,
                       int64_t seq_q, int64_t head_dim, int64_t page_size, int64_t num_pages,
                       int64_t max_pages, const char* dtype, int device, void* stream) {
  return guarded([&] {
    const fa::PagedAppendKernel& kernel = find_kernel<fa::PagedAppendKernel>(name);
    const fa::DType t = read_dtype(dtype);
    fa::PagedAppendArgs a;
    // The cache's shape with heads = heads_kv: appending knows no query heads.
    a.shape = read_paged_shape(host_seqlens_k, batch, heads_kv, heads_kv, seq_q, head_dim,
                               page_size, num_pages, max_pages, 0.0f, 0);
    for (int64_t b = 0; b < batch; ++b)
      if (a.shape.seqlens_k[static_cast<size_t>(b)] < seq_q)
        throw fa::UsageError("seqlens_k[" + std::to_string(b) +
                             "] = " + std::to_string(a.shape.seqlens_k[static_cast<size_t>(b)]) +
                             " is less than the " + std::to_string(seq_q) +
                             " new keys (seqlens_k counts them already)");
    require_pointer(k_new, "k_new");
    require_pointer(v_new, "v_new");
    require_pointer(k_pages, "k_pages");
    require_pointer(v_pages, "v_pages");
    require_pointer(block_table, "block_table");
    require_pointer(seqlens_k, "seqlens_k");
    require_gpu(kernel.min_sm);
    require_append_dtype(kernel, t);
    a.k_new = k_new;
    a.v_new = v_new;
    a.k_pages = k_pages;
    a.v_pages = v_pages;
    a.block_table = block_table;
    a.seqlens_k = seqlens_k;
    a.dtype = t;
    DeviceGuard guard(device);
    kernel.run(a, static_cast<cudaStream_t>(stream));
  });
}

// ---- Chapter 07: the FP8 forward ----------------------------------------------------------------

const char* fa_py_list_fp8_kernels(void) {
  static const std::string table = [] {
    std::ostringstream os;
    for (const fa::AttentionFwdFp8Kernel* k :
         fa::entries_with_prefix<fa::AttentionFwdFp8Kernel>(""))
      os << k->name << "\t" << head_dims_list(k->head_dims) << "\t" << k->min_sm << "\t"
         << k->block_rows_q << "\t" << k->block_rows_kv << "\t"
         << (k->vt_p_order ? "p_order" : "keys") << "\t" << k->about << "\n";
    return os.str();
  }();
  return table.c_str();
}

int fa_py_supported_fp8(const char* name, int64_t head_dim) {
  return guarded([&] {
    const fa::AttentionFwdFp8Kernel& kernel = find_kernel<fa::AttentionFwdFp8Kernel>(name);
    require_fp8_runnable(kernel, head_dim);
  });
}

int fa_py_attention_fwd_fp8(const char* name, const void* q_codes, const void* k_codes,
                            const void* vt_codes, const float* q_scale, const float* k_scale,
                            const float* v_scale, void* o_bf16, float* lse, int64_t batch,
                            int64_t heads, int64_t seq_q, int64_t seq_k, int64_t head_dim,
                            float scale, int causal, int device, void* stream) {
  return guarded([&] {
    const fa::AttentionFwdFp8Kernel& kernel = find_kernel<fa::AttentionFwdFp8Kernel>(name);
    fa::AttentionFwdFp8Args a;
    a.shape = read_shape(batch, heads, seq_q, seq_k, head_dim, scale, causal);
    require_pointer(q_codes, "q_codes");
    require_pointer(k_codes, "k_codes");
    require_pointer(vt_codes, "vt_codes");
    require_pointer(q_scale, "q_scale");
    require_pointer(k_scale, "k_scale");
    require_pointer(v_scale, "v_scale");
    require_pointer(o_bf16, "o_bf16");
    require_pointer(lse, "lse");
    require_fp8_runnable(kernel, head_dim);
    a.q = static_cast<const uint8_t*>(q_codes);
    a.k = static_cast<const uint8_t*>(k_codes);
    a.vt = static_cast<const uint8_t*>(vt_codes);
    a.q_scale = q_scale;
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    a.p_scale = fa::kFp8PScale;  // as the harness: the naive FP8 forward of the rule uses it
    a.o = o_bf16;
    a.lse = lse;
    a.block_rows_q = kernel.block_rows_q;
    a.block_rows_kv = kernel.block_rows_kv;
    DeviceGuard guard(device);
    kernel.run(a, static_cast<cudaStream_t>(stream));
  });
}

int fa_py_pick(const char* op, const char* dtype, int64_t head_dim, int64_t seq_q, int64_t seq_k,
               int causal, int window, int gqa, int64_t page_size, int deterministic, int sm) {
  return guarded([&] {
    fa::Problem p;
    const std::string o = str_or_empty(op);
    if (o == "fwd")
      p.op = fa::Op::Fwd;
    else if (o == "bwd")
      p.op = fa::Op::Bwd;
    else if (o == "varlen_fwd")
      p.op = fa::Op::VarlenFwd;
    else if (o == "varlen_bwd")
      p.op = fa::Op::VarlenBwd;
    else if (o == "paged_fwd")
      p.op = fa::Op::PagedFwd;
    else
      throw fa::UsageError("op must be fwd, bwd, varlen_fwd, varlen_bwd or paged_fwd, not \"" + o +
                           "\"");
    p.dtype = read_dtype(dtype);
    if (head_dim < 1 || seq_q < 0 || seq_k < 0 || page_size < 0)
      throw fa::UsageError("head_dim must be at least 1, seq_q, seq_k and page_size at least 0");
    p.head_dim = static_cast<int>(head_dim);
    p.seq_q = seq_q;
    p.seq_k = seq_k;
    p.causal = causal != 0;
    p.window = window != 0;
    p.gqa = gqa != 0;
    p.page_size = static_cast<int>(page_size);
    p.deterministic = deterministic != 0;
    if (sm == 0 && !fa::have_gpu()) throw NoGpu(fa::gpu_skip_reason(70));
    const fa::Pick k = sm == 0 ? fa::pick(p) : fa::pick(p, sm);
    if (!k) throw fa::Unsupported(k.refusal);
    std::string passed;
    for (size_t i = 0; i < k.passed_over.size(); ++i) passed += (i ? "; " : "") + k.passed_over[i];
    g_pick = k.kernel + "\t" + k.kind + "\t" + std::to_string(k.sm) + "\t" + k.rule->conditions() +
             "\t" + k.rule->why + "\t" + k.rule->measured + "\t" + passed;
  });
}

const char* fa_py_pick_result(void) {
  return g_pick.c_str();
}

const char* fa_py_dispatch_table(void) {
  static const std::string table = [] {
    std::ostringstream os;
    for (const fa::Rule& r : fa::dispatch_table())
      os << fa::op_name(r.op) << "\t" << r.kernel << "\t" << r.conditions() << "\t" << r.why << "\t"
         << r.measured << "\n";
    return os.str();
  }();
  return table.c_str();
}

}  // extern "C"
