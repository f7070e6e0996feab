// Hidden tests of chapter 00's exercise (vector_add, matrix_add): sizes, blocks and seeds the
// public tests (tests/gpu/test_ch00_kernels.cpp) do not use. These kernels are called directly,
// not through the registry, so FA_GRADE_SUBSTITUTE does not apply to them.
#include <vector>

#include "buffer.h"
#include "ch00_gpu_basics.h"
#include "grade_util.h"
#include "random.h"

namespace {

using namespace fa::ch00;

std::vector<float> values(int64_t n, uint64_t stream) {
  return fa::random_normal(n, fa::derive_seed(777001, stream), -0.5f, 3.0f);
}

TEST(HiddenCh00, VectorAddOddSizes) {
  FA_GRADE_SKIP_WITHOUT_GPU(70);
  for (int64_t n : {2, 31, 33, 63, 65, 511, 1023, 65537, 3000017}) {
    std::vector<float> a = values(n, 11), b = values(n, 12), c(static_cast<size_t>(n));
    fa::DeviceBuffer da(n * 4), db(n * 4), dc(n * 4);
    da.upload(a.data(), da.bytes());
    db.upload(b.data(), db.bytes());
    for (int block : {32, 64, 128, 192, 512, 992}) {
      dc.poison();
      vector_add(da.as<float>(), db.as<float>(), dc.as<float>(), n, block, nullptr);
      dc.download(c.data(), dc.bytes());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(c[i], a[i] + b[i]) << "n=" << n << " block=" << block << " i=" << i << "\n"
                                     << fa::exercise_hint("00/vector_add");
    }
  }
}

TEST(HiddenCh00, MatrixAddOddShapes) {
  FA_GRADE_SKIP_WITHOUT_GPU(70);
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {2, 3}, {3, 5000}, {5000, 3}, {31, 33}, {333, 777}, {2049, 17}, {1, 65537}}) {
    const int64_t n = rows * cols;
    std::vector<float> A = values(n, 13), B = values(n, 14), C(static_cast<size_t>(n));
    fa::DeviceBuffer dA(n * 4), dB(n * 4), dC(n * 4);
    dA.upload(A.data(), dA.bytes());
    dB.upload(B.data(), dB.bytes());
    dC.poison();
    matrix_add(dA.as<float>(), dB.as<float>(), dC.as<float>(), rows, cols, nullptr);
    dC.download(C.data(), dC.bytes());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(C[i], A[i] + B[i])
          << rows << "x" << cols << " at " << i / cols << "," << i % cols << "\n"
          << fa::exercise_hint("00/matrix_add");
  }
}

}  // namespace
