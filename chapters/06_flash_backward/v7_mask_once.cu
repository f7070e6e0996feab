// v7_mask_once.cu: 06/v6_ex2_approx plus one idea: the test "does this tile need a mask?" is made
// once per 32-query chunk of P^T, not once per element. bf16 / fp16 in, mma.sync m16n8k16, fp32
// accumulate. Not bitwise deterministic (dQ by atomics, as in v3-v6).
//
// Why. v3-v6 write the mask inside the loop over the chunk's 16 elements a thread holds:
//   pv = exp(...); if (need_mask) { key, query; if (masked) pv = 0; }
// need_mask is the same for the whole tile, but the compiler keeps the branch where it is: per
// element a BRA, and a BSSY / BSYNC pair around the masked part (v4 in Nsight Compute, D 128,
// N 8192: BRA 55 M, BSSY 23 M, BSYNC 23 M, for 67 M exponentials). Here the two cases are two
// loops: tiles that need no mask (all of a non-causal sequence but its last key tile, and every
// causal tile off the diagonal) run the exponentials alone; the others compute the keep test
// next to each exponential.
//
// The map, the tiles, the dQ split, shared memory, the hoisted addresses and ex2.approx: as v6.
//
// The code: ch06_kv128_kernel.cuh, kv128_kernel<T, D, 7>; this rung's idea is the branch marked
// `kRung >= 7` there.
//
// Speed (H100, 2026-11-23, sixth session, call 4; as v4's header). D 64 full N 8192: v6 196.5,
// v7 199.4 (+1.5%); D 128 full: 219.5, 218.2 (-0.6%; call 2: 222.6, 220.5). Nsight Compute at
// D 128 (call2_ncu_bwd_v7.txt): 2.12 G instructions, as many as FlashAttention-2's kernel, and
// 14.57 ms against its 10.45. BRA 55 M -> 41 M and BSSY / BSYNC 23 M -> 17 M each: the other
// branches of the loop (rows past seq_q, the next tile) stay. At D 128 the duplicated loop costs
// ptxas 4 bytes of spills; the rung is kept because it helps D 64 and its idea is the one the
// next rungs build on, a loop that does only what its tile needs.
#include "ch06_kv128.cuh"         // the tile, Params, the block's pieces, the host side
#include "ch06_kv128_kernel.cuh"  // kv128_kernel<T, D, kRung>: v5's kernel and the ideas after it
#include "registry.h"

namespace {

struct V7 : KvRung {
  static constexpr const char* kName = "06/v7_mask_once";
  template <class T, int D>
  static auto kernel() {
    return kv128_kernel<T, D, 7>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel, {V7::kName,
                                 kv128_backward<V7>,
                                 "v6 + the mask test once per chunk of P^T, not once per element",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {32, 64, 96, 128},
                                 80,
                                 false});
