// registry.h: one signature per problem, and one line to register a kernel under a stable name.
//
// Every kernel version in the repository is registered like this, next to its launcher:
//
//   FA_REGISTER(SoftmaxKernel, {"01/v1_thread_per_row", softmax_v1, "one thread per row", 3});
//
// The chapter programs, the tests and the benchmarks iterate over these lists, so a new kernel
// (a student's too) shows up everywhere by adding one file and that one line.
//
// Names are "<chapter>/<version>"; the chapter prefix decides which program runs the kernel.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "dtype.h"
#include "shapes.h"

namespace fa {

// ---- Row softmax (chapters 01, 02): fp32 in, fp32 out. ----------------------------------------
using SoftmaxFn = void (*)(const float* x, float* y, SoftmaxShape shape, cudaStream_t stream);
struct SoftmaxKernel {
  std::string name;
  SoftmaxFn run = nullptr;
  std::string about;  // one line: what changed in this version
  int reads = 1;      // passes over x in global memory (the write is one more pass)
  int min_sm = 70;    // oldest GPU it runs on, as major*10+minor
};

// ---- GEMM (chapter 03): C = A*B, row-major. A and B are `dtype`; C is always fp32. -------------
using GemmFn = void (*)(const void* A, const void* B, float* C, GemmShape shape, DType dtype,
                        cudaStream_t stream);
struct GemmKernel {
  std::string name;
  GemmFn run = nullptr;
  std::string about;
  std::vector<DType> dtypes = {DType::F32};
  int min_sm = 70;
};

// ---- Transpose (chapter 04): out = in^T, fp32. ------------------------------------------------
using TransposeFn = void (*)(const float* in, float* out, TransposeShape shape, cudaStream_t s);
struct TransposeKernel {
  std::string name;
  TransposeFn run = nullptr;
  std::string about;
  int min_sm = 70;
};

// Head dims a kernel does not list but rounds up inside (rounds_head_dim, below) are the multiples
// of kHeadDimStep: the step at which a row of 16-bit elements stays a whole number of 16-byte
// chunks, as TMA's row strides must be. A kernel that copies rows of any length (head_dim_step 1:
// chapter 05's t15, chapter 06's t17) rounds every head dim up.
constexpr int kHeadDimStep = 8;

// ---- Attention forward (chapters 05, 07, 08). --------------------------------------------------
// q, k, v, o are `dtype` with the layouts of AttentionShape; lse (L) is fp32 [batch, heads, seq_q].
// K and V have shape.kv_heads() heads (grouped-query attention when fewer than shape.heads).
struct AttentionFwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  AttentionShape shape;
  DType dtype = DType::F32;
};
using AttentionFwdFn = void (*)(const AttentionFwdArgs& args, cudaStream_t stream);
struct AttentionFwdKernel {
  std::string name;
  AttentionFwdFn run = nullptr;
  std::string about;
  std::vector<DType> dtypes = {DType::F32};
  std::vector<int> head_dims = {64};
  int min_sm = 70;
  // Takes grouped K/V heads (shape.heads_kv < shape.heads). A kernel that leaves it false is
  // never run on such a shape: the harness reports UNSUPPORTED instead.
  bool gqa = false;
  // Written for decoding (short seq_q against a long cache): correct for every seq_q, but the
  // long square shapes of the FlashAttention benchmark protocol are not its job (fa_bench skips
  // it there and times it on decode shapes instead).
  bool decoding = false;
  // Also takes every head dim below head_dims.back() that is a multiple of kHeadDimStep (8; not
  // listed): computed at the next listed head dim, the columns past the real one zero in shared
  // memory and never stored (harness.h, takes_head_dim).
  bool rounds_head_dim = false;
  // With rounds_head_dim: the step of the head dims it rounds up, kHeadDimStep or 1 (every one).
  int head_dim_step = kHeadDimStep;
};

// ---- FP8 (e4m3) attention forward (chapter 07, common/fp8.h) ----------------------------------
// Inputs are e4m3 codes with one fp32 scale per block of rows of one head (fp8.h's per-block
// scaling: the value of a code is e4m3_to_float(code) * scale of its block). No grouped K/V heads:
// K and V have shape.heads heads, like Q.
//   q      [B, H, seq_q, D] codes; q_scale [B * H, ceil(seq_q / block_rows_q)]
//   k      [B, H, seq_k, D] codes; k_scale [B * H, ceil(seq_k / block_rows_kv)]
//   vt     V transposed per head, [B, H, D, fp8_vt_stride(seq_k)] codes: row c of a head holds
//          V[0..seq_k-1][c] and then zeros up to the stride (seq_k rounded up to 16 bytes). The FP8
//          wgmma takes K-major operands only, so the B operand of O += P V (reduced over keys) must
//          have the keys innermost; the 16-byte rounding is TMA's rule for a row stride. A kernel
//          that declares vt_p_order (below) takes each 16 keys of a row in the order its P
//          registers hold them (fp8.h, fp8_vt_key_at) instead.
//          v_scale [B * H, ceil(seq_k / block_rows_kv)]: V's blocks are K's blocks of keys.
//   p_scale  P is quantised as e4m3(P~ * p_scale) (fp8.h's kFp8PScale), 1/p_scale goes into 1/l.
//   o      bf16 [B, H, seq_q, D];  lse fp32 [B, H, seq_q], as AttentionFwdArgs.
// The block sizes are the kernel's (AttentionFwdFp8Kernel): the harness quantises with them.
struct AttentionFwdFp8Args {
  const uint8_t* q = nullptr;
  const uint8_t* k = nullptr;
  const uint8_t* vt = nullptr;
  const float* q_scale = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  float p_scale = 256.0f;  // the harness passes fp8.h's kFp8PScale
  void* o = nullptr;
  float* lse = nullptr;
  AttentionShape shape;
  int64_t block_rows_q = 64, block_rows_kv = 128;
};
using AttentionFwdFp8Fn = void (*)(const AttentionFwdFp8Args& args, cudaStream_t stream);
struct AttentionFwdFp8Kernel {
  std::string name;
  AttentionFwdFp8Fn run = nullptr;
  std::string about;
  std::vector<int> head_dims = {128};
  int min_sm = 90;
  // The quantisation blocks the kernel reads its scales in (one scale per tile of Q rows and per
  // tile of keys is what a tiled kernel can apply outside its MMAs).
  int64_t block_rows_q = 64, block_rows_kv = 128;
  // V^T's keys within every 16 of a row in P's register order (fp8.h, fp8_vt_key_at): the kernel
  // then needs no permutation of its own. The harness and attention_fp8 lay V^T out so.
  bool vt_p_order = false;
};

// ---- Attention backward (chapter 06). ----------------------------------------------------------
// Inputs q, k, v, o, dout (dtype) and lse (fp32, from the forward). Outputs dq, dk, dv (dtype) and
// delta = D = rowsum(dO * O) (fp32 [batch, heads, seq_q]). `workspace` is an fp32 scratch buffer
// of q_numel() floats (e.g. a dQ accumulator), zeroed before every call. K, V, dK and dV have
// shape.kv_heads() heads: a backward that declares `gqa` sums dK and dV over each K/V head's group
// of query heads; the harness reports grouped shapes as UNSUPPORTED for every other backward.
struct AttentionBwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* delta = nullptr;
  float* workspace = nullptr;
  AttentionShape shape;
  DType dtype = DType::F32;
};
using AttentionBwdFn = void (*)(const AttentionBwdArgs& args, cudaStream_t stream);
struct AttentionBwdKernel {
  std::string name;
  AttentionBwdFn run = nullptr;
  std::string about;
  std::vector<DType> dtypes = {DType::F32};
  std::vector<int> head_dims = {64};
  int min_sm = 70;
  bool deterministic = true;         // false for versions that accumulate with atomics
  bool gqa = false;                  // takes grouped K/V heads (shape.heads_kv < shape.heads)
  bool rounds_head_dim = false;      // as AttentionFwdKernel's
  int head_dim_step = kHeadDimStep;  // as AttentionFwdKernel's
};

// ---- The backward's preprocess (chapter 06): D = rowsum(dO o O), one float per query row. ------
// o and dout are `dtype` with the layout of Q; delta is fp32 [batch, heads, seq_q]. Every
// backward of chapter 06 calls it first; fa_bench times it on its own (memory-bound: GB/s).
using AttentionBwdPreprocessFn = void (*)(const void* o, const void* dout, float* delta,
                                          const AttentionShape& shape, DType dtype,
                                          cudaStream_t stream);
struct AttentionBwdPreprocessKernel {
  std::string name;
  AttentionBwdPreprocessFn run = nullptr;
  std::string about;
  std::vector<DType> dtypes = {DType::F32};
  int min_sm = 70;
};

// ---- Chapter 09: variable-length batches (VarlenShape in shapes.h), with an optional window. ---
// q, k, v, o, lse as VarlenShape lays them out; cu_seqlens_q and cu_seqlens_k are the batch + 1
// cumulative offsets on the device (int32, starting at 0). The launcher sizes its grid from
// shape.max_seq_q() and reads the lengths on the device, as FlashAttention's varlen functions do.
struct VarlenFwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  VarlenShape shape;
  DType dtype = DType::BF16;
};
using VarlenFwdFn = void (*)(const VarlenFwdArgs& args, cudaStream_t stream);
struct VarlenFwdKernel {
  std::string name;
  VarlenFwdFn run = nullptr;
  std::string about;
  std::vector<DType> dtypes = {DType::F16, DType::BF16};
  std::vector<int> head_dims = {64, 128};
  int min_sm = 80;
  bool gqa = false;                  // takes heads_kv < heads
  bool window = false;               // takes window_left / window_right (shape.has_window())
  bool rounds_head_dim = false;      // as AttentionFwdKernel's
  int head_dim_step = kHeadDimStep;  // as AttentionFwdKernel's
};

// The backward of a variable-length batch: inputs as the forward's plus o, dout (like q) and lse;
// outputs dq (like q), dk, dv (like k), delta (fp32, like lse). `workspace` is fp32 scratch of
// q_numel() floats, zeroed before every call. Grouped K/V heads only where the kernel says gqa
// (then dk, dv of a K/V head are the sums over its group).
struct VarlenBwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* delta = nullptr;
  float* workspace = nullptr;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  VarlenShape shape;
  DType dtype = DType::BF16;
};
using VarlenBwdFn = void (*)(const VarlenBwdArgs& args, cudaStream_t stream);
struct VarlenBwdKernel {
  std::string name;
  VarlenBwdFn run = nullptr;
  std::string about;
  std::vector<DType> dtypes = {DType::F16, DType::BF16};
  std::vector<int> head_dims = {64, 128};
  int min_sm = 80;
  bool window = false;
  bool deterministic = true;
  std::string forward;               // the VarlenFwdKernel that makes O and L for it
  bool rounds_head_dim = false;      // as AttentionFwdKernel's
  bool gqa = false;                  // takes heads_kv < heads (dK, dV summed over each group)
  int head_dim_step = kHeadDimStep;  // as AttentionFwdKernel's
};

// ---- Chapter 09: attention over a paged KV cache (PagedShape in shapes.h). ---------------------
// q [batch, heads, seq_q, D], k_pages and v_pages [num_pages, heads_kv, page_size, D], o like q,
// lse fp32 [batch, heads, seq_q]; block_table [batch, max_pages] and seqlens_k [batch], int32,
// on the device.
struct PagedFwdArgs {
  const void* q = nullptr;
  const void* k_pages = nullptr;
  const void* v_pages = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* seqlens_k = nullptr;
  PagedShape shape;
  DType dtype = DType::BF16;
};
using PagedFwdFn = void (*)(const PagedFwdArgs& args, cudaStream_t stream);
struct PagedFwdKernel {
  std::string name;
  PagedFwdFn run = nullptr;
  std::string about;
  std::vector<DType> dtypes = {DType::F16, DType::BF16};
  std::vector<int> head_dims = {64, 128};
  std::vector<int> page_sizes = {16, 64, 256};
  int min_sm = 80;
  bool gqa = false;       // takes heads_kv < heads
  bool decoding = false;  // written for seq_q <= kDecodeSeqQ (harness.h); correct for every seq_q
  bool rounds_head_dim = false;      // as AttentionFwdKernel's
  int head_dim_step = kHeadDimStep;  // as AttentionFwdKernel's
};

// Appending the new tokens' keys and values to the pages: k_new and v_new are
// [batch, heads_kv, seq_q, D] (seq_q new tokens per sequence); they become keys
// seqlens_k[b] - seq_q .. seqlens_k[b] - 1 of sequence b (seqlens_k counts them already, as the
// attention that follows reads it). Nothing else in the pages may change.
struct PagedAppendArgs {
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  void* k_pages = nullptr;
  void* v_pages = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* seqlens_k = nullptr;
  PagedShape shape;
  DType dtype = DType::BF16;
};
using PagedAppendFn = void (*)(const PagedAppendArgs& args, cudaStream_t stream);
struct PagedAppendKernel {
  std::string name;
  PagedAppendFn run = nullptr;
  std::string about;
  std::vector<DType> dtypes = {DType::F16, DType::BF16};
  int min_sm = 70;
};

// ---- The shared memory a kernel's blocks ask for (dispatch.cpp reads it). ------------------------
// A block may opt in to 227 KiB of shared memory on sm_90 and sm_100, 163 KiB on sm_80 and sm_87,
// but only 99 KiB on sm_86, sm_89 and sm_120 (gpu.h, smem_optin_bytes_of_sm). A kernel whose
// blocks ask for more than 99 KiB at some head dim says how much, in one line beside its
// registration:
//
//   FA_REGISTER_SMEM("06/v5_warp_tiles", smem_need);  // size_t smem_need(int head_dim)
//
// so that the dispatch passes it over on a GPU that has less, instead of choosing a kernel that
// can only refuse at launch. `bytes` answers for each head dim the kernel lists (a kernel that
// rounds head dims up is asked at the listed one it computes at). The launcher's own check
// (FA_UNSUPPORTED_IF against smem_optin_bytes()) reads the same constant.
using SmemBytesFn = size_t (*)(int head_dim);
struct SmemNeed {
  std::string name;  // the kernel's registry name
  SmemBytesFn bytes = nullptr;
};

// The usual body of such a function: the bytes at each head dim the kernel is instantiated for,
// from the constant its launcher checks, e.g.
//   smem_at<64, 128>(d, [](auto D) { return Layout<decltype(D)::value>::kBytes; })
// (0 at a head dim not listed: the kernel refuses it anyway).
template <int... kHeadDims, class BytesAt>
size_t smem_at(int head_dim, BytesAt bytes_at) {
  size_t bytes = 0;
  ((head_dim == kHeadDims ? (bytes = size_t(bytes_at(std::integral_constant<int, kHeadDims>{})))
                          : 0),
   ...);
  return bytes;
}

// ---- Chapters: each chapter program registers its body so the tour can run them in order. ----
using ChapterFn = int (*)(const std::vector<std::string>& args);
struct Chapter {
  std::string number;  // "00".."08"
  std::string title;
  ChapterFn run = nullptr;
};

// ---- Exercises: a file generated from a solution with its key parts cut out (see exercise.h).
// The generated file registers itself, so a failing run of one of its kernels can say
// "TODO in <file>: not implemented" instead of leaving the student with a bare mismatch.
struct Exercise {
  std::string name;                  // the exercise file, relative to the repository root
  std::vector<std::string> kernels;  // registered kernels defined in that file
  int todos = 0;                     // TODO blocks the generator cut out
};

// ---- The registry itself. ----------------------------------------------------------------------
template <class K>
std::vector<K>& registry();  // all registered entries, in order
template <class K>
bool register_entry(const K& entry);  // aborts on a duplicate name
template <class K>
const K* find_entry(const std::string& name);  // nullptr when absent
// Entries whose name starts with `prefix` ("05/"), in name order with numbers compared as numbers
// (natural_less: t9_... before t10_...), so a chapter's ladder lists its rungs in order.
template <class K>
std::vector<const K*> entries_with_prefix(const std::string& prefix);
template <class K>
std::vector<std::string> entry_names(const std::string& prefix = "");

std::vector<const Chapter*> chapters_in_order();

// a < b, where runs of digits compare by their value ("v9" < "v10" < "v10a"; "v01" == "v1" in
// value, then the shorter run first), everything else byte by byte.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace fa

#define FA_CONCAT_INNER(a, b) a##b
#define FA_CONCAT(a, b) FA_CONCAT_INNER(a, b)
// FA_REGISTER(Type, {fields...}); at namespace scope in any .cu or .cpp file.
#define FA_REGISTER(Type, ...)                                             \
  static const bool FA_CONCAT(fa_registered_, __LINE__) [[maybe_unused]] = \
      ::fa::register_entry<::fa::Type>(::fa::Type __VA_ARGS__)
// FA_REGISTER_SMEM(name, bytes); beside a kernel's FA_REGISTER: its SmemNeed entry (above).
#define FA_REGISTER_SMEM(name, ...) FA_REGISTER(SmemNeed, {name, __VA_ARGS__})
