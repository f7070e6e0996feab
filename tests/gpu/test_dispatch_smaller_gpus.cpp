// The dispatch's choices for GPUs with less shared memory a block than the one here: an A100's
// 163 KiB (sm_80) and the 99 KiB of sm_86, sm_89 and sm_120 (gpu.h, smem_optin_bytes_of_sm). Each
// choice runs here under that GPU's limit (cap_smem_optin_bytes): the launcher's own check then
// refuses whatever the smaller GPU would refuse, so a kernel whose registered need (registry.h,
// SmemNeed) understates what its launcher asks for fails here, as it would on that GPU. A choice
// must pass its check; a refusal must name the shared memory (no kernel of this build fits).
//
// Not emulated: everything else that differs between those GPUs (the sm_90 rows do not hold for
// them, so only kernels compiled for sm_80 and newer run; their machine code here is sm_90's).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dispatch.h"
#include "gpu.h"
#include "harness.h"
#include "registry.h"
#include "test_util.h"

namespace {

using fa::DType;
using fa::Op;

struct SmallerGpu {
  int sm;
  const char* what;
};
const SmallerGpu kGpus[] = {{80, "an A100 (163 KiB a block)"}, {86, "sm_86/89/120 (99 KiB)"}};

// Lifts the cap however the test ends.
struct SmemCap {
  explicit SmemCap(size_t bytes) { fa::cap_smem_optin_bytes(bytes); }
  ~SmemCap() { fa::cap_smem_optin_bytes(0); }
};

fa::RunOptions check_only(uint64_t seed) {
  fa::RunOptions o;
  o.seed = seed;
  o.time = false;
  return o;
}

// A refusal must come from the shared memory: some kernel that takes the problem was passed over
// because its blocks need more than the GPU has (the words of smem_short, dispatch.cpp).
void expect_refusal_for_smem(const fa::Pick& k) {
  EXPECT_NE(k.refusal.find("of shared memory a block at head_dim"), std::string::npos)
      << "only the shared memory may leave a 16-bit head dim of 32-256 without a kernel here: "
      << k.refusal;
}

// Fixed-length forward and backward, the head dims chapters 05 and 06 list and some between them
// (rounded up inside 05/t14 and 06/t16; 59 and 111 in 05/t15 and 06/t17; a backward between 128
// and 256 in 06/t19, at 256 in 06/t18 where 06/t14 does not fit), ragged lengths. An A100 runs
// every one of them; a 99 KiB GPU refuses only where every kernel that takes the problem needs
// more shared memory.
TEST(DispatchSmallerGpus, FixedLengthChoicesRunUnderTheirLimit) {
  FA_SKIP_WITHOUT_GPU(80);
  const std::vector<std::pair<int64_t, int64_t>> lengths = {{127, 129}, {1000, 1000}};
  int ran = 0;
  for (const SmallerGpu& g : kGpus) {
    const size_t limit = fa::smem_optin_bytes_of_sm(g.sm);
    for (Op op : {Op::Fwd, Op::Bwd})
      for (DType t : {DType::BF16, DType::F16})
        for (int d : {32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 256})
          for (auto [nq, nk] : lengths)
            for (bool causal : {false, true}) {
              const fa::AttentionShape s{2, 3, nq, nk, d, causal, 0.0f};
              const fa::Problem p =
                  op == Op::Fwd ? fa::Problem::forward(s, t) : fa::Problem::backward(s, t);
              const fa::Pick k = fa::pick(p, g.sm);
              SCOPED_TRACE(std::string(g.what) + ", " + fa::op_name(op) + " " + fa::dtype_name(t) +
                           " D " + std::to_string(d) + ": " + k.explain(true));
              if (!k) {
                EXPECT_NE(g.sm, 80) << "an A100 has a kernel for every one of these problems";
                expect_refusal_for_smem(k);
                continue;
              }
              const uint64_t seed = uint64_t(g.sm * 1000 + d * 7 + nq);
              SmemCap cap(limit);
              fa::RunResult r;
              if (k.kind == "fwd") {
                r = fa::run_attention_fwd(*fa::find_entry<fa::AttentionFwdKernel>(k.kernel), s, t,
                                          check_only(seed));
              } else if (k.kind == "bwd") {
                r = fa::run_attention_bwd(*fa::find_entry<fa::AttentionBwdKernel>(k.kernel), s, t,
                                          check_only(seed));
              } else {
                ADD_FAILURE() << "a fixed-length problem without a window sent to " << k.kind;
                continue;
              }
              EXPECT_EQ(r.status, fa::Status::Pass) << r.report();
              ++ran;
            }
  }
  EXPECT_GT(ran, 120);
}

// Packed batches (chapter 09's mma.sync kernels), with and without a window, at the head dims of
// 09/v1_varlen and 09/v2_window (64, 128), at those only 09/v3, v4, bwd_v3 and bwd_v4 take (59,
// 96), and above 128 (192, 201, 256: v3, v4 and bwd_v5). An A100 runs every one of them.
TEST(DispatchSmallerGpus, PackedBatchChoicesRunUnderTheirLimit) {
  FA_SKIP_WITHOUT_GPU(80);
  fa::VarlenShape s;
  s.seqlens_q = {17, 1000, 129};
  s.seqlens_k = {17, 1000, 129};
  s.heads = 2;
  s.causal = true;
  for (const SmallerGpu& g : kGpus) {
    const size_t limit = fa::smem_optin_bytes_of_sm(g.sm);
    for (Op op : {Op::VarlenFwd, Op::VarlenBwd})
      for (int d : {59, 64, 96, 128, 192, 201, 256})
        for (bool window : {false, true}) {
          fa::VarlenShape w = s;
          w.head_dim = d;
          if (window) w.window_left = 100, w.window_right = 0;
          fa::Problem p = fa::Problem::forward(w.padded(), DType::BF16);  // its longest lengths
          p.op = op;
          const fa::Pick k = fa::pick(p, g.sm);
          SCOPED_TRACE(std::string(g.what) + ", " + p.str() + ": " + k.explain(true));
          if (!k) {
            EXPECT_NE(g.sm, 80) << "an A100 has a kernel for every one of these problems";
            expect_refusal_for_smem(k);
            continue;
          }
          SmemCap cap(limit);
          const fa::RunResult r =
              op == Op::VarlenFwd
                  ? fa::run_varlen_fwd(*fa::find_entry<fa::VarlenFwdKernel>(k.kernel), w,
                                       DType::BF16, check_only(uint64_t(d + g.sm)))
                  : fa::run_varlen_bwd(*fa::find_entry<fa::VarlenBwdKernel>(k.kernel), w,
                                       DType::BF16, check_only(uint64_t(d + g.sm)));
          EXPECT_EQ(r.status, fa::Status::Pass) << r.report();
        }
  }
}

}  // namespace
