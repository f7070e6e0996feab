// v8_one_lane_address.cu: v7 (v7_swizzled_smem.cu) with one set of ldmatrix lane addresses for
// Q, K and V instead of three. One idea: the registers v7's four-base addresses took, given back.
//
// Why: v7 keeps each lane's ldmatrix address into a swizzled tile as four bases (one per 16-column
//   step modulo 4, fa::tiles::LaneAddr), so that every read is a base plus a constant. It keeps
//   three such sets, for Q, K and V: 12 registers live across the key loop, plus the 8 that shift
//   the K and V sets to the current buffer. At D 128 the kernel sits at 255 registers and ptxas
//   spills 8 bytes (v6, padded, spilled none); the profile's largest gap to FlashAttention-2 is
//   short-scoreboard stalls, i.e. MMAs waiting for ldmatrix results that could not be loaded
//   earlier for lack of registers (notes/05_flash_forward.md, section 8).
//
// What changed vs v7
//   * A lane of an ldmatrix.x4 points at row (lane % 8) + 8 ((lane / 8) & 1) and column
//     8 (lane / 16) of its 16 x 16 block for Q (the A fragment) and V (.trans); K used row
//     (lane % 8) + 8 (lane / 16), column 8 ((lane / 8) & 1), so that the four 8 x 8 matrices came
//     back in the order of the two B fragments. Read with Q's mapping, K's matrices come back with
//     the middle two swapped; compute_s_m (ch05_mma_fwd_mtiles.cuh) takes fragments 0, 2 and 1, 3.
//   * Then the three tiles differ only by where they start: K buffer b lies (Q tile bytes - this
//     warp's Q offset + b * buffer bytes) past Q's lane address, V buffer b a constant further.
//     The kernel keeps Q's four bases and shifts them once per key tile (four adds, v7: eight).
//
// Speed: see the ladder in the chapter README (measured against v7 in one call).

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v8, given this rung's tiles
#include "ch05_tiles_v6.cuh"       // v6's tiles
#include "registry.h"

namespace fa {
namespace {

// v7's tiles (swizzled rows where they hold whole 128-byte groups), reached through one set of
// lane addresses (this rung).
template <int D>
struct TilesV8 : TilesV6<D> {
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr bool kOneLaneAddr = true;
};

struct RungV8 {
  static constexpr const char* kName = "05/v8_one_lane_address";
  template <int D>
  using Tiles = TilesV8<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV8::kName,
             fa::mtiles_forward<fa::RungV8>,
             "v7 with one set of ldmatrix lane addresses for Q, K and V (registers freed)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
