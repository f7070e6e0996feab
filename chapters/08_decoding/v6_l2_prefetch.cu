// 08/v6_l2_prefetch: 08/v5_block_stream with a prefetch-size hint on its copies. One idea: tell
// L2 to fetch whole 128-byte lines from DRAM, since every byte of them will be read anyway.
//
// What changed. The 16-byte cp.async of a full step carries .L2::128B (PTX ISA, cp.async:
// ".level::prefetch_size"), through fa::mma::cp_async_16_l2_128. A hint: the copy, and so the
// results, are v5's. The bounded last step keeps v5's loader.
//
// Speed (NVIDIA H100 80GB HBM3, 2026-11-23, fifth session, call 6 at commit 19f12a2;
// notes/measured/h100-2026-11-23e/call6_decode.log, SDPA in the same run, copy ceiling 2856 GB/s).
// Grouped shape: 2868 GB/s (100.4% of copy; v5 2841), FlashAttention-2 3016, cuDNN 3004: 0.95x
// FA2, the best of ours and still short of it. B 1, H 16, seq_k 131072: 2889 (v5 2825; FA2 2885,
// v2 2905); B 8, H 32: 2981 (v5 2919; FA2 2788, v2 3005). Call 4 measured the hint on the
// throwaway forms of v4 and v5 as well: +2.2% and +1.3% on the grouped shape (.L2::256B: the same
// as 128B). Nsight Compute (call6_ncu_v6.txt): 382.5 us, 2.81 TB/s of DRAM, 206 registers, 69.6 KB
// of shared memory, 256 blocks, 11.9% achieved occupancy; DRAM read exactly the bytes of K and V
// (33.56 M sectors in call 4). What still separates it from FlashAttention-2's 3.02 TB/s is in
// notes/08_decoding.md (section "Five percent short").
#include <cuda_runtime.h>

#include "ch08_block_stream.cuh"  // the kernel (v5's, with the copy hint as a template flag)
#include "ch08_mma_split.cuh"     // mma_split_forward: the checks and the dtype / head-dim dispatch
#include "registry.h"

namespace {

struct Rung : BlockStream</*kL2Hint=*/true> {
  static constexpr const char* kName = "08/v6_l2_prefetch";
};

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {"08/v6_l2_prefetch",
             mma_split_forward<Rung>,
             "v5 with the .L2::128B prefetch-size hint on every cp.async of a full step",
             {DType::F16, DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true});
