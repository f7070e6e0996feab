// GENERATED from chapters/08_decoding/ch08_split_kv.cpp by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// ch08_split_kv.cpp: the CPU model of the split-KV arithmetic (see ch08_split_kv.h; the launch
// plan is common/split_kv_plan.cpp). A CPU exercise (notes/coursework.md): the merge of two
// partial states.
// EXERCISE-KERNELS: cpu/08_split_merge
#include "ch08_split_kv.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "exercise.h"

namespace fa {
namespace ch08 {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// e^(m - M) for M = max(m, ...): exactly 1 when m == M, which also covers two empty states
// (-inf - -inf would be NaN); chapter 02's convention.
double factor(double m, double M) {
  return m == M ? 1.0 : std::exp(m - M);
}
}  // namespace

Partial partial_over_keys(const HeadView& h, int64_t row, int64_t k0, int64_t k1) {
  Partial p;
  p.m = kNegInf;
  p.o.assign(static_cast<size_t>(h.d), 0.0);
  int64_t last = h.seq_k - 1;
  if (h.causal) last = std::min(last, causal_last_key(row, h.seq_q, h.seq_k));
  k1 = std::min(k1, last + 1);
  if (k1 <= k0) return p;  // this row sees none of these keys: the identity (-inf, 0, 0)
  std::vector<double> s(static_cast<size_t>(k1 - k0));
  for (int64_t j = k0; j < k1; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < h.d; ++d) dot += double(h.q[row * h.d + d]) * double(h.k[j * h.d + d]);
    s[j - k0] = dot * h.scale;
    p.m = std::max(p.m, s[j - k0]);
  }
  for (int64_t j = k0; j < k1; ++j) {
    const double e = std::exp(s[j - k0] - p.m);
    p.l += e;
    for (int64_t d = 0; d < h.d; ++d) p.o[d] += e * double(h.v[j * h.d + d]);
  }
  return p;
}

Partial merge(const Partial& a, const Partial& b) {
  Partial r;
  // TODO(exercise split-merge): chapter 02's (m, l) merge, with o carried along: o was summed relative to the same max as l, so each side's o takes exactly the factor its l takes (the helper above, exactly 1 when nothing moved)
  fa::exercise_todo("cpu/08_split_merge", "split-merge");
  return r;
}

namespace {
// A row's final state out: O = o / l and L = m + ln l (O = 0, L = -inf for a row that saw no key).
void write_row(const Partial& acc, int64_t d, double* O, double* L) {
  for (int64_t j = 0; j < d; ++j) O[j] = acc.l > 0 ? acc.o[j] / acc.l : 0.0;
  *L = acc.l > 0 ? acc.m + std::log(acc.l) : kNegInf;
}
}  // namespace

void split_kv_forward_head(const HeadView& h, int64_t split_len, double* O, double* L) {
  split_len = std::max<int64_t>(1, split_len);
  for (int64_t i = 0; i < h.seq_q; ++i) {
    Partial acc;
    acc.m = kNegInf;
    acc.o.assign(static_cast<size_t>(h.d), 0.0);
    for (int64_t k0 = 0; k0 < h.seq_k; k0 += split_len)
      acc = merge(acc, partial_over_keys(h, i, k0, k0 + split_len));
    write_row(acc, h.d, O + i * h.d, L + i);
  }
}

void block_stream_forward_head(const HeadView& h, int64_t split_len, int64_t tile, int64_t warps,
                               double* O, double* L) {
  split_len = std::max<int64_t>(1, split_len);
  const int64_t slice = std::max<int64_t>(1, tile / std::max<int64_t>(1, warps));
  for (int64_t i = 0; i < h.seq_q; ++i) {
    Partial acc = partial_over_keys(h, i, 0, 0);  // the identity (-inf, 0, 0)
    for (int64_t s0 = 0; s0 < h.seq_k; s0 += split_len) {
      const int64_t s1 = std::min(h.seq_k, s0 + split_len);
      Partial block = partial_over_keys(h, i, 0, 0);
      for (int64_t w = 0; w < warps; ++w) {
        Partial warp = partial_over_keys(h, i, 0, 0);
        for (int64_t t0 = s0; t0 < s1; t0 += tile) {
          const int64_t k0 = t0 + w * slice;
          warp = merge(warp, partial_over_keys(h, i, std::min(k0, s1), std::min(k0 + slice, s1)));
        }
        block = merge(block, warp);
      }
      acc = merge(acc, block);
    }
    write_row(acc, h.d, O + i * h.d, L + i);
  }
}

}  // namespace ch08
}  // namespace fa

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/08_decoding/exercises/ch08_split_kv.cpp", {"cpu/08_split_merge"}, 1});
