// hopper.cuh: thin, documented wrappers over the Hopper (sm_90a) instructions that chapter 03's
// v6 and chapter 07's attention kernels are built from: the Tensor Memory Accelerator (TMA),
// mbarriers, warpgroup MMA (wgmma), register reallocation (setmaxnreg) and named barriers.
// Each wrapper is one or two instructions; the comments carry the facts needed to use them.
// Compiled only for sm_90a (the "a" marks architecture-specific instructions that newer GPUs do
// not promise to keep); elsewhere every wrapper traps, and kernels that use them register
// min_sm = 90 and refuse any GPU that is not compute capability 9.0.
//
// The three ideas, in one paragraph each:
// * TMA: one thread asks the copy engine for a whole 2-D box of a tensor (described once on the
//   host by a CUtensorMap: base, sizes, strides, box, swizzle). The engine writes the box to shared
//   memory, zero-filling whatever lies outside the tensor, and reports the bytes it wrote to an
//   mbarrier. No thread spends instructions on addresses or predicates.
// * mbarrier: a counter in shared memory with a phase bit. It completes a phase when the expected
//   number of arrivals has happened *and* the expected bytes of TMA traffic have landed; waiters
//   spin on the parity of the phase they need (0, 1, 0, 1, ... for uses 0, 1, 2, 3, ... of a
//   buffer).
// * wgmma: four warps (a warpgroup, 128 threads) issue one asynchronous MMA together:
//   D[64 x N] (+)= A[64 x 16] * B[16 x N], A and B read straight from shared memory through
//   64-bit "matrix descriptors", D in registers (N/2 fp32 per thread). Issue, commit the group,
//   and wait for it later: the tensor cores work while the warps do other things.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "mma.cuh"  // smem_addr

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_SM90A 1
#else
#define FA_SM90A 0
#endif

namespace fa::hopper {

// ---- mbarrier ------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
#if FA_SM90A
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mma::smem_addr(bar)),
               "r"(arrivals));
#else
  __trap();
#endif
}

// Make the initialised barriers visible to the TMA engine (the "async proxy") before first use.
__device__ __forceinline__ void mbar_fence_init() {
#if FA_SM90A
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also announces `bytes` of TMA traffic the current phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if FA_SM90A
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mma::smem_addr(bar)),
      "r"(bytes)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if FA_SM90A
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mma::smem_addr(bar)) : "memory");
#else
  __trap();
#endif
}

// Spin until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if FA_SM90A
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_AGAIN:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_AGAIN;\n"
      "}\n" ::"r"(mma::smem_addr(bar)),
      "r"(parity)
      : "memory");
#else
  __trap();
#endif
}

// ---- TMA -----------------------------------------------------------------------------------------
// Copy the box at coordinates (c0 = innermost/column, c1 = row) of the tensor described by `tmap`
// (a __grid_constant__ kernel parameter) into shared memory at `dst`; completion is reported to
// `bar` as bytes. Out-of-range elements of the box are written as zeros.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* tmap, uint64_t* bar, int c0,
                                            int c1) {
#if FA_SM90A
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(mma::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(mma::smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
#else
  __trap();
#endif
}

// ---- wgmma ---------------------------------------------------------------------------------------
// Shared-memory matrix descriptor for a tile stored in the 128-byte-swizzle layout that TMA
// writes with CU_TENSOR_MAP_SWIZZLE_128B: rows of 128 bytes, the 16-byte chunks of row r XORed
// with r % 8, so 8 rows (1024 bytes, aligned to 1024) form one swizzle atom.
//   bits  0-13  start address >> 4       bits 16-29  leading byte offset >> 4 (LBO)
//   bits 32-45  stride byte offset >> 4  bits 62-63  swizzle mode (1 = 128 bytes)
// K-major operand (A here: a row holds 64 consecutive k): SBO = 1024, the step between groups of
//   8 rows; LBO is unused. Moving 16 k to the right = adding 32 bytes to the start address.
// MN-major operand (B here: a row holds 64 consecutive n of one k): LBO = the step between
//   64-column strips, SBO = 1024, the step between groups of 8 k-rows.
__device__ __forceinline__ uint64_t smem_desc_sw128(const void* tile, uint32_t lbo_bytes,
                                                    uint32_t sbo_bytes) {
  const uint64_t addr = mma::smem_addr(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

// The descriptor of the same layout `bytes` further on in shared memory (a multiple of 16): only
// the start address (bits 0-13, in 16-byte units) moves. Shared-window addresses are below 2^18,
// so the field never carries into bit 14 and the sum can stay in the low 32 bits: a mainloop that
// builds its descriptors once and advances them this way spends one integer add on each, where
// smem_desc_sw128 converts a pointer, masks and shifts every time.
__device__ __forceinline__ uint64_t smem_desc_advance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + (bytes >> 4));
}

// Before the first wgmma of a batch: orders the warpgroup's earlier register and shared-memory
// accesses before the asynchronous MMAs read them.
__device__ __forceinline__ void wgmma_fence() {
#if FA_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if FA_SM90A
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Wait until at most N committed wgmma groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if FA_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Keep the compiler from moving accesses to the accumulators across wgmma issue/wait points: the
// hardware writes them behind the compiler's back.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64 x 256] (+)= A[64 x 16] * B[16 x 256] for one warpgroup, fp32 accumulators, A K-major and B
// MN-major (the last two immediates: A not transposed, B transposed). With accumulate == 0 the
// old D is ignored. Accumulator layout, thread t of the warpgroup, w = t / 32, g = (t % 32) / 4,
// q = t % 4: d[4j + 0, 1] = D[16w + g][8j + 2q, +1] and d[4j + 2, 3] = D[16w + g + 8][8j + 2q, +1],
// for j = 0..31 (the m16n8 C fragment of mma.sync, repeated along N).
#define FA_WGMMA_M64N256K16(TYPE)                                                                  \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE                                 \
      " {"                                                                                         \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"            \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"            \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"            \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"            \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"            \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "     \
      "%111,"                                                                                      \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, " \
      "%127},"                                                                                     \
      " %128, %129, p, 1, 1, 0, 1;\n}\n"                                                           \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), \
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), \
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), \
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), \
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),          \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),        \
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),        \
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),        \
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])         \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));

__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
#if FA_SM90A
  FA_WGMMA_M64N256K16("bf16");
#else
  __trap();
#endif
}

__device__ __forceinline__ void wgmma_m64n256k16_f16(float (&d)[128], uint64_t desc_a,
                                                     uint64_t desc_b, int accumulate) {
#if FA_SM90A
  FA_WGMMA_M64N256K16("f16");
#else
  __trap();
#endif
}

#undef FA_WGMMA_M64N256K16

// ---- Additions for chapter 07 (FlashAttention on Hopper) -------------------------------------------

// 3-D TMA load: as tma_load_2d, for a tensor described with three dimensions (c0 innermost). The
// attention kernels describe Q, K and V as [batch*heads][seq][head_dim], so that a box that runs
// past the end of one head's sequence is zero-filled instead of reading the next head's rows.
__device__ __forceinline__ void tma_load_3d(void* dst, const void* tmap, uint64_t* bar, int c0,
                                            int c1, int c2) {
#if FA_SM90A
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(mma::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(mma::smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  __trap();
#endif
}

// Register reallocation between warpgroups (setmaxnreg). A block is launched with one register
// count for all its threads; a warp-specialised kernel lets the producer warpgroup shrink to a few
// registers (dec) so that the consumer warpgroups can grow (inc). Counts are per thread, multiples
// of 8 in [24, 256]; every warp of a warpgroup must execute the same instruction. inc blocks until
// the registers it asks for have been released into the block's pool, so the counts must add up:
// with 3 warpgroups launched at 168 (the most 384 threads get: 65536 / 384, rounded down to 8),
// 24 + 240 + 240 = 3 x 168. The kernel must be compiled with __launch_bounds__(threads, 1).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
#if FA_SM90A
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
#if FA_SM90A
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Named barriers (bar.sync / bar.arrive with an id): like __syncthreads (which is barrier 0), but
// for a subset of the block: `threads` (a multiple of 32) threads, counting every arriving warp
// in full. sync waits; arrive signals without waiting (a producer-consumer handshake between
// warpgroups). Ids 1..15 are free for the kernel to use.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// fence_registers for 32-bit operands (the A fragments of register-A wgmma): keeps the compiler
// from reusing their registers while an asynchronous wgmma may still read them.
template <int N>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// ---- wgmma of any N the attention kernels use (64, 128, 256), both operand forms -------------------
// wgmma_ss: D[64 x N] (+)= A[64 x 16] * B[16 x N], A and B in shared memory (descriptors). A is
//   K-major unless kTransA = 1 (imm-trans-a: A MN-major, K rows of M, which the PTX ISA allows
//   for 16-bit types only; 07/bwd_v6's dQ_tile = dS K reads dS out of the dS^T tile that way, as
//   wgmma_ss_n64_at below does at N = 64). kTransB = 0: B K-major, i.e. stored as N rows of K
//   (S = Q K^T reads K as it lies in memory); kTransB = 1: B MN-major, K rows of N (03/v6's B,
//   attention's V).
// wgmma_rs: the same with A in registers, 4 x 32-bit per thread (each two 16-bit values, low half
//   = lower column). The A fragment of warp w (rows 16w..16w+15 of the 64), g = lane / 4,
//   q = lane % 4, is the A fragment of mma.sync m16n8k16:
//     a[0] = A[16w + g][2q, 2q+1]       a[1] = A[16w + g + 8][2q, 2q+1]
//     a[2] = A[16w + g][2q+8, 2q+9]     a[3] = A[16w + g + 8][2q+8, 2q+9]
//   and the accumulator fragment is the one documented at FA_WGMMA_M64N256K16: d[4j + 0, 1] =
//   D[16w + g][8j + 2q, +1], d[4j + 2, 3] = D[16w + g + 8][8j + 2q, +1]. So the accumulators of
//   columns 16k..16k+15 (j = 2k and 2k + 1), packed in pairs, are exactly the A fragment of the k-th
//   k16 slice: a = {d[8k+0,1], d[8k+2,3], d[8k+4,5], d[8k+6,7]}. This is how P = softmax(S) feeds
//   P V without a trip through shared memory. (The PTX ISA only allows imm-trans-b with register A.)
// Registers named in an asm operand list cannot be indexed at run time, hence one macro per N.

// m64n64k16: 32 accumulators per thread.
#define FA_WG_ACC_N64                                                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"

#define FA_WG_OPS_N64                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

#define FA_WGMMA_SS_N64(TYPE)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N64 \
      "}, %32, %33, p, 1, 1, %36, %35;\n}\n"                                         \
      : FA_WG_OPS_N64                                                                \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA))

#define FA_WGMMA_RS_N64(TYPE)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N64 \
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                             \
      : FA_WG_OPS_N64                                                                \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

// m64n96k16 (O += P V at D 96, A from registers: 07/t52's instance of its own): 48 accumulators
// per thread. B (V, MN-major) spans one whole 64-column strip and half of the next.
#define FA_WG_ACC_N96 \
  FA_WG_ACC_N64 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"

#define FA_WG_OPS_N96                                                                            \
  FA_WG_OPS_N64, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),   \
      "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), \
      "+f"(d[45]), "+f"(d[46]), "+f"(d[47])

#define FA_WGMMA_RS_N96(TYPE)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n96k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N96 \
      "}, {%48, %49, %50, %51}, %52, p, 1, 1, %54;\n}\n"                             \
      : FA_WG_OPS_N96                                                                \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

// m64n128k16: 64 accumulators per thread.
#define FA_WG_ACC_N128                                                               \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

#define FA_WG_OPS_N128                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define FA_WGMMA_SS_N128(TYPE)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N128 \
      "}, %64, %65, p, 1, 1, %68, %67;\n}\n"                                           \
      : FA_WG_OPS_N128                                                                 \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA))

#define FA_WGMMA_RS_N128(TYPE)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N128 \
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                               \
      : FA_WG_OPS_N128                                                                 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

// m64n256k16: 128 accumulators per thread.
#define FA_WG_ACC_N256                                                                           \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "             \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "             \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define FA_WG_OPS_N256                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),          \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),         \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),         \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),         \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

#define FA_WGMMA_SS_N256(TYPE)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                    \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N256 \
      "}, %128, %129, p, 1, 1, %132, %131;\n}\n"                                       \
      : FA_WG_OPS_N256                                                                 \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA))

#define FA_WGMMA_RS_N256(TYPE)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                    \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N256 \
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"                         \
      : FA_WG_OPS_N256                                                                 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

// m64n80k16 (S = Q K^T only: FlashAttention-3's K/V tile of 80 keys): 40 accumulators per thread.
#define FA_WG_ACC_N80                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
  "%38, %39"

#define FA_WG_OPS_N80                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])

#define FA_WGMMA_SS_N80(TYPE)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n80k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N80 \
      "}, %40, %41, p, 1, 1, %44, %43;\n}\n"                                         \
      : FA_WG_OPS_N80                                                                \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA))

// m64n32k16 (07/bwd_t53's S^T = K Q^T and dP^T = V dO^T at D 256, one warpgroup's 32 of the
// tile's 64 queries): 16 accumulators per thread.
#define FA_WG_ACC_N32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"

#define FA_WG_OPS_N32                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15])

#define FA_WGMMA_SS_N32(TYPE)                                                        \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N32 \
      "}, %16, %17, p, 1, 1, %20, %19;\n}\n"                                         \
      : FA_WG_OPS_N32                                                                \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA))

// m64n176k16 (S = Q K^T only: FlashAttention-3's K/V tile of 176 keys): 88 accumulators per thread.
#define FA_WG_ACC_N176                                                                         \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87"

#define FA_WG_OPS_N176                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87])

#define FA_WGMMA_SS_N176(TYPE)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n176k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N176 \
      "}, %88, %89, p, 1, 1, %92, %91;\n}\n"                                           \
      : FA_WG_OPS_N176                                                                 \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA))

// m64n112k16 (S = Q K^T only: FlashAttention-3's K/V tile of 112 keys at D 192): 56 accumulators
// per thread, N 80's 40 and 16 more.
#define FA_WG_ACC_N112 \
  FA_WG_ACC_N80 ", %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55"

#define FA_WG_OPS_N112                                                                           \
  FA_WG_OPS_N80, "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),   \
      "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), \
      "+f"(d[53]), "+f"(d[54]), "+f"(d[55])

#define FA_WGMMA_SS_N112(TYPE)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %58, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n112k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N112 \
      "}, %56, %57, p, 1, 1, %60, %59;\n}\n"                                           \
      : FA_WG_OPS_N112                                                                 \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA))

// m64n192k16 (O += P V at D 192, A from registers): 96 accumulators per thread, N 128's 64 and 32
// more.
#define FA_WG_ACC_N192                                                                      \
  FA_WG_ACC_N128                                                                            \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, " \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"

#define FA_WG_OPS_N192                                                                           \
  FA_WG_OPS_N128, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),  \
      "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), \
      "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
      "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), \
      "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])

#define FA_WGMMA_RS_N192(TYPE)                                                         \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"                                    \
      "wgmma.mma_async.sync.aligned.m64n192k16.f32." TYPE "." TYPE " {" FA_WG_ACC_N192 \
      "}, {%96, %97, %98, %99}, %100, p, 1, 1, %102;\n}\n"                             \
      : FA_WG_OPS_N192                                                                 \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

template <int N, class T, int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         int accumulate) {
  static_assert(N == 32 || N == 64 || N == 80 || N == 112 || N == 128 || N == 176 || N == 256,
                "wgmma_ss: N = 32, 64, 80, 112, 128, 176 or 256");
#if FA_SM90A
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 32) {
    if constexpr (kBf16)
      FA_WGMMA_SS_N32("bf16");
    else
      FA_WGMMA_SS_N32("f16");
  } else if constexpr (N == 64) {
    if constexpr (kBf16)
      FA_WGMMA_SS_N64("bf16");
    else
      FA_WGMMA_SS_N64("f16");
  } else if constexpr (N == 80) {
    if constexpr (kBf16)
      FA_WGMMA_SS_N80("bf16");
    else
      FA_WGMMA_SS_N80("f16");
  } else if constexpr (N == 112) {
    if constexpr (kBf16)
      FA_WGMMA_SS_N112("bf16");
    else
      FA_WGMMA_SS_N112("f16");
  } else if constexpr (N == 128) {
    if constexpr (kBf16)
      FA_WGMMA_SS_N128("bf16");
    else
      FA_WGMMA_SS_N128("f16");
  } else if constexpr (N == 176) {
    if constexpr (kBf16)
      FA_WGMMA_SS_N176("bf16");
    else
      FA_WGMMA_SS_N176("f16");
  } else {
    if constexpr (kBf16)
      FA_WGMMA_SS_N256("bf16");
    else
      FA_WGMMA_SS_N256("f16");
  }
#else
  __trap();
#endif
}

template <int N, class T, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                         int accumulate) {
  static_assert(N == 64 || N == 96 || N == 128 || N == 192 || N == 256,
                "wgmma_rs: N = 64, 96, 128, 192 or 256");
#if FA_SM90A
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 64) {
    if constexpr (kBf16)
      FA_WGMMA_RS_N64("bf16");
    else
      FA_WGMMA_RS_N64("f16");
  } else if constexpr (N == 96) {
    if constexpr (kBf16)
      FA_WGMMA_RS_N96("bf16");
    else
      FA_WGMMA_RS_N96("f16");
  } else if constexpr (N == 128) {
    if constexpr (kBf16)
      FA_WGMMA_RS_N128("bf16");
    else
      FA_WGMMA_RS_N128("f16");
  } else if constexpr (N == 192) {
    if constexpr (kBf16)
      FA_WGMMA_RS_N192("bf16");
    else
      FA_WGMMA_RS_N192("f16");
  } else {
    if constexpr (kBf16)
      FA_WGMMA_RS_N256("bf16");
    else
      FA_WGMMA_RS_N256("f16");
  }
#else
  __trap();
#endif
}

#undef FA_WGMMA_SS_N32
#undef FA_WGMMA_SS_N64
#undef FA_WGMMA_SS_N80
#undef FA_WGMMA_SS_N112
#undef FA_WGMMA_SS_N176
#undef FA_WGMMA_SS_N128
#undef FA_WGMMA_SS_N256
#undef FA_WGMMA_RS_N64
#undef FA_WGMMA_RS_N96
#undef FA_WGMMA_RS_N128
#undef FA_WGMMA_RS_N192
#undef FA_WGMMA_RS_N256
#undef FA_WG_ACC_N32
#undef FA_WG_ACC_N64
#undef FA_WG_ACC_N96
#undef FA_WG_ACC_N80
#undef FA_WG_ACC_N112
#undef FA_WG_ACC_N192
#undef FA_WG_ACC_N176
#undef FA_WG_ACC_N128
#undef FA_WG_ACC_N256
#undef FA_WG_OPS_N32
#undef FA_WG_OPS_N64
#undef FA_WG_OPS_N96
#undef FA_WG_OPS_N80
#undef FA_WG_OPS_N112
#undef FA_WG_OPS_N192
#undef FA_WG_OPS_N176
#undef FA_WG_OPS_N128
#undef FA_WG_OPS_N256

// ---- TMA stores, bulk groups and the proxy fence (chapter 03's tuning steps t10 and t11, the FP8
// forwards of chapter 07) ---------------------------------------------------------------------------

// Copy the box at coordinates (c0 = column, c1 = row) of the tensor described by `tmap` from
// shared memory at `src` (a shared-window address, mma::smem_addr; laid out as the map's swizzle
// says) to global memory. Elements of the box outside the tensor are not written. Asynchronous:
// the store joins this thread's current bulk group (bulk_commit_group closes it), and `src` must
// not be written until bulk_wait_group_read says the group has been read.
__device__ __forceinline__ void tma_store_2d(const void* tmap, uint32_t src, int c0, int c1) {
#if FA_SM90A
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(tmap)),
      "r"(src), "r"(c0), "r"(c1)
      : "memory");
#else
  __trap();
#endif
}

// Close this thread's pending bulk stores into one bulk group.
__device__ __forceinline__ void bulk_commit_group() {
#if FA_SM90A
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most N of this thread's bulk groups are still *reading* their shared memory (their
// writes to global memory may still be in flight): then their source buffers may be reused.
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
#if FA_SM90A
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}

// Wait until at most N of this thread's bulk groups are still pending at all (read and written).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
#if FA_SM90A
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// This thread's generic-proxy writes to shared memory (ordinary st.shared) become visible to the
// async proxy (the TMA engine reading the buffer) only after this fence.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if FA_SM90A
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// The same for global memory: orders this thread's accesses through the generic proxy (ordinary
// loads and stores, flags and counters) with those through the async proxy (the TMA engine's
// stores and reduce-adds).
__device__ __forceinline__ void fence_proxy_async_global() {
#if FA_SM90A
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

// ---- Two instructions of the single-pass backward (07/bwd_v2_dq_reduce, bwd_v3_deterministic) ---
// dQ_tile[64 x 64] (+)= A[64 x 16] B[16 x 64], both from shared memory, A MN-major (imm-trans-a
// = 1: the tile holds A^T = dS^T, a row per k = key, 64 consecutive m = queries) and B MN-major
// (K: a row per k = key, 64 consecutive n = columns). The PTX ISA allows the transposed A only
// for 16-bit types read from shared memory, which both are here. Accumulator layout as
// wgmma_ss's.
template <class T>
__device__ __forceinline__ void wgmma_ss_n64_at(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                int accumulate) {
#if FA_SM90A
#define FA_WGMMA_N64_AT(TYPE)                                                                      \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                  \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "          \
      "%32, %33, p, 1, 1, 1, 1;\n}\n"                                                              \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                         \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate))
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    FA_WGMMA_N64_AT("bf16");
  else
    FA_WGMMA_N64_AT("f16");
#undef FA_WGMMA_N64_AT
#else
  __trap();
#endif
}

// dst[0 .. bytes/4) += src[0 .. bytes/4), fp32, element by element, atomically in L2: the TMA
// engine reads `bytes` (a multiple of 16) from shared memory at `src` (16-byte aligned) and
// reduce-adds them into global memory at `dst` (16-byte aligned). Asynchronous, like
// tma_store_2d: it joins this thread's bulk group (bulk_commit_group closes it), and
// `src` may be rewritten once bulk_wait_group_read says the group has been read.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
#if FA_SM90A
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   __cvta_generic_to_global(dst)),
               "r"(src), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// The tensor form of the reduce-add (07/bwd_v4_dq_tile_reduce): the TMA engine reads one box of
// `tmap` (an fp32 map; its swizzle says how the box lies in shared memory at `src`, which a
// 128-byte swizzle wants 1024-byte aligned) and adds it, element by element and atomically in L2,
// into the tensor at coordinates (c0, c1, c2), innermost first. Elements of the box outside the
// tensor are not written (rows past the end of a sequence cost nothing and reach no other head).
// Asynchronous like bulk_reduce_add_f32: it joins this thread's bulk group.
__device__ __forceinline__ void tma_reduce_add_3d(const void* tmap, uint32_t src, int c0, int c1,
                                                  int c2) {
#if FA_SM90A
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%2, %3, %4}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  __trap();
#endif
}

// dst[0] += a, dst[1] += b, atomically in L2, with nothing returned (07/bwd_t42_dq_red): the
// vector form of `red` (sm_90), one instruction for 8 contiguous bytes, `dst` 8-byte aligned.
// Relaxed, at GPU scope: the adds of one kernel are complete for the next kernel on its stream.
__device__ __forceinline__ void red_add_f32x2(float* dst, float a, float b) {
#if FA_SM90A
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(__cvta_generic_to_global(dst)),
               "f"(a), "f"(b)
               : "memory");
#else
  __trap();
#endif
}

}  // namespace fa::hopper
