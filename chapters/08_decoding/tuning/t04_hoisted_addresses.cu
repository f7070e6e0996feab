// 08/t04_hoisted_addresses: 08/v3_mma_split with its shared- and global-memory addresses computed
// once per lane, before the loop over steps. A tuning step (tuning/README.md): measured, 1% faster,
// and the evidence that v3's arithmetic is not its bound; the main path's v4_block_stream.cu keeps
// the idea (its copies need it even more: 128 threads, 4 passes per step).
//
// Why. Nsight Compute on v3 at the grouped shape (B 8, H 32, H_kv 8, seq_k 32768, bf16, D 128;
// H100, 2026-11-23, notes/measured/h100-2026-11-23d/ncu_dec_v3_gqa.txt) counts 5.45 cycles
// per issued instruction with about 1.4 warps per scheduler; its stall reasons are led by short
// scoreboard (ldmatrix, shuffles, exp2) and long scoreboard (waiting for the copies), then
// "selected" (issuing) and "wait" (fixed-latency dependencies): the warp seemed to spend most of
// its time on its own chain rather than on memory. In v3's PTX a step is about 445 instructions,
// and 189 of them issue the step's 16 cp.async of K and V: fa::tiles::load_tile_async computes
// every chunk's row, column, 64-bit source and bounds test from scratch (11 instructions per
// copy), and every ldmatrix address is rebuilt from a generic pointer.
//
// What changed. The lane's copy plan is fixed: with kChunks = D / 8 chunks per row and 32 lanes,
// lane copies chunk lane % kChunks of rows lane / kChunks + kRowsPerPass * i. Its source and
// destination for pass i are a base plus a compile-time constant, so ptxas folds the constant into
// the instruction. A step adds st * kKeys * D to the source and the stage's offset to the 32-bit
// destination. Only the split's last step can hold fewer than kKeys keys; it alone takes v3's
// bounded loader (zero-filled rows past k_end). The ldmatrix addresses get the same treatment: a
// 32-bit base per lane, plus the stage, plus a constant per fragment. Nothing else differs from
// v3: same map, same ring, the same floating-point arithmetic in the same order.
//
// What it bought: Nsight Compute has the kernel at 393.0 us, 2.73 TB/s of DRAM, 41.8 M warp
// instructions, 238 registers (notes/measured/h100-2026-11-23e/ncu_v4_hoisted_addresses.txt;
// v3 397.6 us at 2.70 TB/s). Fewer instructions did not make it faster, and the variants that
// removed more of them did not either (tuning/README.md): the step's arithmetic is not what holds
// DRAM at 2.7 TB/s.
//
// Speed (H100 80GB HBM3, 2026-11-23): bf16 D 128, seq_q 1, B 8 H 32 H_kv 8 seq_k 32768: 2742 GB/s,
// 96.0% of copy; v3 2705, FlashAttention-2 3016
// (notes/measured/h100-2026-11-23e/decode_v5_v6_fold.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention_tiles.cuh"  // padded tiles and their cp.async loader
#include "split_kv.cuh"         // Params, make_params, resident_blocks
#include "ch08_tuning.cuh"  // v3's rows, Q fragments and keys; the copy plan, the step, write-out
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace {

// This step's flags (ch08_tuning.cuh): full-step copies without the prefetch hint.
struct Steps {
  static constexpr bool kL2Hint = false;
};

// A block is one warp (kWarp threads) and one m16 tile of rows (kTileRows); a step is kKeys keys
// (ch08_tuning.cuh).
constexpr int kStages = 4;  // shared-memory stages per warp (kStages - 1 in flight)

template <int D>
using MmaLayout = Ring<D, kKeys, kStages>;  // ch08_tuning.cuh
static_assert(MmaLayout<128>::kSmem <= 48 * 1024,
              "no opt-in to more than 48 KiB of shared memory here");

template <class T, int D>
__global__ void __launch_bounds__(kWarp) mma_split_kernel(Params p) {
  using Lay = MmaLayout<D>;
  constexpr int kPitch = Lay::kPitch;
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const stages = reinterpret_cast<T*>(smem);

  const int lane = threadIdx.x;
  const int g = lane / 4, t4 = lane % 4;  // this lane holds rows g and g + 8 of every fragment

  // Which (sequence, K/V head), row tile and split this warp owns; its two rows and Q fragments;
  // its keys (ch08_tuning.cuh).
  const MmaTile t = mma_tile(p, blockIdx.x);
  int64_t out_row[2], last[2];
  uint32_t qf[D / 16][4];
  mma_rows<T, D>(p, t, g, t4, out_row, last, qf);
  int64_t k_begin, k_end;
  mma_keys(p, t, k_begin, k_end);
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  const T* kbase = static_cast<const T*>(p.k) + t.bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + t.bkv * p.seq_k * D;

  // The copies, planned once (RingCopy, ch08_tuning.cuh: this step's idea).
  const RingCopy<T, D, kKeys, kStages, kWarp, Steps> copy(stages, kbase, vbase, k_begin, k_end,
                                                          nsteps, lane);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) copy.issue(st);

  // ldmatrix lane offsets, as in chapter 05. K: x4 = keys 0-7 / 8-15 times
  // columns 0-7 / 8-15 of a k16 slice (b of n8 tiles 0 and 1). V (.trans): x4 = keys 0-7 / 8-15
  // times columns 0-7 / 8-15 of a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1).
  // As 32-bit shared addresses of stage 0, in bytes: a step adds its stage's offset, a fragment a
  // compile-time constant.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16), k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1), v_ld_col = 8 * (lane / 16);
  const uint32_t k_ld = fa::mma::smem_addr(stages) + uint32_t(k_ld_row * kPitch + k_ld_col) * 2;
  const uint32_t v_ld = k_ld - uint32_t(k_ld_row * kPitch + k_ld_col) * 2 + Lay::kVBytes +
                        uint32_t(v_ld_row * kPitch + v_ld_col) * 2;

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  float m[2] = {kNegInf, kNegInf};  // running max, log2 units (rows g, g + 8)
  float l[2] = {0.0f, 0.0f};        // this lane's share of the running sum (its columns)

  for (int64_t st = 0; st < nsteps; ++st) {
    copy.issue(st + kStages - 1);  // into the stage step st - 1 used: every lane is done with it
    fa::mma::cp_async_wait<kStages - 1>();
    __syncwarp();  // step st's copies, issued by all lanes, are visible to every lane
    const uint32_t stage = uint32_t(st % kStages) * Lay::kStageBytes;

    const int64_t k0 = k_begin + st * kKeys;
    mma_step<T, D>(qf, k_ld + stage, v_ld + stage, k0, k_end, last, p.scale_log2, t4, m, l, o);
    __syncwarp();  // every lane's ldmatrix of this stage is done before it is refilled
  }
  fa::mma::cp_async_wait<0>();  // nothing of this warp's left in flight (empty groups only)

  // Epilogue: the row sums over the quad, then each real row's partial (or O and L).
  quad_sum(l);
  write_rows<T, D>(p, t, out_row, g, t4, m, l, o);
}

struct Rung {
  static constexpr const char* kName = "08/t04_hoisted_addresses";
  template <class T, int D>
  static void launch(const AttentionFwdArgs& a, cudaStream_t stream);
};

template <class T, int D>
void Rung::launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  launch_warp_split<T, D>(mma_split_kernel<T, D>, MmaLayout<D>::kSmem, a, stream);
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {"08/t04_hoisted_addresses",
             mma_split_forward<Rung>,
             "08/v3 with every copy and ldmatrix address a per-lane base plus a constant: a full "
             "step issues its cp.async with no address arithmetic; only a split's last step "
             "tests rows",
             {DType::F16, DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true});
