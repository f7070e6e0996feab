// v10_swizzled_smem.cu: 06/v9_dq_two_mtiles plus one idea: the K, V, Q and dO tiles in shared
// memory hold swizzled rows instead of padded ones (at D = 64 and 128), so that every cp.async
// fills whole 128-byte lines and asks L2 for each 32-byte sector once. bf16 / fp16 in, mma.sync
// m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by atomics, as in v3-v9).
//
// Why. The padded rows (D + 8 elements: the eight rows of an ldmatrix 8x8 matrix in eight bank
// groups) start 16 bytes further modulo 128 from one row to the next, so a warp's cp.async of
// whole rows straddles 128-byte lines of shared memory. Nsight Compute's source page of 06/v7's
// dK/dV kernel (H100, 2026-11-23, D 128 N 8192; notes/measured/h100-2026-11-23f/
// call2_sass_v7.csv.gz, summed by bench/sass_memory.py) counts the copies (LDGSTS) at 178.9 M
// shared-memory wavefronts for an ideal 68.2 M and 408.9 M L2 sectors for an ideal 272.6 M;
// FlashAttention-2's kernel, copying into swizzled tiles, is at the ideal counts. The ldmatrix
// reads are at their ideal in both. Shared memory is this kernel's busy unit (v8's header), and
// the excess is 110 M wavefronts beside ldmatrix's 1.4-1.7 G. In chapter 08 the same change made
// the decode split kernel 6% faster (08/v7_swizzled_ring).
//
// What changed (kSwz in ch06_kv128_kernel.cuh): 16-byte chunk c of row r of a tile is stored at
// chunk c ^ (r % 8) of its 128-byte group (fa::tiles::swizzled_offset), rows D elements apart;
// each tile keeps v9's place and size, so the tiles stay 128-byte aligned. The copies (TileCopy,
// load_tile_async) write that layout. Every ldmatrix lane reads rows that are lane % 8 modulo 8,
// so its swizzled address is v9's with bits 4-6 flipped by one lane constant; each base address is
// a fa::tiles::LaneAddr (four bases instead of one, so that every read stays a base plus a
// compile-time constant). dS^T, written by plain stores and already at the ideal count, keeps its
// padded rows. D = 32 and 96 run v9's code: their rows do not fill whole 128-byte groups.
// ptxas (CUDA 13.0, sm_90) at D 128: 255 registers, 8 bytes of spills (v9: 28).
//
// Speed (H100 80GB HBM3, 2026-11-25, bf16, B = 16384/N, H = 2048/D, PyTorch SDPA in the same call:
// notes/measured/h100-2026-11-25/call2_v10_sdpa.log, call2_v10_bench.log)
//   1.01-1.03x v9 (measured in the same call) at every D 64 and 128 shape from N 2048 on,
//   0.98-1.01x below;
//   D 128 N 8192: 237.4 TFLOP/s (v9 233.8; FlashAttention-2 292.3, 0.81x); causal 234.3 (v9
//   229.2; FA2 269.6, 0.87x). Over N 1024 .. 16384: 0.75x (D 64, N 16384) to 1.04x FA2.
//   Nsight Compute (D 128 N 8192, call2_ncu_bwd_*.txt, call2_ncu_bwd_opcodes.txt): the copies at
//   their ideal counts (68.16 M wavefronts, 272.63 M L2 sectors, as FA2's); 13.48 ms against FA2's
//   10.53; tensor pipe busy 37.9% (FA2 49.9%). The gain is small because the copies were a small
//   share of the shared-memory traffic: ldmatrix's 1.48 G wavefronts are unchanged.
//   A first form XORed each ldmatrix address (one LOP3 and an IADD per read): 2.67 G instructions
//   against this form's 2.16 G, and the same speed (call 1: 239.4 at D 128 N 8192, v9 235.4).
//   Few instructions issue in this kernel (20-25% of cycles): it waits, on shared memory.
#include "ch06_kv128.cuh"         // the tile, Params, the block's pieces, the host side
#include "ch06_kv128_kernel.cuh"  // kv128_kernel<T, D, kRung>: v5's kernel and the ideas after it
#include "registry.h"

namespace {

struct V10 : KvRung {
  static constexpr const char* kName = "06/v10_swizzled_smem";
  template <class T, int D>
  static auto kernel() {
    return kv128_kernel<T, D, 10>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {V10::kName,
             kv128_backward<V10>,
             "v9 with Q, dO, K and V swizzled instead of padded in shared memory (D 64, 128)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
