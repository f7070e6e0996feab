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

// 2: chapter 09 (varlen, paged, append) and grouped K/V heads
// 3: chapter 07's FP8 (e4m3) forward (fa_py_list_fp8_kernels, fa_py_attention_fwd_fp8)
// 4: the dispatch (fa_py_pick, fa_py_dispatch_table)
// 5: grouped K/V heads in the fixed-length backward (fa_py_attention_bwd_gqa)
#define FA_PY_API_VERSION 5

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
// fp32 scratch of batch * heads * seq_q * head_dim floats; the call zeroes it on the stream before
// the kernels (as the harness does), so the caller need not.
int fa_py_attention_bwd(const char* name, const void* q, const void* k, const void* v,
                        const void* o, const void* dout, const float* lse, void* dq, void* dk,
                        void* dv, float* delta, float* workspace, int64_t batch, int64_t heads,
                        int64_t seq_q, int64_t seq_k, int64_t head_dim, const char* dtype,
                        float scale, int causal, int device, void* stream);

// ---- Grouped-query attention with the fixed-length forward kernels ------------------------------
// As fa_py_attention_fwd, with K and V of `heads_kv` heads ([batch, heads_kv, seq_k, D]); heads
// must be a multiple of heads_kv, and the kernel must take grouped heads (chapter 08's and
// 07/v5_persistent do).
int fa_py_attention_fwd_gqa(const char* name, const void* q, const void* k, const void* v, void* o,
                            float* lse, int64_t batch, int64_t heads, int64_t heads_kv,
                            int64_t seq_q, int64_t seq_k, int64_t head_dim, const char* dtype,
                            float scale, int causal, int device, void* stream);

// As fa_py_attention_bwd, with K, V, dK and dV of `heads_kv` heads ([batch, heads_kv, seq_k, D]):
// dK and dV of a K/V head are the sums over its group of query heads. The kernel must take grouped
// heads (07/bwd_v1_tma_wgmma does; fa_py_supported_ex says). workspace as fa_py_attention_bwd's.
int fa_py_attention_bwd_gqa(const char* name, const void* q, const void* k, const void* v,
                            const void* o, const void* dout, const float* lse, void* dq, void* dk,
                            void* dv, float* delta, float* workspace, int64_t batch, int64_t heads,
                            int64_t heads_kv, int64_t seq_q, int64_t seq_k, int64_t head_dim,
                            const char* dtype, float scale, int causal, int device, void* stream);

// ---- Chapter 09: serving ----------------------------------------------------------------------
// The chapter 09 kernels, one per line, fields separated by tabs:
//   kind  name  dtypes  head dims  min_sm  flags  page sizes  forward  about
// kind is varlen_fwd, varlen_bwd, paged_fwd or append; flags a comma list of gqa, window,
// decoding, nondeterministic ("" for none); page sizes ("16,64,256") for paged_fwd, forward (the
// varlen forward that makes O and L) for varlen_bwd, "" elsewhere; append has no head dims.
const char* fa_py_list_serving_kernels(void);

// Whether kernel `name` of `kind` (fwd, bwd, varlen_fwd, varlen_bwd, paged_fwd, append) runs
// `dtype` at `head_dim` here, and, when asked (nonzero), grouped K/V heads, a sliding window and
// pages of `page_size` keys: FA_PY_OK, or the code and message the launch would fail with.
// fa_py_supported(kind, ...) is this with gqa = window = page_size = 0.
int fa_py_supported_ex(const char* kind, const char* name, const char* dtype, int64_t head_dim,
                       int gqa, int window, int64_t page_size);

// Variable-length batches (common/shapes.h, VarlenShape): head-major packed Q, O
// [heads, total_q, D], K, V [heads_kv, total_k, D], L fp32 [heads, total_q]. cu_seqlens_q/_k are
// the batch + 1 cumulative offsets twice: int32 on the device for the kernel, and int64 on the
// host (host_cu_seqlens_q/_k, read during the call) for the lengths the launcher sizes its grid
// from; they must be the same numbers. Offsets start at 0 and never decrease (a sequence may be
// empty); total_q = host_cu_seqlens_q[batch] < 2^31. window_left / window_right: -1 unlimited,
// FlashAttention's meaning (AttentionShape); heads_kv 0 means heads. With total_q = 0 nothing is
// launched.
int fa_py_varlen_fwd(const char* name, const void* q, const void* k, const void* v, void* o,
                     float* lse, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                     const int64_t* host_cu_seqlens_q, const int64_t* host_cu_seqlens_k,
                     int64_t batch, int64_t heads, int64_t heads_kv, int64_t head_dim,
                     const char* dtype, float scale, int causal, int64_t window_left,
                     int64_t window_right, int device, void* stream);

// Its backward: dQ (like q), dK, dV (like k) and delta (fp32, like lse) from Q, K, V, O, dO and
// L. `workspace` is fp32 scratch of heads * total_q * head_dim floats, zeroed by the caller
// before each call. No backward takes grouped heads (heads_kv must be 0 or heads). With total_q
// = 0, dK and dV are zeroed (no query, no gradient) and no kernel runs.
int fa_py_varlen_bwd(const char* name, const void* q, const void* k, const void* v, const void* o,
                     const void* dout, const float* lse, void* dq, void* dk, void* dv, float* delta,
                     float* workspace, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                     const int64_t* host_cu_seqlens_q, const int64_t* host_cu_seqlens_k,
                     int64_t batch, int64_t heads, int64_t heads_kv, int64_t head_dim,
                     const char* dtype, float scale, int causal, int64_t window_left,
                     int64_t window_right, int device, void* stream);

// A paged KV cache (common/shapes.h, PagedShape): Q, O [batch, heads, seq_q, D], L fp32
// [batch, heads, seq_q], pages [num_pages, heads_kv, page_size, D], block_table int32
// [batch, max_pages] and seqlens_k int32 [batch] on the device; host_seqlens_k the same lengths
// as int64 on the host (read during the call). Every seqlens_k[b] must fit its block table row
// (<= max_pages * page_size); the block table's entries are the caller's to keep in range.
int fa_py_paged_fwd(const char* name, const void* q, const void* k_pages, const void* v_pages,
                    void* o, float* lse, const int32_t* block_table, const int32_t* seqlens_k,
                    const int64_t* host_seqlens_k, int64_t batch, int64_t heads, int64_t heads_kv,
                    int64_t seq_q, int64_t head_dim, int64_t page_size, int64_t num_pages,
                    int64_t max_pages, const char* dtype, float scale, int causal, int device,
                    void* stream);

// Appends seq_q new keys and values per sequence, k_new and v_new [batch, heads_kv, seq_q, D],
// into the pages, in place: they become keys seqlens_k[b] - seq_q .. seqlens_k[b] - 1 of
// sequence b (seqlens_k counts them already, so each must be >= seq_q).
int fa_py_paged_append(const char* name, const void* k_new, const void* v_new, void* k_pages,
                       void* v_pages, const int32_t* block_table, const int32_t* seqlens_k,
                       const int64_t* host_seqlens_k, int64_t batch, int64_t heads_kv,
                       int64_t seq_q, int64_t head_dim, int64_t page_size, int64_t num_pages,
                       int64_t max_pages, const char* dtype, int device, void* stream);

// ---- Chapter 07: the FP8 (e4m3) forward (common/registry.h, AttentionFwdFp8Args) ---------------
// The FP8 forward kernels, one per line, fields separated by tabs:
//   name  head dims ("128")  min_sm  block_rows_q  block_rows_kv  vt order  about
// block_rows_q / block_rows_kv are the kernel's quantisation blocks: its inputs carry one fp32
// scale per block of that many query rows / keys of one head (common/fp8.h, quantize_head). The
// vt order is "keys" (V^T's row c holds V[0..seq_k-1][c]) or "p_order" (each 16 of those keys in
// P's register order: common/fp8.h, fp8_vt_key_at; registry.h, vt_p_order).
const char* fa_py_list_fp8_kernels(void);

// Whether FP8 kernel `name` runs head dim `head_dim` here, without launching anything: FA_PY_OK,
// or the code and message the launch would fail with.
int fa_py_supported_fp8(const char* name, int64_t head_dim);

// O and L = forward(Q, K, V) on e4m3 codes (bytes, OCP FP8 E4M3) with per-block fp32 scales: the
// value of a code is e4m3(code) * the scale of its block.
//   q_codes [batch, heads, seq_q, D];  q_scale [batch * heads, ceil(seq_q / block_rows_q)]
//   k_codes [batch, heads, seq_k, D];  k_scale [batch * heads, ceil(seq_k / block_rows_kv)]
//   vt_codes V transposed per head, [batch, heads, D, stride] with stride = seq_k rounded up to a
//            multiple of 16 (fp8_vt_stride), the keys past seq_k zero (code 0);
//            v_scale [batch * heads, ceil(seq_k / block_rows_kv)] (V's blocks are K's)
//   o_bf16 bf16 [batch, heads, seq_q, D];  lse fp32 [batch, heads, seq_q]
// The block sizes are the kernel's (fa_py_list_fp8_kernels); P is quantised with fp8.h's
// kFp8PScale. Codes base pointers 16-byte aligned (TMA). No grouped heads, no window.
int fa_py_attention_fwd_fp8(const char* name, const void* q_codes, const void* k_codes,
                            const void* vt_codes, const float* q_scale, const float* k_scale,
                            const float* v_scale, void* o_bf16, float* lse, int64_t batch,
                            int64_t heads, int64_t seq_q, int64_t seq_k, int64_t head_dim,
                            float scale, int causal, int device, void* stream);

// ---- The dispatch (common/dispatch.h): which kernel runs a problem ------------------------------
// op is "fwd", "bwd" (fixed length), "varlen_fwd", "varlen_bwd" or "paged_fwd"; seq_q and seq_k
// the lengths (varlen: the longest sequence; 0 when not known); causal, window, gqa and
// deterministic are 0 or 1; page_size 0 except for paged_fwd; sm the GPU to choose for
// (major*10+minor), 0 for this machine's. On FA_PY_OK fa_py_pick_result() holds one line of
// tab-separated fields:
//   kernel  kind ("fwd", "bwd", "varlen_fwd", "varlen_bwd", "paged_fwd")  sm  conditions  why
//   measured (the log, relative to the repository)  passed over ("kernel: reason; ..." or "")
// Otherwise the code and message say why nothing runs the problem (FA_PY_NO_GPU without a GPU
// and sm 0; FA_PY_UNSUPPORTED when no row's kernel takes it).
int fa_py_pick(const char* op, const char* dtype, int64_t head_dim, int64_t seq_q, int64_t seq_k,
               int causal, int window, int gqa, int64_t page_size, int deterministic, int sm);
const char* fa_py_pick_result(void);

// The table itself, a row per line, tab-separated: op  kernel  conditions  why  measured.
const char* fa_py_dispatch_table(void);

#ifdef __cplusplus
}
#endif
