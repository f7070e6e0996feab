// v12_stmatrix_epilogue.cu: v11 (v11_bc64_at_d128.cu) with an epilogue that does no address
// arithmetic per element: O goes into shared memory by stmatrix, at the lane addresses Q was read
// through, and out to global memory as a base plus constants, loads ahead of stores.
//
// Why: measured in the next GPU call (the header is written from its numbers).

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v12, given this rung's tiles
#include "ch05_tiles_v6.cuh"       // v6's tiles
#include "registry.h"

namespace fa {
namespace {

// v11's tiles, with O stored by store_o_m (this rung).
template <int D>
struct TilesV12 : TilesV6<D> {
  static constexpr int kBc = D == 128 ? 64 : TilesV6<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr bool kOneLaneAddr = true;
  static constexpr bool kPipelineLoads = true;
  static constexpr bool kHoistCopies = true;
  static constexpr bool kStmatrixO = true;
};

struct RungV12 {
  static constexpr const char* kName = "05/v12_stmatrix_epilogue";
  template <int D>
  using Tiles = TilesV12<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::RungV12::kName,
             fa::mtiles_forward<fa::RungV12>,
             "v11 with O stored by stmatrix at Q's lane addresses, then copied out as base + "
             "constant (sm_90; v11's epilogue in builds for older GPUs)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128, 256},
             80});
