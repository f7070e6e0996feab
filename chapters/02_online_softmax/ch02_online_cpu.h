// ch02_online_cpu.h: the CPU model of online softmax, shared by the chapter program and the tests.
//
// The state of a partially read row is a pair (m, l): m = the largest element seen so far,
// l = sum over the elements seen so far of e^(x_j - m). The empty row is (-inf, 0).
//
//   online step:  reading x:  m' = max(m, x),  l' = l * e^(m - m') + e^(x - m')
//   pair merge:   (m1, l1) (+) (m2, l2) = (M, l1 * e^(m1 - M) + l2 * e^(m2 - M)),  M = max(m1, m2)
//
// The online step is the merge with the one-element state (x, 1). The merge is associative and
// commutative, with identity (-inf, 0), so any split of a row into pieces, processed in any order
// or as a tree, gives the same (m, l): this is what lets the GPU kernels reduce across threads,
// warps and blocks, and what FlashAttention does across K/V tiles.
//
// -inf: the factor e^(m_old - m_new) is taken as 1 when m_old == m_new (which covers two empty
// states, where -inf - -inf would be NaN), and e^(-inf - finite) = 0 otherwise, as it should.
#pragma once
#include <cstdint>
#include <vector>

namespace ch02 {

struct MaxSum {
  double m;
  double l;
};

MaxSum empty_state();                    // (-inf, 0): the identity of merge
MaxSum merge(MaxSum a, MaxSum b);        // the pair merge above
MaxSum online_step(MaxSum s, double x);  // one element

// Online softmax of one row, in double: one pass for (m, l), one pass to write. When `trace` is
// given it receives the state after every element (trace[i] = state after x[0..i]).
std::vector<double> online_softmax(const float* x, int64_t n, std::vector<MaxSum>* trace = nullptr);

// The (m, l) of a whole row through a different route: split into `pieces` nearly equal pieces,
// each reduced with online steps, then merged right to left. Must equal the sequential one.
MaxSum reduce_in_pieces(const float* x, int64_t n, int64_t pieces);

// Safe softmax of one row (three passes, double): what online_softmax must reproduce.
std::vector<double> safe_softmax(const float* x, int64_t n);

}  // namespace ch02
