#include "mutants.h"

#include <cstdio>
#include <cstdlib>

#include "check.h"

namespace fa {

bool register_mutant_failed(const std::string& name) {
  std::fprintf(stderr, "fa mutants: '%s' is registered twice\n", name.c_str());
  std::abort();
}

}  // namespace fa

// A student release (tests/course/make_release.py) leaves out the hand-written mutants of this
// folder: each correct twin, and most of the mutants beside it, is an exercise's answer written out
// (the online softmax of chapter 02, the forward of chapter 05, dS of chapter 06). The release
// reads the list of files from the next line and keeps their launchers here, so that the tests
// still link; each reports "unsupported", and the tests that run one skip and say why.
// RELEASE-LEAVES-OUT: softmax_mutants.cu attention_fwd_mutants.cu attention_tiled_race.cu attention_bwd_mutants.cu
#if defined(FA_STUDENT_RELEASE) && FA_STUDENT_RELEASE
namespace mutants {
namespace {
[[noreturn]] void left_out(const char* file) {
  ::fa::throw_unsupported(std::string("tests/mutants/") + file +
                              " is not in the student release: its kernels hold an exercise's "
                              "answer (the course repository has them)",
                          __FILE__, __LINE__);
}
}  // namespace

void softmax_online_correct(const float*, float*, fa::SoftmaxShape, cudaStream_t) {
  left_out("softmax_mutants.cu");
}
void softmax_no_max_subtraction(const float*, float*, fa::SoftmaxShape, cudaStream_t) {
  left_out("softmax_mutants.cu");
}
void softmax_online_no_rescale(const float*, float*, fa::SoftmaxShape, cudaStream_t) {
  left_out("softmax_mutants.cu");
}
void attn_fwd_correct(const fa::AttentionFwdArgs&, cudaStream_t) {
  left_out("attention_fwd_mutants.cu");
}
void attn_fwd_causal_off_by_one(const fa::AttentionFwdArgs&, cudaStream_t) {
  left_out("attention_fwd_mutants.cu");
}
void attn_fwd_half_accumulator(const fa::AttentionFwdArgs&, cudaStream_t) {
  left_out("attention_fwd_mutants.cu");
}
void attn_fwd_skips_tail_rows(const fa::AttentionFwdArgs&, cudaStream_t) {
  left_out("attention_fwd_mutants.cu");
}
void attn_fwd_tiled_synced(const fa::AttentionFwdArgs&, cudaStream_t) {
  left_out("attention_tiled_race.cu");
}
void attn_fwd_tiled_missing_sync(const fa::AttentionFwdArgs&, cudaStream_t) {
  left_out("attention_tiled_race.cu");
}
void attn_bwd_correct(const fa::AttentionBwdArgs&, cudaStream_t) {
  left_out("attention_bwd_mutants.cu");
}
void attn_bwd_delta_from_dout(const fa::AttentionBwdArgs&, cudaStream_t) {
  left_out("attention_bwd_mutants.cu");
}
}  // namespace mutants
#endif
