// t07_mask_once.cu: 06/t06_ex2_approx plus one idea: the test "does this tile need a mask?" is
// made once per 32-query chunk of P^T, not once per element. bf16 / fp16 in, mma.sync m16n8k16,
// fp32 accumulate. Not bitwise deterministic (dQ by atomics, as in v3, t04-t06).
//
// Why. v3 to t06 write the mask inside the loop over the chunk's 16 elements a thread holds:
//   pv = exp(...); if (need_mask) { key, query; if (masked) pv = 0; }
// need_mask is the same for the whole tile, but the compiler keeps the branch where it is: per
// element a BRA, and a BSSY / BSYNC pair around the masked part (t04 in Nsight Compute, D 128,
// N 8192: BRA 55 M, BSSY 23 M, BSYNC 23 M, for 67 M exponentials). Here the two cases are two
// loops: tiles that need no mask (all of a non-causal sequence but its last key tile, and every
// causal tile off the diagonal) run the exponentials alone; the others compute the keep test
// next to each exponential.
//
// The map, the tiles, the dQ split, shared memory, the hoisted addresses and ex2.approx: as t06.
//
// The code: ch06_kv128_kernel.cuh, kv128_kernel<T, D, StepsT07>; this step's switch is
// kMaskOnce.
//
// Measured (H100 80GB HBM3, 2026-11-23, notes/measured/h100-2026-11-23f/): D 64 full N 8192: t06
// 196.5, t07 199.4 (+1.5%); D 128 full: 219.5, 218.2 (-0.6%; in an earlier run of the same day
// 222.6, 220.5) (bench_final.log). Nsight Compute at D 128 (ncu_bwd_v7.txt): 2.12 G
// instructions, as many as FlashAttention-2's kernel, and 14.57 ms against its 10.45. BRA 55 M ->
// 41 M and BSSY / BSYNC 23 M -> 17 M each: the other branches of the loop (rows past seq_q, the
// next tile) stay. At D 128 the duplicated loop costs ptxas 4 bytes of spills; the step is kept
// because it helps D 64 and its idea is the one the next steps build on, a loop that does only
// what its tile needs.
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 218.2 TFLOP/s, t06 219.5.
#include "ch06_kv128.cuh"         // the tile, Params, the block's pieces, the host side
#include "ch06_kv128_kernel.cuh"  // kv128_kernel<T, D, Steps>: t05's kernel and the switches after it
#include "registry.h"

namespace {

// This step's switch on, and the one before it.
struct StepsT07 : KvSteps {
  static constexpr bool kEx2Approx = true, kMaskOnce = true;
};

struct T07 : KvStep {
  static constexpr const char* kName = "06/t07_mask_once";
  template <class T, int D>
  static auto kernel() {
    return kv128_kernel<T, D, StepsT07>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel, {T07::kName,
                                 kv128_backward<T07>,
                                 "t06 + the mask test once per chunk of P^T, not once per element",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {32, 64, 96, 128},
                                 80,
                                 false});
