#include "random.h"

#include <cmath>

namespace fa {

uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  // splitmix64: a fixed, well-mixed function, the same on every platform.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<float> random_normal(int64_t n, uint64_t seed, float mean, float stddev) {
  // xorshift + Box-Muller, written out so every platform draws the same numbers
  // (std::normal_distribution is implementation-defined).
  std::vector<float> out(static_cast<size_t>(n));
  uint64_t s = derive_seed(seed, 0) | 1;
  auto next_uniform = [&s]() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (static_cast<double>(s >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // (0, 1)
  };
  const double two_pi = 6.283185307179586;
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = next_uniform(), u2 = next_uniform();
    double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(mean + stddev * r * std::cos(two_pi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(mean + stddev * r * std::sin(two_pi * u2));
  }
  return out;
}

}  // namespace fa
