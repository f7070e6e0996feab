// random.h: seeded, reproducible inputs. Normal draws with a non-zero mean: a zero-mean output
// makes relative error meaningless and can hide sign bugs. Programs print the seed they used.
#pragma once
#include <cstdint>
#include <vector>

namespace fa {

constexpr float kDefaultInputMean = 0.5f;
constexpr float kDefaultInputStd = 1.0f;

std::vector<float> random_normal(int64_t n, uint64_t seed, float mean = kDefaultInputMean,
                                 float stddev = kDefaultInputStd);

// Derive independent streams for several tensors from one printed seed.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

}  // namespace fa
