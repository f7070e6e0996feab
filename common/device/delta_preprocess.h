// delta_preprocess.h: the choices of chapter 06's D preprocess (delta_preprocess.cuh, beside
// this file) that host code reads too: the launcher's U and load hint, the block size, the other
// choices the chapter program measures, and the grid a launch reports. Chapter 06 introduces the
// preprocess (notes/06_flash_backward.md; its launcher is declared in
// chapters/06_flash_backward/ch06_preprocess.h); chapters 07 and 09 compile the kernel from here.
#pragma once
#include <cstdint>

namespace fa {

// The launcher's U: rows per lane group, so each lane has 2U 16-byte loads of O and dO in flight.
// 4: 128 bytes per lane, at 62 registers (no spills) where U = 1 takes 28, so an SM holds 4 blocks
// of 256 threads instead of 8: at most 128 KiB in flight per SM, against 64 KiB at U = 1 and
// 96 KiB at U = 2 (6 blocks). U = 8 would take 116 registers, 2 blocks per SM, for the same
// 128 KiB. Chapter 06's program prints GB/s for U = 1, 2, 4 (not yet measured on a GPU).
constexpr int kDeltaLauncherUnroll = 4;
// O is loaded evict-first (ld.global.cs): nothing after the preprocess reads it again, so its
// lines should be the first L2 gives up. dO is loaded plainly: the dK/dV and dQ kernels read it.
constexpr bool kDeltaLauncherEvictFirst = true;

// ---- For chapter 06's bytes-in-flight table ---------------------------------------------------
// The same kernel with other choices: U in {1, 2, 4} with O evict-first, or U = 4 with plain
// loads of O. Every choice gives bitwise the same D.
struct DeltaVariant {
  int unroll = kDeltaLauncherUnroll;
  bool evict_first = kDeltaLauncherEvictFirst;
};

// The grid a launch used. Little's law needs the resident threads: sms * blocks_per_sm * 256,
// each with 32 * U bytes of loads in flight at most.
struct DeltaGrid {
  int64_t blocks = 0;     // launched: a few waves at most, then a grid-stride loop
  int blocks_per_sm = 0;  // resident at once, from the occupancy calculator
  int sms = 0;
};
constexpr int kDeltaBlockThreads = 256;  // threads per block of the kernel

}  // namespace fa
