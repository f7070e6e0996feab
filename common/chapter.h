// chapter.h: the frame every chapter program shares. A chapter registers its body:
//
//   int run_chapter(const std::vector<std::string>& args);
//   FA_REGISTER(Chapter, {"01", "safe softmax", run_chapter});
//
// and its program is common/chapter_main.cpp built with FA_CHAPTER_NUMBER="01". The tour runs
// every registered chapter in order with its default arguments.
//
// Exit codes: 0 all checks passed (or there was no GPU and the CPU tier passed), 1 a check failed,
// 2 bad command line (fa::UsageError: the message alone) or an internal error (file:line kept).
//
// The shared options (one vocabulary for every program, documented in common/README.md):
//   add_attention_options / read_attention_options   --batch --heads --seq_q --seq_k --head_dim
//                                                     --causal --scale --dtype
//   add_kernel_options                                --kernel and, for timed programs, --repeats
//   add_matrix_options / read_matrix_shapes           --rows --cols (paired lists)
//   kernels_help<K>(prefix)                           the --help section listing the kernels
#pragma once
#include <cstdint>
#include <iosfwd>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "cli.h"
#include "harness.h"
#include "registry.h"

namespace fa {

int chapter_main(const std::string& number, int argc, char** argv);
// Runs a chapter's body; catches and reports its errors as "<program>: error: ..." (exit 2).
int run_chapter(const Chapter& c, const std::vector<std::string>& args, const std::string& program);

// The header every chapter prints: its title, the GPU (or that there is none) and the seed.
void print_chapter_header(std::ostream& os, const std::string& number, const std::string& title,
                          const Cli& cli);

// Printed by a chapter that found no GPU: what it skipped and why. It is also recorded, so that
// the tour's summary can say which chapters ran only their CPU tier.
void print_no_gpu(std::ostream& os, const std::string& what_was_skipped);
// What the chapter that ran last skipped for want of a GPU ("" when its GPU part ran).
const std::string& skipped_without_gpu();

std::vector<std::string> split_list(const std::string& s);
[[noreturn]] void throw_unknown_kernel(const std::string& name,
                                       const std::vector<std::string>& choices);

// ---- Commands the programs print -------------------------------------------------------------
// Every command line a chapter program shows the reader (its --help example, its advice) is in
// this one table, so tests/cpu/test_readme_commands.cpp can run each of them.
struct PrintedCommand {
  std::string id;       // "ch02.compare_with_ch01"
  std::string program;  // "ch01_safe_softmax"
  std::string args;     // "--rows=4096 --cols=4096"
  std::string line() const { return program + " " + args; }
};
const std::vector<PrintedCommand>& printed_commands();
const PrintedCommand& printed_command(const std::string& id);  // throws on an unknown id

// ---- Kernels: --kernel, --repeats, and the --help list -----------------------------------------
// Declares --kernel (all, or names, comma-separated) and, when repeats_default > 0, --repeats.
void add_kernel_options(Cli& cli, const std::string& prefix, int repeats_default);

// One line per kernel: name, dtypes, head dims, oldest GPU, what it changes.
std::string describe_kernel(const SoftmaxKernel& k);
std::string describe_kernel(const GemmKernel& k);
std::string describe_kernel(const TransposeKernel& k);
std::string describe_kernel(const AttentionFwdKernel& k);
std::string describe_kernel(const AttentionBwdKernel& k);
// Chapter 09: the tags in front of `about` say what the kernel takes beyond the plain problem
// (GQA, a window, the page sizes of a paged kernel).
std::string describe_kernel(const VarlenFwdKernel& k);
std::string describe_kernel(const VarlenBwdKernel& k);
std::string describe_kernel(const PagedFwdKernel& k);
std::string describe_kernel(const PagedAppendKernel& k);

// The --help section of the kernels a program can run (read from the registry: no GPU needed).
template <class K>
std::string kernels_help(const std::string& prefix) {
  std::ostringstream os;
  for (const K* k : entries_with_prefix<K>(prefix)) os << "  " << describe_kernel(*k) << "\n";
  return os.str();
}

// Kernels of a registry type that `--kernel` selects: all with the chapter's prefix, or the ones
// named (an unknown name throws fa::UsageError listing the choices).
template <class K>
std::vector<const K*> select_kernels(const std::string& prefix, const std::string& requested) {
  std::vector<const K*> all = entries_with_prefix<K>(prefix);
  if (requested.empty() || requested == "all") return all;
  std::vector<const K*> out;
  for (const std::string& want : split_list(requested)) {
    const K* k = find_entry<K>(want);
    if (k == nullptr || want.rfind(prefix, 0) != 0)
      throw_unknown_kernel(want, entry_names<K>(prefix));
    out.push_back(k);
  }
  return out;
}

// --dtype: a comma-separated list of fp32, fp16, bf16, or "all" (the three).
std::vector<DType> read_dtypes(const Cli& cli);
std::string dtype_list(const std::vector<DType>& dtypes);  // "fp32,bf16"

// ---- Sizes -------------------------------------------------------------------------------------
// Throws fa::UsageError when `bytes` of GPU memory cannot exist: more than the GPU has, or, with
// no GPU to ask, more than any GPU has (1 TiB). Call it before allocating anything.
void require_fits_in_gpu_memory(double bytes, const std::string& what);
std::string format_bytes(double bytes);  // "12.0 MiB", "3.5 GiB"

// --rows and --cols: comma-separated lists paired element by element (a single value pairs with
// every value of the other list), so "--rows=4096,16384 --cols=4096,1024" is two shapes. Each
// must fit in GPU memory twice (an fp32 input and output).
void add_matrix_options(Cli& cli, const std::string& rows, const std::string& cols,
                        const std::string& what);
std::vector<SoftmaxShape> read_matrix_shapes(const Cli& cli);

// ---- Attention ---------------------------------------------------------------------------------
struct AttentionDefaults {
  int64_t batch = 2, heads = 8, seq_q = 1024;
  int64_t seq_k = 0;  // 0: the same as seq_q
  int64_t head_dim = 64;
  std::string dtype = "fp32,bf16";
};
// Declares --batch --heads --seq_q --seq_k --head_dim --causal --scale --dtype.
void add_attention_options(Cli& cli, const AttentionDefaults& defaults = {});

struct AttentionOptions {
  AttentionShape shape;      // shape.causal is false: run each value of `causal`
  std::vector<bool> causal;  // --causal: {true}; --causal=false: {false}; not given: both
  std::vector<DType> dtypes;
};
// Reads and validates them (positive sizes); throws fa::UsageError.
AttentionOptions read_attention_options(const Cli& cli);

// --kernel=auto in the attention programs: the kernels the dispatch (dispatch.h) picks for the
// request, one choice per dtype and causal value, each printed to `os` with the row that chose it
// and its log. On a machine without a GPU, the choice for an sm_90 GPU (said so). K is
// AttentionFwdKernel or AttentionBwdKernel; a choice of another kind (a chapter 09 kernel for a
// window or grouped heads) is printed and left out.
template <class K>
std::vector<const K*> dispatch_kernels(const AttentionOptions& a, std::ostream& os);

// GPU memory of one run: q, k, v, o in the dtype and L in fp32 (forward); the backward adds dO,
// dQ, dK, dV, D and the fp32 workspace.
double attention_fwd_bytes(const AttentionShape& s, DType t);
double attention_bwd_bytes(const AttentionShape& s, DType t);

// Throws fa::UsageError unless the kernels can run the request. With --kernel=all some kernel
// must take the head dim and one of the dtypes; a kernel named on the command line must take the
// head dim and at least one of the dtypes itself. The message lists what each kernel supports.
template <class K>
void require_supported(const std::vector<const K*>& kernels, const AttentionOptions& a,
                       bool named) {
  const int d = static_cast<int>(a.shape.head_dim);
  auto runs = [&](const K& k) {
    if (!takes_head_dim(k, d)) return false;
    for (DType t : a.dtypes)
      if (supports(k.dtypes, t)) return true;
    return false;
  };
  std::ostringstream os;
  bool any = false;
  for (const K* k : kernels) {
    if (runs(*k)) {
      any = true;
      continue;
    }
    if (named) {
      os << "--kernel=" << k->name << " cannot run head_dim " << d << " in " << dtype_list(a.dtypes)
         << "; it takes:\n  " << describe_kernel(*k);
      throw UsageError(os.str());
    }
  }
  if (any) return;
  os << "no kernel here runs head_dim " << d << " in " << dtype_list(a.dtypes) << "; they take:\n";
  for (const K* k : kernels) os << "  " << describe_kernel(*k) << "\n";
  throw UsageError(os.str());
}

}  // namespace fa
