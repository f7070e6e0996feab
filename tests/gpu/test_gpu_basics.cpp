// The plumbing on a real GPU: poison really is NaN, the ceilings are measured and sane.
#include <cmath>

#include "buffer.h"
#include "ceilings.h"
#include "test_util.h"

namespace {

TEST(GpuBasics, PoisonReadsBackAsNaN) {
  FA_SKIP_WITHOUT_GPU(70);
  for (fa::DType t : {fa::DType::F32, fa::DType::F16, fa::DType::BF16}) {
    fa::DeviceBuffer b(64 * fa::dtype_size(t));
    b.poison();
    for (float x : fa::to_host(t, b, 64)) EXPECT_TRUE(std::isnan(x)) << fa::dtype_name(t);
  }
}

TEST(GpuBasics, CopyBandwidthIsMeasured) {
  FA_SKIP_WITHOUT_GPU(70);
  double gbps = fa::copy_bandwidth_gbps();
  EXPECT_GT(gbps, 100.0);
  EXPECT_LT(gbps, 20000.0);
}

}  // namespace
