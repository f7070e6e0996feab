// online_cpu.cpp: the CPU model of online softmax (see ch02_online_cpu.h).
// A CPU exercise (notes/coursework.md): the pair merge, which everything below is built from.
// EXERCISE-KERNELS: cpu/02_pair_merge
#include <algorithm>
#include <cmath>
#include <limits>

#include "ch02_online_cpu.h"
#include "exercise.h"

namespace ch02 {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// e^(m_old - m_new) with m_new >= m_old; exactly 1 when they are equal (also when both are -inf).
double rescale(double m_old, double m_new) {
  return m_old == m_new ? 1.0 : std::exp(m_old - m_new);
}
}  // namespace

MaxSum empty_state() {
  return {kNegInf, 0.0};
}

MaxSum merge(MaxSum a, MaxSum b) {
  // EXERCISE(pair-merge): the merged max is the larger of the two; each side's sum was taken relative to its own max, so bring it to the merged one with its own factor (the helper above, which is exactly 1 when nothing moved) before adding
  const double m = std::max(a.m, b.m);
  return {m, a.l * rescale(a.m, m) + b.l * rescale(b.m, m)};
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<MaxSum>("cpu/02_pair_merge", "pair-merge");
  // EXERCISE-END
}

MaxSum online_step(MaxSum s, double x) {
  // A -inf element is the empty state (-inf, 0); any other x is (x, 1) = "one e^(x - x)".
  const MaxSum one = (x == kNegInf) ? empty_state() : MaxSum{x, 1.0};
  return merge(s, one);
}

std::vector<double> online_softmax(const float* x, int64_t n, std::vector<MaxSum>* trace) {
  MaxSum s = empty_state();
  if (trace) trace->clear();
  for (int64_t i = 0; i < n; ++i) {  // pass 1: max and sum together
    s = online_step(s, x[i]);
    if (trace) trace->push_back(s);
  }
  std::vector<double> y(static_cast<size_t>(n), 0.0);
  if (s.m == kNegInf) return y;                                               // all -inf: zeros
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(double(x[i]) - s.m) / s.l;  // pass 2: write
  return y;
}

MaxSum reduce_in_pieces(const float* x, int64_t n, int64_t pieces) {
  pieces = std::max<int64_t>(1, std::min(pieces, std::max<int64_t>(n, 1)));
  std::vector<MaxSum> part(static_cast<size_t>(pieces), empty_state());
  for (int64_t p = 0; p < pieces; ++p)
    for (int64_t i = n * p / pieces; i < n * (p + 1) / pieces; ++i)
      part[p] = online_step(part[p], x[i]);
  MaxSum s = empty_state();
  for (int64_t p = pieces - 1; p >= 0; --p) s = merge(part[p], s);
  return s;
}

std::vector<double> safe_softmax(const float* x, int64_t n) {
  double m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, double(x[i]));
  std::vector<double> y(static_cast<size_t>(n), 0.0);
  if (m == kNegInf) return y;
  double l = 0.0;
  for (int64_t i = 0; i < n; ++i) l += std::exp(double(x[i]) - m);
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(double(x[i]) - m) / l;
  return y;
}

}  // namespace ch02
