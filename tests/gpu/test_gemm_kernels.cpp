// Every registered GEMM (chapter 03 and the cuBLAS reference row), at the shapes that catch tile
// and tail bugs, in every dtype the kernel takes.
#include "test_util.h"

namespace {

class GemmKernels : public VariantTest {
 protected:
  const fa::GemmKernel& kernel() { return *fa::find_entry<fa::GemmKernel>(GetParam()); }
};

TEST_P(GemmKernels, RaggedShapes) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  fa::RunOptions o;
  o.time = false;
  for (fa::DType t : kernel().dtypes)
    // The first three have odd strides (16-byte vector loads and TMA impossible: the kernels'
    // element-by-element paths); the rest are multiples of 8 but of no tile, so the vector and
    // TMA paths (03/v6 needs K % 8 == 0 and N % 8 == 0) meet tails in M, N and K.
    for (fa::GemmShape s :
         {fa::GemmShape{1, 1, 1}, fa::GemmShape{17, 33, 65}, fa::GemmShape{127, 129, 255},
          fa::GemmShape{1, 8, 16}, fa::GemmShape{200, 136, 72}, fa::GemmShape{1000, 1000, 1000}})
      FA_EXPECT_PASS(fa::run_gemm(kernel(), s, t, o));
}

TEST_P(GemmKernels, Long4096Cubed) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  fa::RunOptions o;
  o.time = false;
  for (fa::DType t : kernel().dtypes)
    FA_EXPECT_PASS(fa::run_gemm(kernel(), {4096, 4096, 4096}, t, o));
}

// Many ragged tiles: 4000 is no multiple of 64, 128 or 256, so 4000 x 4000 x 1000 is hundreds of
// output tiles whose last row and column of tiles are partial, with K % 64 = 40: a persistent
// kernel (one block per SM walking tiles) meets tails on its second and later tiles, where a bug
// in carrying its pipeline from one tile to the next shows. 1000 x 4800 x 4000 is 152 tiles of
// 128 x 256 with 63 k-steps each: on an H100's 132 SMs a last wave of 20 tiles long enough for
// 03/t14 to split it (its rule wants a tail of 32 k-steps; 4000 x 4000 x 1000 has 2). The 16-bit
// inputs only: the fp32 runs share no reference with them and would double the CPU's work.
TEST_P(GemmKernels, LongRaggedManyTiles) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  fa::RunOptions o;
  o.time = false;
  for (fa::DType t : kernel().dtypes)
    if (t != fa::DType::F32)
      for (fa::GemmShape s : {fa::GemmShape{4000, 4000, 1000}, fa::GemmShape{1000, 4800, 4000}})
        FA_EXPECT_PASS(fa::run_gemm(kernel(), s, t, o));
}

INSTANTIATE_TEST_SUITE_P(Registered, GemmKernels,
                         ::testing::ValuesIn(fa::entry_names<fa::GemmKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GemmKernels);

}  // namespace
