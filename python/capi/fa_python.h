// fa_python.h: the C ABI of libfa_python.so, through which Python (ctypes, no C++ extension
// build) calls any registered attention kernel. python/flash_from_scratch/_lib.py is its one
// caller in this repository; tests/cpu/test_python_capi.cpp checks it without a GPU.
//
// Conventions are the repository's (notes/conventions.md): Q, O are [batch, heads, seq_q, D], K,
// V are [batch, heads, seq_k, D], contiguous, in `dtype` ("fp32", "fp16", "bf16"); L and D
// (delta) are fp32 [batch, heads, seq_q]; L is the natural-log logsumexp of scale * Q K^T; causal
// masks are aligned bottom-right; scale = 0 means 1/sqrt(head_dim). Pointers are device
// pointers of `device`; kernels are launched on `stream` (a cudaStream_t, NULL for the legacy
// default stream) and not waited for, like any CUDA library call.
//
// Every function returns FA_PY_OK or an error code; fa_py_last_error() then holds the message,
// in the words the chapter programs and the harness use for the same problem.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FA_PY_API_VERSION 1

enum {
  FA_PY_OK = 0,
  FA_PY_USAGE = 1,        // bad arguments: unknown kernel or dtype, null pointer, size < 1
  FA_PY_UNSUPPORTED = 2,  // the kernel has no version for this dtype / head dim / GPU / shape
  FA_PY_NO_GPU = 3,       // no usable CUDA device
  FA_PY_ERROR = 4,        // a CUDA error or another failure (message keeps its file:line)
};

int fa_py_api_version(void);

// The message of the last failed call on this thread ("" after a successful one).
const char* fa_py_last_error(void);

// The registered attention kernels, one per line, fields separated by tabs:
//   fwd|bwd  name  dtypes ("fp32,bf16")  head dims ("32,64")  min_sm  deterministic (0|1)  about
// Forward kernels are listed as deterministic (they accumulate nothing across blocks).
const char* fa_py_list_kernels(void);

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", or "no GPU (...)": the chapter programs' header.
const char* fa_py_describe_gpu(void);

// Whether kernel `name` ("fwd" or "bwd" in `kind`) can run `dtype` at `head_dim` here, without
// launching anything: FA_PY_OK, or the code and message the launch would fail with.
int fa_py_supported(const char* kind, const char* name, const char* dtype, int64_t head_dim);

// O and L = forward(Q, K, V).
int fa_py_attention_fwd(const char* name, const void* q, const void* k, const void* v, void* o,
                        float* lse, int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_k,
                        int64_t head_dim, const char* dtype, float scale, int causal, int device,
                        void* stream);

// dQ, dK, dV (dtype) and delta = rowsum(dO * O) (fp32) from Q, K, V, O, dO and L. `workspace` is
// fp32 scratch of batch * heads * seq_q * head_dim floats, zeroed by the caller before each call.
int fa_py_attention_bwd(const char* name, const void* q, const void* k, const void* v,
                        const void* o, const void* dout, const float* lse, void* dq, void* dk,
                        void* dv, float* delta, float* workspace, int64_t batch, int64_t heads,
                        int64_t seq_q, int64_t seq_k, int64_t head_dim, const char* dtype,
                        float scale, int causal, int device, void* stream);

#ifdef __cplusplus
}
#endif
