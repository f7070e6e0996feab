// t18_d256_one_buffer.cu: 06/t14_d256_tiles with one Q buffer and one dO buffer instead of two
// each, so that the D 256 backward fits a block of an A100 (163 KiB of shared memory). bf16 /
// fp16 in, mma.sync m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by atomics, as t14).
//
// Why. t14 needs 211 KiB a block: an H100 or H200 has it (227 KiB), an A100 does not, and no
// other mma.sync backward at D 256 fits one either (06/v2 needs 199 KiB, v3 208). On an A100 the
// backward at D 256 was refused. FlashAttention-2 runs the same 64 x 64 tile there with Q
// single-buffered: "A100, we don't do double buffering to save smem"
// (csrc/flash_attn/src/flash_bwd_launch_template.h, run_mha_bwd_hdim256, for blocks with at
// least 144 KiB); its dO has one buffer at every head dim.
//
// What changed against t14 (one member of the tile, and the switch it turns in t12's kernel,
// ch06_warp_tiles_kernel.cuh):
//   * Q_i and dO_i have one buffer each: K, V (32 KiB each), Q, dO (32 KiB each), L and D (1
//     KiB), P and dS (18 KiB): 147 KiB.
//   * The copies of Q_{i+1} and dO_{i+1} can no longer start at the top of tile i, under all of
//     its products: they would overwrite the tile being read. They start after dK += dS^T Q, the
//     last product that reads Q and dO, behind one more barrier, and run under dQ = dS K and its
//     atomics. L and D keep their two buffers (512 bytes each).
// On a GPU whose blocks have 211 KiB the dispatch keeps t14, whose copies run under the whole
// tile.
//
// Speed (H200, 2026-12-05, tuning/README.md): 0.99-1.01x t14, 1.61-1.79x v3, 0.84-0.96x
// FlashAttention-2; the dispatch runs it at D 256 where t14 does not fit (an A100).

#include <string>

#include "ch06_warp_tiles_kernel.cuh"  // warp_tiles_kernel<T, D, Steps, Tile>: t12's kernel
#include "registry.h"

namespace {

constexpr int kD256 = 256;  // the one head dim of this step

// t14's tile with one Q and one dO buffer.
struct D256OneBufferTile {
  static constexpr int kKeys = 64;
  static constexpr int kLd = kD256;
  static constexpr int kLdPT = kKeys + kPad;
  static constexpr int kKeyShift = 1;
  static constexpr int kQdoBuffers = 1;
};
static_assert(warp_tiles_smem_bytes<kD256, D256OneBufferTile>() == 150528, "147 KiB");
static_assert(warp_tiles_smem_bytes<kD256, D256OneBufferTile>() <= 163 * 1024,
              "fits an A100's 163 KiB a block");

// t12's switch on, as t14.
struct StepsT18 : WarpTilesSteps {
  static constexpr bool kOneBarrierFewer = true;
};

// The step, as ch06_kv128.cuh's host side asks for it.
struct T18 {
  static constexpr const char* kName = "06/t18_d256_one_buffer";
  template <class T, int D>
  static auto kernel() {
    return warp_tiles_kernel<T, D, StepsT18, D256OneBufferTile>;
  }
  template <int D>
  static constexpr int smem_bytes() {
    return warp_tiles_smem_bytes<D, D256OneBufferTile>();
  }
  template <int D>
  static constexpr int keys() {
    return D256OneBufferTile::kKeys;
  }
};

void t18_backward(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(T18::kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(a.shape.head_dim != kD256,
                    std::string(T18::kName) +
                        " is instantiated for head_dim 256 only (06/v5_warp_tiles has 64 and 128)");
  run_head_dim<T18, kD256>(a, stream);  // checks the shared memory, the D preprocess, the launches
}

}  // namespace

FA_REGISTER(AttentionBwdKernel, {T18::kName,
                                 t18_backward,
                                 "t14 with one Q and one dO buffer: 147 KiB a block, so that D "
                                 "256 fits an A100 (FlashAttention-2's A100 form)",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {256},
                                 80,
                                 false});
FA_REGISTER_SMEM(T18::kName, [](int d) {
  return fa::smem_at<256>(d, [](auto D) { return T18::smem_bytes<decltype(D)::value>(); });
});
