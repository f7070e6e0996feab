// ch03_common.cuh: the few device helpers the GEMM kernels share. (Their ceil_div is fa::ceil_div,
// from shapes.h.)
#pragma once
#include <cstdint>

#include "shapes.h"

namespace fa::ch03 {

// Blocks along y (rows of C) are limited to 65535; a launcher checks it before launching.
constexpr int64_t kMaxGridY = 65535;

}  // namespace fa::ch03
