// 07/v2_warp_specialized: v1 with the roles split between warpgroups, as FlashAttention-3 does.
// Read v1 first (v1_tma_wgmma.cu): tiles, layouts, descriptors, softmax and epilogue are its own
// (hopper_attention.cuh); only who does what, and when, changed.
//
// What changed vs v1, and why it pays
//   In v1 one warpgroup does everything in turn: issue the TMA copies, wait for them, S = Q K^T,
//   softmax, P V, then a __syncthreads before the next copy may be issued into the freed stage.
//   Whenever those warps are in the softmax or waiting at the barrier, no wgmma is in flight, and
//   with a single warpgroup per SM (v1's shared memory allows one block for D >= 128) nobody else
//   can fill the gap: the tensor cores idle for the whole softmax (MUFU ex2 runs at 16 per clock per
//   SM, wgmma at ~4096 dense 16-bit FLOPs per clock per SM, 989 TFLOP/s / (132 SMs x 1.83 GHz);
//   for D = 128 a 64 x 128 tile is 4.2 M FLOPs of MMA, ~1 k clocks, and 8192 exponentials, ~0.5 k
//   clocks of MUFU plus the FMAs, max and shuffles around them; v1's measured rate puts a whole
//   tile at ~2.5 k clocks, so ~1.5 k of them pass with the tensor cores idle).
//   v2 is warp-specialised:
//   * producer warpgroup (warpgroup 0): one thread loads Q once, then streams K and V tiles into a
//     ring of kStages stages; before reusing a stage it waits on that stage's "empty" mbarrier,
//     after issuing it the TMA completes the stage's "full" mbarrier by bytes. It never touches
//     the math, so loads run ahead by up to kStages tiles with no block-wide barrier at all.
//   * two consumer warpgroups (1, 2): 64 query rows each (Br = 128 per block), both reading the
//     same K/V stage; each waits on "full", computes as v1, and arrives on "empty" when its wgmmas
//     are done with the stage (256 arrivals complete the phase). Two independent warpgroups per SM
//     mean the scheduler can run one's wgmmas while the other is in its softmax: the overlap that
//     v1 could not have, here left to the warp scheduler (v3's ping-pong makes it deliberate).
//   * setmaxnreg: 384 threads get at most 168 registers each (65536 / 384), and a consumer needs
//     S + O + P = 160-176 registers of tiles alone (hopper_attention.cuh): without reallocation the
//     consumers spill. The producer needs almost none, so it gives them back (dec to 24) and the
//     consumers take them (inc to 240): 24 + 2 x 240 = 3 x 168. This is part of the same idea (the
//     roles are only affordable with it), not a separate rung.
//
// Map of the kernel
//   block       3 warpgroups (384 threads): producer + 2 consumers; Br = 128 query rows
//   tiles       Bc as v1 (128 for D = 64, 128; 64 for D = 256)
//   pipeline    kStages-stage K/V ring (4 for D = 64, 2 for D = 128 and 256), full/empty mbarriers
//               per stage; phase parity (use / kStages) & 1 as in 03/v6
//   smem        Q 128 x D + kStages x (K + V) Bc x D: D 64: 144 KiB, D 128: 160 KiB, D 256:
//               192 KiB of tiles, + 1 KiB for the mbarriers and the 1024-byte alignment
//   registers   producer 24, consumers 240 after setmaxnreg (compiled at 168)
//   not done    a consumer whose 64 rows see none of a causal tile's keys still computes it (fully
//               masked); the block-level range is v1's (kv_tiles.h) with Br = 128
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 569.5 TFLOP/s, FlashAttention-2 341.7
// (notes/measured/h100-2026-11-23c/sdpa_flush.log). At D 64 it is slower than v1 (notes/07,
// section 4, "Why v2 loses to v1 at D = 64").
#include <cuda.h>

#include "hopper_attention.cuh"
#include "ch07_launch.cuh"

namespace fa::ch07 {
namespace {

constexpr int kConsumers = 2;                           // warpgroups that compute
constexpr int kThreads = 128 * (1 + kConsumers);        // + the producer warpgroup
constexpr int kBr = kConsumers * kRowsPerWarpgroup;     // 128 query rows per block
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 24 + 2 x 240 = 3 x 168
template <int D>
constexpr int stages() {
  return D == 64 ? 4 : 2;
}

template <int D>
struct V2Smem {
  static constexpr int kStages = stages<D>();
  static constexpr int kQBytes = kBr * D * 2;
  static constexpr int kKVBytes = Tiles<D>::kKVBytes;
  static constexpr int kKOffset = kQBytes;                       // K stage s at + s * kKVBytes
  static constexpr int kVOffset = kQBytes + kStages * kKVBytes;  // V stage s at + s * kKVBytes
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBytes = kBarOffset + (1 + 2 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kQBytes % kAtomBytes == 0 && kKVBytes % kAtomBytes == 0, "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "fits the 227 KiB a block may opt in to");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_v2_kernel(const __grid_constant__ CUtensorMap tm_q,
                        const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_v, const Params p) {
  using Tl = Tiles<D>;
  using Sm = V2Smem<D>;
  constexpr int kBc = Tl::kBc;
  FA_TL_INIT(threadIdx.x / 128);  // the timeline build's phase marks (ch07_timeline.cuh)
  constexpr int kStages = Sm::kStages;
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume atoms start there.
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sQ = smem;
  auto sK = [&](int s) { return smem + Sm::kKOffset + s * Sm::kKVBytes; };
  auto sV = [&](int s) { return smem + Sm::kVOffset + s * Sm::kKVBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* full = q_full + 1;       // per stage: K and V bytes of the tile have landed
  uint64_t* empty = full + kStages;  // per stage: both consumers are done reading it

  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128, q = t % 4;
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const KvTiles range = kv_tiles(q0, kBr, p.seq_q, p.seq_k, kBc, p.causal);
  const int n_tiles = int(range.visit), n_unmasked = int(range.unmasked);

  if (threadIdx.x == 0) {
    hopper::mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&full[s], 1);                  // the producer's expect_tx arrival
      hopper::mbar_init(&empty[s], 128 * kConsumers);  // every consumer thread, once per use
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  if (warpgroup == 0) {
    // ---- Producer: gives its registers away, then one thread keeps the ring full.
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      hopper::mbar_arrive_expect_tx(q_full, Sm::kQBytes);
      for (int c = 0; c < Tl::kStrips; ++c)
        hopper::tma_load_3d(sQ + c * kBr * 128, &tm_q, q_full, c * kSwizzleCols, int(q0), int(bh));
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages, use = j / kStages;
        FA_TL_START(tl_slot);
        if (use > 0) hopper::mbar_wait(&empty[s], (use - 1) & 1);  // both consumers freed it
        FA_TL_END(tl_slot, kProducerWait, j);
        hopper::mbar_arrive_expect_tx(&full[s], 2 * Sm::kKVBytes);
        for (int c = 0; c < Tl::kStrips; ++c) {
          hopper::tma_load_3d(sK(s) + c * kBc * 128, &tm_k, &full[s], c * kSwizzleCols, j * kBc,
                              int(bh));
          hopper::tma_load_3d(sV(s) + c * kBc * 128, &tm_v, &full[s], c * kSwizzleCols, j * kBc,
                              int(bh));
        }
      }
    }
    return;
  }

  // ---- Consumers: take the registers, then compute exactly as v1 on their 64 rows.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const unsigned char* sQc = sQ + consumer * kRowsPerWarpgroup * 128;  // its rows in each strip
  const int64_t wg_row0 = q0 + consumer * kRowsPerWarpgroup;

  // This thread's two rows and the last key each may see.
  const int64_t row0 = wg_row0 + 16 * (t / 32) + (t % 32) / 4;
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
    hopper::mbar_wait(&full[s], (j / kStages) & 1);
    FA_TL_END(tl_kv, kWaitKV, j);

    // ---- S = Q K_j^T: 64 x Bc, D / 16 k-steps, both operands K-major in shared memory.
    float sc[Tl::kSAcc];
    hopper::wgmma_fence();
    FA_TL_START(tl_qk);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kBc, T, 0>(sc, desc_k_major<kBr>(sQc, kk), desc_k_major<kBc>(sK(s), kk),
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
    rescale(o, alpha);
    uint32_t pf[Tl::kPSlices][4];
    pack_p<T>(sc, pf);
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

    // ---- This warpgroup is done with stage s: the producer may refill it once both are.
    hopper::mbar_arrive(&empty[s]);
  }

  FA_TL_START(tl_epilogue);
  store_o_l<T, D>(o, m, l, c, static_cast<T*>(p.o) + bh * p.seq_q * p.d, p.lse + bh * p.seq_q,
                  wg_row0, p.seq_q, t, p.d);
  FA_TL_END(tl_epilogue, kEpilogue, n_tiles);
}

// ---- Host side: ch07_launch.cuh checks the arguments, picks T and D, and calls Launch<T, D>::run.
constexpr const char* kName = "07/v2_warp_specialized";

template <class T, int D>
struct Launch {
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    launch_fwd<flash_fwd_v2_kernel<T, D>, D, kBr, kThreads, V2Smem<D>::kBytes>(kName, a, stream);
  }
};

void attention_fwd_v2(const AttentionFwdArgs& a, cudaStream_t stream) {
  run_fwd_rung<Launch>(kName, a, stream);
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {kName,
             attention_fwd_v2,
             "v1 warp-specialised: TMA producer warpgroup + 2 wgmma consumer warpgroups (Br=128), "
             "full/empty mbarrier K/V ring, setmaxnreg 24/240",
             {DType::BF16, DType::F16},
             {64, 128, 256},
             90,
             /*gqa=*/false,
             /*decoding=*/false,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
