// v8_whole_q_tile.cu: 06/v7_mask_once plus one idea: a warp computes S^T and dP^T for all 64
// queries of the tile at once (kChunk = 64), not in two halves of 32. bf16 / fp16 in, mma.sync
// m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by atomics, as in v3-v7).
//
// Why. With v5-v7 the dK/dV kernel issues as many instructions as FlashAttention-2's (2.12 G at
// D 128, N 8192) and is still 1.4x slower; what it does more of is ldmatrix (436 M against 302 M),
// and shared memory is its busiest unit (L1 throughput 75.6%, short-scoreboard stalls first;
// notes/06_flash_backward.md, section 5c). In S^T = K_j Q_i^T the A fragment (16 keys x 16
// columns of K_j) is loaded once per k-step and query chunk: with two chunks, twice. One chunk of
// 64 loads it once for four B fragments instead of two: per warp and Q tile, S^T and dP^T take
// 40 ldmatrix each instead of 48 (the dK, dV and dQ products are unchanged): 192 instead of 208.
// The price is registers: S^T and dP^T of 64 queries are 32 fp32 registers each, not 16. At
// D = 128, where dK and dV already hold 128, ptxas spills 24 bytes (v7: 4); measured on the H100
// it is faster all the same (v9's header, and notes/06_flash_backward.md, section 5c).
//
// The map, the tiles, the dQ split, shared memory, masking, the hoisted addresses and ex2.approx:
// as v7.
//
// The code: ch06_kv128_kernel.cuh, kv128_kernel<T, D, 8>; this rung's idea is kChunk there.
//
// Speed (H100, 2026-11-23, sixth session, call 4; as v4's header). D 128 full N 8192: v7 218.2,
// v8 226.5 (+3.8%); D 64: 199.4 -> 206.9 (+3.8%); causal D 128: 212.8 -> 218.4. In call 3 the
// same change at D 128 (as the throwaway 06/x_c64_all, on top of v9's dQ) was +4.2% over v9 with
// 32-query chunks there (233.9 against 224.4), which is why D 128 takes it too despite the
// spills.
#include "ch06_kv128.cuh"         // the tile, Params, the block's pieces, the host side
#include "ch06_kv128_kernel.cuh"  // kv128_kernel<T, D, kRung>: v5's kernel and the ideas after it
#include "registry.h"

namespace {

struct V8 : KvRung {
  static constexpr const char* kName = "06/v8_whole_q_tile";
  template <class T, int D>
  static auto kernel() {
    return kv128_kernel<T, D, 8>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {V8::kName,
             kv128_backward<V8>,
             "v7 + S^T and dP^T for the whole 64-query tile at once (one K / V fragment load per "
             "k-step, not two)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
