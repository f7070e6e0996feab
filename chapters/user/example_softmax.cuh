// example_softmax.cuh: the arithmetic of the worked example, as plain host+device functions, so
// the CPU tests (tests/cpu/test_user_kernels.cpp) can check the same code the kernel runs.
//
// A running (m, l) pair summarises a stream of values x: m is the largest value seen and
// l = sum exp(x - m). Two summaries of disjoint parts combine exactly, which is what lets 32 lanes
// each read a strided part of a row in ONE pass and then merge their results.
#pragma once
#include <math.h>

#include "shapes.h"  // FA_HD: __host__ __device__ under nvcc, inline otherwise

namespace user_example {

struct MaxSum {
  float m;  // running max (-inf before the first finite value)
  float l;  // sum of exp(x - m) over the values seen
};

FA_HD MaxSum empty_max_sum() {
  return {-INFINITY, 0.0f};
}

// Add one value. -inf values contribute exp(-inf) = 0 and must not reach exp(-inf - -inf) = NaN.
FA_HD MaxSum push(MaxSum a, float x) {
  if (x > a.m) {  // new max: rescale what we have (exp(-inf) = 0 when a was empty)
    a.l = a.l * expf(a.m - x) + 1.0f;
    a.m = x;
  } else if (x > -INFINITY) {
    a.l += expf(x - a.m);
  }
  return a;
}

// Combine two summaries: rescale both sums to the larger max.
FA_HD MaxSum merge(MaxSum a, MaxSum b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return empty_max_sum();  // both empty (or all -inf): nothing to rescale
  return {m, a.l * expf(a.m - m) + b.l * expf(b.m - m)};
}

// y = exp(x - m) / l; an all -inf row (l == 0) is defined as all zeros (notes/conventions.md).
FA_HD float normalise(MaxSum s, float x) {
  return s.l > 0.0f ? expf(x - s.m) / s.l : 0.0f;
}

}  // namespace user_example
