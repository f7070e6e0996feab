// t09_dq_two_mtiles.cu: 06/t08_whole_q_tile plus one idea: at D = 128 a warp's piece of
// dQ_i = dS K_j is 32 query rows (two m16 tiles) by 32 columns, not 16 rows by 64, so every K
// fragment loaded by ldmatrix feeds both m-tiles, as chapter 05's forward does with two m-tiles
// per warp. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by
// atomics, as in v3, t04-t08).
//
// Why. Shared memory is the busy unit (t08's header): at D = 128 each warp's dQ product loaded,
// per k-step of 16 keys and 32 columns, one A fragment (dS^T) and two B fragments (K) for four
// MMAs: per warp and Q tile 2 x 8 x 3 = 48 ldmatrix. As 2 (rows) x 4 (columns) warp tiles of 32 x
// 32: two A and two B fragments for eight MMAs, 8 x 4 = 32 ldmatrix. The MMAs and the atomics
// are the same in number; the fp32 accumulator is 32 registers instead of 16, live only in the
// dQ phase, where S^T and dP^T are dead.
// Other head dims keep t08's split: at D = 64 a 32 x 16 warp tile would load as many fragments
// as 16 x 32 (one B for two A), and D = 32 and 96 do not split into four 16-column quarters.
//
// The map, the tiles, shared memory, masking, the hoisted addresses, ex2.approx and the chunks
// of S^T: as t08.
//
// The code: ch06_kv128_kernel.cuh, kv128_kernel<T, D, StepsT09>; this step's switch is
// kDqTwoMtiles (kDqRowTiles there, and the m-tile loops of the dQ product).
//
// Measured (H100 80GB HBM3, 2026-11-23, notes/measured/h100-2026-11-23f/bench_final.log): causal
// N 16384: 232.4 -> 245.0; D 64 is t08's code (205.7 against 206.9: run-to-run spread). Against
// PyTorch's FlashAttention-2 in the same run (sdpa_final.log): D 128 full 0.93 / 0.88 / 0.83 /
// 0.78 / 0.77 at N 1024 / 2048 / 4096 / 8192 / 16384, causal 0.98 / 0.95 / 0.86 / 0.83 / 0.80.
// What is left: the same instruction count as FA2's kernel but 1.33x its ldmatrix (402.7 M
// against 302.0 M with this step's dQ and 32-query chunks, ncu_bwd_v9_chunk32.txt) and 3x
// its barrier stalls; FA2 gives each warp 32 x 32 tiles of S and dP and 32 keys x 64 columns of
// dK and dV, with P and dS through shared memory (notes/06_flash_backward.md, section 5c). The
// next step, swizzled tiles, is the main path's 06/v4_bc128_tuned (v4_bc128_tuned.cu).
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 232.5 TFLOP/s, t08 226.5.
#include "ch06_kv128.cuh"         // the tile, Params, the block's pieces, the host side
#include "ch06_kv128_kernel.cuh"  // kv128_kernel<T, D, Steps>: t05's kernel and the switches after it
#include "registry.h"

namespace {

// This step's switch on, and those of the steps before it.
struct StepsT09 : KvSteps {
  static constexpr bool kEx2Approx = true, kMaskOnce = true, kWholeQTile = true,
                        kDqTwoMtiles = true;
};

struct T09 : KvStep {
  static constexpr const char* kName = "06/t09_dq_two_mtiles";
  template <class T, int D>
  static auto kernel() {
    return kv128_kernel<T, D, StepsT09>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {T09::kName,
             kv128_backward<T09>,
             "t08 + dQ in 32 x 32 warp tiles at D = 128 (each K fragment feeds two m-tiles)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
