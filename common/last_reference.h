// last_reference.h: the float64 reference of the last set of inputs, kept for the next check.
//
// A chapter program checks every kernel of its ladder on the same inputs (one seed, shape and
// dtype), so every kernel is compared with the same float64 reference. At N = 4096, D = 128 that
// reference takes seconds per checked head, and computing it again for each of a dozen kernels
// was most of a chapter run (chapter 06's README example: 266 s on the H100 with every GPU test
// running beside it, 46 s with this). So the harness keeps the last reference it computed, with a
// copy of everything it was computed from, and reuses it only when a new check's inputs are the
// same bytes: a cached reference can never stand in for different inputs.
#pragma once
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fa {

// Everything a reference depends on: the scalars (shape, mask, scale, dtype, which heads and rows
// are checked) as text, and the values of the input tensors it reads.
struct RefInputs {
  std::string scalars;
  std::vector<std::vector<float>> data;

  bool same_as(const RefInputs& o) const {
    if (scalars != o.scalars || data.size() != o.data.size()) return false;
    for (size_t i = 0; i < data.size(); ++i)
      if (data[i].size() != o.data[i].size() ||
          std::memcmp(data[i].data(), o.data[i].data(), data[i].size() * sizeof(float)) != 0)
        return false;
    return true;
  }
};

// The last reference of one kind (the harness keeps one for the forward, one for the backward).
// get() returns compute()'s result for these inputs, calling compute() only if the inputs differ
// from the last call's (or the last compute() threw).
template <class Refs>
class LastReference {
 public:
  template <class Compute>
  Refs get(RefInputs key, Compute compute) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!valid_ || !key.same_as(key_)) {
      valid_ = false;  // stays false if compute() throws
      refs_ = compute();
      key_ = std::move(key);
      valid_ = true;
    }
    return refs_;
  }

 private:
  std::mutex mutex_;
  bool valid_ = false;
  RefInputs key_;
  Refs refs_;
};

}  // namespace fa
