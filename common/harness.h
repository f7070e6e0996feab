// harness.h: run one registered kernel on one shape, check it against the float64 reference, and
// time it. The chapter programs, the tests and the benchmarks all go through these functions, so
// a kernel is judged the same way everywhere.
//
// Each run: draws seeded inputs (non-zero mean), rounds them to the kernel's dtype, poisons the
// outputs (so unwritten elements fail), runs the kernel once, compares every output with the
// reference (compare.h), then times it (timing.h) if asked.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "compare.h"
#include "random.h"
#include "registry.h"
#include "timing.h"

namespace fa {

struct RunOptions {
  uint64_t seed = 20261121;
  bool check = true;  // compare with the reference
  bool time = true;   // measure the median time
  TimingOptions timing;
  float input_mean = kDefaultInputMean;
  float input_std = kDefaultInputStd;
  // Softmax only: edit the input before it is uploaded (insert -inf, offset by 1e4, ...).
  std::function<void(std::vector<float>& x, SoftmaxShape s)> softmax_input_hook;
  // Attention: the checks sample heads and rows once the CPU reference would take too long.
  // 0 = automatic; the run's `note` says what was checked.
  int64_t check_heads = 0;
  // Attention backward: the forward kernel that produces O and L ("" = the best registered one
  // that supports the dtype and head dim).
  std::string forward_kernel;
  // Override the default tolerance (has_tolerance = true).
  bool has_tolerance = false;
  Tolerance tolerance;
};

enum class Status { Pass, Fail, Unsupported, NoGpu };
const char* status_name(Status s);

struct RunResult {
  std::string kernel, shape, dtype;
  Status status = Status::Pass;
  std::string message;  // why it was unsupported, skipped, or failed (the compare reports)
  std::string note;     // e.g. "checked 3 of 64 heads"
  std::vector<CompareResult> checks;
  double ms = -1;      // median time
  double tflops = -1;  // compute-bound problems
  double gbps = -1;    // memory-bound problems: minimal bytes (each input read once, each output
                       // written once) over time
  int passes = 0;      // softmax: global-memory passes the kernel makes (reads + the write)
  double pct = -1;     // of the ceiling named by pct_of
  std::string pct_of;
  bool ok() const { return status == Status::Pass; }
  double max_error() const;
  std::string report() const;  // every check's report, the shape and the seed
};

RunResult run_softmax(const SoftmaxKernel& k, SoftmaxShape s, const RunOptions& opt = {});
RunResult run_gemm(const GemmKernel& k, GemmShape s, DType t, const RunOptions& opt = {});
RunResult run_transpose(const TransposeKernel& k, TransposeShape s, const RunOptions& opt = {});
RunResult run_attention_fwd(const AttentionFwdKernel& k, AttentionShape s, DType t,
                            const RunOptions& opt = {});
RunResult run_attention_bwd(const AttentionBwdKernel& k, AttentionShape s, DType t,
                            const RunOptions& opt = {});

// ---- FP8 (e4m3) attention forward (harness_fp8.cpp) --------------------------------------------
// Draws fp32 inputs, quantises Q, K, V per head on the host with the kernel's block sizes
// (fp8.h's quantize_head; Q and K rotated first with `rotate`), uploads the codes (V transposed,
// fp8_transpose_v), poisons O and L, runs, and checks O and L with fp8.h's rule: the float64
// reference on the dequantised values, the bound 2 x the naive FP8 forward's error + 1e-4, plus
// the FP8 tensor cores' own accumulation error (kFp8AccumulatorRel, fp8.h).
// TFLOP/s: 4 B H D per visible pair, as the 16-bit forwards.
struct Fp8RunOptions : RunOptions {
  bool rotate = false;                // the random Hadamard rotation of Q and K (D a power of two)
  uint64_t rotation_seed = 20261126;  // its signs
  // Edits the fp32 inputs Q, K, V ([B, H, seq, D]) before quantisation, e.g. outlier features.
  std::function<void(std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                     const AttentionShape& s)>
      input_hook;
};
RunResult run_attention_fwd_fp8(const AttentionFwdFp8Kernel& k, AttentionShape s,
                                const Fp8RunOptions& opt = {});

// ---- Chapter 09 (harness_serving.cpp) ----------------------------------------------------------
// Varlen: every sequence checked against the float64 reference of that sequence alone (the
// FlashAttention rule against the naive same-precision implementation for fp16/bf16); TFLOP/s
// counted on the visible pairs of all sequences. The backward runs the kernel's `forward` first.
RunResult run_varlen_fwd(const VarlenFwdKernel& k, const VarlenShape& s, DType t,
                         const RunOptions& opt = {});
RunResult run_varlen_bwd(const VarlenBwdKernel& k, const VarlenShape& s, DType t,
                         const RunOptions& opt = {});
// What serving a varlen batch with a fixed-length kernel costs, timed only (no check), TFLOP/s on
// the varlen problem's visible pairs: the batch padded to its longest sequence (one call on
// s.padded()), or one call per sequence.
RunResult time_varlen_padded(const AttentionFwdKernel& k, const VarlenShape& s, DType t,
                             const RunOptions& opt = {});
RunResult time_varlen_per_sequence(const AttentionFwdKernel& k, const VarlenShape& s, DType t,
                                   const RunOptions& opt = {});
// Paged: the pages of every sequence drawn in a shuffled order (no sequence's pages contiguous or
// ascending), spare pages poisoned; checked per sequence against the float64 reference; GB/s of
// PagedShape::min_bytes against the copy ceiling, and TFLOP/s.
RunResult run_paged_fwd(const PagedFwdKernel& k, const PagedShape& s, DType t,
                        const RunOptions& opt = {});
// Append: every element of both page pools compared exactly (the new keys where they belong,
// everything else unchanged); GB/s of the bytes appended (read once, written once).
RunResult run_paged_append(const PagedAppendKernel& k, const PagedShape& s, DType t,
                           const RunOptions& opt = {});

// True when the kernel lists this dtype / head dim (the harness reports UNSUPPORTED otherwise).
// In an exercise build, for a kernel (registry name, e.g. "00/vector_add") whose file is still
// the generated exercise: "TODO in <file>: not implemented? ...". Otherwise "". Reports and tests
// that call a kernel directly append it to their failure messages.
std::string exercise_hint(const std::string& kernel);

bool supports(const std::vector<DType>& dtypes, DType t);
bool supports(const std::vector<int>& head_dims, int d);
// The head dim a kernel computes d at: d when it is listed (or cannot be rounded), else the
// smallest listed head dim above d, for a kernel that rounds and a d that is a multiple of `step`
// (kHeadDimStep, or 1 for a kernel that rounds every head dim). takes_head_dim: whether that head
// dim is listed.
int64_t computed_head_dim(const std::vector<int>& head_dims, bool rounds_up, int64_t d,
                          int step = kHeadDimStep);
bool takes_head_dim(const std::vector<int>& head_dims, bool rounds_up, int64_t d,
                    int step = kHeadDimStep);
// Whether a kernel rounds head dims up: the flag of the kernels that have it, false for others.
inline bool rounds_head_dim(const AttentionFwdKernel& k) {
  return k.rounds_head_dim;
}
inline bool rounds_head_dim(const AttentionBwdKernel& k) {
  return k.rounds_head_dim;
}
inline bool rounds_head_dim(const VarlenFwdKernel& k) {
  return k.rounds_head_dim;
}
inline bool rounds_head_dim(const VarlenBwdKernel& k) {
  return k.rounds_head_dim;
}
inline bool rounds_head_dim(const PagedFwdKernel& k) {
  return k.rounds_head_dim;
}
template <class K>
bool rounds_head_dim(const K&) {
  return false;
}
// The step of the head dims it rounds: the field of the kernels that have it, else kHeadDimStep.
inline int head_dim_step(const AttentionFwdKernel& k) {
  return k.head_dim_step;
}
inline int head_dim_step(const AttentionBwdKernel& k) {
  return k.head_dim_step;
}
inline int head_dim_step(const VarlenFwdKernel& k) {
  return k.head_dim_step;
}
inline int head_dim_step(const VarlenBwdKernel& k) {
  return k.head_dim_step;
}
inline int head_dim_step(const PagedFwdKernel& k) {
  return k.head_dim_step;
}
template <class K>
int head_dim_step(const K&) {
  return kHeadDimStep;
}
template <class K>
bool takes_head_dim(const K& k, int64_t d) {
  return takes_head_dim(k.head_dims, rounds_head_dim(k), d, head_dim_step(k));
}
template <class K>
int64_t computed_head_dim(const K& k, int64_t d) {
  return computed_head_dim(k.head_dims, rounds_head_dim(k), d, head_dim_step(k));
}
// The message of the harness's UNSUPPORTED row for a kernel that has no version for dtype t and
// head dim d ("this kernel has no bf16 D=80 version"); "" when it has one (listed, or rounded up
// to one with rounds_up).
std::string missing_version(const std::vector<DType>& dtypes, const std::vector<int>& head_dims,
                            DType t, int64_t d, bool rounds_up = false, int step = kHeadDimStep);
template <class K>
std::string missing_version(const K& k, DType t, int64_t d) {
  return missing_version(k.dtypes, k.head_dims, t, d, rounds_head_dim(k), head_dim_step(k));
}
// The message of an fa::Error thrown by a kernel run, as the harness reports it: e.what(), plus a
// rebuild hint when the binary holds no code for this GPU, which makes the run UNSUPPORTED rather
// than failed (*unsupported is set then).
struct Error;
std::string kernel_error_message(const Error& e, bool* unsupported);
// The most advanced forward kernel (last by name among "05/...") that takes dtype t and head dim d.
const AttentionFwdKernel* best_forward_kernel(DType t, int d);
// The forward that makes O and L for a backward run: best_forward_kernel, or where no chapter 05
// kernel takes (t, d) or runs on this GPU, the last registered general forward that does.
const AttentionFwdKernel* forward_for_backward(DType t, int d);
// The same for shape s: with grouped K/V heads, where that forward takes none, the first registered
// forward that takes them (chapter 07's v5 on an H100); nullptr when none runs here.
const AttentionFwdKernel* forward_for_backward(const AttentionShape& s, DType t);

// Grouped-query shapes (shapes.h): why a kernel cannot run `s` ("heads_kv must divide heads", or
// "this kernel takes heads_kv == heads only" when !takes_gqa), "" when it can. Every kernel that
// does not declare gqa (AttentionFwdKernel, AttentionBwdKernel) is refused on grouped shapes.
std::string grouped_heads_refusal(const AttentionShape& s, bool takes_gqa);

// Decoding: forward runs with seq_q <= kDecodeSeqQ are memory-bound, and the harness also reports
// their GB/s (of attention_fwd_min_bytes: Q, K, V read once, O and L written once; K and V with
// heads_kv heads) and the percentage of the measured copy bandwidth.
constexpr int64_t kDecodeSeqQ = 16;
double attention_fwd_min_bytes(const AttentionShape& s, DType t);

// A table: kernel | shape | dtype | ms | TFLOP/s or GB/s | % of ceiling | max error | status.
void print_table(std::ostream& os, const std::string& title, const std::vector<RunResult>& rows);
// Prints the full report of every row that did not pass. Returns the number of failures. With the
// environment variable FA_REPORT=all it prints the report of every row, passed ones too: each
// checked tensor's largest error, where it is, and the tolerance it was held to.
int print_failures(std::ostream& os, const std::vector<RunResult>& rows);

}  // namespace fa
