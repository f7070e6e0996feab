// mutants.h: deliberately WRONG kernels, each with one classic mistake, and the registry that
// holds them.
//
// The mutants live in their OWN registry, never the main one (common/registry.h): the chapter
// programs, the generic tests and the benchmarks iterate the main registry and never see a
// mutant. A mutant registers itself next to its launcher with
//
//   FA_REGISTER_MUTANT(AttentionFwdKernel, {"mutant/07_wrong_barrier_parity", run, "...", ...});
//
// and a test or the grader finds it with fa::find_mutant<fa::AttentionFwdKernel>(name) and hands
// it straight to the harness, which must REJECT it (FAIL, or a sanitizer report for a race). If a
// mutant ever passes, the harness has a blind spot: that is the point of mutation testing.
// Names are "mutant/<chapter>_<what>".
//
// The mutants of chapters 07 and 08 are the real rungs with exactly one line changed: CMake
// generates their sources at configure time from the rung file (tests/mutants/CMakeLists.txt),
// so a mutant is always today's rung plus one mistake, and its correct twin is the rung itself.
// The older mutants below (one thread per row) are hand-written, each with a correct twin built
// the same way. A student release leaves their files out (a twin is an exercise's answer) and keeps
// their launchers in mutants.cpp, where each reports "unsupported" (notes/coursework.md).
#pragma once
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "registry.h"

namespace fa {

// All registered mutants of one kernel type, in registration order.
template <class K>
std::vector<K>& mutants() {
  static std::vector<K> entries;  // function-local: safe during static initialisation
  return entries;
}

// The mutant named `name`, or nullptr.
template <class K>
const K* find_mutant(const std::string& name) {
  for (const K& e : mutants<K>())
    if (e.name == name) return &e;
  return nullptr;
}

// Adds a mutant; a duplicate name is a bug in the mutant list: abort (static initialisation,
// nobody can catch an exception yet).
bool register_mutant_failed(const std::string& name);  // prints and aborts
template <class K>
bool register_mutant(const K& entry) {
  if (find_mutant<K>(entry.name) != nullptr) return register_mutant_failed(entry.name);
  mutants<K>().push_back(entry);
  return true;
}

}  // namespace fa

// FA_REGISTER_MUTANT(Type, {fields...}); at namespace scope, like FA_REGISTER (common/registry.h).
#define FA_REGISTER_MUTANT(Type, ...)                                             \
  static const bool FA_CONCAT(fa_registered_mutant_, __LINE__) [[maybe_unused]] = \
      ::fa::register_mutant<::fa::Type>(::fa::Type __VA_ARGS__)

namespace mutants {

constexpr int kHeadDim = 64;

// ---- Row softmax, fp32, one thread per row. ---------------------------------------------------
// Correct twin: online max/sum with the rescale, -inf rows give zeros.
void softmax_online_correct(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st);
// (a) exp(x) without subtracting the row max: exp overflows to inf past x = 88.7, inf/inf = NaN.
void softmax_no_max_subtraction(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st);
// (b) online softmax that forgets to rescale l by exp(m_old - m_new) when the max grows.
void softmax_online_no_rescale(const float* x, float* y, fa::SoftmaxShape s, cudaStream_t st);

// ---- Attention forward, one thread per query row (fp32 or fp16 inputs). ---------------------
// Correct twin: online softmax, fp32 accumulators, bottom-right causal mask.
void attn_fwd_correct(const fa::AttentionFwdArgs& a, cudaStream_t st);
// (c) causal mask off by one: query i also sees key i + (seq_k - seq_q) + 1.
void attn_fwd_causal_off_by_one(const fa::AttentionFwdArgs& a, cudaStream_t st);
// (e) O accumulated in __half: small terms vanish once the sum is large (long sequences).
void attn_fwd_half_accumulator(const fa::AttentionFwdArgs& a, cudaStream_t st);
// (f) launches only full 64-row tiles: the ragged tail rows are never written (poison NaN stays).
void attn_fwd_skips_tail_rows(const fa::AttentionFwdArgs& a, cudaStream_t st);

// ---- Attention forward, fp32, K/V tiles staged in shared memory. -------------------------------
// Correct twin: __syncthreads after loading a tile AND after using it.
void attn_fwd_tiled_synced(const fa::AttentionFwdArgs& a, cudaStream_t st);
// (d) no __syncthreads after using a tile: a fast warp overwrites K/V while a slow warp still reads
// them (write-after-read race). Often gives the right answer anyway; racecheck always reports it.
void attn_fwd_tiled_missing_sync(const fa::AttentionFwdArgs& a, cudaStream_t st);

// ---- Attention backward, fp32, one thread per query row (dK, dV by atomics). --------------------
// Correct twin: D = rowsum(dO * O).
void attn_bwd_correct(const fa::AttentionBwdArgs& a, cudaStream_t st);
// (g) D computed from the wrong tensor: rowsum(dO * dO).
void attn_bwd_delta_from_dout(const fa::AttentionBwdArgs& a, cudaStream_t st);

}  // namespace mutants

// A generated mutant is the whole rung file, its shared-memory line (FA_REGISTER_SMEM) included.
// That line is the rung's own and the rung registers it: in a mutant it registers nothing (a
// second entry under the rung's name would abort as a duplicate).
#undef FA_REGISTER_SMEM
#define FA_REGISTER_SMEM(name, ...) static_assert(true, "the rung registers its shared memory")
