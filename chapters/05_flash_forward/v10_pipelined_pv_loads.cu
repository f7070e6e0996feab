// v10_pipelined_pv_loads.cu: v9 (v9_pipelined_s_loads.cu) with the V fragment loads of
// O = alpha O + P V software-pipelined as well. One idea: v9's, applied to the second matmul.
//
// Why: P V reads one V fragment (ldmatrix.x4.trans: one k16 slice of keys, two n8 tiles of D) per
//   kM x 2 MMAs, Bc / 16 x D / 16 of them per key tile (16 at D 128), and each was loaded just
//   ahead of its own MMAs.
//
// What changed vs v9
//   * rescale_o_add_pv_m_pipelined (ch05_mma_fwd_mtiles.cuh): the first V fragment is loaded
//     before the rescale of O; then each step loads fragment i + 1 into a second set of registers
//     before it issues the MMAs of fragment i. The P fragments of both k16 slices are packed
//     before the first MMA instead of slice by slice.
//
// Speed: see the ladder in the chapter README (measured against v9 in one call).

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v10, given this rung's tiles
#include "ch05_tiles_v6.cuh"       // v6's tiles
#include "registry.h"

namespace fa {
namespace {

// v9's tiles, lane addresses and pipelined S, with P V's fragment loads pipelined (this rung).
template <int D>
struct TilesV10 : TilesV6<D> {
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr bool kOneLaneAddr = true;
  static constexpr bool kPipelineS = true;
  static constexpr bool kPipelinePV = true;
};

struct RungV10 {
  static constexpr const char* kName = "05/v10_pipelined_pv_loads";
  template <int D>
  using Tiles = TilesV10<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV10::kName,
             fa::mtiles_forward<fa::RungV10>,
             "v9 with V fragment i + 1 loaded before the MMAs of fragment i in P V",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
