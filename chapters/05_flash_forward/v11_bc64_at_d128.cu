// v11_bc64_at_d128.cu: v10 (v10_hoisted_copy_addresses.cu) with Bc = 64 again at D 128.
// One idea: v5 halved Bc at D 128 because 64 keys did not fit the registers; v8 and v10 freed some.
//
// Status: a candidate, measured in the next GPU call.

#include "ch05_mtiles_kernel.cuh"  // the kernel and launcher of v4-v11, given this rung's tiles
#include "ch05_tiles_v6.cuh"       // v6's tiles
#include "registry.h"

namespace fa {
namespace {

template <int D>
struct TilesV11 : TilesV6<D> {
  static constexpr int kBc = D == 128 ? 64 : TilesV6<D>::kBc;
  static constexpr int kSTiles = kBc / 8;
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr bool kOneLaneAddr = true;
  static constexpr bool kPipelineLoads = true;
  static constexpr bool kHoistCopies = true;
};

struct RungV11 {
  static constexpr const char* kName = "05/v11_bc64_at_d128";
  template <int D>
  using Tiles = TilesV11<D>;
};

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel, {fa::RungV11::kName,
                                 fa::mtiles_forward<fa::RungV11>,
                                 "v10 with 64 keys per K/V tile at D 128",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {32, 64, 96, 128, 256},
                                 80});
