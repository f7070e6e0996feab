// t05_hoisted_addresses.cu: 06/t04_bc128_8warps plus one idea: every address the loop over Q
// tiles uses is computed once, before the loop, as a per-thread base; inside the loop an address
// is that base plus a compile-time constant. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate.
// Not bitwise deterministic (dQ by atomics, as in v3 and t04). Chapter 08's
// 08/t04_hoisted_addresses is the same idea in the decoding kernel.
//
// Why. Nsight Compute's per-instruction counts of t04 (H100, bf16, D 128, N 8192, B 2, H 16;
// notes/06_flash_backward.md, section 5c) put 2.89 G instructions on the dK/dV kernel against
// FlashAttention-2's 2.12 G for the same 671 M tensor-core MMAs. The difference is integer work:
// LEA 316 M (FA2: 135 M), IMAD 280 M (65 M), LOP3 97 M (0.7 M), ISETP 86 M (2.3 M), SHF 60 M
// (0.5 M). Two places make most of it:
//   - the prefetch of Q_{i+1} and dO_{i+1}: load_tile_async's strided loop starts at the thread
//     index, so the compiler cannot count its trips; it emits a generic loop with a remainder
//     and a 64-bit bounds test per 16-byte copy: about 320 instructions per warp and Q tile for 8
//     cp.async (a fifth of the kernel's instructions);
//   - the ldmatrix addresses: at 255 registers the compiler does not keep the 30-odd row
//     addresses of the loop alive, and recomputes each from the lane index (LOP3, IMAD, LEA)
//     before its ldmatrix, every Q tile.
// What changes:
//   - TileCopy: thread tid copies chunk tid % (D / 8) of rows tid / (D / 8) + kRowsPerPass * i;
//     between passes the source moves by kRowsPerPass * D elements and the destination by
//     kRowsPerPass * (D + 8): constants. A full tile is kPasses cp.async with no test; only the
//     last tile of a sequence that ends inside it takes load_tile_async, which zero-fills.
//   - Eight 32-bit shared addresses per thread (K and V as A, K as B of dQ, Q and dO as B in both
//     forms, dS^T as A of dQ, and the store of dS^T) hold the lane's part of every ldmatrix; a
//     fragment's address is one of them plus (row * pitch + column) * 2, known at compile time.
// The arithmetic, the tiles and the order of every MMA are t04's; only the addresses changed.
//
// The map, the dQ split over the eight warps, shared memory and masking: as t04 (see there).
//
// The code: ch06_kv128_kernel.cuh runs kv128_kernel<T, D, KvSteps>, every later switch off; this
// step's idea is its TileCopy and the address bases ("t05:" there).
//
// Measured (H100 80GB HBM3, 2026-11-23, notes/measured/h100-2026-11-23f/): D 64 full N 8192
// 191.2 TFLOP/s, t04 182.7 (+5%) (bench_final.log). Nsight Compute (ncu_bwd_v5.txt, D 128
// N 8192): 2.28 G instructions (t04: 2.89 G), LEA 316 M -> 59 M, IMAD 280 M -> 145 M; 14.98 ms
// (t04: 15.53). A fifth fewer instructions bought 4%: the kernel was not short of issue slots
// (issue active 24% -> 19%); its busiest unit is shared memory (L1 74%), as t08's header says.
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 214.4 TFLOP/s, t04 210.3.
#include "ch06_kv128.cuh"         // the tile, Params, the block's pieces, the host side
#include "ch06_kv128_kernel.cuh"  // kv128_kernel<T, D, Steps>: t05's kernel and the switches after it
#include "registry.h"

namespace {

struct T05 : KvStep {
  static constexpr const char* kName = "06/t05_hoisted_addresses";
  template <class T, int D>
  static auto kernel() {
    return kv128_kernel<T, D, KvSteps>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {T05::kName,
             kv128_backward<T05>,
             "t04 + every address of the loop computed once (copy plan, ldmatrix bases)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
