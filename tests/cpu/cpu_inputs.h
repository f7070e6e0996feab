// cpu_inputs.h: random Q, K, V for the CPU tests of the attention models.
#pragma once
#include <cstdint>
#include <vector>

#include "random.h"
#include "shapes.h"

namespace fa_test {

struct Inputs {
  std::vector<float> q, k, v;
};

// Standard-normal Q, K and V of shape s, each from its own stream of one seed, so that a test
// names its inputs with one number and two tests with the same number see the same tensors.
inline Inputs draw(const fa::AttentionShape& s, uint64_t seed) {
  return {fa::random_normal(s.q_numel(), fa::derive_seed(seed, 1)),
          fa::random_normal(s.k_numel(), fa::derive_seed(seed, 2)),
          fa::random_normal(s.k_numel(), fa::derive_seed(seed, 3))};
}

}  // namespace fa_test
