// 08/v3_mma_split: 08/v2_parallel_merge with a split kernel on tensor cores: S = Q K^T and
// O += P V on mma.sync m16n8k16, each warp its own split. fp16 and bf16 only (fp32 stays on v1 and
// v2: mma.sync takes no fp32 inputs), D 64 and 128, grouped-query attention included.
//
// What changed, and why. On the grouped shape (B 8, H 32, H_kv 8: 4 query rows per K/V head,
// 32768 keys, bf16, D 128) v1's split kernel streams at 2.05 TB/s of DRAM (Nsight Compute, H100,
// 2026-11-23: 524.5 us, grid 384 = 64 x 6 splits, 161 registers, 3 blocks per SM), where
// FlashAttention-2 takes 355.3 us at 3.02 TB/s. Ours is instruction-bound (issue slots 53.6% busy):
// every K/V tile serves 4 rows, so phase 1 (S, Q read from shared memory as fp32 for every FMA)
// and phase 3 (P V, 32 chunks of V per thread) do 4x the CUDA-core work of the multi-head shape.
// FA2 puts the 4 rows of the group into a 64-row tile (60 rows wasted) and still streams at 90%
// of DRAM peak, because its S and P V run on tensor cores: the wasted rows cost nothing that
// matters. Here the rows of one K/V head (group * seq_q, at most 16 per tile) are padded to one
// m16 tile, and a 16-key step costs a warp 16 mma for S and 16 for P V whatever the rows.
//
// The map. A block is one warp (32 threads) and owns one (sequence, K/V head, tile of 16 query
// rows of its group, split of the keys); the plan (ch08_split_kv.h) counts these one-warp blocks
// against how many the GPU holds at once, so "warps x blocks" is simply blocks. The warp:
//   1. loads its 16 rows' Q straight from global memory into A fragments (D/16 of them, 4 x 32-bit
//      words per lane each: 32 registers at D 128), rows past the group's zero, kept for the
//      whole kernel (Q is read once, a few KB against megabytes of K/V);
//   2. streams its split through a kStages-deep ring of shared-memory stages, each kKeys = 16 keys
//      of K and V in padded rows (common/attention_tiles.cuh: cp.async 16-byte chunks, keys past
//      the split zero-filled); the copies of the next kStages - 1 steps are in flight while one is
//      computed; only cp.async.wait_group and __syncwarp order them, no block barrier;
//   3. per step: S = Q K^T (16 x 16, two n8 tiles; K by ldmatrix, the non-transposed B operand),
//      scaled to log2 units, masked (-inf past the split / seq_k, causal bottom-right per row,
//      padding rows see nothing); the online softmax on the accumulator fragments (row max over
//      the quad, exp2, alpha = 2^(m_old - m_new)); O = alpha O + P V with P packed to 16 bits
//      straight from the S registers into the A fragment, V by ldmatrix .trans;
//   4. writes each real row's partial (m, l, o) to the workspace (padding rows write nothing), or
//      with a single split O and L directly; a row that saw no key gives (-inf, 0, 0).
// v2's merge (ch08_parallel_merge.cuh) folds the splits.
//
// Registers: the O accumulator is 16 x D fp32 over 32 lanes (64 at D 128), the Q fragments 32,
// S 8; ptxas' count is in notes/08_decoding.md. Shared memory: kStages x (K + V) x 16 keys x
// (D + 8) x 2 bytes = 34816 B at D 128 (18432 at D 64), under the 48 KiB default (no opt-in):
// 6 blocks (warps) per H100 SM, 4 on an A100, 2 on sm_86/89. Bytes in flight: 3 stages of 16 keys
// x 2 x 256 B = 24 KiB per warp, about 144 KiB per H100 SM, well above the ~30 KB an SM needs
// in flight to keep HBM busy (bandwidth x latency / SMs).
//
// Speed (NVIDIA H100 80GB HBM3, 2026-11-23, fourth session, call 3 at commit f7dd6aa;
// bench/compare_decode.py, bf16 D 128, seq_q 1, read-only L2 flush, copy ceiling 2852 GB/s in the
// same run, PyTorch SDPA on the same shapes: notes/measured/h100-2026-11-23d/call3_decode.log):
// B 8, H 32, H_kv 8 (GQA), seq_k 32768: 2690 GB/s (94.3% of copy; FlashAttention-2 2987, cuDNN
// 3035; v1 2604, v2 2505), the best of ours on that shape: above 90% of copy, but 0.90x FA2's
// speed. Nsight Compute in the same call (table at the end of call3_sdpa.log): this split kernel
// took 397.60 us at 2.70 TB/s of DRAM (v1's 524.48 us at 2.05, FA2's 355.33 us at 3.02: call 1
// of the session, call1_ncu_ours_decode_gqa.txt, call1_ncu_fa2_decode_gqa.txt), tensor pipe
// 9.53% busy, 230 registers, 768 one-warp blocks, achieved occupancy 8.53% (about 5.5 warps per
// SM). S and P V, the work that made v1 instruction-bound, run on the tensor pipe now (v3's
// issue-slot use was not recorded: that the bound is gone is read from the time). What holds
// DRAM at 2.70 TB/s was not profiled (no warp-stall breakdown). The candidates, in
// notes/08_decoding.md with the test for each: too few warps per SM to hide each warp's serial
// chain (ldmatrix, the 8 dependent MMAs of S, shuffles, exp2f, P V, the rescale of O); one wave
// of 5 or 6 warps per SM; exp2f rather than ex2.approx.
// With one real row per m16 tile v3 is slower than v2 (why was not profiled): B 8, H 32, seq_k
// 32768: 2847 (99.8%; v2 3048); B 1, H 16, seq_k 131072: 2722 (95.5%; v2 2902;
// notes/measured/h100-2026-11-23d/call3_bench.log).
// Tests on that GPU (call 3): the default label, 333 of 333, with v3's DecodingKernels tests
// (ragged caches and GQA groups, every dtype, 131072 keys, many rows per K/V head, B * H past
// 65535; notes/measured/h100-2026-11-23d/call3_ctest.log); compute-sanitizer memcheck,
// racecheck, synccheck and initcheck clean; the long tests (Q, and K/V, past 2^31 elements)
// passed (both in the footer of call3_sdpa.log).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention_tiles.cuh"      // padded tiles and their cp.async loader
#include "ch08_mma_split.cuh"       // what v3-v6 share: rows, Q fragments, keys, write-out
#include "ch08_parallel_merge.cuh"  // v2's merge
#include "ch08_split_kv.cuh"        // Params, make_params, resident_blocks
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace {

// A block is one warp (kWarp threads) and one m16 tile of rows (kTileRows); a step is kKeys keys
// (ch08_mma_split.cuh).
constexpr int kStages = 4;  // shared-memory stages per warp (kStages - 1 in flight)

template <int D>
using MmaLayout = Ring<D, kKeys, kStages>;  // ch08_mma_split.cuh
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
  // its keys (ch08_mma_split.cuh).
  const MmaTile t = mma_tile(p, blockIdx.x);
  int64_t out_row[2], last[2];
  uint32_t qf[D / 16][4];
  mma_rows<T, D>(p, t, g, t4, out_row, last, qf);
  int64_t k_begin, k_end;
  mma_keys(p, t, k_begin, k_end);
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  const T* kbase = static_cast<const T*>(p.k) + t.bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + t.bkv * p.seq_k * D;

  // Step `st` into stage st % kStages; one commit group per step, an empty one past the last step,
  // so that "wait until kStages - 1 groups are pending" always means "step st has landed".
  auto issue = [&](int64_t st) {
    if (st < nsteps) {
      T* sk = stages + int(st % kStages) * Lay::kStageElems;
      const int64_t k0 = k_begin + st * kKeys;
      fa::tiles::load_tile_async<D, kKeys, kWarp>(sk, kbase, k0, k_end, lane);
      fa::tiles::load_tile_async<D, kKeys, kWarp>(sk + kKeys * kPitch, vbase, k0, k_end, lane);
    }
    fa::mma::cp_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) issue(st);

  // ldmatrix lane offsets, as in chapter 05 (ch05_mma_fwd.cuh). K: x4 = keys 0-7 / 8-15 times
  // columns 0-7 / 8-15 of a k16 slice (b of n8 tiles 0 and 1). V (.trans): x4 = keys 0-7 / 8-15
  // times columns 0-7 / 8-15 of a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1).
  const int k_ld_row = (lane % 8) + 8 * (lane / 16), k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1), v_ld_col = 8 * (lane / 16);

  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = 0.0f;
  float m[2] = {kNegInf, kNegInf};  // running max, log2 units (rows g, g + 8)
  float l[2] = {0.0f, 0.0f};        // this lane's share of the running sum (its columns)

  for (int64_t st = 0; st < nsteps; ++st) {
    issue(st + kStages - 1);  // into the stage step st - 1 used: every lane is done with it
    fa::mma::cp_async_wait<kStages - 1>();
    __syncwarp();  // step st's copies, issued by all lanes, are visible to every lane
    const T* sK = stages + int(st % kStages) * Lay::kStageElems;
    const T* sV = sK + kKeys * kPitch;

    // S = Q K^T: 16 rows x 16 keys, two n8 accumulator tiles.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kb[4];
      fa::mma::ldmatrix_x4(kb, sK + k_ld_row * kPitch + kk * 16 + k_ld_col);
      const uint32_t b_lo[2] = {kb[0], kb[1]}, b_hi[2] = {kb[2], kb[3]};
      fa::mma::mma_16816<T>(s[0], qf[kk], b_lo);
      fa::mma::mma_16816<T>(s[1], qf[kk], b_hi);
    }

    // Scale to log2 units and mask: s[nt][e] is row g + 8 (e / 2), key 8 nt + 2 t4 + e % 2.
    const int64_t k0 = k_begin + st * kKeys;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = k0 + 8 * nt + 2 * t4 + (e & 1);
        s[nt][e] = (key < k_end && key <= last[e / 2]) ? s[nt][e] * p.scale_log2 : kNegInf;
      }

    // The online softmax of both rows over this step: the quad's 4 lanes hold a row's 16 keys.
    float m_use[2], alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(
          m[h], fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1])));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      m_use[h] = mx == kNegInf ? 0.0f : mx;  // nothing seen yet: no -inf - -inf
      alpha[h] = exp2f(m[h] - m_use[h]);
      m[h] = mx;
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = exp2f(s[nt][e] - m_use[e / 2]);  // masked: 0
#pragma unroll
    for (int h = 0; h < 2; ++h)
      l[h] = l[h] * alpha[h] + ((s[0][2 * h] + s[0][2 * h + 1]) + (s[1][2 * h] + s[1][2 * h + 1]));

      // O = alpha O + P V: P packed to 16 bits is the A fragment of this k16 slice of keys.
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      o[dn][0] *= alpha[0];
      o[dn][1] *= alpha[0];
      o[dn][2] *= alpha[1];
      o[dn][3] *= alpha[1];
    }
    const uint32_t pa[4] = {
        fa::mma::pack2<T>(s[0][0], s[0][1]), fa::mma::pack2<T>(s[0][2], s[0][3]),
        fa::mma::pack2<T>(s[1][0], s[1][1]), fa::mma::pack2<T>(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      fa::mma::ldmatrix_x4_trans(vb, sV + v_ld_row * kPitch + dp * 16 + v_ld_col);
      const uint32_t b_lo[2] = {vb[0], vb[1]}, b_hi[2] = {vb[2], vb[3]};
      fa::mma::mma_16816<T>(o[2 * dp], pa, b_lo);
      fa::mma::mma_16816<T>(o[2 * dp + 1], pa, b_hi);
    }
    __syncwarp();  // every lane's ldmatrix of this stage is done before it is refilled
  }
  fa::mma::cp_async_wait<0>();  // nothing of this warp's left in flight (empty groups only)

  // Epilogue: the row sums over the quad, then each real row's partial (or O and L).
  quad_sum(l);
  write_rows<T, D>(p, t, out_row, g, t4, m, l, o);
}

struct Rung {
  static constexpr const char* kName = "08/v3_mma_split";
  template <class T, int D>
  static void launch(const AttentionFwdArgs& a, cudaStream_t stream);
};

template <class T, int D>
void Rung::launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  launch_warp_split<T, D>(mma_split_kernel<T, D>, MmaLayout<D>::kSmem, a, stream);
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {"08/v3_mma_split",
             mma_split_forward<Rung>,
             "v2 with the split kernel on tensor cores: one warp per split, the group's rows "
             "padded to an m16 tile, S and P V on mma.sync, a 4-stage cp.async K/V ring per warp, "
             "no block barrier; v2's merge",
             {DType::F16, DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true});
