// 08/v7_swizzled_ring: 08/v6_l2_prefetch with K and V stored swizzled instead of padded in the
// ring. One idea: a shared-memory layout whose rows start at 128-byte boundaries, so that the
// cp.async of a whole row is one aligned piece of shared memory and of L2.
//
// Why. On the grouped shape (B 8, H 32, H_kv 8, seq_k 32768, bf16, D 128) v6 reads from DRAM
// exactly the bytes of K and V, as FlashAttention-2 does, on the same grid, yet asks L2 for 50.3 M
// sectors where FA2 asks for 33.6 M; the extra 16.7 M are hits, the same sectors asked twice
// (Nsight Compute, H100, 2026-11-23 and 2026-11-24). The source page of the profile names the
// instructions: each full-step cp.async (a warp copies two rows of 256 bytes) counts 24 L2 sectors
// where 16 would do, and 10.5 shared-memory wavefronts where 4 would (FA2's copies: 16 and 4). The
// padding is the cause: a padded row (D + 8 elements) starts 16 bytes further modulo 128 than the
// one before, so every odd row of a warp's pair straddles 128-byte lines of shared memory, and
// the copy is split into pieces that ask L2 for the same 32-byte sectors again.
//
// What changed. The ring's rows are D elements apart, unpadded, and the 16-byte chunk c of row r
// is stored at chunk c ^ (r % 8) of its 128-byte group (fa::tiles::swizzled_offset). A warp's copy
// writes two whole aligned rows; the eight rows that one ldmatrix 8x8 matrix reads (same logical
// chunk, r % 8 = 0 .. 7) still land in eight different 16-byte bank groups, as the padding made
// them. A lane's ldmatrix rows all have r % 8 = lane % 8, so it keeps v6's unswizzled addresses
// and compile-time offsets and flips bits 4-6 of each with one XOR (fa::tiles::swizzle_xor). The
// split's last step, which tests rows, uses the swizzled form of v6's loader. The ring is 64 KiB
// instead of 68 at D 128. Everything else is v6's: the flag kSwizzle in ch08_block_stream.cuh.
//
// Speed (NVIDIA H100 80GB HBM3, 2026-11-24, eighth session, call 2; bench/compare_decode.py,
// bf16 D 128, seq_q 1, copy ceiling 2860 GB/s, SDPA in the same run:
// notes/measured/h100-2026-11-24/call2_decode.log). Grouped shape: 3015 GB/s (105.4% of copy; v6
// 2881), FlashAttention-2 3012, cuDNN 3031: level with FA2. B 1, H 16, seq_k 131072: 3035 (v6
// 2905; FA2 2884, cuDNN 3025); B 8, H 32: 3134 (v6 2987; FA2 2784, cuDNN 3108). Nsight Compute on
// the grouped shape (call2_ncu_decode_v7.txt): 352.7 us (v6 375.3 in call 1, FA2 356.9 in call 2),
// 33.56 M L2 sector requests (v6 50.33 M), and the copies' shared-memory wavefronts and L2 sectors
// at the ideal counts (bench/sass_memory.py; notes/08_decoding.md, "The answer").
#include <cuda_runtime.h>

#include "ch08_block_stream.cuh"  // the kernel (v5's, with the copy hint and the swizzle as flags)
#include "ch08_mma_split.cuh"     // mma_split_forward: the checks and the dtype / head-dim dispatch
#include "registry.h"

namespace {

struct Rung : BlockStream</*kL2Hint=*/true, /*kSwizzle=*/true> {
  static constexpr const char* kName = "08/v7_swizzled_ring";
};

}  // namespace

FA_REGISTER(
    AttentionFwdKernel,
    {"08/v7_swizzled_ring",
     mma_split_forward<Rung>,
     "v6 with K and V swizzled instead of padded in shared memory: aligned whole-row copies",
     {DType::F16, DType::BF16},
     {64, 128},
     /*min_sm=*/80,
     /*gqa=*/true,
     /*decoding=*/true});
