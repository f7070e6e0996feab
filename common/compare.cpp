#include "compare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace fa {

Tolerance Tolerance::allclose(double atol, double rtol) {
  Tolerance t;
  t.rule = Rule::AllClose;
  t.atol = atol;
  t.rtol = rtol;
  return t;
}

Tolerance Tolerance::flash(double factor, double floor) {
  Tolerance t;
  t.rule = Rule::FlashRule;
  t.factor = factor;
  t.floor = floor;
  return t;
}

std::string Tolerance::str() const {
  std::ostringstream os;
  os << std::setprecision(3);
  if (rule == Rule::AllClose)
    os << "|x-ref| <= " << atol << " + " << rtol << "*|ref|";
  else
    os << "max|x-ref| <= " << factor << " x naive-low-precision error + " << floor;
  return os.str();
}

std::string format_index(int64_t flat, const std::vector<int64_t>& dims,
                         const std::vector<std::string>& names) {
  if (dims.empty() || flat < 0) return "[" + std::to_string(flat) + "]";
  std::vector<int64_t> idx(dims.size());
  int64_t rest = flat;
  for (size_t k = dims.size(); k-- > 0;) {
    idx[k] = dims[k] > 0 ? rest % dims[k] : 0;
    rest = dims[k] > 0 ? rest / dims[k] : 0;
  }
  std::ostringstream os;
  os << "[";
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k) os << ", ";
    if (k < names.size()) os << names[k] << "=";
    os << idx[k];
  }
  os << "]";
  return os.str();
}

namespace {

// Shared scan: errors, non-finite values, and the elementwise verdict from `allowed(ref)`.
template <class Allowed>
void scan(CompareResult& r, const float* got, const double* ref, int64_t n, Allowed allowed) {
  r.count = n;
  for (int64_t i = 0; i < n; ++i) {
    double g = got[i], e = ref[i];
    bool bad = false;
    if (!std::isfinite(e)) {
      bad = !(g == e);  // -inf must be matched by -inf, exactly
      if (bad) ++r.nonfinite;
    } else if (!std::isfinite(g)) {
      bad = true;
      ++r.nonfinite;
    } else {
      double abs_err = std::fabs(g - e);
      double rel_err = abs_err / std::max(std::fabs(e), 1e-30);
      if (abs_err > r.max_abs) {
        r.max_abs = abs_err;
        r.worst = i;
      }
      if (std::fabs(e) > 1e-6) r.max_rel = std::max(r.max_rel, rel_err);
      bad = !(abs_err <= allowed(e));
    }
    if (bad) {
      if (r.first_bad < 0) {
        r.first_bad = i;
        r.got_at_first_bad = g;
        r.ref_at_first_bad = e;
      }
      ++r.bad;
    }
  }
  r.ok = r.bad == 0;
}

}  // namespace

CompareResult compare_allclose(const std::string& what, const float* got, const double* ref,
                               int64_t n, double atol, double rtol) {
  CompareResult r;
  r.what = what;
  r.tol = Tolerance::allclose(atol, rtol);
  scan(r, got, ref, n, [&](double e) { return atol + rtol * std::fabs(e); });
  return r;
}

double naive_max_error(const double* ref, const float* naive, int64_t n) {
  double naive_err = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(ref[i])) {
      double d = std::fabs(double(naive[i]) - ref[i]);
      if (std::isfinite(d)) naive_err = std::max(naive_err, d);
    }
  return naive_err;
}

CompareResult compare_flash_rule(const std::string& what, const float* got, const double* ref,
                                 const float* naive, int64_t n, double factor, double floor) {
  return compare_flash_bound(what, got, ref, n, factor, floor, naive_max_error(ref, naive, n));
}

CompareResult compare_flash_bound(const std::string& what, const float* got, const double* ref,
                                  int64_t n, double factor, double floor, double naive_err) {
  CompareResult r;
  r.what = what;
  r.tol = Tolerance::flash(factor, floor);
  r.naive_err = naive_err;
  r.bound = factor * naive_err + floor;
  scan(r, got, ref, n, [&](double) { return r.bound; });
  return r;
}

CompareResult compare(const std::string& what, const float* got, const double* ref,
                      const float* naive, int64_t n, const Tolerance& tol) {
  if (tol.rule == Tolerance::Rule::AllClose)
    return compare_allclose(what, got, ref, n, tol.atol, tol.rtol);
  return compare_flash_rule(what, got, ref, naive, n, tol.factor, tol.floor);
}

std::string CompareResult::summary() const {
  std::ostringstream os;
  os << std::scientific << std::setprecision(2) << what << " max abs " << max_abs << " rel "
     << max_rel;
  if (nonfinite) os << ", " << nonfinite << " non-finite";
  return os.str();
}

std::string CompareResult::report() const {
  std::ostringstream os;
  os << std::setprecision(6);
  os << what << ": " << (ok ? "PASS" : "FAIL") << " (" << count << " elements, tolerance "
     << tol.str() << ")\n";
  if (worst >= 0)
    os << "  max abs error " << max_abs << " at " << format_index(worst, dims, names)
       << ", max rel error " << max_rel << "\n";
  else
    os << "  max abs error -, max rel error - (no element was finite where the reference is)\n";
  if (naive_err >= 0)
    os << "  naive same-precision implementation's max error " << naive_err
       << " -> allowed max error " << bound << "\n";
  if (!ok) {
    os << "  " << bad << " of " << count << " elements out of tolerance";
    if (nonfinite) os << " (" << nonfinite << " NaN/Inf where the reference is finite)";
    os << "\n  first mismatch at " << format_index(first_bad, dims, names) << ": got "
       << got_at_first_bad << ", expected " << ref_at_first_bad << "\n";
    if (std::isnan(got_at_first_bad))
      os << "  hint: outputs are poisoned with NaN before the run: either this element was never\n"
            "  written, or the kernel computed a NaN itself (inf/inf, (-inf)-(-inf), 0*inf)\n";
  }
  return os.str();
}

}  // namespace fa
