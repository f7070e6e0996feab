// dispatch.h: which registered kernel runs a problem on a given GPU — the choice a user of the
// library gets without naming a kernel.
//
//   fa::Problem p = fa::Problem::forward(shape, fa::DType::BF16);
//   fa::Pick k = fa::pick(p);            // on this machine's GPU
//   if (k) run k.kernel ...; else k.refusal says why nothing can
//   std::cout << k.explain();            // which row chose it, and the log that measured it
//
// The choice is one table (dispatch_table() in dispatch.cpp), read top to bottom: the first row
// whose conditions hold for the problem, and whose kernel is registered in this build and runs
// the problem on this GPU (dtype, head dim, grouped heads, window, page size, determinism, and the
// shared memory its blocks ask for: registry.h's SmemNeed), wins.
// A row never names a kernel without the measurement that put it there: a log in notes/measured/
// holding that kernel beside the ones it beat, in the same run. When a faster kernel lands, one
// row changes (and its log with it); the Python package ("auto"), the chapter programs
// (--kernel=auto) and fa_bench's "auto" rows all read this one table.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"
#include "shapes.h"

namespace fa {

// The problems the table chooses for, and the registry kinds their kernels come from.
//   Fwd, Bwd     fixed-length attention [B, H, N, D]. A forward row may name a chapter 09 varlen
//                kernel: the caller then runs the batch as a packed one of equal lengths
//                (Pick::kind says which). A backward that declares gqa takes grouped K/V
//                heads itself (sums dK, dV over each group); for any other the caller runs it
//                on K and V repeated over the group.
//   VarlenFwd, VarlenBwd, PagedFwd   chapter 09's packed and paged batches.
enum class Op { Fwd, Bwd, VarlenFwd, VarlenBwd, PagedFwd };
const char* op_name(Op op);  // "fwd", "bwd", "varlen_fwd", "varlen_bwd", "paged_fwd"

struct Problem {
  Op op = Op::Fwd;
  DType dtype = DType::BF16;
  int head_dim = 128;
  // Fixed length: the lengths. Varlen: the longest sequence. Paged: seq_q, and the longest cache.
  int64_t seq_q = 0, seq_k = 0;
  bool causal = false;
  bool window = false;         // a sliding window (AttentionShape::has_window)
  bool gqa = false;            // fewer K/V heads than query heads
  int page_size = 0;           // PagedFwd only
  bool deterministic = false;  // backward: the same bits in every run (no atomics)

  static Problem forward(const AttentionShape& s, DType t);
  static Problem backward(const AttentionShape& s, DType t);
  std::string str() const;  // "fwd bf16 D128 Nq4096 Nk4096 causal"
};

// One row of the table. Conditions left at their defaults match every problem.
struct Rule {
  enum class Tri { Any, Yes, No };
  Op op = Op::Fwd;
  std::string kernel;
  int sm_min = 80, sm_max = 1000;  // the GPUs the row is for (compute capability, 90 = H100/H200)
  std::vector<DType> dtypes;       // empty: every dtype the kernel takes
  // Empty: every head dim the kernel takes. Matched against the head dim the kernel computes the
  // problem at (a kernel that rounds head dims up, registry.h, runs D 96 as D 128).
  std::vector<int> head_dims;
  Tri causal = Tri::Any, window = Tri::Any, gqa = Tri::Any;
  Tri rounded = Tri::Any;  // Yes: head dims the kernel does not list but rounds up to one it does
  int64_t seq_q_max = -1;  // -1: no limit
  int64_t seq_k_min = 0, seq_k_max = -1;  // keys per sequence; -1: no limit
  int64_t page_min = 0;                   // PagedFwd: pages of at least this many keys; 0: any
  std::string why;                        // what the measurement showed, in a line
  std::string measured;  // the log it showed it in, relative to the repository root

  std::string conditions() const;  // "sm_90, D 64, full, seq_k <= 2048"
};

const std::vector<Rule>& dispatch_table();

struct Pick {
  std::string kernel;     // the registry name; empty when nothing here runs the problem
  std::string kind;       // "fwd", "bwd", "varlen_fwd", "varlen_bwd" or "paged_fwd"
  int sm = 0;             // the GPU it was chosen for: its compute capability,
  size_t smem_optin = 0;  // and the shared memory one of its blocks may have (gpu.h)
  const Rule* rule = nullptr;
  // Rows whose conditions held but whose kernel could not run the problem, with the reason
  // ("07/v5_persistent: not in this build", "...: no fp32 version").
  std::vector<std::string> passed_over;
  std::string refusal;  // when kernel is empty: why

  explicit operator bool() const { return !kernel.empty(); }
  // The choice in words, one line per fact: the kernel and the row, its measurement, the rows
  // passed over. brief: the first line only.
  std::string explain(bool brief = false) const;
};

// For this machine's GPU (no GPU: a Pick with the refusal "no GPU: ...").
Pick pick(const Problem& p);
// For a GPU of compute capability `sm` (major*10+minor), whether or not one is here: what the
// tests and fa.explain() use to show the choice on another machine. Its shared memory a block is
// the Programming Guide's for that compute capability (gpu.h, smem_optin_bytes_of_sm), or
// `smem_optin` bytes: a row whose kernel asks for more (registry.h, SmemNeed) is passed over.
Pick pick(const Problem& p, int sm);
Pick pick(const Problem& p, int sm, size_t smem_optin);

}  // namespace fa
