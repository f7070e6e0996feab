// ch00_gpu_basics.h: what chapter 00 shares between its host program, its kernels and its tests.
//
// Two halves:
//   1. Plain C++ arithmetic about a GPU (no CUDA needed): grid sizes, threads that would fall off
//      the end of an array, how many tiles fit in shared memory, how many blocks fit on an SM, the
//      roofline. The CPU tests check these, and the program prints them even without a GPU.
//   2. The launchers of the chapter's kernels (defined in the .cu files of this folder). Each one
//      checks its launch with FA_CHECK_LAUNCH, so a bad configuration throws fa::Error.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "shapes.h"

namespace fa::ch00 {

// ---- 1. Arithmetic about a GPU -----------------------------------------------------------------

constexpr int kWarpSize = 32;  // every NVIDIA GPU so far; the device query prints the real value

// Blocks needed to cover n items with `per_block` items per block: the rounded-up division every
// launch starts with, defined once for the whole repository in shapes.h.
// ceil_div(1000003, 256) = 3907 blocks.
using fa::ceil_div;

// A launch of ceil_div(n, block) blocks starts this many threads past the end of an n-element
// array. Without an `if (i < n)` test each of them reads and writes out of bounds.
constexpr int64_t threads_out_of_bounds(int64_t n, int64_t block) {
  return ceil_div(n, block) * block - n;
}

// How many tiles of `tile_bytes` fit in `available_bytes` of shared memory.
constexpr int64_t tiles_that_fit(int64_t available_bytes, int64_t tile_bytes) {
  return tile_bytes > 0 ? available_bytes / tile_bytes : 0;
}

// The per-SM limits that decide how many blocks can be resident at once (the "occupancy").
struct SmLimits {
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  int regs_per_sm = 0;
  int64_t smem_per_sm = 0;              // bytes
  int64_t smem_reserved_per_block = 0;  // bytes the driver keeps per resident block
};

// The H100 SXM5 (sm_90) numbers from NVIDIA's Hopper tuning guide: 2048 threads, 32 blocks,
// 64K 32-bit registers and 228 KiB of shared memory per SM, 1 KiB of it reserved per block.
SmLimits h100_sm_limits();

// The number of resident blocks of `threads` threads using `regs_per_thread` registers and
// `smem_per_block` bytes of shared memory, and which limit binds. Registers are handed out per
// warp in chunks of 256 (8 per thread), so regs_per_thread is rounded up to a multiple of 8.
struct Residency {
  int blocks = 0;
  std::string limited_by;  // "threads", "blocks", "registers" or "shared memory"
};
Residency resident_blocks(const SmLimits& sm, int threads, int regs_per_thread,
                          int64_t smem_per_block);

// FP32 lanes (CUDA cores) per SM: what turns a clock into a peak FMA rate. 0 when unknown.
int fp32_lanes_per_sm(int sm);

// Peak fp32 rate in TFLOP/s: SMs x lanes x 2 flops per FMA x clock.
double fp32_peak_tflops(int sm_count, int lanes_per_sm, double clock_khz);

// Peak DRAM bandwidth in GB/s from the memory clock and bus width (double data rate).
double dram_peak_gbps(double memory_clock_khz, int bus_bits);

// The roofline: attainable FLOP/s of a kernel doing `intensity` FLOPs per byte of DRAM traffic.
double roofline_tflops(double intensity_flop_per_byte, double peak_tflops, double bandwidth_gbps);
// Where the slope meets the roof: FLOPs a kernel must do per byte to be compute bound.
double ridge_point(double peak_tflops, double bandwidth_gbps);

// The chapter's elementwise example: y = relu(x * a + b), rounded the way the three-kernel
// version rounds (the product is rounded to fp32 before the add). Used by the CPU check.
float relu_axb_reference(float x, float a, float b);

// One thread of the FMA-rate kernel, replayed on the CPU (std::fma rounds exactly like the GPU's
// fmaf): kFmaChains independent chains acc = acc * a + b for `iters` steps, then summed.
constexpr int kFmaChains = 8;
float fma_thread_reference(int64_t thread, int iters, float a, float b);

// The two branch bodies of the divergence kernels, replayed on the CPU.
constexpr int kDivergenceChains = 4;
float divergence_path_affine(float seed, int iters);     // x = x * 0.9 + 0.05 per step
float divergence_path_quadratic(float seed, int iters);  // x = x * x + 0.2 per step
float divergence_seed(int64_t thread);

// ---- 2. Launchers (the kernels live in the .cu files) ------------------------------------------

// c[i] = a[i] + b[i] for i < n, one thread per element, `block` threads per block. A block of
// more than 1024 threads is an invalid configuration: the launch throws fa::Error
// (cudaErrorInvalidConfiguration), which the chapter catches on purpose.
void vector_add(const float* a, const float* b, float* c, int64_t n, int block, cudaStream_t s);
// The same kernel WITHOUT the bounds test: every launched thread writes. Only call it on buffers
// padded to ceil_div(n, block) * block elements, as the chapter does to show where stray writes go.
void vector_add_unchecked(const float* a, const float* b, float* c, int64_t n, int block,
                          cudaStream_t s);
// C = A + B for row-major rows x cols matrices, 2D grid of 32x8 blocks.
void matrix_add(const float* A, const float* B, float* C, int64_t rows, int64_t cols,
                cudaStream_t s);

// What the compiler and runtime say about the vector-add kernel at a block size.
struct KernelResources {
  int regs_per_thread = 0;
  int static_smem_bytes = 0;
  int resident_blocks_per_sm = 0;  // cudaOccupancyMaxActiveBlocksPerMultiprocessor
};
KernelResources vector_add_resources(int block);

// The FMA-rate kernel: `blocks` x `threads`, each doing iters * kFmaChains FMAs; out[thread] is
// the sum of the chains (so nothing is dead code). `iters` must be a multiple of kFmaUnroll.
constexpr int kFmaUnroll = 16;
void fma_rate(float* out, int blocks, int threads, int iters, float a, float b, cudaStream_t s);

// Divergence: every thread runs one of two equally expensive loops. `divergent` chooses by lane
// parity (both paths inside every warp); otherwise by warp parity (one path per warp).
void divergence(float* out, int blocks, int threads, int iters, bool divergent, cudaStream_t s);

// Fusion: y = relu(x * a + b) as three kernels through global memory, or as one kernel.
void scale_kernel(const float* x, float* t, float a, int64_t n, cudaStream_t s);  // t = x * a
void shift_kernel(const float* t, float* u, float b, int64_t n, cudaStream_t s);  // u = t + b
void relu_kernel(const float* u, float* y, int64_t n, cudaStream_t s);            // y = max(u, 0)
void fused_relu_axb(const float* x, float* y, float a, float b, int64_t n, cudaStream_t s);

// Device attributes that fa::GpuInfo does not carry.
struct ExtraDeviceInfo {
  int max_threads_per_block = 0;
  int max_blocks_per_sm = 0;
  int64_t smem_reserved_per_block = 0;
  int max_grid_x = 0;
  int max_grid_y = 0;
};
ExtraDeviceInfo extra_device_info();

}  // namespace fa::ch00
