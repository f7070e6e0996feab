// t19_d256_rounded.cu: 06/t18_d256_one_buffer taking every head dim that is a multiple of 8 up to
// 256, computed at D 256 as t16 computes the head dims up to 128 inside v4. One idea, t16's: rows
// of d elements in global memory, rows of D = 256 in shared memory and registers, the columns
// d .. D - 1 zero. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate. Not bitwise deterministic
// (dQ by atomics, as t14 and t18).
//
// Why. Between 128 and 256 (136, 160, 192, 224, ... : Gemma-like and other models) no mma.sync
// backward ran: t16 stops at 128 (v4's tiles at 256 do not fit a block), and t18 takes 256
// alone. On an A100, where chapter 07 does not run, the backward at these head dims was refused.
// t18's 147 KiB fit there; rounding up inside it adds no shared memory.
//
// What changed against t18 (the switch kRowsOfD in t12's kernel, ch06_warp_tiles_kernel.cuh,
// and the parameter it reads, ParamsRowsOfD::d in ch06_kv128.cuh):
//   * Q, dO, K and V (load_rows_of_d, for every tile: the whole-tile copy plan of rows of D is
//     not used): the source of row r is r * d elements from the tensor's start, and a 16-byte
//     chunk at or past d is zero-filled (cp.async with src-size 0, as a row past seq already is).
//     d is a multiple of 8: a chunk lies wholly inside the row or wholly past it, and every row
//     starts at a 16-byte boundary. S and dP gain 0 from the zero columns; the columns of dV, dK
//     and dQ past d are sums of products with those zeros, 0.
//   * dQ's atomics, dK and dV (store_rows_of_d): rows of d, the columns past d neither added nor
//     stored. The fp32 accumulator has rows of d: the size of the caller's workspace.
//   * The (batch * head) offsets: seq * d elements a head.
// D = rowsum(dO * O) (the preprocess) and dQ's conversion already work on rows of any length.
// A d that is no multiple of 8, or above 256, is refused.
//
// Speed (H200, 2026-12-05, tuning/README.md): D 192 129.0-148.9 TFLOP/s, 0.61-0.71x
// FlashAttention-2; at D 256 0.88-0.90x t18. The dispatch runs it from 136 to 248 before sm_90.

#include <string>

#include "ch06_warp_tiles_kernel.cuh"  // warp_tiles_kernel<T, D, Steps, Tile>: t12's kernel
#include "registry.h"

namespace {

constexpr int kD256 = 256;  // the one instance: every head dim is computed at 256

// t18's tile: one Q and one dO buffer.
struct D256RoundedTile {
  static constexpr int kKeys = 64;
  static constexpr int kLd = kD256;
  static constexpr int kLdPT = kKeys + kPad;
  static constexpr int kKeyShift = 1;
  static constexpr int kQdoBuffers = 1;
};

// t12's switch on, as t14 and t18; t19's own.
struct StepsT19 : WarpTilesSteps {
  static constexpr bool kOneBarrierFewer = true;
  static constexpr bool kRowsOfD = true;
};

// The step, as ch06_kv128.cuh's host side asks for it.
struct T19 {
  static constexpr const char* kName = "06/t19_d256_rounded";
  template <class T, int D>
  static auto kernel() {
    return warp_tiles_kernel<T, D, StepsT19, D256RoundedTile>;
  }
  template <int D>
  static constexpr int smem_bytes() {
    return warp_tiles_smem_bytes<D, D256RoundedTile>();
  }
  template <int D>
  static constexpr int keys() {
    return D256RoundedTile::kKeys;
  }
};

void t19_backward(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(T19::kName) + " takes bf16 and fp16 only");
  const int64_t d = a.shape.head_dim;
  FA_UNSUPPORTED_IF(d <= 0 || d > kD256 || d % fa::kHeadDimStep != 0,
                    std::string(T19::kName) +
                        ": takes the head dims up to 256 that are multiples of 8, computed at "
                        "256; not " +
                        std::to_string(d));
  run_head_dim<T19, kD256>(a, stream);  // checks the shared memory, the D preprocess, the launches
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {T19::kName,
             t19_backward,
             "t18 taking every head dim that is a multiple of 8 up to 256: rows of d in global "
             "memory, of 256 in shared memory, the columns past d zero",
             {fa::DType::BF16, fa::DType::F16},
             {256},
             /*min_sm=*/80,
             /*deterministic=*/false,
             /*gqa=*/false,
             /*rounds_head_dim=*/true});
FA_REGISTER_SMEM(T19::kName, [](int d) {
  return fa::smem_at<256>(d, [](auto D) { return T19::smem_bytes<decltype(D)::value>(); });
});
