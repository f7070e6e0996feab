// t06_ex2_approx.cu: 06/t05_hoisted_addresses plus one idea: P = 2^x by the MUFU instruction
// alone (ex2.approx.ftz, ch06_kv128.cuh: ex2_ftz) instead of exp2f. bf16 / fp16 in, mma.sync
// m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by atomics, as in v3, t04, t05).
//
// Why. Built without --use_fast_math, exp2f is MUFU.EX2 inside a guard for results in the
// denormal range: FSETP, a predicated FMUL before and one after, four instructions where one
// would do. The backward computes one exponential per (query, key), as many as the forward: at
// D 128, N 8192, B 2, H 16 that is 67 M MUFU.EX2 warp instructions, and about 200 M guard
// instructions around them in t04's Nsight Compute counts (FSETP 68 M, FMUL 203 M). A
// probability below 2^-126 adds nothing visible to a sum of bf16 / fp16 products, so flushing it
// to zero costs no accuracy the tests can see, and chapter 05's forward kernels already do the
// same. exp2(-inf) is still +0: rows that do not exist or see no key (L' = +inf) and masked
// entries stay exactly 0.
//
// The map, the tiles, the dQ split, shared memory, masking and the hoisted addresses: as t05.
//
// The code: ch06_kv128_kernel.cuh, kv128_kernel<T, D, StepsT06>; this step's switch is
// kEx2Approx (exp2_p there).
//
// Measured (H100 80GB HBM3, 2026-11-23, notes/measured/h100-2026-11-23f/bench_final.log): causal
// D 128 N 8192 205.9 -> 214.6 (+4%); D 64 full: 191.2 -> 196.5 (+3%).
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 219.5 TFLOP/s, t05 214.4.
#include "ch06_kv128.cuh"         // the tile, Params, the block's pieces, the host side
#include "ch06_kv128_kernel.cuh"  // kv128_kernel<T, D, Steps>: t05's kernel and the switches after it
#include "registry.h"

namespace {

// This step's switch on.
struct StepsT06 : KvSteps {
  static constexpr bool kEx2Approx = true;
};

struct T06 : KvStep {
  static constexpr const char* kName = "06/t06_ex2_approx";
  template <class T, int D>
  static auto kernel() {
    return kv128_kernel<T, D, StepsT06>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {T06::kName,
             kv128_backward<T06>,
             "t05 + P = 2^x by ex2.approx.ftz (no denormal guard around MUFU.EX2)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
