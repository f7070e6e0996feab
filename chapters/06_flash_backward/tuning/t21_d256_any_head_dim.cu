// t21_d256_any_head_dim.cu: 06/t19_d256_rounded taking every head dim up to 256, multiples of 8 or
// not (139, 201, ...), computed at 256 as t19 computes the multiples of 8. One idea, the one t17
// adds to t16: rows that are not a whole number of 16-byte chunks, copied and stored through
// registers. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate. Not bitwise deterministic (dQ by
// atomics, as t19).
//
// Why. A backward at a head dim above 128 that is no multiple of 8 ran nowhere, on no GPU: t17
// (element copies) stops at 128, t19 and chapter 07's Hopper kernels (TMA: rows of whole 16-byte
// chunks) take multiples of 8 only. The forward of such a head dim runs (05/t15 takes every head
// dim up to 256); its backward was refused.
//
// What changed against t19 (the switch kAnyRowLength in t12's kernel, ch06_warp_tiles_kernel.cuh),
// where d is no multiple of 8 (a launch-wide, warp-uniform test):
//   * Q, dO, K and V (load_rows_of_d): each 16-byte chunk of shared memory is filled from the
//     row's elements one 2-byte load at a time, zeros past d (fa::tiles::copy_chunk_by_elements,
//     common/device/attention_tiles.cuh, from chapter 05's t15), synchronously.
//   * dQ's atomics: one float at a time, the columns below d (a row of d floats is 8-byte aligned
//     only for even rows when d is odd).
//   * dK and dV (store_rows_of_d): one element at a time, below d.
//   * dQ's conversion: the 1-3 elements past the last group of four (convert_dq_tail_kernel,
//     ch06_kv128.cuh), which a head dim that is no multiple of 8 can leave.
// The preprocess D = rowsum(dO * O) already takes rows of any length. Where d is a multiple of 8
// every line is t19's (the dispatch keeps t19 and chapter 07 for those head dims).
//
// Speed (H200, 2026-12-05, tuning/README.md): D 201 62.7-72.9 TFLOP/s, 0.42-0.54x
// FlashAttention-2 behind its padded copy; at multiples of 8 0.87-0.91x t19, which keeps them.

#include <string>

#include "ch06_warp_tiles_kernel.cuh"  // warp_tiles_kernel<T, D, Steps, Tile>: t12's kernel
#include "registry.h"

namespace {

constexpr int kD256 = 256;  // the one instance: every head dim is computed at 256

// t18's and t19's tile: one Q and one dO buffer.
struct D256AnyTile {
  static constexpr int kKeys = 64;
  static constexpr int kLd = kD256;
  static constexpr int kLdPT = kKeys + kPad;
  static constexpr int kKeyShift = 1;
  static constexpr int kQdoBuffers = 1;
};

// t19's switches on; t21's own.
struct StepsT21 : WarpTilesSteps {
  static constexpr bool kOneBarrierFewer = true;
  static constexpr bool kRowsOfD = true;
  static constexpr bool kAnyRowLength = true;
};

// The step, as ch06_kv128.cuh's host side asks for it.
struct T21 {
  static constexpr const char* kName = "06/t21_d256_any_head_dim";
  template <class T, int D>
  static auto kernel() {
    return warp_tiles_kernel<T, D, StepsT21, D256AnyTile>;
  }
  template <int D>
  static constexpr int smem_bytes() {
    return warp_tiles_smem_bytes<D, D256AnyTile>();
  }
  template <int D>
  static constexpr int keys() {
    return D256AnyTile::kKeys;
  }
};

void t21_backward(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(T21::kName) + " takes bf16 and fp16 only");
  const int64_t d = a.shape.head_dim;
  FA_UNSUPPORTED_IF(d <= 0 || d > kD256, std::string(T21::kName) +
                                             ": takes the head dims up to 256, computed at 256; "
                                             "not " +
                                             std::to_string(d));
  run_head_dim<T21, kD256>(a, stream);  // checks the shared memory, the D preprocess, the launches
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {T21::kName,
             t21_backward,
             "t19 taking every head dim up to 256, multiples of 8 or not: rows that are no whole "
             "number of 16-byte chunks copied, added and stored element by element",
             {fa::DType::BF16, fa::DType::F16},
             {256},
             /*min_sm=*/80,
             /*deterministic=*/false,
             /*gqa=*/false,
             /*rounds_head_dim=*/true,
             /*head_dim_step=*/1});
FA_REGISTER_SMEM(T21::kName, [](int d) {
  return fa::smem_at<256>(d, [](auto D) { return T21::smem_bytes<decltype(D)::value>(); });
});
