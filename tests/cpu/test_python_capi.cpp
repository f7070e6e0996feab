// test_python_capi.cpp: the C ABI of libfa_python.so (python/capi/fa_python.h), which Python's
// ctypes loads. Runs without a GPU: the library loads with dlopen (as ctypes does), lists the
// registered attention kernels, and refuses what it cannot do with the harness's own words.
// The kernels themselves are run through it by python/tests/ on a GPU machine.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chapter.h"
#include "dispatch.h"
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
  decltype(&fa_py_list_fp8_kernels) list_fp8 = nullptr;
  decltype(&fa_py_supported_fp8) supported_fp8 = nullptr;
  decltype(&fa_py_attention_fwd_fp8) fwd_fp8 = nullptr;
  decltype(&fa_py_pick) pick = nullptr;
  decltype(&fa_py_pick_result) pick_result = nullptr;
  decltype(&fa_py_dispatch_table) dispatch_table = nullptr;
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
    bind(x.handle, "fa_py_list_fp8_kernels", &x.list_fp8);
    bind(x.handle, "fa_py_supported_fp8", &x.supported_fp8);
    bind(x.handle, "fa_py_attention_fwd_fp8", &x.fwd_fp8);
    bind(x.handle, "fa_py_pick", &x.pick);
    bind(x.handle, "fa_py_pick_result", &x.pick_result);
    bind(x.handle, "fa_py_dispatch_table", &x.dispatch_table);
    return x;
  }();
  return a;
}

std::vector<std::vector<std::string>> table_rows(const std::string& table) {
  std::vector<std::vector<std::string>> rows;
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

std::vector<std::vector<std::string>> kernel_rows() {
  return table_rows(api().list_kernels());
}

// A forward call that fails before touching memory: the pointers are never dereferenced.
int fwd_call(const char* kernel, const char* dtype, int64_t d, int64_t seq_q = 17) {
  static float dummy[1];
  return api().fwd(kernel, dummy, dummy, dummy, dummy, dummy, 1, 2, seq_q, 5, d, dtype, 0.0f, 1, 0,
                   nullptr);
}

// An FP8 forward call that fails before touching memory; one argument can be made null (0..7 in
// the order q_codes, k_codes, vt_codes, q_scale, k_scale, v_scale, o_bf16, lse; -1: none).
int fwd_fp8_call(const char* kernel, int64_t d, int64_t seq_q = 17, int null_arg = -1) {
  static float dummy[1];
  std::vector<void*> p(8, dummy);
  if (null_arg >= 0) p[size_t(null_arg)] = nullptr;
  return api().fwd_fp8(kernel, p[0], p[1], p[2], static_cast<float*>(p[3]),
                       static_cast<float*>(p[4]), static_cast<float*>(p[5]), p[6],
                       static_cast<float*>(p[7]), 1, 2, seq_q, 5, d, 0.0f, 1, 0, nullptr);
}

// The first registered FP8 kernel ("" when this build has none: they are sm_90a code).
std::string first_fp8_kernel() {
  const auto ks = fa::entries_with_prefix<fa::AttentionFwdFp8Kernel>("");
  return ks.empty() ? std::string() : ks.front()->name;
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
  ASSERT_NE(api().list_fp8, nullptr);
  ASSERT_NE(api().supported_fp8, nullptr);
  ASSERT_NE(api().fwd_fp8, nullptr);
  EXPECT_EQ(api().api_version(), FA_PY_API_VERSION);
  EXPECT_EQ(FA_PY_API_VERSION, 5);
  // The registry inside stays inside (fa_python.map): this process has its own.
  EXPECT_EQ(dlsym(api().handle, "_ZN2fa8have_gpuEv"), nullptr);  // fa::have_gpu()
}

// The dispatch through the C ABI chooses what fa::pick chooses (the library has its own copy of
// the registry and the table), and refuses in its words.
TEST(PythonCApi, PickIsTheDispatchsChoice) {
  ASSERT_NE(api().pick, nullptr);
  ASSERT_NE(api().pick_result, nullptr);
  ASSERT_NE(api().dispatch_table, nullptr);
  for (int sm : {80, 90})
    for (const char* op : {"fwd", "bwd"})
      for (int64_t d : {64, 96, 128, 256})
        for (int causal : {0, 1}) {
          fa::Problem p;
          p.op = std::string(op) == "fwd" ? fa::Op::Fwd : fa::Op::Bwd;
          p.dtype = fa::DType::BF16;
          p.head_dim = static_cast<int>(d);
          p.seq_q = p.seq_k = 4096;
          p.causal = causal != 0;
          const fa::Pick want = fa::pick(p, sm);
          SCOPED_TRACE(p.str() + " on sm_" + std::to_string(sm));
          if (!want) {  // the D 256 backward on an A100: nothing fits its shared memory
            EXPECT_EQ(api().pick(op, "bf16", d, 4096, 4096, causal, 0, 0, 0, 0, sm),
                      FA_PY_UNSUPPORTED);
            EXPECT_EQ(std::string(api().last_error()), want.refusal);
            continue;
          }
          ASSERT_EQ(api().pick(op, "bf16", d, 4096, 4096, causal, 0, 0, 0, 0, sm), FA_PY_OK)
              << api().last_error();
          const auto fields = table_rows(std::string(api().pick_result()) + "\n")[0];
          ASSERT_EQ(fields.size(), 7u)
              << "kernel, kind, sm, conditions, why, measured, passed over";
          EXPECT_EQ(fields[0], want.kernel);
          EXPECT_EQ(fields[1], want.kind);
          EXPECT_EQ(fields[2], std::to_string(sm));
          EXPECT_EQ(fields[5], want.rule->measured);
        }
  EXPECT_EQ(api().pick("fwd", "bf16", 264, 4096, 4096, 0, 0, 0, 0, 0, 90), FA_PY_UNSUPPORTED);
  EXPECT_NE(std::string(api().last_error()).find("no registered kernel runs fwd bf16 D264"),
            std::string::npos)
      << api().last_error();
  EXPECT_EQ(api().pick("sideways", "bf16", 64, 1, 1, 0, 0, 0, 0, 0, 90), FA_PY_USAGE);
  if (!fa::have_gpu()) {
    EXPECT_EQ(api().pick("fwd", "bf16", 64, 1, 1, 0, 0, 0, 0, 0, 0), FA_PY_NO_GPU);
  }
  EXPECT_EQ(table_rows(api().dispatch_table()).size(), fa::dispatch_table().size());
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

TEST(PythonCApi, ListsEveryFp8Kernel) {
  ASSERT_NE(api().handle, nullptr) << dlerror();
  const auto rows = table_rows(api().list_fp8());
  for (const auto& r : rows) {
    ASSERT_EQ(r.size(), 7u)
        << "name, head dims, min_sm, block_rows_q, block_rows_kv, vt order, about";
    const fa::AttentionFwdFp8Kernel* k = fa::find_entry<fa::AttentionFwdFp8Kernel>(r[0]);
    ASSERT_NE(k, nullptr) << r[0];
    std::string dims;
    for (int d : k->head_dims) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    EXPECT_EQ(r[1], dims);
    EXPECT_EQ(r[2], std::to_string(k->min_sm));
    EXPECT_EQ(r[3], std::to_string(k->block_rows_q));
    EXPECT_EQ(r[4], std::to_string(k->block_rows_kv));
    EXPECT_EQ(r[5], k->vt_p_order ? "p_order" : "keys");
    EXPECT_EQ(r[6], k->about);
  }
  EXPECT_EQ(rows.size(), fa::registry<fa::AttentionFwdFp8Kernel>().size());
  if (fa::find_entry<fa::AttentionFwdFp8Kernel>("07/fp8_v1") != nullptr)
    EXPECT_NE(std::string(api().list_fp8()).find("07/fp8_v1\t128\t90\t64\t128\tkeys\t"),
              std::string::npos)
        << api().list_fp8();
}

TEST(PythonCApi, Fp8BadArgumentsAreUsageErrors) {
  ASSERT_NE(api().handle, nullptr) << dlerror();
  // An unknown name lists the registered FP8 kernels, in the programs' words.
  std::string expected;
  try {
    fa::throw_unknown_kernel("07/nope", fa::entry_names<fa::AttentionFwdFp8Kernel>());
  } catch (const fa::UsageError& e) {
    expected = e.what();
  }
  EXPECT_EQ(fwd_fp8_call("07/nope", 128), FA_PY_USAGE);
  EXPECT_EQ(api().last_error(), expected);
  EXPECT_EQ(api().supported_fp8("07/nope", 128), FA_PY_USAGE);
  EXPECT_EQ(api().last_error(), expected);
  const std::string name = first_fp8_kernel();
  if (name.empty()) GTEST_SKIP() << "no FP8 kernel in this build (sm_90a code)";
  // Sizes and pointers are checked before the GPU: these answer alike with and without one.
  EXPECT_EQ(fwd_fp8_call(name.c_str(), 128, /*seq_q=*/0), FA_PY_USAGE);
  EXPECT_NE(std::string(api().last_error()).find("at least 1"), std::string::npos);
  const char* names[8] = {"q_codes", "k_codes", "vt_codes", "q_scale",
                          "k_scale", "v_scale", "o_bf16",   "lse"};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(fwd_fp8_call(name.c_str(), 128, 17, i), FA_PY_USAGE) << names[i];
    EXPECT_EQ(std::string(api().last_error()), std::string(names[i]) + " is a null pointer");
  }
  static float dummy[1];
  EXPECT_EQ(api().fwd_fp8(name.c_str(), dummy, dummy, dummy, dummy, dummy, dummy, dummy, dummy, 1,
                          2, 17, 5, 128, -1.0f, 0, 0, nullptr),
            FA_PY_USAGE);
  EXPECT_NE(std::string(api().last_error()).find("scale must be"), std::string::npos);
}

// As for the other kernels: first the GPU, then the head dim (the FP8 harness's words).
TEST(PythonCApi, Fp8UnsupportedRequestsGetTheHarnessMessage) {
  ASSERT_NE(api().handle, nullptr) << dlerror();
  const std::string name = first_fp8_kernel();
  if (name.empty()) GTEST_SKIP() << "no FP8 kernel in this build (sm_90a code)";
  const fa::AttentionFwdFp8Kernel* k = fa::find_entry<fa::AttentionFwdFp8Kernel>(name);
  ASSERT_NE(k, nullptr);
  const int d = k->head_dims.front();  // a head dim it has (the first kernel may be D 256 only)
  if (!fa::have_gpu()) {
    EXPECT_EQ(api().supported_fp8(name.c_str(), d), FA_PY_NO_GPU);
    EXPECT_EQ(std::string(api().last_error()), fa::gpu_skip_reason(k->min_sm));
    EXPECT_EQ(fwd_fp8_call(name.c_str(), d), FA_PY_NO_GPU);
    EXPECT_EQ(std::string(api().last_error()), fa::gpu_skip_reason(k->min_sm));
    EXPECT_EQ(fwd_fp8_call(name.c_str(), 64), FA_PY_NO_GPU);  // the GPU is asked first
  } else if (fa::gpu_skip_reason(k->min_sm).empty()) {
    EXPECT_EQ(api().supported_fp8(name.c_str(), 48), FA_PY_UNSUPPORTED);
    EXPECT_EQ(std::string(api().last_error()), "this kernel has no e4m3 D=48 version");
    EXPECT_EQ(fwd_fp8_call(name.c_str(), 48), FA_PY_UNSUPPORTED);
    EXPECT_EQ(std::string(api().last_error()), "this kernel has no e4m3 D=48 version");
    EXPECT_EQ(api().supported_fp8(name.c_str(), d), FA_PY_OK);
    EXPECT_STREQ(api().last_error(), "");
  } else {
    EXPECT_EQ(api().supported_fp8(name.c_str(), d), FA_PY_UNSUPPORTED);
    EXPECT_EQ(std::string(api().last_error()), fa::gpu_skip_reason(k->min_sm));
  }
}

#else

TEST(PythonCApi, LibraryIsBuilt) {
  GTEST_SKIP() << "libfa_python.so is not part of this build (python/CMakeLists.txt)";
}

#endif
