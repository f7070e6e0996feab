// ch03_common.cuh: the few device helpers the GEMM kernels share.
#pragma once
#include <cstdint>

#include "shapes.h"

namespace fa::ch03 {

constexpr FA_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks along y (rows of C) are limited to 65535; a launcher checks it before launching.
constexpr int64_t kMaxGridY = 65535;

}  // namespace fa::ch03
