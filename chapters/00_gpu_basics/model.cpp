// model.cpp: the plain arithmetic of chapter 00 (no GPU needed). The CPU tests check it and the
// program prints it whether or not a GPU is present.
#include <algorithm>
#include <cmath>

#include "ch00_gpu_basics.h"

namespace fa::ch00 {

SmLimits h100_sm_limits() {
  SmLimits sm;
  sm.max_threads_per_sm = 2048;
  sm.max_blocks_per_sm = 32;
  sm.regs_per_sm = 65536;
  sm.smem_per_sm = 228 * 1024;
  sm.smem_reserved_per_block = 1024;
  return sm;
}

Residency resident_blocks(const SmLimits& sm, int threads, int regs_per_thread,
                          int64_t smem_per_block) {
  Residency r;
  if (threads <= 0) return r;
  // Each candidate limit, in the order we report ties: threads, blocks, registers, shared memory.
  int by_threads = sm.max_threads_per_sm / threads;
  int by_blocks = sm.max_blocks_per_sm;
  int regs = (std::max(regs_per_thread, 1) + 7) / 8 * 8;  // allocation granularity: 8 per thread
  int by_regs = sm.regs_per_sm / (regs * threads);
  int64_t smem = smem_per_block + sm.smem_reserved_per_block;
  int by_smem = smem > 0 ? int(sm.smem_per_sm / smem) : by_blocks;
  r.blocks = by_threads;
  r.limited_by = "threads";
  if (by_blocks < r.blocks) r = {by_blocks, "blocks"};
  if (by_regs < r.blocks) r = {by_regs, "registers"};
  if (by_smem < r.blocks) r = {by_smem, "shared memory"};
  return r;
}

int fp32_lanes_per_sm(int sm) {
  // From NVIDIA's architecture whitepapers. sm_80 (A100) has 64; the consumer and Hopper parts
  // double it. Unknown future parts: 128 is the best guess, and the program labels it a guess.
  switch (sm) {
    case 70:
    case 72:
    case 75:
    case 80:
      return 64;
    case 86:
    case 87:
    case 89:
    case 90:
      return 128;
    default:
      return sm >= 100 ? 128 : 0;
  }
}

double fp32_peak_tflops(int sm_count, int lanes_per_sm, double clock_khz) {
  return double(sm_count) * lanes_per_sm * 2.0 * clock_khz * 1e3 / 1e12;
}

double dram_peak_gbps(double memory_clock_khz, int bus_bits) {
  return 2.0 * memory_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
}

double roofline_tflops(double intensity, double peak_tflops, double bandwidth_gbps) {
  // Memory side: bytes/s x FLOP/byte. 1 GB/s x 1 FLOP/byte = 1e9 FLOP/s = 1e-3 TFLOP/s.
  return std::min(peak_tflops, bandwidth_gbps * intensity * 1e-3);
}

double ridge_point(double peak_tflops, double bandwidth_gbps) {
  return bandwidth_gbps > 0 ? peak_tflops * 1e3 / bandwidth_gbps : 0.0;
}

float relu_axb_reference(float x, float a, float b) {
  // Two separately rounded steps, like the three kernels (and the fused kernel, which uses
  // __fmul_rn / __fadd_rn to keep the same rounding). volatile stops a compiler from contracting
  // the two into one fused multiply-add on CPUs that have one.
  volatile float t = x * a;
  float u = t + b;
  return u > 0.0f ? u : 0.0f;
}

float fma_thread_reference(int64_t thread, int iters, float a, float b) {
  float acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = float(thread % 1024) * 1e-3f + float(j);
  for (int it = 0; it < iters; ++it)
    for (int j = 0; j < kFmaChains; ++j) acc[j] = std::fma(acc[j], a, b);
  float sum = 0.0f;
  for (int j = 0; j < kFmaChains; ++j) sum += acc[j];
  return sum;
}

float divergence_seed(int64_t thread) {
  return float(thread % 97) * 0.004f;
}

float divergence_path_affine(float seed, int iters) {
  float x[kDivergenceChains];
  for (int j = 0; j < kDivergenceChains; ++j) x[j] = seed + 0.01f * float(j);
  for (int it = 0; it < iters; ++it)
    for (int j = 0; j < kDivergenceChains; ++j) x[j] = std::fma(x[j], 0.9f, 0.05f);
  float sum = 0.0f;
  for (int j = 0; j < kDivergenceChains; ++j) sum += x[j];
  return sum;
}

float divergence_path_quadratic(float seed, int iters) {
  float x[kDivergenceChains];
  for (int j = 0; j < kDivergenceChains; ++j) x[j] = seed + 0.01f * float(j);
  for (int it = 0; it < iters; ++it)
    for (int j = 0; j < kDivergenceChains; ++j) x[j] = std::fma(x[j], x[j], 0.2f);
  float sum = 0.0f;
  for (int j = 0; j < kDivergenceChains; ++j) sum += x[j];
  return sum;
}

}  // namespace fa::ch00
