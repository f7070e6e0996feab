// ch03_gemm.h: what the chapter 03 program needs to know about its kernels beyond the registry:
// the block tile of the tensor-core kernel and how many of its blocks fit on one SM (for the
// wave-quantization arithmetic of the "matmul mystery").
#pragma once
#include "dtype.h"

namespace fa::ch03 {

// v5_tensor_core's block tile: every block computes one kV5BlockM x kV5BlockN tile of C.
constexpr int kV5BlockM = 128;
constexpr int kV5BlockN = 128;
// Used when there is no GPU to ask (two blocks of 256 threads fit the register file of an SM).
constexpr int kV5AssumedBlocksPerSm = 2;

// Resident v5 blocks per SM on the GPU at hand (the CUDA occupancy calculator). Needs a GPU.
int v5_blocks_per_sm(DType dtype);

// The name of the best tensor-core kernel, the one the mystery sweep times against cuBLAS.
inline const char* best_tensor_core_kernel() { return "03/v5_tensor_core"; }

}  // namespace fa::ch03
