// t14_d256_tiles.cu: 06/v5_warp_tiles's kernel at D 256, with one idea: a block owns 64 keys
// instead of 128, so that its dK and dV fit in registers. bf16 / fp16 in, mma.sync m16n8k16, fp32
// accumulate. Not bitwise deterministic (dQ by atomics, as in v3 to v5).
//
// Why. v5 keeps dK and dV of its 128 keys in registers for the whole walk over the queries: 2 x
// 128 keys x D fp32 values over 256 threads, 128 registers each at D 128. At D 256 that is 256
// registers for the accumulators alone, and the tiles (K, V, Q x2, dO x2 of 128 or 64 rows of
// 512 bytes) would take 256 KiB of shared memory, past the 227 KiB a block may have. So D 256
// went to 06/v3_atomic_dq (64 keys, 4 warps, each warp 16 keys and all 256 columns, P and dS in
// registers), at 99-116 TFLOP/s on the H200 where FlashAttention-2 runs 145-255 (0.43-0.68x).
// FlashAttention-2 itself runs D 256 with 64 keys and 8 warps (its flash_bwd_launch_template.h,
// run_mha_bwd_hdim256: a 64 x 64 tile, 8 warps, for GPUs with at least 176 KiB of shared memory
// a block).
//
// What changed against v5 at D 128 (the kernel is t12's, warp_tiles_kernel in
// ch06_warp_tiles_kernel.cuh, which is v5's at D 128; this file gives it D256Tile):
//   * Bc = 64 keys a block, Br = 64 queries a tile, 8 warps.
//   * S and dP: warp (wm, wn) = (warp / 4, warp % 4) computes 32 queries x 16 keys (v5: 32 x 32):
//     per k16 step 2 Q (or dO) fragments and 1 K (or V) fragment for 4 MMAs.
//   * dK and dV: warp (wk, wd) = (warp % 2, warp / 2) owns 32 keys x 64 columns (v5: 32 x D / 2):
//     2 x 2 x 8 x 4 = 128 registers, v5's count at D 128.
//   * dQ += dS K: warp (wq, wc) = (wm, wn), 32 queries x 64 columns (v5: 32 x D / 4), k over the
//     64 keys.
//   * P and dS: 64 queries x 64 keys, rows of 72 (the padding of v5's 136-element rows).
//   * The rows of K, V, Q and dO are D elements apart, not in v4's places of D + 8 (which would
//     leave 5 KiB of the 227 a block may have).
//   Shared memory: K, V (32 KiB each), Q and dO double-buffered (128 KiB), L and D (1 KiB), P
//   and dS (18 KiB): 211 KiB, one block of 8 warps per SM, as v5.
// The price: each Q tile's dQ is added once per 64 keys instead of once per 128, so the dQ
// atomics per FLOP double against v5 at D 128 (FlashAttention-2 pays the same: its D 256 tile is
// 64 keys too).
//
// ptxas (CUDA 13.0, sm_90): 254 registers, no spills.
//
// Speed (H200, 2026-12-04, bf16, B = 16384/N, H = 2048/D; medians of three alternating rounds with
// PyTorch SDPA in each, notes/measured/h200-2026-12-04/rounds_bwd_d256_t14.md)
//   1.48-1.87x v3 at every D 256 shape; N 8192 207.7 TFLOP/s (v3 115.2). Against
//   FlashAttention-2: 1.03 (N 512), 0.97 (1024), 0.88 (2048), 0.86 (4096), 0.84 (8192), 0.82
//   (16384); causal 1.15, 1.13, 0.97, 0.91, 0.90, 0.87.
// What is left (Nsight Compute, D 256 N 8192, ncu_bwd_D256_*.txt): the same ldmatrix count
// (352.3 M), copies and L2 reduction sectors of the dQ atomics (805.3 M) as FlashAttention-2's
// kernel, but 17.4 ms against 13.8 and the tensor pipe busy 33% against 42%. 31% of the warp-stall
// samples fall in the 32 float2 atomics a warp issues per Q tile: the load/store queue is full (LG
// stalls), and ptxas, at 254 registers, rebuilds the atomics' address register between groups of
// eight and waits for the previous eight to read it (long-scoreboard stalls, 324 K per warp against
// 193 K). Without dQ at all (a wrong result, timed as a bound) the kernel runs 347 TFLOP/s at N
// 8192. Tried and dropped (the tuning README's rows): one address for a warp's 32 atomics, dQ in
// two halves of 32 columns, both together (the best: 1.015-1.025x t14, inside the 2% that one
// run's spread allows), and dQ with its atomics before the dK product (0.97-1.00x).

#include <string>

#include "ch06_warp_tiles_kernel.cuh"  // warp_tiles_kernel<T, D, Steps, Tile>: t12's kernel
#include "registry.h"

namespace {

constexpr int kD256 = 256;  // the one head dim of this step

// This step's tile (the header's list): 64 keys a block, rows of D elements, P and dS rows of
// 64 + kPad, dK and dV in warp tiles of 32 keys x D / 4 (2 warps along the keys).
struct D256Tile {
  static constexpr int kKeys = 64;
  static constexpr int kLd = kD256;
  static constexpr int kLdPT = kKeys + kPad;
  static constexpr int kKeyShift = 1;
  static constexpr int kQdoBuffers = 2;
};
static_assert(warp_tiles_smem_bytes<kD256, D256Tile>() == 216064, "211 KiB");

// t12's switch on: v5's kernel has it.
struct StepsT14 : WarpTilesSteps {
  static constexpr bool kOneBarrierFewer = true;
};

// The step, as ch06_kv128.cuh's host side asks for it.
struct T14 {
  static constexpr const char* kName = "06/t14_d256_tiles";
  template <class T, int D>
  static auto kernel() {
    return warp_tiles_kernel<T, D, StepsT14, D256Tile>;
  }
  template <int D>
  static constexpr int smem_bytes() {
    return warp_tiles_smem_bytes<D, D256Tile>();
  }
  template <int D>
  static constexpr int keys() {
    return D256Tile::kKeys;
  }
};

void t14_backward(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(T14::kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(a.shape.head_dim != kD256,
                    std::string(T14::kName) +
                        " is instantiated for head_dim 256 only (06/v5_warp_tiles has 64 and 128)");
  run_head_dim<T14, kD256>(a, stream);  // checks the shared memory, the D preprocess, the launches
}

}  // namespace

FA_REGISTER(AttentionBwdKernel, {T14::kName,
                                 t14_backward,
                                 "v5's kernel at D 256: 64 keys a block, so that dK and dV fit "
                                 "in registers (FlashAttention-2's D 256 tile)",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {256},
                                 80,
                                 false});
FA_REGISTER_SMEM(T14::kName, [](int d) {
  return fa::smem_at<256>(d, [](auto D) { return T14::smem_bytes<decltype(D)::value>(); });
});
