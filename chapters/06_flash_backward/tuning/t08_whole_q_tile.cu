// t08_whole_q_tile.cu: 06/t07_mask_once plus one idea: a warp computes S^T and dP^T for all 64
// queries of the tile at once (kChunk = 64), not in two halves of 32. bf16 / fp16 in, mma.sync
// m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by atomics, as in v3, t04-t07).
//
// Why. With t05-t07 the dK/dV kernel issues as many instructions as FlashAttention-2's (2.12 G at
// D 128, N 8192) and is still 1.4x slower; what it does more of is ldmatrix (436 M against 302 M),
// and shared memory is its busiest unit (L1 throughput 75.6%, short-scoreboard stalls first;
// notes/06_flash_backward.md, section 5c). In S^T = K_j Q_i^T the A fragment (16 keys x 16
// columns of K_j) is loaded once per k-step and query chunk: with two chunks, twice. One chunk of
// 64 loads it once for four B fragments instead of two: per warp and Q tile, S^T and dP^T take
// 40 ldmatrix each instead of 48 (the dK, dV and dQ products are unchanged): 192 instead of 208.
// The price is registers: S^T and dP^T of 64 queries are 32 fp32 registers each, not 16. At
// D = 128, where dK and dV already hold 128, ptxas spills 24 bytes (t07: 4); measured on the H100
// it is faster all the same (t09's header, and notes/06_flash_backward.md, section 5c).
//
// The map, the tiles, the dQ split, shared memory, masking, the hoisted addresses and ex2.approx:
// as t07.
//
// The code: ch06_kv128_kernel.cuh, kv128_kernel<T, D, StepsT08>; this step's switch is
// kWholeQTile (kChunk there).
//
// Measured (H100 80GB HBM3, 2026-11-23, notes/measured/h100-2026-11-23f/bench_final.log): D 64:
// 199.4 -> 206.9 (+3.8%); causal D 128: 212.8 -> 218.4. The same change at D 128, tried first on
// top of t09's dQ, was +4.2% over 32-query chunks there (233.9 against 224.4,
// bench_c32.log in that folder), which is why D 128 takes it too despite the spills.
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 226.5 TFLOP/s, t07 218.2.
#include "ch06_kv128.cuh"         // the tile, Params, the block's pieces, the host side
#include "ch06_kv128_kernel.cuh"  // kv128_kernel<T, D, Steps>: t05's kernel and the switches after it
#include "registry.h"

namespace {

// This step's switch on, and those of the steps before it.
struct StepsT08 : KvSteps {
  static constexpr bool kEx2Approx = true, kMaskOnce = true, kWholeQTile = true;
};

struct T08 : KvStep {
  static constexpr const char* kName = "06/t08_whole_q_tile";
  template <class T, int D>
  static auto kernel() {
    return kv128_kernel<T, D, StepsT08>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel, {T08::kName,
                                 kv128_backward<T08>,
                                 "t07 + S^T and dP^T for the whole 64-query tile at once (one K / "
                                 "V fragment load per k-step, not two)",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {32, 64, 96, 128},
                                 80,
                                 false});
