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

#include <string>
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
};

// ---- Attention backward (chapter 06). ----------------------------------------------------------
// Inputs q, k, v, o, dout (dtype) and lse (fp32, from the forward). Outputs dq, dk, dv (dtype) and
// delta = D = rowsum(dO * O) (fp32 [batch, heads, seq_q]). `workspace` is an fp32 scratch buffer
// of q_numel() floats (e.g. a dQ accumulator), zeroed before every call. No backward takes
// grouped K/V heads: the harness reports shapes with heads_kv != heads as UNSUPPORTED.
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
  bool deterministic = true;  // false for versions that accumulate with atomics
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
