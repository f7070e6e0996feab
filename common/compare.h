// compare.h: does a kernel's output match the float64 reference? Two rules, both strict:
//
//  * fp32 kernels: every element must satisfy |x - ref| <= atol + rtol * |ref|.
//  * fp16/bf16 kernels (the FlashAttention rule): the kernel's max error against the float64
//    reference must be at most `factor` times the max error of a naive implementation in the same
//    low precision, plus a small floor. factor = 2 for outputs, 3 for gradients. The bound adapts
//    to shape and data, so it neither hides real bugs nor fails on honest rounding.
//
// Either way NaN or Inf where the reference is finite fails, and an infinite reference (L = -inf
// for a row that sees no key) must be matched exactly. The report names the first mismatching
// element by its multi-dimensional index, the max abs and rel errors, and the tolerance used.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fa {

struct Tolerance {
  enum class Rule { AllClose, FlashRule };
  Rule rule = Rule::AllClose;
  double atol = 1e-5, rtol = 1e-5;    // AllClose
  double factor = 2.0, floor = 1e-5;  // FlashRule: bound = factor * naive_err + floor
  static Tolerance allclose(double atol, double rtol);
  static Tolerance flash(double factor, double floor);
  std::string str() const;
};

struct CompareResult {
  std::string what;  // "O", "L", "dQ", ...
  bool ok = true;
  int64_t count = 0;
  int64_t bad = 0;        // elements outside the tolerance
  int64_t nonfinite = 0;  // NaN/Inf where the reference is finite (or a wrong infinity)
  double max_abs = 0, max_rel = 0;
  int64_t worst = -1, first_bad = -1;
  double got_at_first_bad = 0, ref_at_first_bad = 0;
  double naive_err = -1;  // FlashRule: the naive low-precision implementation's max error
  double bound = 0;       // FlashRule: the max error allowed
  Tolerance tol;
  std::vector<int64_t> dims;       // for printing indices, e.g. {B, H, N, D}
  std::vector<std::string> names;  // e.g. {"b", "h", "i", "d"}
  std::string report() const;      // several lines; says why it failed
  std::string summary() const;     // one line: max abs/rel error
};

std::string format_index(int64_t flat, const std::vector<int64_t>& dims,
                         const std::vector<std::string>& names);

// Fixed tolerance: elementwise |got - ref| <= atol + rtol*|ref|.
CompareResult compare_allclose(const std::string& what, const float* got, const double* ref,
                               int64_t n, double atol, double rtol);

// FlashAttention rule: max|got - ref| <= factor * max|naive - ref| + floor.
CompareResult compare_flash_rule(const std::string& what, const float* got, const double* ref,
                                 const float* naive, int64_t n, double factor, double floor);

// The naive implementation's max error max|naive - ref| over the elements where ref is finite.
double naive_max_error(const double* ref, const float* naive, int64_t n);
// The FlashAttention rule with the naive error measured elsewhere: a batch of sequences checked
// one sequence at a time takes the naive error of the whole batch (one short sequence's few
// elements say little about the precision of the dtype).
CompareResult compare_flash_bound(const std::string& what, const float* got, const double* ref,
                                  int64_t n, double factor, double floor, double naive_err);

// Dispatch on a Tolerance (naive is only read for the FlashRule).
CompareResult compare(const std::string& what, const float* got, const double* ref,
                      const float* naive, int64_t n, const Tolerance& tol);

}  // namespace fa
