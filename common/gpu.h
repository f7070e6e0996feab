// gpu.h: is there a GPU, which one, and can it run a given kernel? Tests and programs ask here
// and skip with a reason instead of crashing on a machine without one.
#pragma once
#include <cstddef>
#include <string>

namespace fa {

struct GpuInfo {
  bool present = false;
  std::string why_absent;  // filled when present == false
  int device = 0;
  std::string name;
  int sm = 0;  // compute capability as major*10+minor: 90 for an H100
  int sm_count = 0;
  int clock_khz = 0;
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
  size_t global_mem = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block = 0;        // default limit per block (48 KiB)
  size_t smem_per_block_optin = 0;  // after cudaFuncSetAttribute
  size_t smem_per_sm = 0;
  int regs_per_block = 0;
  int regs_per_sm = 0;
  int max_threads_per_sm = 0;
  int warp_size = 32;
};

const GpuInfo& gpu_info();  // queried once
bool have_gpu();

// "" when the local GPU can run a kernel needing compute capability `min_sm`; otherwise the
// reason to print (no GPU, or the GPU is too old).
std::string gpu_skip_reason(int min_sm = 70);

// The GPU was not compiled for: the build's CUDA architectures do not include this GPU's.
std::string describe_gpu();

// The dynamic shared memory one block may opt in to on the current device (227 KiB on an H100,
// 163 KiB on an A100, 99 KiB on sm_86/89): what a launcher checks before it asks for more than
// the default 48 KiB. Throws fa::Error on a CUDA failure, like every checked call.
size_t smem_optin_bytes();

// Emulating a GPU with less shared memory a block (an A100's 163 KiB, an RTX 4090's 99 KiB) on a
// larger one: from now on smem_optin_bytes() answers at most `bytes` (0 lifts the cap), so every
// launcher that checks it refuses what the smaller GPU would refuse. The tests run the dispatch's
// choices for smaller GPUs under their limits this way.
void cap_smem_optin_bytes(size_t bytes);

// The same limit for a GPU of compute capability `sm` (major*10+minor) that need not be here, from
// the CUDA C++ Programming Guide's table of technical specifications per compute capability
// ("maximum amount of shared memory per thread block"): 227 KiB on sm_90 and sm_100/103, 163 KiB
// on sm_80 and sm_87, 99 KiB on sm_86, sm_89 and sm_120/121, 64 KiB on sm_75, 96 KiB on sm_70/72.
// A compute capability the table does not know gets 99 KiB, the least any GPU from sm_80 on has.
size_t smem_optin_bytes_of_sm(int sm);

}  // namespace fa
