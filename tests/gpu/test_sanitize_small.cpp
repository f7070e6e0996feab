// SanitizeSmall.*: every registered kernel of every problem, in each dtype and head dim it lists,
// once per tiny ragged shape, checked (not timed). Small enough to run under compute-sanitizer
// (memcheck, racecheck, synccheck, initcheck: the ctest tests with label "sanitize", see
// tests/CMakeLists.txt), and a quick smoke test in the normal gpu label too.
//
// Library reference rows ("ref/...", cuBLAS) are left out: we cannot fix what a sanitizer says
// about a closed-source library, and its kernels are not what this repository teaches.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "exercise.h"
#include "mutants.h"
#include "test_util.h"

namespace {

using fa::AttentionShape;

fa::RunOptions check_only() {
  fa::RunOptions o;
  o.time = false;
  o.check = true;
  return o;
}

// A library row, a kernel FA_SANITIZE_ONLY leaves out (sanitize_selected, test_util.h), or, in a
// student release, a kernel whose exercise file is still as handed out (common/exercise.h): its
// own tests (label gpu-exercise) fail until it is written; here it would fail the smoke test of
// every other kernel with it.
bool left_out(const std::string& name) {
  return name.rfind("ref/", 0) == 0 || !sanitize_selected(name) || exercise_not_written(name);
}

// Run one case; a failed check or an exception (a CUDA error the sanitizer provoked, an illegal
// address) fails the test but lets the remaining kernels run. Each case is named in the log, so a
// sanitizer run shows which kernels and shapes it covered (FA_SANITIZE_ONLY narrows the list).
template <class F>
void run_case(const std::string& what, F body) {
  std::printf("  case %s\n", what.c_str());
  try {
    fa::RunResult r = body();
    if (r.status == fa::Status::Fail) ADD_FAILURE() << what << "\n" << r.report();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw: " << e.what();
  }
}

// Two tiny shapes per attention variant: more keys than queries, and more queries than keys
// (with causal masking the first rows then see no key at all).
const std::pair<int64_t, int64_t> kAttnSeqs[] = {{17, 33}, {33, 17}};

TEST(SanitizeSmall, SoftmaxKernels) {
  FA_SKIP_WITHOUT_GPU(70);
  for (const fa::SoftmaxKernel* k : fa::entries_with_prefix<fa::SoftmaxKernel>("")) {
    if (left_out(k->name)) continue;
    for (fa::SoftmaxShape s : {fa::SoftmaxShape{3, 33}, fa::SoftmaxShape{2, 1025}})
      run_case(k->name + " " + s.str(), [&] { return fa::run_softmax(*k, s, check_only()); });
  }
}

TEST(SanitizeSmall, GemmKernels) {
  FA_SKIP_WITHOUT_GPU(70);
  for (const fa::GemmKernel* k : fa::entries_with_prefix<fa::GemmKernel>("")) {
    if (left_out(k->name)) continue;
    // 17 x 33 x 65 has odd strides: the element-by-element paths (and the TMA kernels' fallback).
    // 200 x 136 x 72 has N and K multiples of 8, so the TMA kernels of chapter 03 run their own
    // code, with partial tiles in M, N and K; 200 x 136 x 264 has 5 k-steps of 64, the fewest
    // 03/t19 runs its own code with (4 a tile, the last partial).
    for (fa::DType t : k->dtypes)
      for (fa::GemmShape s :
           {fa::GemmShape{17, 33, 65}, fa::GemmShape{200, 136, 72}, fa::GemmShape{200, 136, 264}})
        run_case(k->name + " " + fa::dtype_name(t) + " " + s.str(),
                 [&] { return fa::run_gemm(*k, s, t, check_only()); });
  }
}

TEST(SanitizeSmall, TransposeKernels) {
  FA_SKIP_WITHOUT_GPU(70);
  for (const fa::TransposeKernel* k : fa::entries_with_prefix<fa::TransposeKernel>("")) {
    if (left_out(k->name)) continue;
    run_case(k->name, [&] {
      return fa::run_transpose(*k, fa::TransposeShape{17, 33}, check_only());
    });
  }
}

TEST(SanitizeSmall, AttentionForwardKernels) {
  FA_SKIP_WITHOUT_GPU(70);
  for (const fa::AttentionFwdKernel* k : fa::entries_with_prefix<fa::AttentionFwdKernel>("")) {
    if (left_out(k->name)) continue;
    for (fa::DType t : k->dtypes)
      for (int d : sanitized_dims(*k))
        for (auto [nq, nk] : kAttnSeqs)
          for (bool causal : {false, true}) {
            AttentionShape s{1, 2, nq, nk, d, causal, 0.0f};
            run_case(k->name + " " + s.str() + " " + fa::dtype_name(t),
                     [&] { return fa::run_attention_fwd(*k, s, t, check_only()); });
          }
  }
}

TEST(SanitizeSmall, AttentionBackwardKernels) {
  FA_SKIP_WITHOUT_GPU(70);
  for (const fa::AttentionBwdKernel* k : fa::entries_with_prefix<fa::AttentionBwdKernel>("")) {
    if (left_out(k->name)) continue;
    for (fa::DType t : k->dtypes)
      for (int d : sanitized_dims(*k))
        for (auto [nq, nk] : kAttnSeqs)
          for (bool causal : {false, true}) {
            AttentionShape s{1, 2, nq, nk, d, causal, 0.0f};
            run_case(k->name + " " + s.str() + " " + fa::dtype_name(t),
                     [&] { return fa::run_attention_bwd(*k, s, t, check_only()); });
          }
  }
}

// The correct twins of the mutation tests must be clean too (the racy mutant is NOT here: it has
// its own racecheck test, which expects a hazard report).
TEST(SanitizeSmall, MutantTwins) {
  FA_SKIP_WITHOUT_GPU(70);
  const fa::SoftmaxKernel sm{"mutant/softmax_online_correct", mutants::softmax_online_correct, "",
                             2, 70};
  run_case(sm.name, [&] { return fa::run_softmax(sm, {3, 33}, check_only()); });
  const fa::AttentionFwdKernel naive{
      "mutant/attn_fwd_correct",        mutants::attn_fwd_correct, "",
      {fa::DType::F32, fa::DType::F16}, {mutants::kHeadDim},       70};
  const fa::AttentionFwdKernel tiled{"mutant/attn_fwd_tiled_synced",
                                     mutants::attn_fwd_tiled_synced,
                                     "",
                                     {fa::DType::F32},
                                     {mutants::kHeadDim},
                                     70};
  const fa::AttentionBwdKernel back{"mutant/attn_bwd_correct",
                                    mutants::attn_bwd_correct,
                                    "",
                                    {fa::DType::F32},
                                    {mutants::kHeadDim},
                                    70,
                                    false};
  for (auto [nq, nk] : kAttnSeqs)
    for (bool causal : {false, true}) {
      AttentionShape s{1, 2, nq, nk, mutants::kHeadDim, causal, 0.0f};
      for (fa::DType t : naive.dtypes)
        run_case(naive.name + " " + s.str(),
                 [&] { return fa::run_attention_fwd(naive, s, t, check_only()); });
      run_case(tiled.name + " " + s.str(),
               [&] { return fa::run_attention_fwd(tiled, s, fa::DType::F32, check_only()); });
      run_case(back.name + " " + s.str(),
               [&] { return fa::run_attention_bwd(back, s, fa::DType::F32, check_only()); });
    }
}

}  // namespace
