// GENERATED from chapters/01_safe_softmax/ch01_reduce_model.cpp by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// ch01_reduce_model.cpp: the warp and block reductions of 01/v3_warp_shuffle_vec4, lane by lane
// on the CPU (see ch01_reduce_model.h).
// A CPU exercise (notes/coursework.md): the butterfly; the block reduction (as the kernel has it)
// is built on it.
// EXERCISE-KERNELS: cpu/01_warp_reduce
#include "ch01_reduce_model.h"

#include <algorithm>
#include <limits>

#include "check.h"
#include "exercise.h"

namespace fa::ch01 {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float combine(float a, float b, bool is_max) {
  return is_max ? std::max(a, b) : a + b;
}
}  // namespace

int64_t& shuffles_issued() {
  static int64_t count = 0;
  return count;
}

WarpRegs shfl_xor(const WarpRegs& v, int offset) {
  FA_REQUIRE(offset > 0 && offset < kLanes, "shfl_xor: the offset must name another lane");
  ++shuffles_issued();
  WarpRegs out;
  for (int lane = 0; lane < kLanes; ++lane) out[lane] = v[lane ^ offset];
  return out;
}

WarpRegs warp_all_reduce(WarpRegs v, bool is_max) {
  // TODO(exercise butterfly): log2(32) exchanges through shfl_xor, each lane combining its value with the one it receives (combine() above), so that afterwards EVERY lane holds the whole warp's result; all lanes exchange at once, so each step reads the values of the step before
  (void)combine;
  return fa::exercise_todo<WarpRegs>("cpu/01_warp_reduce", "butterfly");
}

std::vector<float> block_all_reduce(const std::vector<float>& v, bool is_max) {
  const int threads = int(v.size());
  FA_REQUIRE(threads > 0 && threads % kLanes == 0 && threads <= 1024,
             "block_all_reduce: a block of 32 to 1024 threads, whole warps");
  const int warps = threads / kLanes;
  auto warp_regs = [&](const std::vector<float>& all, int w) {
    WarpRegs r;
    std::copy(all.begin() + w * kLanes, all.begin() + (w + 1) * kLanes, r.begin());
    return r;
  };
  std::vector<float> out(v.size());
  // block_reduce: every warp reduces its own values; lane 0 of each writes the warp's result to
  // its slot of a buffer in shared memory; after the barrier every warp reduces the buffer again,
  // its lanes past the last warp holding the identity of the operation (-inf for a maximum: a 0
  // would win over all-negative values). Every thread ends with the block's result.
  std::vector<float> buf(kLanes, 0.0f);  // __shared__ float buf[32]
  for (int w = 0; w < warps; ++w) buf[w] = warp_all_reduce(warp_regs(v, w), is_max)[0];
  // __syncthreads(): every warp's slot is written before any warp reads the buffer.
  const float identity = is_max ? kNegInf : 0.0f;
  WarpRegs second;
  for (int lane = 0; lane < kLanes; ++lane) second[lane] = lane < warps ? buf[lane] : identity;
  const WarpRegs total = warp_all_reduce(second, is_max);
  for (int t = 0; t < threads; ++t) out[t] = total[t % kLanes];
  return out;
}

}  // namespace fa::ch01

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/01_safe_softmax/exercises/ch01_reduce_model.cpp", {"cpu/01_warp_reduce"}, 1});
