// Chapter 04: coalesced loads. The program body (ch04_coalesced_loads, and the tour).
//
//   CPU tier  tensors as pointer + shape + strides: reshape vs transpose, and the two attention
//             layouts [B,N,H,D] and [B,H,N,D] seen from a kernel that reads one head's rows.
//   GPU tier  the copy ceiling; the same copy walking rows vs walking columns; 4-, 8- and 16-byte
//             accesses; the transpose ladder (04/...) checked on a ragged shape and timed.
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "buffer.h"
#include "ceilings.h"
#include "ch04_kernels.h"
#include "ch04_strides.h"
#include "chapter.h"
#include "check.h"
#include "gpu.h"
#include "harness.h"
#include "random.h"
#include "timing.h"

namespace fa::ch04 {
namespace {

// ---- CPU tier ----------------------------------------------------------------------------------
int strides_demo(std::ostream& os) {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      os << "  CHECK FAILED: " << what << "\n";
      ++failures;
    }
  };
  os << "\n== Shape and stride (CPU) ==\n";
  std::vector<float> data(6);
  for (int i = 0; i < 6; ++i) data[i] = float(i);
  TensorView x = contiguous({2, 3});
  os << "  x = [[0 1 2] [3 4 5]]          " << x.str() << "\n";
  TensorView xt = transpose(x, 0, 1);
  os << "  x.T (no data moved)           " << xt.str() << "\n";
  TensorView xr = reshape(x, {3, 2});
  os << "  x.reshape(3, 2)               " << xr.str() << "\n";
  std::vector<float> t_vals = materialize(data.data(), xt), r_vals = materialize(data.data(), xr);
  os << "  x.T reads      ";
  for (float v : t_vals) os << v << " ";
  os << "(x.T[1][0] = element " << offset_of(xt, {1, 0}) << ")\n  x.reshape reads";
  for (float v : r_vals) os << " " << v;
  os << "   same shape, different elements: reshape is not transpose\n";
  expect(t_vals == std::vector<float>({0, 3, 1, 4, 2, 5}), "transpose order");
  expect(r_vals == std::vector<float>({0, 1, 2, 3, 4, 5}), "reshape order");
  bool threw = false;
  try {
    reshape(xt, {6});
  } catch (const Error&) {
    threw = true;
  }
  os << "  x.T.reshape(6) without a copy: " << (threw ? "refused (not contiguous)" : "allowed?!")
     << "\n";
  expect(threw, "reshaping a transposed view must need a copy");

  const int64_t B = 2, N = 1024, H = 16, D = 64;
  TensorView a = bnhd(B, N, H, D), b = bhnd(B, N, H, D);
  os << "\n  Attention tensors, B=" << B << " N=" << N << " H=" << H << " D=" << D << ":\n"
     << "  [B,N,H,D] " << a.str() << "\n"
     << "  [B,H,N,D] " << b.str() << "\n"
     << "  one head's row n is D = " << D << " contiguous floats in both; row n+1 starts "
     << head_row_stride_bnhd(a) << " elements later in [B,N,H,D] but " << head_row_stride_bhnd(b)
     << " in [B,H,N,D].\n"
     << "  A tile of 64 rows of one head: one contiguous " << 64 * D * 4 / 1024
     << " KiB block in [B,H,N,D]; 64 separate 256-byte pieces " << head_row_stride_bnhd(a) * 4
     << " bytes apart in [B,N,H,D] (still coalesced per row, but no longer one stream).\n";
  expect(head_row_stride_bnhd(a) == H * D && head_row_stride_bhnd(b) == D, "head row strides");
  // q.view(B,N,H,D).transpose(1,2) is [B,H,N,D] in shape with [B,N,H,D] memory:
  TensorView q = transpose(a, 1, 2);
  os << "  [B,N,H,D].transpose(1,2)  " << q.str() << "\n";
  expect(offset_of(q, {1, 3, 5, 7}) == offset_of(a, {1, 5, 3, 7}), "transposed view offsets");
  return failures;
}

// ---- GPU tier ----------------------------------------------------------------------------------
double gbps_of(double bytes_moved, double ms) {
  return bytes_moved / (ms * 1e-3) / 1e9;
}

void copy_demos(std::ostream& os, TransposeShape s, double ceiling, const TimingOptions& topt) {
  const int64_t n = s.numel();
  DeviceBuffer in = to_device(DType::F32, random_normal(n, 7)), out(size_t(n) * sizeof(float));
  const double bytes = 2.0 * double(n) * sizeof(float);
  auto row = [&](const std::string& name, double ms) {
    const double g = gbps_of(bytes, ms);
    os << "  " << std::left << std::setw(34) << name << std::right << std::setw(9) << std::fixed
       << std::setprecision(4) << ms << " ms " << std::setw(8) << std::setprecision(0) << g
       << " GB/s " << std::setw(6) << std::setprecision(1) << 100.0 * g / ceiling << "% of copy\n"
       << std::defaultfloat;
  };
  os << "\n== Copies of " << s.str() << " fp32 (copy ceiling " << std::fixed << std::setprecision(0)
     << ceiling << std::defaultfloat << " GB/s) ==\n";
  row("walk rows (coalesced)",
      time_gpu([&](cudaStream_t st) { copy_walk_rows(in.as<float>(), out.as<float>(), s, st); },
               topt)
          .median_ms);
  row("walk columns (uncoalesced)",
      time_gpu([&](cudaStream_t st) { copy_walk_cols(in.as<float>(), out.as<float>(), s, st); },
               topt)
          .median_ms);
  for (int bytes_per : {4, 8, 16})
    row("flat copy, " + std::to_string(bytes_per) + "-byte accesses",
        time_gpu(
            [&](cudaStream_t st) {
              copy_vector_width(in.as<float>(), out.as<float>(), n, bytes_per, st);
            },
            topt)
            .median_ms);
  // The copies must copy: check the last one.
  std::vector<float> back = to_host(DType::F32, out, size_t(n));
  std::vector<float> orig = to_host(DType::F32, in, size_t(n));
  FA_REQUIRE(back == orig, "the vector copy did not reproduce its input");
}

int run(const std::vector<std::string>& args) {
  Cli cli("ch04_coalesced_loads", "Strides, coalescing, bank conflicts: copies and transposes.");
  add_matrix_options(cli, "8192", "8192", "timed matrix");
  cli.option("check", Cli::IntList, "1000,1023",
             "rows,cols of the correctness runs (ragged on purpose)")
      .at_least(1);
  add_kernel_options(cli, "04/", 20);
  cli.section("transpose kernels (name, dtype, oldest GPU, what it changes)",
              kernels_help<TransposeKernel>("04/"))
      .example(printed_command("ch04.help").args);
  if (!cli.parse(args)) return cli.exit_code();
  const std::vector<SoftmaxShape> shapes = read_matrix_shapes(cli);  // rows x cols, like x of 01
  const std::vector<int64_t> chk = cli.get_int_list("check");
  if (chk.size() != 2) throw UsageError("--check: expected two positive sizes rows,cols");
  const int64_t repeats = cli.get_int("repeats");
  const std::vector<const TransposeKernel*> kernels =
      select_kernels<TransposeKernel>("04/", cli.get("kernel"));

  std::ostream& os = std::cout;
  print_chapter_header(os, "04", "coalesced loads", cli);
  int failures = strides_demo(os);
  if (!have_gpu()) {
    print_no_gpu(os, "the copies and the transpose ladder");
    return failures ? 1 : 0;
  }

  TimingOptions topt;
  topt.repeats = int(repeats);
  const double ceiling = copy_bandwidth_gbps();
  for (const SoftmaxShape& s : shapes) copy_demos(os, {s.rows, s.cols}, ceiling, topt);

  RunOptions check_opt;
  check_opt.seed = cli.seed();
  check_opt.time = false;
  RunOptions time_opt;
  time_opt.seed = cli.seed();
  time_opt.timing = topt;
  std::vector<RunResult> checked, timed;
  const TransposeShape check_shape{chk[0], chk[1]};
  for (const TransposeKernel* k : kernels) {
    RunResult c = run_transpose(*k, check_shape, check_opt);
    checked.push_back(c);
    if (!c.ok()) continue;
    for (const SoftmaxShape& s : shapes)  // checked again, and timed
      timed.push_back(run_transpose(*k, {s.rows, s.cols}, time_opt));
  }
  print_table(os, "Transpose correctness at " + check_shape.str() + " (exact)", checked);
  print_table(os, "Transpose speed (% of the copy ceiling)", timed);
  failures += print_failures(os, checked);
  failures += print_failures(os, timed);
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace fa::ch04

FA_REGISTER(Chapter, {"04", "coalesced loads", fa::ch04::run});
