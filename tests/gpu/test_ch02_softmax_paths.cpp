// Paths of the chapter 01/02 softmax kernels that the generic harness tests cannot reach:
//  * rows that are NOT 16-byte aligned (x and y offset by one float), where cols % 4 == 0 would
//    otherwise select the float4 path: the kernels must notice and take the scalar path;
//  * the lengths around chapter 02's register-capacity switches (1024/1025, 16384/16385), where
//    02/v2_single_read changes layout or falls back to the two-pass path.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "buffer.h"
#include "check.h"
#include "random.h"
#include "reference.h"
#include "test_util.h"

namespace {

// Runs kernel `name` on x placed `offset` floats into its buffer, with y likewise offset.
fa::CompareResult run_offset(const fa::SoftmaxKernel& k, fa::SoftmaxShape s, int64_t offset,
                             uint64_t seed) {
  std::vector<float> x = fa::random_normal(s.numel(), seed, 0.5f, 3.0f);
  for (int64_t r = 0; r < s.rows; ++r) {  // a few -inf entries and one all -inf row
    x[r * s.cols] = -std::numeric_limits<float>::infinity();
    if (r == 1)
      for (int64_t c = 0; c < s.cols; ++c)
        x[r * s.cols + c] = -std::numeric_limits<float>::infinity();
  }
  const size_t bytes = (s.numel() + offset) * sizeof(float);
  std::vector<float> padded(s.numel() + offset, 0.0f);
  std::copy(x.begin(), x.end(), padded.begin() + offset);
  fa::DeviceBuffer dx(bytes), dy(bytes);
  dx.upload(padded.data(), bytes);
  dy.poison();
  k.run(dx.as<float>() + offset, dy.as<float>() + offset, s, nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> y(s.numel() + offset);
  dy.download(y.data(), bytes);
  const std::vector<double> ref = fa::softmax_rows_ref(x.data(), s);
  return fa::compare_allclose("y", y.data() + offset, ref.data(), s.numel(), 1e-9, 2e-5);
}

class Ch0102SoftmaxPaths : public ::testing::TestWithParam<std::string> {
 protected:
  const fa::SoftmaxKernel& kernel() { return *fa::find_entry<fa::SoftmaxKernel>(GetParam()); }
};

TEST_P(Ch0102SoftmaxPaths, UnalignedRowsTakeTheScalarPath) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (int64_t cols : {4, 128, 1024, 4096, 20000}) {
    fa::CompareResult c = run_offset(kernel(), {5, cols}, 1, 11 + cols);
    EXPECT_TRUE(c.ok) << "cols " << cols << "\n" << c.report();
  }
}

TEST_P(Ch0102SoftmaxPaths, LengthsAroundTheLayoutSwitches) {
  FA_SKIP_WITHOUT_GPU(kernel().min_sm);
  for (int64_t cols : {128, 129, 1024, 1025, 2048, 2049, 4096, 4100, 8192, 8196, 16384, 16385,
                       16388, 32768, 32772}) {
    fa::CompareResult c = run_offset(kernel(), {6, cols}, 0, 3 + cols);
    EXPECT_TRUE(c.ok) << "cols " << cols << "\n" << c.report();
  }
}

// The chapters' own ladders ("01/v...", "02/v..."), not kernels a reader added under chapters/user.
std::vector<std::string> chapter_0102_kernels() {
  std::vector<std::string> out;
  for (const char* prefix : {"01/v", "02/v"})
    for (const std::string& n : fa::entry_names<fa::SoftmaxKernel>(prefix)) out.push_back(n);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Registered, Ch0102SoftmaxPaths,
                         ::testing::ValuesIn(chapter_0102_kernels()), RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Ch0102SoftmaxPaths);

}  // namespace
