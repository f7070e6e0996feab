#include "chapter.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "check.h"
#include "dispatch.h"
#include "gpu.h"

namespace fa {

namespace {
std::string g_skipped_without_gpu;  // see skipped_without_gpu()

// With no GPU to ask, a request beyond this much memory is refused: no GPU has 1 TiB.
constexpr double kNoGpuMemoryLimit = 1024.0 * 1024 * 1024 * 1024;
}  // namespace

// ---- The commands the programs print. Keep each one runnable: the CPU test runs every line. ----
const std::vector<PrintedCommand>& printed_commands() {
  static const std::vector<PrintedCommand> all = {
      {"ch00.help", "ch00_gpu_basics", "--n=17 --rows=3 --cols=5"},
      {"ch01.help", "ch01_safe_softmax",
       "--rows=16384 --cols=1024 --kernel=01/v3_warp_shuffle_vec4"},
      {"ch02.help", "ch02_online_softmax", "--rows=1024 --cols=100000 --kernel=02/v2_single_read"},
      {"ch02.compare_with_ch01", "ch01_safe_softmax", "--rows=4096,16384 --cols=4096,1024"},
      {"ch03.help", "ch03_tiled_matmul",
       "--kernel=03/v5_tensor_core --dtype=bf16 --m=8192 --n=8192 --k=8192"},
      {"ch03.explain", "ch03_tiled_matmul", "--explain=2049"},
      {"ch04.help", "ch04_coalesced_loads", "--rows=4096 --cols=16384 --kernel=04/v3_smem_padded"},
      {"ch05.help", "ch05_flash_forward", "--seq_q=4096 --head_dim=128 --dtype=bf16 --causal"},
      {"ch06.help", "ch06_flash_backward", "--seq_q=4096 --head_dim=128 --dtype=bf16"},
      {"ch07.help", "ch07_flash_hopper", "--seq_q=4096 --head_dim=64 --causal"},
      {"ch08.help", "ch08_decoding",
       "--batch=8 --heads=32 --heads_kv=8 --seq_q=1 --seq_k=32768 --head_dim=128 --causal"},
      {"ch09.help", "ch09_serving",
       "--lengths=0,1,17,1000,2048 --window=127,0 --window_seq=2048 --page_size=64 --seq_k=8192"},
      {"tour.help", "tour", "01 05"},
  };
  return all;
}

const PrintedCommand& printed_command(const std::string& id) {
  for (const PrintedCommand& c : printed_commands())
    if (c.id == id) return c;
  throw Error("internal: no printed command '" + id + "' in common/chapter.cpp");
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void throw_unknown_kernel(const std::string& name, const std::vector<std::string>& choices) {
  std::ostringstream os;
  os << "no kernel named '" << name << "'; registered here:";
  for (const std::string& c : choices) os << "\n  " << c;
  throw UsageError(os.str());
}

void print_chapter_header(std::ostream& os, const std::string& number, const std::string& title,
                          const Cli& cli) {
  os << "\n################################################################################\n"
     << "# Chapter " << number << ": " << title << "\n"
     << "# GPU: " << describe_gpu() << "   seed: " << cli.seed() << "\n"
     << "################################################################################\n";
}

void print_no_gpu(std::ostream& os, const std::string& what) {
  g_skipped_without_gpu = what;
  os << "\n[no GPU] " << gpu_info().why_absent << ": skipped " << what
     << ". The CPU tier above ran in full.\n";
}

const std::string& skipped_without_gpu() {
  return g_skipped_without_gpu;
}

int run_chapter(const Chapter& c, const std::vector<std::string>& args,
                const std::string& program) {
  g_skipped_without_gpu.clear();
  try {
    return c.run(args);
  } catch (const UsageError& e) {  // the user's input: the message alone
    std::cerr << program << ": error: " << e.what() << "\n";
    return 2;
  } catch (const Error& e) {  // internal: the message carries file:line
    std::cerr << program << ": internal error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": unexpected error: " << e.what() << "\n";
    return 2;
  }
}

int chapter_main(const std::string& number, int argc, char** argv) {
  const Chapter* c = find_entry<Chapter>(number);
  if (c == nullptr) {
    std::cerr << "chapter " << number << " is not linked into this program\n";
    return 2;
  }
  std::string program = argv[0];  // its name, as the Cli's own messages say it
  program = program.substr(program.find_last_of('/') + 1);
  std::vector<std::string> args(argv + 1, argv + argc);
  return run_chapter(*c, args, program);
}

// ---- Kernels -----------------------------------------------------------------------------------
void add_kernel_options(Cli& cli, const std::string& prefix, int repeats_default) {
  const bool attention = prefix == "05/" || prefix == "06/" || prefix == "07/" || prefix == "08/";
  cli.option("kernel", Cli::TextList, "all",
             "kernel name(s) to run, comma-separated (default: every " + prefix +
                 " kernel, listed below)" +
                 (attention ? "; auto: the kernel the dispatch picks for the problem on this GPU, "
                              "from any chapter (common/dispatch.h)"
                            : ""));
  if (repeats_default > 0)
    cli.option("repeats", Cli::Int, std::to_string(repeats_default),
               "timed repeats (median reported)")
        .at_least(1);
}

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string out;
  for (DType t : dtypes) out += (out.empty() ? "" : ",") + std::string(dtype_name(t));
  return out;
}

namespace {
std::string kernel_line(const std::string& name, const std::string& dtypes,
                        const std::vector<int>& head_dims, int min_sm, const std::string& about) {
  std::ostringstream os;
  os << std::left << std::setw(30) << name << " " << std::setw(15) << dtypes;
  if (!head_dims.empty()) {
    std::string d = "D=";
    for (size_t i = 0; i < head_dims.size(); ++i)
      d += (i ? "," : "") + std::to_string(head_dims[i]);
    os << " " << std::setw(15) << d;
  }
  os << " sm_" << min_sm << "+  " << about;
  return os.str();
}
}  // namespace

std::string describe_kernel(const SoftmaxKernel& k) {
  return kernel_line(k.name, "fp32", {}, k.min_sm, k.about);
}
std::string describe_kernel(const GemmKernel& k) {
  return kernel_line(k.name, dtype_list(k.dtypes), {}, k.min_sm, k.about);
}
std::string describe_kernel(const TransposeKernel& k) {
  return kernel_line(k.name, "fp32", {}, k.min_sm, k.about);
}
// "[D 8k] ": the kernel also takes the multiples of 8 between its head dims (rounds_head_dim);
// "[any D] ": every head dim up to its largest (head_dim_step 1).
static std::string rounding_tag(bool rounds, int step = kHeadDimStep) {
  return !rounds ? "" : step == 1 ? "[any D] " : "[D 8k] ";
}
std::string describe_kernel(const AttentionFwdKernel& k) {
  return kernel_line(k.name, dtype_list(k.dtypes), k.head_dims, k.min_sm,
                     rounding_tag(k.rounds_head_dim, k.head_dim_step) + k.about);
}
std::string describe_kernel(const AttentionBwdKernel& k) {
  return kernel_line(k.name, dtype_list(k.dtypes), k.head_dims, k.min_sm,
                     rounding_tag(k.rounds_head_dim, k.head_dim_step) + k.about);
}
std::string describe_kernel(const VarlenFwdKernel& k) {
  std::string tags = std::string(k.gqa ? "[GQA] " : "") + (k.window ? "[window] " : "") +
                     rounding_tag(k.rounds_head_dim);
  return kernel_line(k.name, dtype_list(k.dtypes), k.head_dims, k.min_sm, tags + k.about);
}
std::string describe_kernel(const VarlenBwdKernel& k) {
  std::string tags =
      std::string(k.window ? "[window] " : "") + (k.deterministic ? "" : "[atomics] ") +
      (k.forward.empty() ? "" : "[forward " + k.forward + "] ") + rounding_tag(k.rounds_head_dim);
  return kernel_line(k.name, dtype_list(k.dtypes), k.head_dims, k.min_sm, tags + k.about);
}
std::string describe_kernel(const PagedFwdKernel& k) {
  std::string pages = "[pages ";
  for (size_t i = 0; i < k.page_sizes.size(); ++i)
    pages += (i ? "," : "") + std::to_string(k.page_sizes[i]);
  pages += "] ";
  return kernel_line(
      k.name, dtype_list(k.dtypes), k.head_dims, k.min_sm,
      pages + (k.decoding ? "[decoding] " : "") + rounding_tag(k.rounds_head_dim) + k.about);
}
std::string describe_kernel(const PagedAppendKernel& k) {
  return kernel_line(k.name, dtype_list(k.dtypes), {}, k.min_sm, k.about);
}

std::vector<DType> read_dtypes(const Cli& cli) {
  std::vector<DType> out;
  for (const std::string& name : cli.get_list("dtype")) {
    if (name == "all") return {DType::F32, DType::F16, DType::BF16};
    try {
      out.push_back(parse_dtype(name));
    } catch (const Error&) {
      throw UsageError("--dtype: unknown dtype '" + name + "' (fp32, fp16, bf16 or all)");
    }
  }
  if (out.empty()) throw UsageError("--dtype: give at least one of fp32, fp16, bf16");
  return out;
}

// ---- Sizes -------------------------------------------------------------------------------------
std::string format_bytes(double bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  if (bytes < double(1 << 30))
    os << bytes / double(1 << 20) << " MiB";
  else if (bytes < kNoGpuMemoryLimit)
    os << bytes / double(1 << 30) << " GiB";
  else
    os << bytes / kNoGpuMemoryLimit << " TiB";
  return os.str();
}

void require_fits_in_gpu_memory(double bytes, const std::string& what) {
  const GpuInfo& g = gpu_info();
  if (g.present && bytes > double(g.global_mem))
    throw UsageError(what + " needs " + format_bytes(bytes) + " of GPU memory; " + g.name +
                     " has " + format_bytes(double(g.global_mem)) + ". Choose smaller sizes.");
  if (!g.present && bytes > kNoGpuMemoryLimit)
    throw UsageError(what + " needs " + format_bytes(bytes) +
                     " of GPU memory, more than any GPU has (1 TiB). Choose smaller sizes.");
}

void add_matrix_options(Cli& cli, const std::string& rows, const std::string& cols,
                        const std::string& what) {
  cli.option("rows", Cli::IntList, rows,
             "rows of the " + what + " (a list: one shape per entry, with --cols)")
      .at_least(1)
      .option("cols", Cli::IntList, cols, "columns of the " + what)
      .at_least(1);
}

std::vector<SoftmaxShape> read_matrix_shapes(const Cli& cli) {
  const std::vector<int64_t> rows = cli.get_int_list("rows"), cols = cli.get_int_list("cols");
  if (rows.empty() || cols.empty()) throw UsageError("--rows and --cols need a value");
  if (rows.size() != cols.size() && rows.size() != 1 && cols.size() != 1)
    throw UsageError("--rows and --cols are paired: give lists of the same length, or one value");
  std::vector<SoftmaxShape> out;
  for (size_t i = 0; i < std::max(rows.size(), cols.size()); ++i) {
    const SoftmaxShape s{rows[rows.size() == 1 ? 0 : i], cols[cols.size() == 1 ? 0 : i]};
    require_fits_in_gpu_memory(2.0 * double(s.rows) * double(s.cols) * sizeof(float),
                               "an input and an output of " + s.str() + " floats");
    out.push_back(s);
  }
  return out;
}

// ---- Attention ---------------------------------------------------------------------------------
void add_attention_options(Cli& cli, const AttentionDefaults& d) {
  cli.option("batch", Cli::Int, std::to_string(d.batch), "batch size B")
      .at_least(1)
      .option("heads", Cli::Int, std::to_string(d.heads), "heads H")
      .at_least(1)
      .option("seq_q", Cli::Int, std::to_string(d.seq_q), "query length N_q")
      .at_least(1)
      .option("seq_k", Cli::Int, std::to_string(d.seq_k), "key length N_k (0 = seq_q)")
      .at_least(0)
      .option("head_dim", Cli::Int, std::to_string(d.head_dim),
              "head dimension D (see the kernels below)")
      .at_least(1)
      .flag("causal",
            "causal mask only (bottom-right aligned); =false: no mask only; "
            "default: both")
      .option("scale", Cli::Number, "0", "softmax scale (0 = 1/sqrt(D))")
      .option("dtype", Cli::TextList, d.dtype, "fp32, fp16, bf16, comma-separated, or all");
}

AttentionOptions read_attention_options(const Cli& cli) {
  AttentionOptions a;
  AttentionShape& s = a.shape;
  s.batch = cli.get_int("batch");
  s.heads = cli.get_int("heads");
  s.seq_q = cli.get_int("seq_q");
  s.seq_k = cli.get_int("seq_k");
  if (s.seq_k == 0) s.seq_k = s.seq_q;
  s.head_dim = cli.get_int("head_dim");
  s.scale = static_cast<float>(cli.get_double("scale"));
  if (cli.given("causal"))
    a.causal = {cli.get_bool("causal")};
  else
    a.causal = {false, true};
  a.dtypes = read_dtypes(cli);
  return a;
}

double attention_fwd_bytes(const AttentionShape& s, DType t) {
  const double q = double(s.batch) * double(s.heads) * double(s.seq_q) * double(s.head_dim);
  // K and V have heads_kv heads (grouped-query attention; heads when heads_kv is 0).
  const double k = double(s.batch) * double(s.kv_heads()) * double(s.seq_k) * double(s.head_dim);
  return (2 * q + 2 * k) * double(dtype_size(t)) + double(s.batch) * s.heads * s.seq_q * 4.0;
}

double attention_bwd_bytes(const AttentionShape& s, DType t) {
  const double q = double(s.batch) * double(s.heads) * double(s.seq_q) * double(s.head_dim);
  const double k = double(s.batch) * double(s.heads) * double(s.seq_k) * double(s.head_dim);
  // q, o, dO, dQ and k, v, dK, dV in the dtype; L and D in fp32; the fp32 workspace of q's size.
  return (4 * q + 4 * k) * double(dtype_size(t)) + 2.0 * s.batch * s.heads * s.seq_q * 4.0 +
         q * 4.0;
}

// ---- --kernel=auto ------------------------------------------------------------------------------

namespace {

template <class K>
std::vector<const K*> dispatch_kernels_for(Op op, const char* kind, const AttentionOptions& a,
                                           std::ostream& os) {
  const int sm = have_gpu() ? gpu_info().sm : 90;
  if (!have_gpu()) os << "--kernel=auto without a GPU: what the dispatch picks on an sm_90 GPU\n";
  std::vector<const K*> out;
  for (DType t : a.dtypes)
    for (bool causal : a.causal) {
      AttentionShape s = a.shape;
      s.causal = causal;
      Problem p = op == Op::Fwd ? Problem::forward(s, t) : Problem::backward(s, t);
      const Pick k = have_gpu() ? pick(p) : pick(p, sm);  // pick(p): this GPU's shared memory
      os << "--kernel=auto, " << p.str() << ": " << k.explain() << "\n";
      if (!k || k.kind != kind) continue;
      const K* e = find_entry<K>(k.kernel);
      if (e != nullptr && std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    }
  if (out.empty())
    throw UsageError(
        "--kernel=auto: the dispatch picks no kernel of this program's "
        "kind for the request (above)");
  return out;
}

}  // namespace

template <>
std::vector<const AttentionFwdKernel*> dispatch_kernels<AttentionFwdKernel>(
    const AttentionOptions& a, std::ostream& os) {
  return dispatch_kernels_for<AttentionFwdKernel>(Op::Fwd, "fwd", a, os);
}

template <>
std::vector<const AttentionBwdKernel*> dispatch_kernels<AttentionBwdKernel>(
    const AttentionOptions& a, std::ostream& os) {
  return dispatch_kernels_for<AttentionBwdKernel>(Op::Bwd, "bwd", a, os);
}

}  // namespace fa
