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
#include <exception>
#include <sstream>
#include <string>

#include "chapter.h"  // describe_kernel, dtype_list, throw_unknown_kernel
#include "check.h"
#include "gpu.h"
#include "harness.h"  // missing_version, kernel_error_message, supports
#include "registry.h"

namespace {

thread_local std::string g_error;

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
  const std::string missing = fa::missing_version(k.dtypes, k.head_dims, t, head_dim);
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

int fa_py_attention_bwd(const char* name, const void* q, const void* k, const void* v,
                        const void* o, const void* dout, const float* lse, void* dq, void* dk,
                        void* dv, float* delta, float* workspace, int64_t batch, int64_t heads,
                        int64_t seq_q, int64_t seq_k, int64_t head_dim, const char* dtype,
                        float scale, int causal, int device, void* stream) {
  return guarded([&] {
    const fa::AttentionBwdKernel& kernel = find_kernel<fa::AttentionBwdKernel>(name);
    const fa::DType t = read_dtype(dtype);
    fa::AttentionBwdArgs a;
    a.shape = read_shape(batch, heads, seq_q, seq_k, head_dim, scale, causal);
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
    kernel.run(a, static_cast<cudaStream_t>(stream));
  });
}

}  // extern "C"
