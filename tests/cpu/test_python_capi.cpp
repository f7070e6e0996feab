// test_python_capi.cpp: the C ABI of libfa_python.so (python/capi/fa_python.h), which Python's
// ctypes loads. Runs without a GPU: the library loads with dlopen (as ctypes does), lists the
// registered attention kernels, and refuses what it cannot do with the harness's own words.
// The kernels themselves are run through it by python/tests/ on a GPU machine.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chapter.h"
#include "gpu.h"
#include "harness.h"
#include "registry.h"

#ifdef FA_PYTHON_LIBRARY
#include <dlfcn.h>

#include "fa_python.h"

namespace {

// The library's entry points, looked up by name like ctypes does.
struct Api {
  void* handle = nullptr;
  int (*api_version)() = nullptr;
  const char* (*last_error)() = nullptr;
  const char* (*list_kernels)() = nullptr;
  int (*supported)(const char*, const char*, const char*, int64_t) = nullptr;
  decltype(&fa_py_attention_fwd) fwd = nullptr;
  decltype(&fa_py_attention_bwd) bwd = nullptr;
};

template <class F>
void bind(void* handle, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
}

const Api& api() {
  static const Api a = [] {
    Api x;
    x.handle = dlopen(FA_PYTHON_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (x.handle == nullptr) return x;
    bind(x.handle, "fa_py_api_version", &x.api_version);
    bind(x.handle, "fa_py_last_error", &x.last_error);
    bind(x.handle, "fa_py_list_kernels", &x.list_kernels);
    bind(x.handle, "fa_py_supported", &x.supported);
    bind(x.handle, "fa_py_attention_fwd", &x.fwd);
    bind(x.handle, "fa_py_attention_bwd", &x.bwd);
    return x;
  }();
  return a;
}

std::vector<std::vector<std::string>> kernel_rows() {
  std::vector<std::vector<std::string>> rows;
  std::string table = api().list_kernels();
  size_t at = 0;
  for (size_t nl; (nl = table.find('\n', at)) != std::string::npos; at = nl + 1) {
    std::vector<std::string> fields;
    const std::string line = table.substr(at, nl - at);
    size_t f = 0;
    for (size_t tab; (tab = line.find('\t', f)) != std::string::npos; f = tab + 1)
      fields.push_back(line.substr(f, tab - f));
    fields.push_back(line.substr(f));
    rows.push_back(fields);
  }
  return rows;
}

// A forward call that fails before touching memory: the pointers are never dereferenced.
int fwd_call(const char* kernel, const char* dtype, int64_t d, int64_t seq_q = 17) {
  static float dummy[1];
  return api().fwd(kernel, dummy, dummy, dummy, dummy, dummy, 1, 2, seq_q, 5, d, dtype, 0.0f, 1, 0,
                   nullptr);
}

}  // namespace

TEST(PythonCApi, LoadsAndExportsOnlyItsCAbi) {
  ASSERT_NE(api().handle, nullptr) << dlerror();
  ASSERT_NE(api().api_version, nullptr);
  ASSERT_NE(api().last_error, nullptr);
  ASSERT_NE(api().list_kernels, nullptr);
  ASSERT_NE(api().supported, nullptr);
  ASSERT_NE(api().fwd, nullptr);
  ASSERT_NE(api().bwd, nullptr);
  EXPECT_EQ(api().api_version(), FA_PY_API_VERSION);
  // The registry inside stays inside (fa_python.map): this process has its own.
  EXPECT_EQ(dlsym(api().handle, "_ZN2fa8have_gpuEv"), nullptr);  // fa::have_gpu()
}

TEST(PythonCApi, ListsEveryRegisteredAttentionKernel) {
  ASSERT_NE(api().handle, nullptr) << dlerror();
  const auto rows = kernel_rows();
  size_t fwd = 0, bwd = 0;
  for (const auto& r : rows) {
    ASSERT_EQ(r.size(), 7u) << "kind, name, dtypes, head dims, min_sm, deterministic, about";
    if (r[0] == "fwd") {
      ++fwd;
      const fa::AttentionFwdKernel* k = fa::find_entry<fa::AttentionFwdKernel>(r[1]);
      ASSERT_NE(k, nullptr) << r[1];
      EXPECT_EQ(r[2], fa::dtype_list(k->dtypes));
      EXPECT_EQ(r[4], std::to_string(k->min_sm));
      EXPECT_EQ(r[6], k->about);
    } else {
      ASSERT_EQ(r[0], "bwd");
      ++bwd;
      const fa::AttentionBwdKernel* k = fa::find_entry<fa::AttentionBwdKernel>(r[1]);
      ASSERT_NE(k, nullptr) << r[1];
      EXPECT_EQ(r[2], fa::dtype_list(k->dtypes));
      EXPECT_EQ(r[5], k->deterministic ? "1" : "0");
    }
  }
  EXPECT_EQ(fwd, fa::registry<fa::AttentionFwdKernel>().size());
  EXPECT_EQ(bwd, fa::registry<fa::AttentionBwdKernel>().size());
  EXPECT_NE(std::string(api().list_kernels()).find("fwd\t05/v1_scalar_fp32\tfp32\t"),
            std::string::npos);
  EXPECT_NE(std::string(api().list_kernels()).find("bwd\t06/v1_fp32\tfp32\t"), std::string::npos);
}

TEST(PythonCApi, UnknownKernelGetsTheProgramsMessage) {
  ASSERT_NE(api().handle, nullptr) << dlerror();
  std::string expected;
  try {
    fa::throw_unknown_kernel("05/nope", fa::entry_names<fa::AttentionFwdKernel>());
  } catch (const fa::UsageError& e) {
    expected = e.what();
  }
  EXPECT_EQ(fwd_call("05/nope", "bf16", 64), FA_PY_USAGE);
  EXPECT_EQ(api().last_error(), expected);
  EXPECT_EQ(expected.rfind("no kernel named '05/nope'; registered here:\n  ", 0), 0u) << expected;
  EXPECT_NE(expected.find("\n  05/v1_scalar_fp32"), std::string::npos) << expected;
  EXPECT_EQ(api().supported("bwd", "06/nope", "bf16", 64), FA_PY_USAGE);
  EXPECT_NE(std::string(api().last_error()).find("no kernel named '06/nope'"), std::string::npos);
}

TEST(PythonCApi, BadArgumentsAreUsageErrors) {
  ASSERT_NE(api().handle, nullptr) << dlerror();
  EXPECT_EQ(fwd_call("05/v1_scalar_fp32", "fp8", 64), FA_PY_USAGE);
  EXPECT_EQ(std::string(api().last_error()), "unknown dtype 'fp8' (expected fp32, fp16 or bf16)");
  EXPECT_EQ(fwd_call("05/v1_scalar_fp32", "fp32", 64, /*seq_q=*/0), FA_PY_USAGE);
  EXPECT_NE(std::string(api().last_error()).find("at least 1"), std::string::npos);
  EXPECT_EQ(api().supported("both", "05/v1_scalar_fp32", "fp32", 64), FA_PY_USAGE);
  // A successful call clears the message; a failed one always leaves one.
  EXPECT_EQ(fwd_call("05/v1_scalar_fp32", "fp32", 64, 0), FA_PY_USAGE);
  EXPECT_STRNE(api().last_error(), "");
}

// The harness's order and words: first the GPU (gpu_skip_reason), then the kernel's versions
// (missing_version). Without a GPU the first answers; with one, the second.
TEST(PythonCApi, UnsupportedRequestsGetTheHarnessMessage) {
  ASSERT_NE(api().handle, nullptr) << dlerror();
  const fa::AttentionFwdKernel* v1 = fa::find_entry<fa::AttentionFwdKernel>("05/v1_scalar_fp32");
  ASSERT_NE(v1, nullptr);
  const int code = api().supported("fwd", "05/v1_scalar_fp32", "bf16", 64);
  const std::string why = api().last_error();
  if (!fa::have_gpu()) {
    EXPECT_EQ(code, FA_PY_NO_GPU);
    EXPECT_EQ(why, fa::gpu_skip_reason(v1->min_sm));
    EXPECT_EQ(fwd_call("05/v1_scalar_fp32", "fp32", 64), FA_PY_NO_GPU);
    EXPECT_EQ(std::string(api().last_error()), fa::gpu_skip_reason(v1->min_sm));
  } else if (fa::gpu_skip_reason(v1->min_sm).empty()) {
    EXPECT_EQ(code, FA_PY_UNSUPPORTED);
    EXPECT_EQ(why, fa::missing_version(v1->dtypes, v1->head_dims, fa::DType::BF16, 64));
    EXPECT_EQ(why, "this kernel has no bf16 D=64 version");
    EXPECT_EQ(api().supported("fwd", "05/v1_scalar_fp32", "fp32", 48), FA_PY_UNSUPPORTED);
    EXPECT_EQ(std::string(api().last_error()), "this kernel has no fp32 D=48 version");
    EXPECT_EQ(api().supported("fwd", "05/v1_scalar_fp32", "fp32", 64), FA_PY_OK);
    EXPECT_STREQ(api().last_error(), "");
  }
}

#else

TEST(PythonCApi, LibraryIsBuilt) {
  GTEST_SKIP() << "libfa_python.so is not part of this build (python/CMakeLists.txt)";
}

#endif
