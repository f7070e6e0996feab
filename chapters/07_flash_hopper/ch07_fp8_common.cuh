// ch07_fp8_common.cuh: what the FP8 (e4m3) forwards of this chapter share (07/fp8_v1 to 07/fp8_v4
// and the tuning steps):
//   * the FP8 wgmma (m64n128k32, e4m3 x e4m3 -> fp32, both operands K-major in shared memory; the
//     same at n224 for a 224-key S tile, and at n128 with A, P, in registers);
//   * P (fp32 accumulators) quantised to e4m3 and stored in the 128-byte swizzled K-major layout
//     the P V wgmma reads, and the proxy fence that makes those stores visible to it;
//   * the kernel parameters (scales, lengths, the P scale) and the host's TMA map of a byte tensor.
// The accuracy rule these kernels are held to, and the layout of V they read, are common/fp8.h's.
// Included by the sm_90a files only, after hopper_attention.cuh.
#pragma once
#include <cuda.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>

#include "hopper_attention.cuh"
#include "fp8.h"
#include "gpu.h"
#include "registry.h"

namespace fa::ch07 {

struct Fp8Params {
  void* o;
  float* lse;
  const float* q_scale;  // [bh][q_blocks], one per 64 query rows
  const float* k_scale;  // [bh][kv_blocks]
  const float* v_scale;  // [bh][kv_blocks]
  int64_t seq_q, seq_k;
  int64_t q_blocks, kv_blocks;
  int num_q_tiles;
  bool causal;
  float scale_log2;   // softmax_scale * log2(e): its absolute value scales S, its sign negates it
  float p_scale;      // P is stored as e4m3(P~ * p_scale)
  float inv_p_scale;  // 1 / p_scale
};

// ---- FP8 wgmma ---------------------------------------------------------------------------------
// D[64 x 128] (+)= A[64 x 32] * B[32 x 128], e4m3 x e4m3 -> fp32, A and B K-major in shared memory
// (descriptors as hopper.cuh's smem_desc_sw128). PTX ISA, wgmma.mma_async: for .e4m3 / .e5m2 the
// instruction is `wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 d, a-desc, b-desc, scale-d,
// imm-scale-a, imm-scale-b;` with no transpose immediates. scale-d = 0 ignores the old D. The
// accumulator layout is the one documented in hopper.cuh (FA_WGMMA_M64N256K16): it does not depend
// on the input type.
__device__ __forceinline__ void wgmma_e4m3_m64n128k32(float (&d)[64], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
#if FA_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#else
  __trap();
#endif
}

// The same S product for a key tile of 224 (07/fp8_t40 on: FlashAttention-3's FP8 tile at D = 128):
// D[64 x 224] (+)= A[64 x 32] * B[32 x 224], 112 accumulators a thread in the layout above (n is any
// multiple of 8 up to 256 for e4m3, PTX ISA, wgmma.mma_async).
__device__ __forceinline__ void wgmma_e4m3_m64n224k32(float (&d)[112], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
#if FA_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %114, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n224k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
      "%111}, "
      "%112, %113, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#else
  __trap();
#endif
}

// The same with A in registers (07/fp8_t36 on): a[0..3] are this thread's 4 x 4 bytes of the
// 64 x 32 A tile. PTX ISA, "Register fragments and shared memory matrix layouts" (wgmma, 8-bit A,
// k32): thread t of the warpgroup, w = t / 32, g = (t % 32) / 4, q = t % 4, holds in a[0] row
// 16w + g, columns 4q .. 4q + 3 (byte i = column 4q + i); a[1] row + 8, the same columns; a[2] and
// a[3] the same rows at columns 16 + 4q .. 16 + 4q + 3.
__device__ __forceinline__ void wgmma_e4m3_rs_m64n128k32(float (&d)[64], const uint32_t (&a)[4],
                                                         uint64_t desc_b, int accumulate) {
#if FA_SM90A
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
#else
  __trap();
#endif
}

// P (fp32, this thread's accumulator fragment of the 64 x 128 tile) -> e4m3(P * p_scale), stored in
// the 128-byte swizzled K-major layout (row r at byte r * 128, its 16-byte chunk c at chunk
// c ^ (r % 8)), which desc_k_major reads. Element i of the fragment is row 16w + g + 8 ((i / 2) %
// 2), column 8 (i / 4) + 2q + i % 2 (hopper.cuh): each even/odd pair is two adjacent bytes.
template <int N>
__device__ __forceinline__ void store_p_e4m3(const float (&s)[N], unsigned char* sP, float p_scale,
                                             int t) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    const int r = 16 * w + g + 8 * ((i / 2) % 2);
    const int col = 8 * (i / 4) + 2 * q;  // byte column of the pair's first element
    const int chunk = (col / 16) ^ (r % 8);
    // x goes to the low byte, y to the high byte (cuda_fp8.h), i.e. column col, col + 1.
    const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(
        make_float2(s[i] * p_scale, s[i + 1] * p_scale), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<__nv_fp8x2_storage_t*>(sP + r * 128 + chunk * 16 + col % 16) = pair;
  }
}

// ---- Host side ---------------------------------------------------------------------------------
// A [bh][rows][cols] byte tensor whose rows are row_stride bytes apart, read in boxes of
// box_rows x 128 bytes of one head with the 128-byte swizzle, zeros where a box passes rows or
// cols. Q and K: cols = D (at D = 256 a row is two boxes wide: the kernel loads columns 0 and 128
// into two strips); V^T: rows = D, cols = seq_k (row_stride = fp8_vt_stride(seq_k)).
inline CUtensorMap make_tmap_u8(const std::string& name, const void* base, int64_t bh, int64_t rows,
                                int64_t cols, int64_t row_stride, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(bh)};
  const cuuint64_t strides[2] = {cuuint64_t(row_stride), cuuint64_t(rows) * cuuint64_t(row_stride)};
  const cuuint32_t box[3] = {128, cuuint32_t(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult rc = tensor_map_encode_fn()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), dims, strides, box,
      elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FA_REQUIRE(rc == CUDA_SUCCESS, name + ": cuTensorMapEncodeTiled failed with " + "CUresult " +
                                     std::to_string(int(rc)) + " (bh " + std::to_string(bh) +
                                     ", rows " + std::to_string(rows) + ", cols " +
                                     std::to_string(cols) + ")");
  return map;
}

// What every FP8 forward's launcher does before its launch: the checks (a clear UNSUPPORTED for
// what the kernel has no version of), the parameters and the TMA maps of Q and K ([bh][rows][D]
// bytes, boxes of br and bc rows) and of V^T ([bh][D][fp8_vt_stride(seq_k)], boxes of D x 128
// keys). br: query rows per block; q_block: rows per Q scale; bc: keys per tile (and per K and V
// scale); vt_p_order: V^T's keys are in P order (registry.h), so its map covers the whole row
// (fp8.h, fp8_vt_map_keys). Returns false when there is nothing to write (seq_q = 0 or no head).
struct Fp8Launch {
  CUtensorMap tm_q, tm_k, tm_vt;
  Fp8Params p;
  unsigned blocks;
};
inline bool prepare_fp8_launch(const AttentionFwdFp8Args& a, const std::string& name, int d, int br,
                               int q_block, int bc, Fp8Launch& out, bool vt_p_order = false) {
  const AttentionShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.seq_k >= 0 && s.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90, name +
                                             " uses sm_90a instructions (wgmma, TMA): it runs on "
                                             "compute capability 9.0 (H100, H200) only");
  FA_UNSUPPORTED_IF(s.head_dim != d, name + ": head_dim " + std::to_string(s.head_dim) +
                                         " not instantiated (" + std::to_string(d) + ")");
  FA_UNSUPPORTED_IF(s.is_gqa(), name + " takes heads_kv == heads only");
  FA_UNSUPPORTED_IF(s.has_window(), name + " takes causal or full attention only");
  FA_UNSUPPORTED_IF(a.block_rows_q != q_block || a.block_rows_kv != bc,
                    name + " reads one scale per " + std::to_string(q_block) +
                        " query rows and per " + std::to_string(bc) + " keys");
  FA_REQUIRE(a.p_scale > 0.0f, "p_scale > 0");
  if (s.seq_q == 0 || s.bh() == 0) return false;  // nothing to write
  FA_UNSUPPORTED_IF(
      !aligned(a.q, 16) || !aligned(a.k, 16) || !aligned(a.vt, 16) || !aligned(a.o, 4),
      name + ": TMA needs 16-byte aligned Q, K, V^T (and O 4-byte aligned)");
  FA_UNSUPPORTED_IF(s.seq_q >= INT_MAX - 512 || s.seq_k >= INT_MAX - 512 || s.bh() >= INT_MAX,
                    name + ": sizes past 2^31 - 513 do not fit TMA's int32 coordinates");
  const int64_t num_q_tiles = (s.seq_q + br - 1) / br;
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, name + ": more than 2^31-1 thread blocks");
  out.blocks = unsigned(blocks);
  // seq_k = 0: no tile is ever loaded; the maps describe one key so that they can be encoded.
  const int64_t nk = s.seq_k > 0 ? s.seq_k : 1;
  out.tm_q = make_tmap_u8(name, a.q, s.bh(), s.seq_q, d, d, br);
  out.tm_k = make_tmap_u8(name, a.k, s.bh(), nk, d, d, bc);
  out.tm_vt =
      make_tmap_u8(name, a.vt, s.bh(), d, fp8_vt_map_keys(nk, vt_p_order), fp8_vt_stride(nk), d);
  Fp8Params& p = out.p;
  p.o = a.o;
  p.lse = a.lse;
  p.q_scale = a.q_scale;
  p.k_scale = a.k_scale;
  p.v_scale = a.v_scale;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.q_blocks = ceil_div(s.seq_q, q_block);
  p.kv_blocks = ceil_div(s.seq_k, bc);
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.scale_log2 = s.softmax_scale() * 1.4426950408889634f;  // log2(e)
  p.p_scale = a.p_scale;
  p.inv_p_scale = 1.0f / a.p_scale;
  return true;
}

}  // namespace fa::ch07
