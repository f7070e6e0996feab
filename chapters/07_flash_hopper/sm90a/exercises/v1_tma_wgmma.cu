// GENERATED from chapters/07_flash_hopper/sm90a/v1_tma_wgmma.cu by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// 07/v1_tma_wgmma: the smallest FlashAttention forward built from Hopper's own instructions
// (sm_90a: H100, H200). The algorithm is chapter 05's (tiles of Q, K, V, online softmax, P kept in
// registers); what changed vs chapter 05 is how the tensor cores are fed.
//
// What changed vs chapter 05, and why it pays
//   Chapter 05's kernels run on mma.sync, the Ampere instruction: a warp multiplies 16 x 8 x 16 at
//   a time and every operand passes through registers (ldmatrix from shared memory first), so the
//   loads, their addresses and the MMAs share the same warps' issue slots. Its final rung,
//   05/v5_fewer_instructions, reaches 381 TFLOP/s at bf16 D 128 N 8192 on an H100, 39% of the
//   989 TFLOP/s dense peak and ahead of FlashAttention-2 on the same instruction (chapter 03's
//   GEMM on mma.sync: 261 TFLOP/s; with wgmma: 701). Two Hopper instructions remove the detour:
//   * wgmma: four warps (a warpgroup) issue one asynchronous 64 x N x 16 MMA that reads B (and
//     optionally A) straight from shared memory through a 64-bit descriptor. S = Q K^T reads both
//     Q and K from shared memory (K-major: a row of K is a column of K^T); O += P V takes P from
//     registers (the register-A form) and V from shared memory MN-major (V's rows are k, its
//     columns n: the "transposed B" bit).
//   * TMA: one thread asks the copy engine for a whole box of Q, K or V; it lands in the 128-byte
//     swizzled layout wgmma reads without bank conflicts, zero-filled past the end of a head, and
//     the bytes are counted on an mbarrier. No thread computes an address or a predicate for it.
//
// Map of the kernel
//   block       one warpgroup (128 threads), Br = 64 query rows of one (batch, head); grid =
//               q tiles x batch*heads on blockIdx.x (no 65535 limit), last q tile first
//   tiles       Bc = 128 keys for D = 64 and 128, 64 for D = 256 (register budget:
//               hopper_attention.cuh)
//   pipeline    K and V tiles in a 2-stage ring: tile j+2 is requested (by thread 0) as soon as
//               the whole warpgroup is done with tile j; the copy of j+1 overlaps the math of j.
//               One mbarrier per stage counts the K and V bytes.
//   per tile    S = Q K^T (D/16 wgmma m64nBc k16, wait), mask (diagonal and ragged tiles only),
//               online softmax in registers (m, l per row, exp2 with the scale in the FMA as in
//               chapter 05), O *= alpha, P -> bf16/fp16 A fragments, O += P V (Bc/16 wgmma m64nDk16,
//               wait)
//   registers   S: Bc/2 fp32 per thread, O: D/2, P: Bc/4 (see hopper_attention.cuh for the table)
//   smem        Q 64 x D + 2 stages x (K + V) Bc x D, 16-bit: D 64: 72 KiB, D 128: 144 KiB,
//               D 256: 160 KiB of tiles; the block asks for 1 KiB more (3 mbarriers and the
//               slack of the 1024-byte alignment): 74,776 bytes, 73 KiB, at D 64
//   ragged      TMA zero-fills rows past seq_q / seq_k; keys past seq_k are masked to -inf; O and
//               L stores are predicated on the row. Causal: tiles above the diagonal are never
//               loaded (kv_tiles.h), the diagonal tiles are masked, rows that see no key get
//               O = 0 and L = -inf.
//   head dims   D = 64, 128, 256 are compiled; a multiple of 8 between them (80, 96, 192, ...)
//               runs the next D, its columns past the real head dim d zero-filled by TMA (the maps
//               describe rows of d elements) and not stored (store_o_l's row length d):
//               head_dim_instance in hopper_attention.cuh, the chapter README's "Head dims
//               between the instances".
//   fallback    pointers TMA cannot take (not 16-byte aligned), seq_k = 0 or sizes near 2^31 run
//               05/v5_fewer_instructions through the registry (it takes every head dim of these).
//
// Why it is not yet fast (the next rungs): the tensor cores sit idle during the softmax, because
// one warpgroup does everything in sequence: wait for S, exponentiate (MUFU: 16 ex2 per clock
// per SM against ~4096 dense 16-bit FLOPs per clock per SM for wgmma, 989 TFLOP/s / (132 SMs x
// 1.83 GHz): for D = 128 a 64 x 128 tile costs 4 * 64 * 128 * 128 = 4.2 M FLOPs of MMA, ~1 k
// clocks, but 64 * 128 = 8192 exponentials, ~0.5 k clocks, i.e. the exponentials take about
// half the time the MMAs do), then P V. And the TMA issue sits in the same warps' instruction
// stream. v2 gives the loads to a producer warpgroup and uses two consumer warpgroups.
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 404.4 TFLOP/s, FlashAttention-2 346.9
// (notes/measured/h100-2026-11-23/sdpa_fwd_table.md).
//
// EXERCISE-KERNELS: 07/v1_tma_wgmma
#include <cuda.h>

#include "hopper_attention.cuh"
#include "ch07_launch.cuh"

namespace fa::ch07 {
namespace {

constexpr int kThreads = 128;  // one warpgroup
constexpr int kBr = kRowsPerWarpgroup;
constexpr int kStages = 2;

template <int D>
struct V1Smem {
  static constexpr int kQBytes = kBr * D * 2;
  static constexpr int kKVBytes = Tiles<D>::kKVBytes;
  static constexpr int kKOffset = kQBytes;                       // K stage s at + s * kKVBytes
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;  // V stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (1 + kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_v1_kernel(const __grid_constant__ CUtensorMap tm_q,
                        const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_v, const Params p) {
  using Tl = Tiles<D>;
  using Sm = V1Smem<D>;
  constexpr int kBc = Tl::kBc;
  FA_TL_INIT(threadIdx.x / 128);  // the timeline build's phase marks (ch07_timeline.cuh)
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume atoms start there.
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sQ = smem;
  auto sK = [&](int s) { return smem + Sm::kKOffset + s * Sm::kKVBytes; };
  auto sV = [&](int s) { return smem + Sm::kVOffset + s * Sm::kKVBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* kv_full = q_full + 1;  // one per stage: K and V bytes of the tile have landed

  const int t = threadIdx.x, q = t % 4;
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const KvTiles range = kv_tiles(q0, kBr, p.seq_q, p.seq_k, kBc, p.causal);
  const int n_tiles = int(range.visit), n_unmasked = int(range.unmasked);

  // Thread 0 asks TMA for K and V tile j into stage j % kStages: D / 64 boxes of Bc rows each.
  auto request_kv = [&](int j) {
    const int s = j % kStages;
    hopper::mbar_arrive_expect_tx(&kv_full[s], 2 * Sm::kKVBytes);
    for (int c = 0; c < Tl::kStrips; ++c) {
      hopper::tma_load_3d(sK(s) + c * kBc * 128, &tm_k, &kv_full[s], c * kSwizzleCols, j * kBc,
                          int(bh));
      hopper::tma_load_3d(sV(s) + c * kBc * 128, &tm_v, &kv_full[s], c * kSwizzleCols, j * kBc,
                          int(bh));
    }
  };

  if (t == 0) {
    hopper::mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) hopper::mbar_init(&kv_full[s], 1);
    hopper::mbar_fence_init();
    hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
    for (int c = 0; c < Tl::kStrips; ++c)
      hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols, int(q0), int(bh));
    for (int j = 0; j < kStages && j < n_tiles; ++j) request_kv(j);
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  // This thread's two rows and the last key each may see.
  const int64_t row0 = q0 + 16 * (t / 32) + (t % 32) / 4;
  const int64_t last_key[2] = {last_visible_key(row0, p.seq_q, p.seq_k, p.causal),
                               last_visible_key(row0 + 8, p.seq_q, p.seq_k, p.causal)};
  const float c = fabsf(p.scale_log2);

  float o[Tl::kOAcc];
#pragma unroll
  for (int i = 0; i < Tl::kOAcc; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  FA_TL_START(tl_q);
  hopper::mbar_wait(q_full, 0);
  FA_TL_END(tl_q, kWaitQ, 0);
  for (int j = 0; j < n_tiles; ++j) {
    const int s = j % kStages;
    FA_TL_START(tl_kv);
    // TODO(exercise kv-ring-parity): wait until stage s holds K and V of tile j. Every fill of a stage completes one phase of its mbarrier, and the wait names the parity of the phase it waits for: how many times was stage s filled before tile j? A wrong parity returns at once (a race: S from a tile still in flight) or never (a hang)
    FA_TL_END(tl_kv, kWaitKV, j);

    // ---- S = Q K_j^T: 64 x Bc, D / 16 k-steps, both operands K-major in shared memory.
    float sc[Tl::kSAcc];
    hopper::wgmma_fence();
    FA_TL_START(tl_qk);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kBc, T, 0>(sc, desc_k_major<kBr>(sQ, kk), desc_k_major<kBc>(sK(s), kk),
                                  kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(sc);
    FA_TL_END(tl_qk, kQK, j);

    // ---- Softmax in registers.
    FA_TL_START(tl_softmax);
    negate_if(sc, p.scale_log2 < 0.0f);
    if (j >= n_unmasked) mask_tile(sc, int64_t(j) * kBc, last_key, q);
    float alpha[2];
    online_softmax(sc, m, l, c, alpha);
    // TODO(exercise rescale-and-pack-p): (1) O was accumulated against the old row maximum: bring this thread's O accumulators to the new one, each with the factor of its own row (which accumulator holds which row: the wgmma accumulator layout). (2) Turn P (fp32, in sc) into the 16-bit register A fragments of O += P V without moving a value between threads: the layouts are such that each thread already holds the values its fragments need. The two layouts: exercises/HINTS.md
    uint32_t pf[Tl::kPSlices][4] = {};  // stand-in: P = 0 and O never rescaled
    FA_TL_END(tl_softmax, kSoftmax, j);

    // ---- O += P V_j: Bc / 16 k-steps, P from registers, V MN-major in shared memory.
    hopper::fence_registers(o);
    hopper::wgmma_fence();
    FA_TL_START(tl_pv);
#pragma unroll
    for (int kk = 0; kk < Tl::kPSlices; ++kk)
      hopper::wgmma_rs<D, T, 1>(o, pf[kk], desc_v<D>(sV(s), kk), 1);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(o);
#pragma unroll
    for (int kk = 0; kk < Tl::kPSlices; ++kk) hopper::fence_registers(pf[kk]);
    FA_TL_END(tl_pv, kPV, j);

    // ---- Stage s is free once every warp's wgmmas on it are done: refill it with tile j + 2.
    FA_TL_START(tl_sync);
    __syncthreads();
    FA_TL_END(tl_sync, kSync, j);
    if (t == 0 && j + kStages < n_tiles) request_kv(j + kStages);
  }

  FA_TL_START(tl_epilogue);
  store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + bh * p.seq_q * p.d, p.lse + bh * p.seq_q, q0,
                  p.seq_q, t, p.d);
  FA_TL_END(tl_epilogue, kEpilogue, n_tiles);
}

// ---- Host side: ch07_launch.cuh checks the arguments, picks T and D, and calls Launch<T, D>::run.
constexpr const char* kName = "07/v1_tma_wgmma";

template <class T, int D>
struct Launch {
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    launch_fwd<flash_fwd_v1_kernel<T, D>, D, kBr, kThreads, V1Smem<D>::kBytes>(kName, a, stream);
  }
};

void attention_fwd_v1(const AttentionFwdArgs& a, cudaStream_t stream) {
  run_fwd_rung<Launch>(kName, a, stream);
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {kName,
             attention_fwd_v1,
             "Hopper: TMA loads (128B swizzle) + wgmma, one warpgroup, Br=64, 2-stage K/V ring, P "
             "from registers",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             90,
             /*gqa=*/false,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/07_flash_hopper/sm90a/exercises/v1_tma_wgmma.cu", {"07/v1_tma_wgmma"}, 2});
