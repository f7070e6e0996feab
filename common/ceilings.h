// ceilings.h: the measured limits of the GPU at hand. Every "% of peak" in the repository is a
// fraction of these numbers, measured in the same process, never of a datasheet.
#pragma once
#include <cuda_runtime_api.h>

#include "dtype.h"
#include "shapes.h"

namespace fa {

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written, 1e9 bytes per GB), from a
// 16-byte-per-thread copy kernel over 1 GiB. Measured once per process, then cached.
double copy_bandwidth_gbps();

// cuBLAS GEMM rate in TFLOP/s at n x n x n: fp32 without TF32, or bf16/fp16 inputs on the tensor
// cores with fp32 accumulation and 16-bit output (the usual "matmul peak"). Cached per (dtype, n).
double cublas_tflops(DType dtype, int n = 4096);

// C = A*B through cuBLAS with this repository's GEMM layout (row-major, fp32 C): the reference row
// of chapter 03 and of the benchmarks.
void cublas_gemm(const void* A, const void* B, float* C, GemmShape shape, DType dtype,
                 cudaStream_t stream);

// The copy kernel behind copy_bandwidth_gbps(), for programs that print it as a row.
void copy_kernel_launch(const float* in, float* out, int64_t n, cudaStream_t stream);

}  // namespace fa
