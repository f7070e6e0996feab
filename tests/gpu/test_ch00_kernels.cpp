// Chapter 00's kernels on ragged sizes: vector add, matrix add, the fusion pair, the invalid
// launch that must throw and leave the context usable, and the unguarded kernel on a padded
// buffer writing exactly the predicted number of stray elements.
#include <vector>

#include "buffer.h"
#include "ch00_gpu_basics.h"
#include "check.h"
#include "random.h"
#include "test_util.h"

namespace {

using namespace fa::ch00;

std::vector<float> values(int64_t n, uint64_t stream) {
  return fa::random_normal(n, fa::derive_seed(20261121, stream));
}

TEST(Ch00Kernels, VectorAddRaggedSizesAndBlocks) {
  FA_SKIP_WITHOUT_GPU(70);
  for (int64_t n : {1, 17, 255, 256, 257, 4097, 1000003}) {
    std::vector<float> a = values(n, 1), b = values(n, 2), c(static_cast<size_t>(n));
    fa::DeviceBuffer da(n * 4), db(n * 4), dc(n * 4);
    da.upload(a.data(), da.bytes());
    db.upload(b.data(), db.bytes());
    for (int block : {32, 96, 256, 1024}) {
      dc.poison();
      vector_add(da.as<float>(), db.as<float>(), dc.as<float>(), n, block, nullptr);
      dc.download(c.data(), dc.bytes());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(c[i], a[i] + b[i]) << "n=" << n << " block=" << block << " i=" << i << "\n"
                                     << fa::exercise_hint("00/vector_add");
    }
  }
}

TEST(Ch00Kernels, MatrixAddRaggedShapes) {
  FA_SKIP_WITHOUT_GPU(70);
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {17, 33}, {113, 203}, {1000, 1037}, {9, 4097}}) {
    int64_t n = rows * cols;
    std::vector<float> A = values(n, 3), B = values(n, 4), C(static_cast<size_t>(n));
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

TEST(Ch00Kernels, FusedEqualsThreeKernelsAndTheCpu) {
  FA_SKIP_WITHOUT_GPU(70);
  const float a = 1.5f, b = -0.25f;
  for (int64_t n : {1, 17, 1025, 100003}) {
    std::vector<float> x = values(n, 5), y3(static_cast<size_t>(n)), y1(static_cast<size_t>(n));
    fa::DeviceBuffer dx(n * 4), dt(n * 4), du(n * 4), dy(n * 4);
    dx.upload(x.data(), dx.bytes());
    dy.poison();
    scale_kernel(dx.as<float>(), dt.as<float>(), a, n, nullptr);
    shift_kernel(dt.as<float>(), du.as<float>(), b, n, nullptr);
    relu_kernel(du.as<float>(), dy.as<float>(), n, nullptr);
    dy.download(y3.data(), dy.bytes());
    dy.poison();
    fused_relu_axb(dx.as<float>(), dy.as<float>(), a, b, n, nullptr);
    dy.download(y1.data(), dy.bytes());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y1[i], y3[i]) << "n=" << n << " i=" << i;
      ASSERT_EQ(y1[i], relu_axb_reference(x[i], a, b)) << "n=" << n << " i=" << i;
    }
  }
}

TEST(Ch00Kernels, InvalidBlockThrowsAndLeavesTheContextUsable) {
  FA_SKIP_WITHOUT_GPU(70);
  const int64_t n = 4097;
  fa::DeviceBuffer da(n * 4), db(n * 4), dc(n * 4);
  da.zero();
  db.zero();
  EXPECT_THROW(vector_add(da.as<float>(), db.as<float>(), dc.as<float>(), n, 2048, nullptr),
               fa::Error);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  dc.poison();
  vector_add(da.as<float>(), db.as<float>(), dc.as<float>(), n, 256, nullptr);
  std::vector<float> c(n);
  dc.download(c.data(), dc.bytes());
  for (float v : c) ASSERT_EQ(v, 0.0f) << fa::exercise_hint("00/vector_add");
}

TEST(Ch00Kernels, UnguardedKernelWritesExactlyThePredictedStrays) {
  FA_SKIP_WITHOUT_GPU(70);
  for (int64_t n : {1, 17, 1000003}) {
    const int block = 256;
    int64_t padded = ceil_div(n, block) * block;
    std::vector<float> ones(padded, 1.0f), c(padded, -7.0f);
    fa::DeviceBuffer da(padded * 4), db(padded * 4), dc(padded * 4);
    da.upload(ones.data(), da.bytes());
    db.upload(ones.data(), db.bytes());
    dc.upload(c.data(), dc.bytes());
    vector_add_unchecked(da.as<float>(), db.as<float>(), dc.as<float>(), n, block, nullptr);
    dc.download(c.data(), dc.bytes());
    int64_t strays = 0;
    for (int64_t i = n; i < padded; ++i) strays += c[i] == 2.0f;
    EXPECT_EQ(strays, threads_out_of_bounds(n, block)) << "n=" << n;
  }
}

TEST(Ch00Kernels, FmaAndDivergenceMatchTheirCpuReplays) {
  FA_SKIP_WITHOUT_GPU(70);
  const int blocks = 4, threads = 256, iters = 64;
  const int64_t total = int64_t(blocks) * threads;
  fa::DeviceBuffer out(total * 4);
  std::vector<float> h(total);
  fma_rate(out.as<float>(), blocks, threads, iters, 0.999f, 0.001f, nullptr);
  out.download(h.data(), out.bytes());
  for (int64_t t = 0; t < total; ++t)
    ASSERT_NEAR(h[t], fma_thread_reference(t, iters, 0.999f, 0.001f), 1e-4f) << t;
  for (bool divergent : {true, false}) {
    divergence(out.as<float>(), blocks, threads, iters, divergent, nullptr);
    out.download(h.data(), out.bytes());
    for (int64_t t = 0; t < total; ++t) {
      int lane = int(t % threads) % kWarpSize, warp = int(t % threads) / kWarpSize;
      bool affine = divergent ? lane % 2 == 0 : warp % 2 == 0;
      float s = divergence_seed(t);
      float want = affine ? divergence_path_affine(s, iters) : divergence_path_quadratic(s, iters);
      ASSERT_NEAR(h[t], want, 1e-4f) << (divergent ? "divergent" : "uniform") << " thread " << t;
    }
  }
}

}  // namespace
