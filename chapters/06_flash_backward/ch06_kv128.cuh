// ch06_kv128.cuh: what 06/v4 to 06/v13 share, the pieces around their dK/dV kernels. They all use
// FlashAttention-2's tile (06/v4's idea): a block owns Bc = 128 keys with 8 warps (16 keys a warp
// up to v10) and walks the Q tiles of Br = 64 queries (128 in v13 at D 64) that see them; dQ is
// added into an fp32 accumulator by atomics (06/v3's idea). The rung files tell the story and hold the measurements;
// v4_bc128_8warps.cu has its own kernel, v5-v10 run ch06_kv128_kernel.cuh's, v11-v13
// ch06_warp_tiles_kernel.cuh's. Device code and its launcher, in an anonymous namespace (each
// including .cu file compiles its own copy).
//
// The map:
//   kWarps .. kLdS   the tile and the shared-memory pitch of dS^T
//   kv128_backward<Rung>  the host side: checks, the D preprocess, the two launches
// (Params and convert_dq_kernel, the same as 06/v3's, are ch06_atomic_dq.cuh's.)
// Moving these pieces here from the rung files changed no instruction of the kernels (their PTX is
// the same before and after, virtual register names and anonymous-namespace tags normalised).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ch06_atomic_dq.cuh"  // Params, convert_dq_kernel
#include "ch06_preprocess.h"
#include "check.h"
#include "flash_bwd_tc.cuh"
#include "gpu.h"
#include "mma.cuh"
#include "registry.h"

namespace {

using fa::causal_last_key;
using fa::ceil_div;
using fa::bwd_tc::kPad;
using fa::bwd_tc::load_l2;
using fa::bwd_tc::load_tile_async;
using fa::bwd_tc::store_rows;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBr = 64;   // query rows per tile
constexpr int kBc = 128;  // key rows per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kLdS = kBr + kPad;  // row of the dS^T tile: kBr queries + padding
static_assert(kBc == kWarps * 16, "one warp per 16 keys");

// Shared memory: K_j, V_j (kBc rows) | Q_i x2 | dO_i x2 (kBr rows) | L_i*log2(e) x2 | D_i x2 |
// dS^T (kBc keys x kBr queries). 59 / 91 / 123 / 155 KiB at D = 32 / 64 / 96 / 128.
template <int D>
constexpr int smem_bytes_tiles() {
  return (2 * kBc + 4 * kBr) * (D + kPad) * 2;  // K_j, V_j; Q_i, dO_i double-buffered
}
template <int D>
constexpr int dkdv_smem_bytes() {
  return smem_bytes_tiles<D>() + 4 * kBr * int(sizeof(float)) + kBc * kLdS * 2;
}

// ---- the host side -------------------------------------------------------------------------
// A rung is a struct with kName (its registered name), kernel<T, D>(), its dK/dV kernel, and
// smem_bytes<D>(), the shared memory that kernel takes: KvRung's for the layout above (v4-v10).
struct KvRung {
  template <int D>
  static constexpr int smem_bytes() {
    return dkdv_smem_bytes<D>();
  }
};
template <class Rung, class T, int D>
void launch(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  Params p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.dout = a.dout;
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq_accum = a.workspace;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;

  const int64_t n_kt = ceil_div(s.seq_k, kBc);
  FA_REQUIRE(n_kt * s.bh() <= INT32_MAX, "batch * heads * key tiles must fit in gridDim.x");

  if (n_kt > 0 && s.bh() > 0) {
    constexpr int kSmem = Rung::template smem_bytes<D>();
    const auto kernel = Rung::template kernel<T, D>();
    FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    p.n_tiles = n_kt;
    kernel<<<static_cast<unsigned>(n_kt * s.bh()), kThreads, kSmem, stream>>>(p);
    FA_CHECK_LAUNCH();
  }
  // dQ = dQaccum * scale, every element (rows no key tile reached are 0 in the workspace).
  const int64_t n4 = s.q_numel() / 4;
  if (n4 > 0) {
    constexpr int kConvThreads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(n4, kConvThreads), int64_t(1) << 20);
    convert_dq_kernel<T><<<static_cast<unsigned>(blocks), kConvThreads, 0, stream>>>(
        a.workspace, static_cast<T*>(a.dq), n4, p.scale);
    FA_CHECK_LAUNCH();
  }
}

// The dynamic shared memory one block may opt in to on the current device (gpu.h).
using fa::smem_optin_bytes;

template <class Rung, int D>
void run_head_dim(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  // v4-v10 need 155 KiB per block at D = 128, v11-v13 171 KiB (and v13 178 KiB at D = 64): an
  // H100 (227 KiB) has it, an A100 (163 KiB) only for the first, sm_86/89 (99 KiB) for neither.
  // Refuse before anything runs, rather than fail in cudaFuncSetAttribute.
  constexpr size_t kSmem = size_t(Rung::template smem_bytes<D>());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    std::string(Rung::kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  FA_REQUIRE(a.workspace != nullptr,
             std::string(Rung::kName) + " needs the fp32 workspace (dQ accumulator)");

  // 1. D = rowsum(dO * O), before the kernel that reads it (same stream).
  fa::launch_delta_preprocess(a.o, a.dout, a.delta, a.shape, a.dtype, stream);

  // 2. dK, dV and the dQ atomics, 3. dQ from the accumulator.
  if (a.dtype == fa::DType::BF16)
    launch<Rung, __nv_bfloat16, D>(a, stream);
  else
    launch<Rung, __half, D>(a, stream);
}

// The registered entry point of a rung. Head dim 256 is not instantiated: K_j and V_j alone
// would take 2 x 128 x 264 x 2 B = 132 KiB, 264 KiB with Q_i and dO_i double-buffered, past the
// 227 KiB a block can have on an H100; 06/v3 serves D = 256.
template <class Rung>
void kv128_backward(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  const fa::AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(Rung::kName) + " takes bf16 and fp16 only");
  switch (s.head_dim) {  // every D here is a multiple of 16, which the mma loops need
    case 32:
      return run_head_dim<Rung, 32>(a, stream);
    case 64:
      return run_head_dim<Rung, 64>(a, stream);
    case 96:
      return run_head_dim<Rung, 96>(a, stream);
    case 128:
      return run_head_dim<Rung, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(Rung::kName) +
                                  " is instantiated for head_dim 32, 64, 96 and 128 only (06/v3 "
                                  "has 256)");
  }
}

}  // namespace
