// 08/t06_l2_prefetch: 08/v4_block_stream with a prefetch-size hint on its copies. One idea: tell
// L2 to fetch whole 128-byte lines from DRAM, since every byte of them will be read anyway. A
// tuning step (tuning/README.md); the main path's v5_swizzled_ring.cu keeps the hint.
//
// What changed. The 16-byte cp.async of a full step carries .L2::128B (PTX ISA, cp.async:
// ".level::prefetch_size"), through fa::mma::cp_async_16_l2_128. A hint: the copy, and so the
// results, are v4's. The bounded last step keeps v4's loader. Measured on the one-warp kernel too
// (t04 + hint): +2.2% on the grouped shape; .L2::256B gave the same as 128B.
//
// Nsight Compute (notes/measured/h100-2026-11-23e/ncu_v6.txt): 382.5 us, 2.81 TB/s of DRAM,
// 206 registers, 69.6 KB of shared memory, 256 blocks, 11.9% achieved occupancy; DRAM read exactly
// the bytes of K and V. It still asked L2 for 1.5x the sectors FlashAttention-2 asks for, which
// v5_swizzled_ring.cu traced to the padded rows and removed.
//
// Speed (H100 80GB HBM3, 2026-11-23): bf16 D 128, seq_q 1, B 8 H 32 H_kv 8 seq_k 32768: 2868 GB/s,
// 100.4% of copy; v4 2841, FlashAttention-2 3016
// (notes/measured/h100-2026-11-23e/decode_v5_v6_fold.log).
#include <cuda_runtime.h>

#include "ch08_tuning.cuh"  // v4's kernel (block_stream_kernel) with the Steps flags, the dispatch
#include "registry.h"

namespace {

// This step's flags (ch08_tuning.cuh): full-step copies with the .L2::128B prefetch hint.
struct Steps {
  static constexpr bool kL2Hint = true;
};

struct Rung : BlockStream<Steps> {
  static constexpr const char* kName = "08/t06_l2_prefetch";
};

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {"08/t06_l2_prefetch",
             mma_split_forward<Rung>,
             "08/v4 with the .L2::128B prefetch-size hint on every cp.async of a full step",
             {DType::F16, DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true});
