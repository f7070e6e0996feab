// Chapter 00: the GPU you are on.
//
// The program a student runs first. Five sections, each printing what it measures and why:
//   1. the device query, and what its numbers mean for the kernels of later chapters;
//   2. threads, warps and blocks: vector and matrix add checked against CPU loops, an invalid
//      launch caught, and what a missing bounds test does on a ragged size;
//   3. measured ceilings: copy bandwidth, an FMA-rate kernel, cuBLAS fp32 and bf16, the roofline;
//   4. control divergence: the same work with and without warps split by a branch;
//   5. operator fusion: relu(x * a + b) as three kernels and as one.
// Without a GPU it prints the arithmetic and the H100 predictions (the CPU tier) and exits 0.
// Exit code: 0 every check passed, 1 a check failed, 2 bad command line or a CUDA error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "buffer.h"
#include "ceilings.h"
#include "ch00_gpu_basics.h"
#include "chapter.h"
#include "check.h"
#include "cli.h"
#include "exercise.h"
#include "gpu.h"
#include "random.h"
#include "registry.h"
#include "timing.h"

namespace fa::ch00 {
namespace {

// ---- small printing helpers --------------------------------------------------------------------

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}
std::string kib(int64_t bytes) {
  return fixed(double(bytes) / 1024.0, bytes % 1024 ? 1 : 0) + " KiB";
}
std::string mib(int64_t bytes) {
  return fixed(double(bytes) / (1024.0 * 1024.0), 1) + " MiB";
}

void section(const std::string& title) {
  std::cout << "\n== " << title << " "
            << std::string(title.size() < 90 ? 90 - title.size() : 0, '=') << "\n";
}
void row(const std::string& what, const std::string& value, const std::string& note = "") {
  std::ostringstream os;
  os << "  " << std::left << std::setw(42) << (what + " ") << std::setw(22) << (value + " ")
     << note;
  std::string line = os.str();
  line.erase(line.find_last_not_of(' ') + 1);  // no trailing blanks when there is no note
  std::cout << line << "\n";
}

// A check that prints its verdict and counts failures (the exit code is 1 if any failed).
struct Checks {
  int failed = 0;
  void expect(bool ok, const std::string& what, const std::string& detail = "") {
    std::cout << "  [" << (ok ? "PASS" : "FAIL") << "] " << what;
    if (!detail.empty()) std::cout << ": " << detail;
    std::cout << "\n";
    if (!ok) ++failed;
  }
  // The check of an exercise kernel (00/vector_add, 00/matrix_add): in a student release whose
  // exercise file is still as handed out (common/exercise.h) a failure says so and is not counted.
  void expect_exercise(const std::string& kernel, bool ok, const std::string& what,
                       const std::string& detail) {
    const std::string file = ok ? "" : fa::untouched_exercise(kernel);
    if (file.empty()) return expect(ok, what, detail);
    std::cout << "  [TODO] " << what << ": " << detail << "; " << kernel
              << "'s exercise is not written yet (TODO in " << file
              << ", untouched): not counted as a failed check\n";
  }
};

// Fast, seeded uniform values in [-1, 1) (splitmix64): the fusion input is 64M floats, and a
// normal generator would take longer than every kernel of the chapter together.
std::vector<float> uniform_values(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v[static_cast<size_t>(i)] =
        float(z >> 40) / float(1 << 23) - 1.0f;  // 24 random bits -> [-1, 1)
  }
  return v;
}

// First index where got != want bit for bit (NaN never equals anything), or -1.
int64_t first_mismatch(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i])) return int64_t(i);
  return -1;
}
bool close(float got, float want, float rel) {
  return std::fabs(got - want) <= rel * std::max(1.0f, std::fabs(want));  // false for NaN
}

// ---- the CPU tier: arithmetic that needs no GPU ------------------------------------------------

constexpr int kTileRowsBr = 128, kTileColsD = 64, kBf16Bytes = 2;
constexpr int64_t kTileBytes = int64_t(kTileRowsBr) * kTileColsD * kBf16Bytes;  // 16 KiB

void explain_plan() {
  section("What this chapter measures, and why");
  std::cout
      << "  1. The device query: SMs, clocks, shared memory, registers, L2, memory. Later "
         "chapters\n"
         "     size their tiles and blocks from these numbers.\n"
         "  2. Threads, warps, blocks: vector and matrix add on ragged sizes, checked against a "
         "CPU\n"
         "     loop; an invalid launch caught; the damage a missing bounds test would do.\n"
         "  3. Ceilings: the copy bandwidth (the memory roof), an FMA kernel (the fp32 roof), "
         "cuBLAS\n"
         "     fp32 and bf16 (the tensor-core roof), and the ridge point where they meet.\n"
         "  4. Divergence: lanes of one warp taking different branches cost both branches.\n"
         "  5. Fusion: three elementwise kernels move 3x the bytes of one fused kernel, and a\n"
         "     memory-bound kernel's time is its bytes divided by the bandwidth.\n";
}

void cpu_tier(int64_t n, int64_t rows, int64_t cols, int64_t fusion_n, Checks& checks) {
  section("Index arithmetic (CPU): a ragged launch");
  const int block = 256;
  int64_t grid = ceil_div(n, block);
  int64_t oob = threads_out_of_bounds(n, block);
  row("vector length n", std::to_string(n), "(not a multiple of the block, on purpose)");
  row("block", std::to_string(block) + " threads",
      "= " + std::to_string(block / kWarpSize) + " warps of 32");
  row("grid = ceil(n / block)", std::to_string(grid) + " blocks");
  row("threads launched = grid x block", std::to_string(grid * block));
  row("threads with i >= n", std::to_string(oob),
      "without `if (i < n)` they write " + std::to_string(oob * 4) + " bytes past the end");
  int64_t gx = ceil_div(cols, 32), gy = ceil_div(rows, 8);
  row("matrix " + std::to_string(rows) + " x " + std::to_string(cols) + ", 32x8 blocks",
      std::to_string(gx) + " x " + std::to_string(gy) + " blocks",
      std::to_string(gx * 32 * gy * 8 - rows * cols) + " threads idle at the ragged edges");
  checks.expect(oob >= 0 && oob < block && (n + oob) % block == 0,
                "threads_out_of_bounds is less than one block and completes the last block");

  section("What the H100 datasheet predicts (CPU)");
  SmLimits h100 = h100_sm_limits();
  int64_t smem_default = 48 * 1024, smem_optin = 227 * 1024;
  row("128x64 bf16 tile", kib(kTileBytes), "Br x D, the Q tile of a FlashAttention block");
  row("tiles per block, default 48 KiB", std::to_string(tiles_that_fit(smem_default, kTileBytes)));
  row("tiles per block, opt-in 227 KiB", std::to_string(tiles_that_fit(smem_optin, kTileBytes)));
  row("tiles per SM, 228 KiB", std::to_string(tiles_that_fit(h100.smem_per_sm, kTileBytes)));
  Residency r128 = resident_blocks(h100, 128, 32, 0);
  row("blocks of 128 threads per SM", std::to_string(r128.blocks),
      "at 32 registers/thread, no shared memory: limited by " + r128.limited_by);
  Residency r128fa = resident_blocks(h100, 128, 128, 3 * kTileBytes);
  row("  ... at 128 regs, 48 KiB shared each", std::to_string(r128fa.blocks),
      "limited by " + r128fa.limited_by);
  double fp32_peak = fp32_peak_tflops(132, fp32_lanes_per_sm(90), 1980e3);
  double hbm = 3350.0;  // GB/s, H100 SXM5 HBM3 datasheet
  row("fp32 peak: 132 SMs x 128 x 2 x 1.98 GHz", fixed(fp32_peak, 1) + " TFLOP/s");
  row("HBM3 bandwidth (datasheet)", fixed(hbm, 0) + " GB/s", "about 3000 GB/s measured by a copy");
  row("bf16 dense tensor cores (datasheet)", "989 TFLOP/s",
      "about 750 measured by cuBLAS at 4096^3");
  row("ridge point fp32", fixed(ridge_point(fp32_peak, hbm), 1) + " FLOP/byte");
  row("ridge point bf16 tensor cores", fixed(ridge_point(989.0, hbm), 0) + " FLOP/byte");
  double unfused_bytes = 6.0 * 4.0 * double(fusion_n), fused_bytes = 2.0 * 4.0 * double(fusion_n);
  row("relu(x*a+b), n = " + std::to_string(fusion_n) + ", 3 kernels",
      fixed(unfused_bytes / 3.0e12 * 1e3, 3) + " ms", "6n x 4 bytes at 3 TB/s");
  row("relu(x*a+b), 1 fused kernel", fixed(fused_bytes / 3.0e12 * 1e3, 3) + " ms",
      "2n x 4 bytes at 3 TB/s: 3x less");
  row("divergent / uniform branch time", "about 2x", "both sides of the branch run in every warp");

  checks.expect(
      tiles_that_fit(smem_default, kTileBytes) == 3 && tiles_that_fit(smem_optin, kTileBytes) == 14,
      "H100 shared memory holds 3 tiles per block by default, 14 after opt-in");
  checks.expect(r128.blocks == 16 && r128.limited_by == "threads",
                "16 blocks of 128 threads fill an H100 SM (2048 threads)");
  checks.expect(std::fabs(ridge_point(fp32_peak, hbm) - 20.0) < 1.0,
                "the fp32 ridge point of an H100 is about 20 FLOP/byte");
  float y = relu_axb_reference(0.5f, 3.0f, -2.0f), z = relu_axb_reference(-1.0f, 3.0f, 1.0f);
  checks.expect(y == 0.0f && z == 0.0f && relu_axb_reference(1.0f, 2.0f, 0.5f) == 2.5f,
                "the CPU reference of relu(x*a+b) clamps negatives and passes positives");
}

// ---- GPU sections ------------------------------------------------------------------------------

void device_query(Checks& checks) {
  section("1. The device query");
  const GpuInfo& g = gpu_info();
  ExtraDeviceInfo e = extra_device_info();
  row("name", g.name);
  row("compute capability", std::to_string(g.sm / 10) + "." + std::to_string(g.sm % 10),
      "sm_" + std::to_string(g.sm));
  row("SMs", std::to_string(g.sm_count), "one block runs on one SM; many blocks share an SM");
  row("SM clock (peak)", fixed(g.clock_khz / 1e3, 0) + " MHz");
  row("memory clock, bus",
      fixed(g.memory_clock_khz / 1e3, 0) + " MHz, " + std::to_string(g.memory_bus_bits) + " bits");
  row("global memory", fixed(double(g.global_mem) / (1 << 30), 1) + " GiB");
  row("L2 cache", mib(int64_t(g.l2_bytes)), "shared by all SMs");
  row("shared memory per block (default)", kib(int64_t(g.smem_per_block)));
  row("shared memory per block (opt-in)", kib(int64_t(g.smem_per_block_optin)),
      "after cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  row("shared memory per SM", kib(int64_t(g.smem_per_sm)),
      "reserved per block: " + kib(e.smem_reserved_per_block));
  row("32-bit registers per block / per SM",
      std::to_string(g.regs_per_block) + " / " + std::to_string(g.regs_per_sm));
  row("threads per block (max)", std::to_string(e.max_threads_per_block));
  row("threads / blocks per SM (max)",
      std::to_string(g.max_threads_per_sm) + " / " + std::to_string(e.max_blocks_per_sm));
  row("warp size", std::to_string(g.warp_size));
  row("grid limit x / y", std::to_string(e.max_grid_x) + " / " + std::to_string(e.max_grid_y),
      "why batch*heads goes on x");

  int lanes = fp32_lanes_per_sm(g.sm);
  std::cout << "\n  What these numbers mean for later chapters:\n";
  SmLimits sm;
  sm.max_threads_per_sm = g.max_threads_per_sm;
  sm.max_blocks_per_sm = e.max_blocks_per_sm;
  sm.regs_per_sm = g.regs_per_sm;
  sm.smem_per_sm = int64_t(g.smem_per_sm);
  sm.smem_reserved_per_block = e.smem_reserved_per_block;
  row("128x64 bf16 tiles per block (default)",
      std::to_string(tiles_that_fit(int64_t(g.smem_per_block), kTileBytes)), "16 KiB each");
  row("128x64 bf16 tiles per block (opt-in)",
      std::to_string(tiles_that_fit(int64_t(g.smem_per_block_optin), kTileBytes)));
  row("128x64 bf16 tiles per SM",
      std::to_string(tiles_that_fit(int64_t(g.smem_per_sm), kTileBytes)));
  Residency r = resident_blocks(sm, 128, 32, 0);
  row("blocks of 128 threads per SM", std::to_string(r.blocks),
      "model at 32 regs/thread: limited by " + r.limited_by);
  KernelResources vr = vector_add_resources(128);
  Residency rv = resident_blocks(sm, 128, vr.regs_per_thread, vr.static_smem_bytes);
  row("  vector add, 128 threads (runtime)", std::to_string(vr.resident_blocks_per_sm),
      std::to_string(vr.regs_per_thread) + " regs/thread; the model says " +
          std::to_string(rv.blocks));
  Residency rfa = resident_blocks(sm, 128, 128, 3 * kTileBytes);
  row("  128 threads, 128 regs, 48 KiB smem", std::to_string(rfa.blocks),
      "a FlashAttention-like block: limited by " + rfa.limited_by);
  row("resident threads on the whole GPU",
      std::to_string(int64_t(g.sm_count) * g.max_threads_per_sm),
      "a grid smaller than this leaves SMs idle");
  if (lanes > 0)
    row("fp32 peak from the clock",
        fixed(fp32_peak_tflops(g.sm_count, lanes, g.clock_khz), 1) + " TFLOP/s",
        std::to_string(lanes) + " FP32 lanes/SM x 2 flops x clock");
  row("DRAM peak from the clocks",
      fixed(dram_peak_gbps(g.memory_clock_khz, g.memory_bus_bits), 0) + " GB/s",
      "2 x memory clock x bus width");
  checks.expect(vr.resident_blocks_per_sm > 0, "the runtime can place vector-add blocks on an SM");
}

void threads_and_blocks(int64_t n, int64_t rows, int64_t cols, uint64_t seed, Checks& checks) {
  section("2. Threads, warps and blocks");
  // Vector add, three block sizes: the answer must not depend on how we cut the work.
  std::vector<float> a = random_normal(n, derive_seed(seed, 1));
  std::vector<float> b = random_normal(n, derive_seed(seed, 2));
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    want[static_cast<size_t>(i)] =
        a[static_cast<size_t>(i)] + b[static_cast<size_t>(i)];  // the CPU loop
  DeviceBuffer da(static_cast<size_t>(n) * 4), db(static_cast<size_t>(n) * 4),
      dc(static_cast<size_t>(n) * 4);
  da.upload(a.data(), da.bytes());
  db.upload(b.data(), db.bytes());
  for (int block : {32, 256, 1024}) {
    dc.poison();  // NaN everywhere: an element nobody writes cannot pass
    vector_add(da.as<float>(), db.as<float>(), dc.as<float>(), n, block, nullptr);
    dc.download(got.data(), dc.bytes());
    int64_t bad = first_mismatch(got, want);
    checks.expect_exercise("00/vector_add", bad < 0,
                           "vector add, n = " + std::to_string(n) + ", block " +
                               std::to_string(block) + " (" + std::to_string(ceil_div(n, block)) +
                               " blocks), equals the CPU loop bit for bit",
                           bad < 0 ? "" : "first mismatch at i = " + std::to_string(bad));
  }

  // Matrix add on a 2D grid.
  int64_t mn = rows * cols;
  std::vector<float> A = random_normal(mn, derive_seed(seed, 3));
  std::vector<float> B = random_normal(mn, derive_seed(seed, 4));
  std::vector<float> Cwant(static_cast<size_t>(mn)), Cgot(static_cast<size_t>(mn));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t o = r * cols + c;
      Cwant[static_cast<size_t>(o)] = A[static_cast<size_t>(o)] + B[static_cast<size_t>(o)];
    }
  DeviceBuffer dA(static_cast<size_t>(mn) * 4), dB(static_cast<size_t>(mn) * 4),
      dC(static_cast<size_t>(mn) * 4);
  dA.upload(A.data(), dA.bytes());
  dB.upload(B.data(), dB.bytes());
  dC.poison();
  matrix_add(dA.as<float>(), dB.as<float>(), dC.as<float>(), rows, cols, nullptr);
  dC.download(Cgot.data(), dC.bytes());
  int64_t badm = first_mismatch(Cgot, Cwant);
  checks.expect_exercise("00/matrix_add", badm < 0,
                         "matrix add " + std::to_string(rows) + " x " + std::to_string(cols) +
                             " on 32x8 blocks equals the CPU loop bit for bit",
                         badm < 0 ? ""
                                  : "first mismatch at row " + std::to_string(badm / cols) +
                                        ", col " + std::to_string(badm % cols));

  // An invalid configuration: 2048 threads per block (the limit is 1024). The launch never
  // starts; cudaGetLastError reports it, FA_CHECK_LAUNCH turns it into fa::Error. This error is
  // not "sticky": the context stays usable, as the next launch shows.
  std::cout << "\n  Launching vector add with a block of 2048 threads (the limit is 1024):\n";
  bool caught = false;
  try {
    vector_add(da.as<float>(), db.as<float>(), dc.as<float>(), n, 2048, nullptr);
  } catch (const Error& err) {
    caught = true;
    std::cout << "    caught fa::Error: " << err.what() << "\n";
  }
  cudaError_t after = cudaGetLastError();  // reading the error also clears it
  checks.expect(caught && after == cudaSuccess,
                "the invalid launch was reported and left no error behind");
  dc.poison();
  vector_add(da.as<float>(), db.as<float>(), dc.as<float>(), n, 256, nullptr);
  dc.download(got.data(), dc.bytes());
  checks.expect(first_mismatch(got, want) < 0, "the next valid launch still works");

  // The missing bounds test, shown safely. The buffers are padded to grid x block elements, with
  // a sentinel in the padding of c, so the stray writes land in memory we own and can be counted.
  // On an unpadded buffer they would hit a neighbouring allocation silently, or raise
  // cudaErrorIllegalAddress, which is sticky: it ruins the CUDA context for the rest of the
  // process (every later call fails), so we do not do that here.
  const int block = 256;
  int64_t padded = ceil_div(n, block) * block, oob = padded - n;
  const float kSentinel = -12345.0f;
  std::vector<float> pa(static_cast<size_t>(padded), 1.0f), pb(static_cast<size_t>(padded), 2.0f),
      pc(static_cast<size_t>(padded));
  std::copy(a.begin(), a.end(), pa.begin());
  std::copy(b.begin(), b.end(), pb.begin());
  std::vector<float> pc_init(static_cast<size_t>(padded), kSentinel);
  DeviceBuffer qa(static_cast<size_t>(padded) * 4), qb(static_cast<size_t>(padded) * 4),
      qc(static_cast<size_t>(padded) * 4);
  qa.upload(pa.data(), qa.bytes());
  qb.upload(pb.data(), qb.bytes());
  qc.upload(pc_init.data(), qc.bytes());
  vector_add_unchecked(qa.as<float>(), qb.as<float>(), qc.as<float>(), n, block, nullptr);
  qc.download(pc.data(), qc.bytes());
  int64_t overwritten = 0;
  for (int64_t i = n; i < padded; ++i) overwritten += pc[static_cast<size_t>(i)] != kSentinel;
  std::cout << "\n  Vector add WITHOUT `if (i < n)`, n = " << n << ", block " << block << ": "
            << oob << " threads have i >= n.\n"
            << "    In the padding we allocated on purpose, " << overwritten << " of " << oob
            << " elements past the end were overwritten (" << overwritten * 4 << " bytes).\n";
  checks.expect(overwritten == oob, "every thread past the end wrote, exactly as predicted");
}

// Time a launch and return milliseconds (median of `repeats` runs), with the shared protocol of
// fa::time_gpu.
double median_ms(const std::function<void(cudaStream_t)>& f, int repeats, bool flush = true) {
  TimingOptions opt;
  opt.repeats = repeats;
  opt.flush = flush ? Flush::Clean : Flush::None;
  return time_gpu(f, opt).median_ms;
}

void ceilings(int fma_iters, int gemm_n, int repeats, Checks& checks) {
  section("3. Measured ceilings");
  const GpuInfo& g = gpu_info();
  std::cout << "  Measuring the copy bandwidth (1 GiB each way), the FMA rate and cuBLAS ...\n";
  double copy_gbps = copy_bandwidth_gbps();

  // FMA rate: enough 256-thread blocks to fill every SM to its thread limit.
  const int threads = 256;
  int blocks = g.sm_count * std::max(1, g.max_threads_per_sm / threads);
  int64_t total_threads = int64_t(blocks) * threads;
  DeviceBuffer out(static_cast<size_t>(total_threads) * 4);
  const float a = 0.999f, b = 0.001f;
  double fma_ms = median_ms(
      [&](cudaStream_t s) { fma_rate(out.as<float>(), blocks, threads, fma_iters, a, b, s); },
      repeats, false);  // pure arithmetic: the cache state does not matter
  double fma_flops = 2.0 * double(total_threads) * fma_iters * kFmaChains;
  double fma_tflops = fma_flops / (fma_ms * 1e-3) / 1e12;
  std::vector<float> outs(static_cast<size_t>(total_threads));
  out.download(outs.data(), out.bytes());
  bool fma_ok = true;
  for (int64_t t : {int64_t(0), int64_t(1), int64_t(777), total_threads / 2, total_threads - 1}) {
    float want = fma_thread_reference(t, fma_iters, a, b);
    fma_ok = fma_ok && close(outs[static_cast<size_t>(t)], want, 1e-5f);
  }
  checks.expect(fma_ok, "the FMA kernel's results match the CPU replay (5 threads)");

  double bf16 = cublas_tflops(DType::BF16, gemm_n);
  double f32 = cublas_tflops(DType::F32, gemm_n);
  int lanes = fp32_lanes_per_sm(g.sm);
  double fp32_peak = lanes > 0 ? fp32_peak_tflops(g.sm_count, lanes, g.clock_khz) : 0.0;
  double dram_peak = dram_peak_gbps(g.memory_clock_khz, g.memory_bus_bits);
  std::string gn = std::to_string(gemm_n);

  std::cout << "\n  " << std::left << std::setw(42) << "ceiling" << std::setw(22) << "measured"
            << "peak from clocks (share reached)" << std::right << "\n";
  row("device-to-device copy", fixed(copy_gbps, 0) + " GB/s",
      fixed(dram_peak, 0) + " GB/s (" + fixed(100.0 * copy_gbps / dram_peak, 0) + "%)");
  row("fp32 FMA kernel", fixed(fma_tflops, 1) + " TFLOP/s",
      fp32_peak > 0
          ? fixed(fp32_peak, 1) + " TFLOP/s (" + fixed(100.0 * fma_tflops / fp32_peak, 0) + "%)"
          : "unknown lanes per SM for this GPU");
  row("cuBLAS fp32 (no TF32), " + gn + "^3", fixed(f32, 1) + " TFLOP/s",
      fp32_peak > 0 ? fixed(100.0 * f32 / fp32_peak, 0) + "% of the fp32 peak" : "");
  row("cuBLAS bf16 tensor cores, " + gn + "^3", fixed(bf16, 0) + " TFLOP/s",
      fixed(bf16 / std::max(f32, 1e-9), 1) + "x the fp32 GEMM");
  row("ridge point, bf16: cuBLAS / copy", fixed(ridge_point(bf16, copy_gbps), 0) + " FLOP/byte",
      "below this a kernel is memory bound");
  row("ridge point, fp32: FMA / copy", fixed(ridge_point(fma_tflops, copy_gbps), 1) + " FLOP/byte");

  std::cout << "\n  Where some kernels sit (FLOPs per byte of DRAM traffic -> attainable rate):\n";
  struct Example {
    const char* name;
    double intensity;
    double roof;
  };
  double gemm_intensity = 2.0 * gemm_n * double(gemm_n) * gemm_n /
                          (3.0 * gemm_n * double(gemm_n) * 2.0);  // read A, B, write C in bf16
  for (const Example& ex : {Example{"vector add (1 FLOP / 12 B)", 1.0 / 12, fma_tflops},
                            Example{"relu(x*a+b), 3 kernels (3 / 24 B)", 3.0 / 24, fma_tflops},
                            Example{"relu(x*a+b), fused (3 / 8 B)", 3.0 / 8, fma_tflops},
                            Example{"bf16 GEMM n^3 (n/3 FLOP/B)", gemm_intensity, bf16}}) {
    row(std::string("  ") + ex.name, fixed(ex.intensity, 3) + " FLOP/B",
        fixed(roofline_tflops(ex.intensity, ex.roof, copy_gbps), 3) + " TFLOP/s at most (" +
            (ex.intensity < ridge_point(ex.roof, copy_gbps) ? "memory" : "compute") + " bound)");
  }
  checks.expect(copy_gbps > 0 && fma_tflops > 0 && bf16 > 0 && f32 > 0 &&
                    std::isfinite(copy_gbps + fma_tflops + bf16 + f32),
                "every ceiling was measured");
}

void divergence_section(int iters, int repeats, Checks& checks) {
  section("4. Control divergence");
  const GpuInfo& g = gpu_info();
  const int threads = 256;
  int blocks = g.sm_count * std::max(1, g.max_threads_per_sm / threads);
  int64_t total = int64_t(blocks) * threads;
  DeviceBuffer out_div(static_cast<size_t>(total) * 4), out_uni(static_cast<size_t>(total) * 4);
  out_div.poison();
  out_uni.poison();
  double t_div = median_ms(
      [&](cudaStream_t s) { divergence(out_div.as<float>(), blocks, threads, iters, true, s); },
      repeats, false);
  double t_uni = median_ms(
      [&](cudaStream_t s) { divergence(out_uni.as<float>(), blocks, threads, iters, false, s); },
      repeats, false);
  std::vector<float> hd(static_cast<size_t>(total)), hu(static_cast<size_t>(total));
  out_div.download(hd.data(), out_div.bytes());
  out_uni.download(hu.data(), out_uni.bytes());
  bool ok = true;
  for (int64_t t : {int64_t(0), int64_t(1), int64_t(31), int64_t(32), int64_t(63), int64_t(64),
                    int64_t(255), total / 2 + 5, total - 1}) {
    float seed = divergence_seed(t);
    int lane = int(t % threads) % kWarpSize, warp = int(t % threads) / kWarpSize;
    float want_div = lane % 2 == 0 ? divergence_path_affine(seed, iters)
                                   : divergence_path_quadratic(seed, iters);
    float want_uni = warp % 2 == 0 ? divergence_path_affine(seed, iters)
                                   : divergence_path_quadratic(seed, iters);
    ok = ok && close(hd[static_cast<size_t>(t)], want_div, 1e-5f) &&
         close(hu[static_cast<size_t>(t)], want_uni, 1e-5f);
  }
  row("branch by lane parity (divergent)", fixed(t_div, 3) + " ms",
      "each warp runs both loops, 16 lanes idle each time");
  row("branch by warp parity (uniform)", fixed(t_uni, 3) + " ms", "each warp runs one loop");
  row("ratio divergent / uniform", fixed(t_div / t_uni, 2) + "x", "expected about 2x");
  checks.expect(ok, "both kernels' results match the CPU replay (9 threads each)");
  if (t_div / t_uni < 1.5)
    std::cout << "  note: the ratio is lower than expected; was the GPU busy, or did the compiler "
                 "predicate the branch?\n";
}

void fusion_section(int64_t n, uint64_t seed, int repeats, Checks& checks) {
  section("5. Operator fusion: y = relu(x * a + b)");
  const float a = 1.5f, b = -0.25f;
  std::vector<float> x = uniform_values(n, derive_seed(seed, 5));
  DeviceBuffer dx(static_cast<size_t>(n) * 4), dt(static_cast<size_t>(n) * 4),
      du(static_cast<size_t>(n) * 4), dy(static_cast<size_t>(n) * 4);
  dx.upload(x.data(), dx.bytes());
  auto unfused = [&](cudaStream_t s) {
    scale_kernel(dx.as<float>(), dt.as<float>(), a, n, s);  // t = x * a   (read x, write t)
    shift_kernel(dt.as<float>(), du.as<float>(), b, n, s);  // u = t + b   (read t, write u)
    relu_kernel(du.as<float>(), dy.as<float>(), n, s);      // y = relu(u) (read u, write y)
  };
  auto fused = [&](cudaStream_t s) { fused_relu_axb(dx.as<float>(), dy.as<float>(), a, b, n, s); };

  std::vector<float> y_unfused(static_cast<size_t>(n)), y_fused(static_cast<size_t>(n));
  dy.poison();
  unfused(nullptr);
  dy.download(y_unfused.data(), dy.bytes());
  dy.poison();
  fused(nullptr);
  dy.download(y_fused.data(), dy.bytes());
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; ++i)
    if (!close(y_fused[static_cast<size_t>(i)], relu_axb_reference(x[static_cast<size_t>(i)], a, b),
               1e-6f))
      bad = i;
  checks.expect(bad < 0, "the fused kernel matches the CPU loop",
                bad < 0 ? "" : "first mismatch at i = " + std::to_string(bad));
  int64_t diff = first_mismatch(y_unfused, y_fused);
  checks.expect(diff < 0, "three kernels and one kernel agree bit for bit",
                diff < 0 ? "" : "first difference at i = " + std::to_string(diff));

  double t3 = median_ms(unfused, repeats), t1 = median_ms(fused, repeats);
  double bytes3 = 6.0 * 4.0 * double(n), bytes1 = 2.0 * 4.0 * double(n);
  double copy_gbps = copy_bandwidth_gbps();
  std::cout << "  n = " << n << " floats (" << mib(n * 4) << " per array, larger than L2)\n";
  row("3 kernels: x -> t -> u -> y", fixed(t3, 3) + " ms",
      fixed(bytes3 / 1e6, 0) + " MB moved, " + fixed(bytes3 / (t3 * 1e-3) / 1e9, 0) + " GB/s (" +
          fixed(100.0 * bytes3 / (t3 * 1e-3) / 1e9 / copy_gbps, 0) + "% of copy)");
  row("1 fused kernel: x -> y", fixed(t1, 3) + " ms",
      fixed(bytes1 / 1e6, 0) + " MB moved, " + fixed(bytes1 / (t1 * 1e-3) / 1e9, 0) + " GB/s (" +
          fixed(100.0 * bytes1 / (t1 * 1e-3) / 1e9 / copy_gbps, 0) + "% of copy)");
  row("speed-up from fusion", fixed(t3 / t1, 2) + "x",
      "the roofline predicts 3x: 3x the bytes, same FLOPs, both far below the ridge");
}

int run(const std::vector<std::string>& args) {
  Cli cli("ch00_gpu_basics",
          "The GPU you are on: device query, threads and blocks, measured ceilings, divergence, "
          "fusion.");
  cli.option("n", Cli::Int, "1000003",
             "vector-add length (ragged on purpose: not a multiple of 256)")
      .at_least(1)
      .option("rows", Cli::Int, "1000", "matrix-add rows")
      .at_least(1)
      .at_most(65535 * 8)  // gridDim.y is at most 65535, and a block covers 8 rows
      .option("cols", Cli::Int, "1037", "matrix-add columns")
      .at_least(1)
      .option("fma_iters", Cli::Int, "4096",
              "FMA steps per chain in the FMA-rate kernel (multiple of 16)")
      .at_least(kFmaUnroll)
      .at_most(1 << 24)
      .option("div_iters", Cli::Int, "4096", "loop steps per thread in the divergence kernels")
      .at_least(1)
      .at_most(1 << 24)
      .option("fusion_n", Cli::Int, "64M", "elements of the fusion example (k = 1024, M = 1024^2)")
      .at_least(1)
      .option("gemm_n", Cli::Int, "4096", "cuBLAS GEMM size n for the n x n x n ceilings")
      .at_least(16)
      .at_most(16384)
      .option("repeats", Cli::Int, "20",
              "timed repeats of the FMA, divergence and fusion kernels (median)")
      .at_least(1)
      .example(printed_command("ch00.help").args);
  if (!cli.parse(args)) return cli.exit_code();
  const int64_t n = cli.get_int("n"), rows = cli.get_int("rows"), cols = cli.get_int("cols");
  const int64_t fma_iters = cli.get_int("fma_iters"), div_iters = cli.get_int("div_iters");
  const int64_t fusion_n = cli.get_int("fusion_n"), gemm_n = cli.get_int("gemm_n");
  const int64_t repeats = cli.get_int("repeats");
  if (fma_iters % kFmaUnroll != 0)
    throw UsageError("--fma_iters=" + std::to_string(fma_iters) + ": must be a multiple of 16");
  require_fits_in_gpu_memory(3.0 * 4 * double(n), "vector add of n = " + std::to_string(n));
  require_fits_in_gpu_memory(3.0 * 4 * double(rows) * double(cols), "the matrix add");
  require_fits_in_gpu_memory(4.0 * 4 * double(fusion_n), "--fusion_n=" + std::to_string(fusion_n));

  print_chapter_header(std::cout, "00", "the GPU you are on", cli);
  Checks checks;
  explain_plan();
  cpu_tier(n, rows, cols, fusion_n, checks);
  if (!have_gpu()) {
    print_no_gpu(std::cout, "the device query, the kernels and the measurements");
    return checks.failed ? 1 : 0;
  }
  device_query(checks);
  threads_and_blocks(n, rows, cols, cli.seed(), checks);
  ceilings(int(fma_iters), int(gemm_n), int(repeats), checks);
  divergence_section(int(div_iters), int(repeats), checks);
  fusion_section(fusion_n, cli.seed(), int(repeats), checks);
  std::cout << "\nChapter 00: "
            << (checks.failed ? std::to_string(checks.failed) + " check(s) FAILED"
                              : std::string("all checks passed"))
            << "\n";
  return checks.failed ? 1 : 0;
}

}  // namespace
}  // namespace fa::ch00

FA_REGISTER(Chapter, {"00", "the GPU you are on", fa::ch00::run});
