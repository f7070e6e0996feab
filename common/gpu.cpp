#include "gpu.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <sstream>

#include "check.h"

namespace fa {

const GpuInfo& gpu_info() {
  static const GpuInfo info = [] {
    GpuInfo g;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      // cudaErrorInsufficientDriver is also what CUDA reports when there is no driver at all
      // (cudaDriverGetVersion then says 0): on a machine without an NVIDIA GPU its text, "driver
      // version is insufficient", would send the reader to update a driver they do not have.
      int driver = 0;
      cudaDriverGetVersion(&driver);
      const bool no_driver = err == cudaErrorInsufficientDriver && driver == 0;
      if (err == cudaSuccess || err == cudaErrorNoDevice || no_driver)
        g.why_absent = "no NVIDIA driver / no CUDA device found";
      else
        g.why_absent = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
      cudaGetLastError();  // clear the error so later calls start clean
      return g;
    }
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
      g.why_absent = "cudaGetDeviceProperties failed";
      cudaGetLastError();
      return g;
    }
    g.present = true;
    g.name = p.name;
    g.sm = p.major * 10 + p.minor;
    g.sm_count = p.multiProcessorCount;
    cudaDeviceGetAttribute(&g.clock_khz, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&g.memory_clock_khz, cudaDevAttrMemoryClockRate, 0);
    cudaDeviceGetAttribute(&g.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
    g.global_mem = p.totalGlobalMem;
    g.l2_bytes = static_cast<size_t>(p.l2CacheSize);
    g.smem_per_block = p.sharedMemPerBlock;
    g.smem_per_block_optin = p.sharedMemPerBlockOptin;
    g.smem_per_sm = p.sharedMemPerMultiprocessor;
    g.regs_per_block = p.regsPerBlock;
    g.regs_per_sm = p.regsPerMultiprocessor;
    g.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    g.warp_size = p.warpSize;
    return g;
  }();
  return info;
}

namespace {
std::atomic<size_t> g_smem_cap{0};  // cap_smem_optin_bytes; 0: none
}  // namespace

size_t smem_optin_bytes() {
  int dev = 0, bytes = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const size_t cap = g_smem_cap.load();
  return cap > 0 && cap < size_t(bytes) ? cap : size_t(bytes);
}

void cap_smem_optin_bytes(size_t bytes) {
  g_smem_cap.store(bytes);
}

size_t smem_optin_bytes_of_sm(int sm) {
  constexpr size_t kKiB = 1024;
  switch (sm) {
    case 70:
    case 72:
      return 96 * kKiB;
    case 75:
      return 64 * kKiB;
    case 80:
    case 87:
      return 163 * kKiB;
    case 90:
    case 100:
    case 103:
      return 227 * kKiB;
    default:  // sm_86, sm_89, sm_120, sm_121, and what the table does not know
      return 99 * kKiB;
  }
}

bool have_gpu() {
  return gpu_info().present;
}

std::string gpu_skip_reason(int min_sm) {
  const GpuInfo& g = gpu_info();
  if (!g.present) return "no GPU: " + g.why_absent;
  if (g.sm < min_sm) {
    std::ostringstream os;
    os << g.name << " is sm_" << g.sm << "; this kernel needs sm_" << min_sm << " or newer";
    return os.str();
  }
  return "";
}

std::string describe_gpu() {
  const GpuInfo& g = gpu_info();
  if (!g.present) return "no GPU (" + g.why_absent + ")";
  std::ostringstream os;
  os << g.name << " (sm_" << g.sm << ", " << g.sm_count << " SMs)";
  return os.str();
}

}  // namespace fa
