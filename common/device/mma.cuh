// mma.cuh: thin, documented wrappers over the Ampere-and-later PTX that the tensor-core kernels
// (chapters 03, 05, 06, 08) are built from. Each is one instruction; the comments give the facts a
// reader needs to use it (who holds which element). sm_80 or newer: on older GPUs these trap,
// and the kernels using them register min_sm = 80 so the harness never launches them there.
//
// The one matrix instruction used everywhere: mma.sync.aligned.m16n8k16 (D = A*B + C), per warp.
//   A is 16x16 (row-major), B is 16x8 (column-major), C and D are 16x8 in fp32.
//   Let g = lane / 4 (the "group", 0..7) and t = lane % 4 (the thread in the group, 0..3).
//   A fragment, 4 x 32-bit registers, each two 16-bit values (low half = lower column):
//     a[0] = A[g    ][2t, 2t+1]     a[1] = A[g + 8][2t, 2t+1]
//     a[2] = A[g    ][2t+8, 2t+9]   a[3] = A[g + 8][2t+8, 2t+9]
//   B fragment, 2 registers:  b[0] = B[2t, 2t+1][g]    b[1] = B[2t+8, 2t+9][g]
//   C/D fragment, 4 floats:   c[0], c[1] = C[g][2t, 2t+1]    c[2], c[3] = C[g + 8][2t, 2t+1]
//
// ldmatrix.x4 loads four 8x8 16-bit matrices from shared memory: lanes 8i..8i+7 give the row
// addresses of matrix i, and every thread receives register i holding its two elements of matrix
// i, laid out exactly as the A/B fragments above expect. ".trans" transposes each 8x8 on the way.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fa::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The same two loads from a 32-bit shared-memory address (what smem_addr returns). A kernel that
// keeps one 32-bit base per lane and adds compile-time offsets lets ptxas fold the offsets into
// the instruction ([base + imm]) instead of keeping a 64-bit pointer live per fragment
// (05/v3_fa2_warp_layout).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t saddr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr));
#else
  __trap();
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t saddr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr));
#else
  __trap();
#endif
}

// The inverse of ldmatrix_x4 (PTX stmatrix, sm_90 and newer): register i of every lane goes to
// 8x8 matrix i, lane l's to row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1; lane l gives the
// address of row l % 8 of matrix l / 8. So an m16n16 block of mma accumulators, packed to 16 bits
// as an A fragment, is stored with the lane addresses an A fragment is loaded from. kHasStmatrix
// tells a kernel whether this build may use it (compute capability 9.0 and newer).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kHasStmatrix = false;
#else
constexpr bool kHasStmatrix = true;
#endif
__device__ __forceinline__ void stmatrix_x4(uint32_t saddr, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  ldmatrix_x4(r, smem_addr(smem_row));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  ldmatrix_x4_trans(r, smem_addr(smem_row));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem_row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem_row)));
#else
  __trap();
#endif
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem_row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem_row)));
#else
  __trap();
#endif
}

// D = A*B + D for one warp, 16-bit inputs (T = __nv_bfloat16 or __half), fp32 accumulators.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  __trap();
#endif
}

// Two floats -> one register of two 16-bit values (lo in the low half), round to nearest.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// The other way: one register of two 16-bit values -> two floats (lo first).
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t packed) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v;
    memcpy(&v, &packed, 4);
    return __bfloat1622float2(v);
  } else {
    __half2 v;
    memcpy(&v, &packed, 4);
    return __half22float2(v);
  }
}

// cp.async: copy 16 bytes global -> shared without passing through registers (sm_80+). With
// `valid` false it writes 16 zero bytes instead of reading: the way to load a ragged tail tile
// without reading past the end of the tensor (src-size 0: no byte is read, but gmem must still
// point into the tensor). saddr is a 32-bit shared-memory address (smem_addr).
__device__ __forceinline__ void cp_async_16(uint32_t saddr, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem),
               "r"(src_bytes));
#else
  __trap();
#endif
}

// The same from a generic pointer into shared memory.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  cp_async_16(smem_addr(smem), gmem, valid);
}

// The same copy to a 32-bit shared-memory address (smem_addr), always 16 bytes. A loop that keeps
// one 32-bit destination and one global pointer per lane and adds compile-time offsets issues one
// instruction per copy, with no address arithmetic between them (08/t04_hoisted_addresses).
__device__ __forceinline__ void cp_async_16(uint32_t saddr, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem));
#else
  __trap();
#endif
}

// The same, with the hint that L2 may fetch the whole 128-byte line around the 16 bytes from DRAM
// (PTX ISA, cp.async: ".level::prefetch_size = .L2::128B"). A hint only: the result is the same
// copy. 08/t06_l2_prefetch measures what it changes.
__device__ __forceinline__ void cp_async_16_l2_128(uint32_t saddr, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem));
#else
  __trap();
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Wait until at most `N` committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace fa::mma
