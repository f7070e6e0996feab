// ch09_bwd_args.h: the checks of a packed backward's arguments that chapter 09's mma.sync rungs
// reading rows of any length (bwd_v3_varlen_any_head_dim and the rungs after it) make the same
// way, before anything runs: the fp32 dQ workspace and the offset tables are there, and at a head
// dim that is a multiple of 8, where the rows go by 16-byte copies, every 16-bit tensor is 16-byte
// aligned (off the step of 8 the rows go element by element and need only their elements'
// alignment). Host code.
#pragma once
#include <cstdint>
#include <string>

#include "check.h"
#include "registry.h"

namespace fa::ch09 {

inline void require_rows_of_d_bwd_args(const VarlenBwdArgs& a, const std::string& name) {
  FA_REQUIRE(a.workspace != nullptr, name + " needs the fp32 workspace (dQ accumulator)");
  FA_REQUIRE(a.cu_seqlens_q != nullptr && a.cu_seqlens_k != nullptr,
             name + " needs cu_seqlens_q and cu_seqlens_k on the device");
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  FA_UNSUPPORTED_IF(
      a.shape.head_dim % 8 == 0 && !(aligned16(a.q) && aligned16(a.k) && aligned16(a.v) &&
                                     aligned16(a.dout) && aligned16(a.dk) && aligned16(a.dv)),
      name +
          ": at a head dim that is a multiple of 8, Q, K, V, dO, dK and dV are read "
          "and written 16 bytes at a time and must be 16-byte aligned");
}

}  // namespace fa::ch09
