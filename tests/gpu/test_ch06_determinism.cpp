// test_ch06_determinism.cpp: a backward kernel that says deterministic = true must give bitwise
// the same dQ, dK, dV and D when run three times on the same inputs, on two shapes at D 64 and
// D 128 (where the kernel takes them): a small ragged causal one and a larger full one (N 2048:
// sixteen or more key blocks add into every dQ row at once, where an unordered accumulation does
// come out different). A kernel that takes grouped K/V heads (gqa) runs two grouped shapes too: a
// group of 4 summed in one block, and multi-query heads on a grid too small for the GPU, where
// the group is split among blocks and their fp32 parts are added by a second kernel. Kernels that
// accumulate with atomics or reduce-adds (deterministic = false) are run the same way and the
// test only prints whether their results differed: that is allowed, and worth seeing.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <vector>

#include "buffer.h"
#include "check.h"
#include "harness.h"
#include "random.h"
#include "registry.h"
#include "test_util.h"

namespace {

using fa::AttentionShape;
using fa::DeviceBuffer;
using fa::DType;

struct Outputs {
  std::vector<uint8_t> dq, dk, dv, delta;
};

std::vector<uint8_t> bytes_of(const DeviceBuffer& b) {
  std::vector<uint8_t> h(b.bytes());
  b.download(h.data(), h.size());
  return h;
}

class BwdDeterminism : public ::testing::TestWithParam<std::string> {
 protected:
  const fa::AttentionBwdKernel& kernel() {
    return *fa::find_entry<fa::AttentionBwdKernel>(GetParam());
  }
};

TEST_P(BwdDeterminism, TwoRunsSameBits) {
  const fa::AttentionBwdKernel& k = kernel();
  FA_SKIP_WITHOUT_GPU(k.min_sm);
  const DType t = k.dtypes.front();
  // D 64 and D 128 where the kernel takes them (a kernel may order its additions differently per
  // head dim), else its first head dim.
  std::vector<int> dims;
  for (int d : {64, 128})
    if (fa::supports(k.head_dims, d)) dims.push_back(d);
  if (dims.empty()) dims.push_back(k.head_dims.front());
  std::vector<AttentionShape> shapes;
  for (int d : dims) {
    // Ragged, causal, seq_q != seq_k, several K tiles per Q tile: many blocks add into each dQ_i.
    // Then a full one with 16+ key blocks per query row, long enough that the blocks of one
    // query tile overlap in time.
    shapes.push_back({2, 3, 300, 517, d, true, 0.0f});
    shapes.push_back({2, 8, 2048, 2048, d, false, 0.0f});
  }
  // Last: a skip (no forward for a grouped shape) ends the test, and the shapes above have run.
  if (k.gqa)
    for (int d : dims) {
      shapes.push_back({2, 8, 1024, 1024, d, true, 0.0f, 2});
      shapes.push_back({1, 16, 2048, 2048, d, false, 0.0f, 1});  // 16 key blocks: split
    }
  for (const AttentionShape& s : shapes) {
    const int d = s.head_dim;
    SCOPED_TRACE(s.str());
    // O and L from a forward kernel: chapter 05's best, else chapter 06's helper; with grouped
    // heads the first registered one that takes them (chapter 07's v5 on an H100).
    const fa::AttentionFwdKernel* fwd = fa::best_forward_kernel(t, d);
    if (fwd == nullptr) fwd = fa::find_entry<fa::AttentionFwdKernel>("06/forward_helper");
    if (s.is_gqa()) fwd = fa::forward_for_backward(s, t);
    if (fwd == nullptr || !fa::supports(fwd->dtypes, t) || !fa::supports(fwd->head_dims, d))
      GTEST_SKIP() << "no forward kernel for " << fa::dtype_name(t) << " D=" << d;

    DeviceBuffer q = fa::to_device(t, fa::random_normal(s.q_numel(), 601));
    DeviceBuffer kk = fa::to_device(t, fa::random_normal(s.k_numel(), 602));
    DeviceBuffer v = fa::to_device(t, fa::random_normal(s.k_numel(), 603));
    DeviceBuffer dO = fa::to_device(t, fa::random_normal(s.q_numel(), 604));
    DeviceBuffer o(size_t(s.q_numel()) * fa::dtype_size(t)), lse(size_t(s.lse_numel()) * 4);
    fa::AttentionFwdArgs fa_args;
    fa_args.q = q.data();
    fa_args.k = kk.data();
    fa_args.v = v.data();
    fa_args.o = o.data();
    fa_args.lse = lse.as<float>();
    fa_args.shape = s;
    fa_args.dtype = t;
    try {
      fwd->run(fa_args, nullptr);
    } catch (const fa::Unsupported& e) {
      GTEST_SKIP() << e.what();
    }
    FA_CUDA_CHECK(cudaDeviceSynchronize());

    auto run_once = [&]() {
      DeviceBuffer gq(size_t(s.q_numel()) * fa::dtype_size(t)),
          gk(size_t(s.k_numel()) * fa::dtype_size(t)), gv(size_t(s.k_numel()) * fa::dtype_size(t)),
          gD(size_t(s.lse_numel()) * 4), ws(size_t(s.q_numel()) * 4);
      gq.poison();
      gk.poison();
      gv.poison();
      gD.poison();
      ws.zero();  // the harness's contract: the workspace is zero at every call
      fa::AttentionBwdArgs a;
      a.q = q.data();
      a.k = kk.data();
      a.v = v.data();
      a.o = o.data();
      a.dout = dO.data();
      a.lse = lse.as<float>();
      a.dq = gq.data();
      a.dk = gk.data();
      a.dv = gv.data();
      a.delta = gD.as<float>();
      a.workspace = ws.as<float>();
      a.shape = s;
      a.dtype = t;
      k.run(a, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      return Outputs{bytes_of(gq), bytes_of(gk), bytes_of(gv), bytes_of(gD)};
    };
    constexpr int kRuns = 3;
    Outputs out[kRuns];
    try {
      for (Outputs& r : out) r = run_once();
    } catch (const fa::Unsupported& e) {
      GTEST_SKIP() << e.what();
    }
    bool same_dq = true, same_dk = true, same_dv = true, same_D = true;
    for (int r = 1; r < kRuns; ++r) {
      same_dq = same_dq && out[r].dq == out[0].dq;
      same_dk = same_dk && out[r].dk == out[0].dk;
      same_dv = same_dv && out[r].dv == out[0].dv;
      same_D = same_D && out[r].delta == out[0].delta;
    }
    if (k.deterministic) {
      EXPECT_TRUE(same_dq) << k.name << ": dQ differs between runs";
      EXPECT_TRUE(same_dk) << k.name << ": dK differs between runs";
      EXPECT_TRUE(same_dv) << k.name << ": dV differs between runs";
      EXPECT_TRUE(same_D) << k.name << ": D differs between runs";
    } else {
      std::cout << "[ info ] " << k.name << " (deterministic = false) on " << s.str() << " "
                << fa::dtype_name(t) << ": " << kRuns << " runs were "
                << (same_dq && same_dk && same_dv && same_D ? "bitwise identical" : "different")
                << " (dQ " << (same_dq ? "same" : "differs") << ", dK "
                << (same_dk ? "same" : "differs") << ", dV " << (same_dv ? "same" : "differs")
                << ")\n";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, BwdDeterminism,
                         ::testing::ValuesIn(fa::entry_names<fa::AttentionBwdKernel>()),
                         RegistryNamePrinter());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BwdDeterminism);

}  // namespace
