// Chapter 00's arithmetic about a GPU: grid sizes, stray threads, tiles in shared memory,
// resident blocks, the roofline, and the CPU replays the chapter checks its kernels against.
#include <gtest/gtest.h>

#include <cmath>

#include "ch00_gpu_basics.h"

namespace {

using namespace fa::ch00;

TEST(Ch00Model, GridCoversEveryElementWithLessThanOneBlockToSpare) {
  EXPECT_EQ(ceil_div(1000003, 256), 3907);
  EXPECT_EQ(ceil_div(1024, 256), 4);
  EXPECT_EQ(ceil_div(1, 256), 1);
  for (int64_t n : {1, 17, 255, 256, 257, 1000003, 4097}) {
    int64_t oob = threads_out_of_bounds(n, 256);
    EXPECT_GE(oob, 0);
    EXPECT_LT(oob, 256);
    EXPECT_EQ((n + oob) % 256, 0) << n;
  }
  EXPECT_EQ(threads_out_of_bounds(1000003, 256), 189);
  EXPECT_EQ(threads_out_of_bounds(4096, 256), 0);
  // 64-bit: a grid over 2^33 elements does not wrap.
  EXPECT_EQ(ceil_div(int64_t(1) << 33, 256), int64_t(1) << 25);
}

TEST(Ch00Model, TilesInH100SharedMemory) {
  const int64_t tile = 128 * 64 * 2;  // 128x64 bf16
  EXPECT_EQ(tiles_that_fit(48 * 1024, tile), 3);
  EXPECT_EQ(tiles_that_fit(227 * 1024, tile), 14);
  EXPECT_EQ(tiles_that_fit(h100_sm_limits().smem_per_sm, tile), 14);
  EXPECT_EQ(tiles_that_fit(1024, 0), 0);
}

TEST(Ch00Model, ResidentBlocksFollowTheBindingLimit) {
  SmLimits h100 = h100_sm_limits();
  Residency r = resident_blocks(h100, 128, 32, 0);
  EXPECT_EQ(r.blocks, 16);
  EXPECT_EQ(r.limited_by, "threads");
  r = resident_blocks(h100, 32, 16, 0);  // tiny blocks: the 32-blocks-per-SM limit binds
  EXPECT_EQ(r.blocks, 32);
  EXPECT_EQ(r.limited_by, "blocks");
  r = resident_blocks(h100, 128, 128, 0);  // 65536 / (128 * 128)
  EXPECT_EQ(r.blocks, 4);
  EXPECT_EQ(r.limited_by, "registers");
  r = resident_blocks(h100, 128, 33, 0);  // rounds up to 40 registers: 65536 / 5120 = 12
  EXPECT_EQ(r.blocks, 12);
  r = resident_blocks(h100, 128, 32, 100 * 1024);  // 228 KiB / (100 KiB + 1 KiB)
  EXPECT_EQ(r.blocks, 2);
  EXPECT_EQ(r.limited_by, "shared memory");
  EXPECT_EQ(resident_blocks(h100, 0, 32, 0).blocks, 0);
}

TEST(Ch00Model, PeaksAndRoofline) {
  EXPECT_EQ(fp32_lanes_per_sm(80), 64);
  EXPECT_EQ(fp32_lanes_per_sm(90), 128);
  EXPECT_NEAR(fp32_peak_tflops(132, 128, 1980e3), 66.9, 0.1);
  EXPECT_NEAR(dram_peak_gbps(2619e3, 5120), 3352.3, 1.0);  // H100 SXM5 HBM3
  double ridge = ridge_point(66.9, 3350.0);
  EXPECT_NEAR(ridge, 19.97, 0.05);
  // Below the ridge the memory roof binds; above it the compute roof.
  EXPECT_NEAR(roofline_tflops(1.0, 66.9, 3350.0), 3.35, 1e-9);
  EXPECT_DOUBLE_EQ(roofline_tflops(1000.0, 66.9, 3350.0), 66.9);
  EXPECT_NEAR(roofline_tflops(ridge, 66.9, 3350.0), 66.9, 1e-9);
}

TEST(Ch00Model, ReferencesOfTheKernels) {
  EXPECT_EQ(relu_axb_reference(1.0f, 2.0f, 0.5f), 2.5f);
  EXPECT_EQ(relu_axb_reference(-1.0f, 2.0f, 0.5f), 0.0f);
  EXPECT_EQ(relu_axb_reference(0.25f, 1.5f, -0.25f), 0.125f);
  // The FMA chains converge to b / (1 - a) = 1 each: 8 chains sum to about 8, never blow up.
  float s = fma_thread_reference(5, 4096, 0.999f, 0.001f);
  EXPECT_TRUE(std::isfinite(s));
  EXPECT_NEAR(s, 8.0f + 0.0166f * (8 * 0.005f + 28.0f - 8.0f), 0.05f);
  // Zero steps: just the starting values.
  EXPECT_FLOAT_EQ(fma_thread_reference(0, 0, 0.5f, 0.5f), 28.0f);
  // Both divergence paths stay bounded and converge to their fixed points (0.5 and ~0.2764).
  float seed = divergence_seed(96);
  EXPECT_NEAR(divergence_path_affine(seed, 4096), 4 * 0.5f, 1e-4f);
  EXPECT_NEAR(divergence_path_quadratic(seed, 4096), 4 * (1.0f - std::sqrt(0.2f)) / 2, 1e-4f);
}

}  // namespace
