// ch01_reduce_model.h: the reductions of 01/v3_warp_shuffle_vec4 on paper. A warp's 32 lanes each
// hold one register; __shfl_xor_sync(mask, v, offset) hands every lane the value of the lane whose
// number differs in the bit `offset`, all lanes at once. A reduction built from such exchanges
// leaves its result where the exchange pattern puts it, and the CPU can run the pattern lane by
// lane and look. A CPU exercise (notes/coursework.md): warp_all_reduce in ch01_reduce_model.cpp.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace fa::ch01 {

constexpr int kLanes = 32;
using WarpRegs = std::array<float, kLanes>;  // one register of every lane of a warp

// __shfl_xor_sync(0xffffffff, v, offset) for every lane at once: lane l gets lane (l ^ offset)'s
// value. Each call adds one to shuffles_issued(), so a test can count the exchanges.
WarpRegs shfl_xor(const WarpRegs& v, int offset);
int64_t& shuffles_issued();

// The warp's maximum (is_max) or sum, in EVERY lane, from shuffles alone: warp_max and warp_sum.
WarpRegs warp_all_reduce(WarpRegs v, bool is_max);

// block_reduce: the block's maximum or sum in every thread. v holds one value per thread
// (blockDim.x = v.size(), a multiple of 32, at most 1024), thread t in lane t % 32 of warp t / 32.
std::vector<float> block_all_reduce(const std::vector<float>& v, bool is_max);

}  // namespace fa::ch01
