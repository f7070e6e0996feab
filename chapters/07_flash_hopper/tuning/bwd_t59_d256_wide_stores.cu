// 07/bwd_t59_d256_wide_stores: a tuning step after bwd_t53: dK and dV stored 16 bytes a thread
// instead of 4, the change bwd_t58 makes to bwd_v6, made to the D 192 and 256 kernel. Not
// deterministic, as bwd_t53.
// Copied from 07/bwd_t53_d256_halves (bwd_t53_d256_halves.cu, read its header first: the halves,
// the D 192 instance and everything else are its); one idea changed: the stores of dK and dV.
//
// Why: bwd_t53's block ends by storing its 64 keys' dK and dV, 64 KiB at D 256, 4 bytes a thread
// (store_acc_rows): 4096 L1 tag requests a block, as bwd_v6's at D 128 (bwd_t58's header).
// The idea: store_acc_rows_16 (hopper_attention_bwd.cuh), the quad transpose and one 16-byte store
// per 8 columns, in both forms of the store (the 128-column halves at D 256, and the runs of 64 and
// 32 columns at D 192). dK and dV must be 16-byte aligned (else the fallback runs, as for shapes
// TMA cannot load); the fp32 parts of a split group are stored as before.
// Prediction (bf16, B = 16384 / N, H = 2048 / D, against bwd_t53 in the same run): as bwd_t58 at
// D 128, 1.02-1.04x at N 512, level from N 4096.
// Measured (NVIDIA H100 80GB HBM3, 2026-12-07, three alternating rounds, medians;
// notes/measured/h100-2026-12-07d/t59_t53_rounds.md): D 256 causal 1.10x bwd_t53 at N 512, 1.06x
// at 1024, 1.03x at 2048; full 1.01x at 512, 1.04-1.05x at 1024-2048; from N 4096 0.99-1.02x.
// D 192 was tested, not timed. Those rounds timed both kernels in one fa_bench process, t53
// first, which favours t53; timed again each in a process of its own (fair_rounds_bwd.md of
// h100-2026-12-07e): 1.08x full and 1.09x causal at N 512, 1.05-1.06x at 1024, then falling to
// 1.01x at 16384, at every protocol shape ahead. The dispatch runs it at every D 256 N.
#include <cuda.h>

#include <algorithm>

#include "hopper_attention_bwd.cuh"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr const char* kName = "07/bwd_t59_d256_wide_stores";
constexpr int kWarpgroups = 2;                          // consumers: the warpgroups that compute
constexpr int kThreads = 128 * (1 + kWarpgroups);       // + the producer warpgroup
constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 24 + 2 x 240 = 3 x 168 (07/v2's)
constexpr int kStages = 2;
constexpr int kBc = kRowsPerWarpgroup;         // 64 keys per block: wgmma M, both warpgroups
constexpr int kBr = 64;                        // queries per streamed tile
constexpr int kHalfQ = kBr / kWarpgroups;      // queries of S^T and dP^T per warpgroup: 32 (N)
constexpr int kStripBytes = kBr * 128;         // one strip of a Q (dO) stage: 8 KiB
constexpr int kBoxCols = 32;                   // fp32 columns per 128-byte swizzled row of a box
constexpr int kBoxBytes = kBr * kBoxCols * 4;  // 64 rows x 128 bytes = 8 KiB, one strip
// The instances: D 256, and D 192 (header, "D 192"), where 136-192 run.
template <int D>
struct Halves {
  static_assert(D == 192 || D == 256, "instances 192 and 256");
  static constexpr int kCols = D / kWarpgroups;  // columns of dK, dV, dQ_tile a warpgroup: 128 | 96
  static constexpr int kStrips = D / kSwizzleCols;  // 64-column strips of a row: 4 | 3
  static constexpr int kBoxes = kCols / kBoxCols;   // reduce-adds per warpgroup and tile: 4 | 3
  // D 256: the staging boxes lie in the warpgroup's own strips of the stage (header); at D 192
  // no strip is one warpgroup's alone (both read strip 1), and the boxes fit beside the stage.
  static constexpr bool kBoxesInStage = D == 256;
};
constexpr int kPBuffers = 2;  // P^T (and dS^T) tiles, used by tiles j % 2
// Named barrier ids (0 is __syncthreads): both halves of P^T and dS^T are stored; warpgroup w's
// staging boxes are written.
constexpr int kPBar = 1;
__device__ int stage_bar(int wg) {
  return 2 + wg;
}
static_assert(kBoxBytes == kStripBytes, "a staging box fills one strip of the stage");

struct BwdParams {
  const float* lse;
  const float* delta;
  float* dq_acc;  // the workspace: fp32 [batch*heads][seq_q][d], zero on entry
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int d;                // the real head dim, the rows' length in global memory (D rounds it up)
  int64_t n_tiles;      // key tiles per (batch, head)
  int64_t n_units;      // (K/V head, part) units: the grid is n_units x n_tiles blocks
  int64_t group_units;  // units per group of the launch order (head_group_place)
  int group;            // query heads per K/V head (1: no grouping)
  int split;            // blocks per (key tile, K/V head), each over group / split heads
  int64_t kv_bh;        // batch * heads_kv
  float* parts;         // split > 1: fp32 dK parts [split][kv_bh][seq_k][d], then dV's likewise
  float scale;          // softmax scale
  float scale_log2;     // scale * log2(e): P = exp2(s * scale_log2 - L2)
  bool causal;
};

// ---- dK, dV and dQ_tile ----------------------------------------------------------------------------
template <int D>
struct Smem {
  static constexpr int kKVBytes = kBc * D * 2;   // K or V
  static constexpr int kQBytes = kBr * D * 2;    // Q or dO, one stage
  static constexpr int kPBytes = kBc * kBr * 2;  // a P^T or dS^T tile: [64 keys][64 queries]
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKVBytes;
  static constexpr int kQOffset = 2 * kKVBytes;                       // stage s at + s * kQBytes
  static constexpr int kdOOffset = kQOffset + kStages * kQBytes;      // stage s at + s * kQBytes
  static constexpr int kPOffset = kdOOffset + kStages * kQBytes;      // buffer b at + b * kPBytes
  static constexpr int kdSOffset = kPOffset + kPBuffers * kPBytes;    // buffer b at + b * kPBytes
  static constexpr int kBoxOffset = kdSOffset + kPBuffers * kPBytes;  // D 192: warpgroup w's at
  static constexpr int kBoxAreaBytes =                                // + w * kBoxes * kBoxBytes
      Halves<D>::kBoxesInStage ? 0 : kWarpgroups * Halves<D>::kBoxes * kBoxBytes;
  static constexpr int kLOffset = kBoxOffset + kBoxAreaBytes;    // float [kStages][kBr]
  static constexpr int kDOffset = kLOffset + kStages * kBr * 4;  // float [kStages][kBr]
  static constexpr int kBarOffset = kDOffset + kStages * kBr * 4;
  static constexpr int kBytes = kBarOffset + (1 + 2 * kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kKVBytes % kAtomBytes == 0 && kQBytes % kAtomBytes == 0 &&
                    kPBytes % kAtomBytes == 0,
                "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "the most dynamic shared memory a block may opt in to");
};

// Store a warpgroup's half of P^T (or dS^T), 64 keys x 32 queries in fp32 accumulators, into the
// shared [64 keys][64 queries] tile: 16-bit, row = key, 128 bytes a row in eight 16-byte chunks,
// chunk c (queries 8c .. 8c + 7) stored at c ^ (row % 8), the 128-byte swizzle TMA would write.
// Thread t (w = t / 32, g = (t % 32) / 4, q = t % 4) holds keys 16w + g (h = 0) and 16w + g + 8
// (h = 1), queries 8 (i / 4) + 2q, +1 of its half in acc[i], acc[i + 1] with h = (i / 2) % 2
// (hopper.cuh); both rows are g modulo 8. For one store of a warp its 8 rows put their 4-byte
// words into 8 different chunks: the 32 words fall on 32 banks.
template <class T>
__device__ __forceinline__ void store_half(unsigned char* tile, const float (&acc)[kHalfQ / 2],
                                           int wg, int t) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
  for (int i = 0; i < kHalfQ / 2; i += 2) {
    const int row = 16 * w + g + 8 * ((i / 2) % 2);
    const int chunk = wg * (kHalfQ / 8) + i / 4;
    *reinterpret_cast<uint32_t*>(tile + row * 128 + ((chunk ^ g) * 16) + 4 * q) =
        mma::pack2<T>(acc[i], acc[i + 1]);
  }
}

// acc (+)= A B over warpgroup wg's columns of a [ROWS x D] tile read MN-major (B = dO, Q or K:
// dV, dK, dQ_tile). D 256: columns 128 wg .., one wgmma of N 128 from strip 2 wg. D 192: columns
// 96 wg .., in two wgmmas that both warpgroups issue alike: N 64 on strip 2 wg (a whole strip:
// columns 0-63 or 128-191) into acc[0 .. 31], then N 32 on half of strip 1 (columns 64-95 from its
// start, or 96-127 from 64 bytes into its rows: the 128-byte swizzle is a function of the address,
// so the XOR pattern TMA wrote still holds there) into acc[32 .. 47]. Columns of acc: Cols192.
template <int D, int ROWS, class T, int kTransA>
__device__ __forceinline__ void wgmma_cols(float (&acc)[D / 4], uint64_t desc_a,
                                           const unsigned char* tile, int kk, int wg,
                                           int accumulate) {
  if constexpr (D == 256) {
    hopper::wgmma_ss<128, T, 1, kTransA>(acc, desc_a, desc_mn_major<ROWS>(tile, kk, 128 * wg),
                                         accumulate);
  } else {
    hopper::wgmma_ss<64, T, 1, kTransA>(*reinterpret_cast<float(*)[32]>(acc), desc_a,
                                        desc_mn_major<ROWS>(tile, kk, 128 * wg), accumulate);
    hopper::wgmma_ss<32, T, 1, kTransA>(*reinterpret_cast<float(*)[16]>(acc + 32), desc_a,
                                        desc_mn_major<ROWS>(tile + 64 * wg, kk, 64), accumulate);
  }
}

// Where warpgroup wg's accumulators lie at D 192 (wgmma_cols): acc[0 .. 31] are columns
// first_a .. + 63, acc[32 .. 47] columns first_b .. + 31; relative to the warpgroup's first column
// 96 wg, accumulator chunk i (columns 8 (i % 4) .. of a 32-column box) is in box (i / 4 + wg) % 3.
struct Cols192 {
  int first_a, first_b;
  __device__ explicit Cols192(int wg) : first_a(128 * wg), first_b(64 + 32 * wg) {}
  __device__ static int box(int i, int wg) { return (i / 4 + wg) % 3; }
};

// Rows k0 .., warpgroup wg's columns of a row-major [seq x ld] gradient (out at column 0) at
// D 192, the columns at or past d not stored (a head dim rounded up): store_acc_rows over the
// accumulators' two runs of columns (Cols192); t59: store_acc_rows_16 for dK and dV themselves.
template <class T>
__device__ __forceinline__ void store_cols_192(T* out, const float (&acc)[48], int64_t k0,
                                               int64_t seq, float mul, int t, int ld, int d,
                                               int wg) {
  const Cols192 c(wg);
  if constexpr (std::is_same_v<T, float>) {  // a split group's fp32 parts: stored as before
    store_acc_rows<T, 64>(out + c.first_a, *reinterpret_cast<const float(*)[32]>(acc), k0, seq, mul,
                          t, ld, d - c.first_a);
    store_acc_rows<T, 32>(out + c.first_b, *reinterpret_cast<const float(*)[16]>(acc + 32), k0, seq,
                          mul, t, ld, d - c.first_b);
  } else {
    store_acc_rows_16<T, 64>(out + c.first_a, *reinterpret_cast<const float(*)[32]>(acc), k0, seq,
                             mul, t, ld, d - c.first_a);
    store_acc_rows_16<T, 32>(out + c.first_b, *reinterpret_cast<const float(*)[16]>(acc + 32), k0,
                             seq, mul, t, ld, d - c.first_b);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_dq_kernel(const __grid_constant__ CUtensorMap tm_q,
                   const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v,
                   const __grid_constant__ CUtensorMap tm_do,
                   const __grid_constant__ CUtensorMap tm_dq, const BwdParams p) {
  using Sm = Smem<D>;
  using H = Halves<D>;
  constexpr int kSAcc = kHalfQ / 2;  // S^T (and dP^T) accumulators per thread
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sK = smem + Sm::kKOffset;
  unsigned char* sV = smem + Sm::kVOffset;
  auto sQ = [&](int s) { return smem + Sm::kQOffset + s * Sm::kQBytes; };
  auto sdO = [&](int s) { return smem + Sm::kdOOffset + s * Sm::kQBytes; };
  float* sL = reinterpret_cast<float*>(smem + Sm::kLOffset);  // stage s at + s * kBr
  float* sD = reinterpret_cast<float*>(smem + Sm::kDOffset);
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* q_full = kv_full + 1;        // per stage: Q, dO (bytes), L and D (arrivals) are in
  uint64_t* q_empty = q_full + kStages;  // per stage: both consumers' staging boxes were read

  const int tid = threadIdx.x;
  // This block's (K/V head, part) unit and key tile: key tile by key tile within its group.
  const BlockPlace place = head_group_place(blockIdx.x, p.n_tiles, p.n_units, p.group_units);
  const int64_t unit = place.unit;  // (K/V head, part) (GQA: bwd_v1's header)
  const int64_t kv_bh = unit / p.split;
  const int part = int(unit % p.split), heads = p.group / p.split;  // this block's query heads
  const int64_t k0 = place.kt * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;

  // The Q tiles that see this block's keys: causal, from the one holding the first query that
  // sees key k0 (every earlier tile is entirely masked, its dS is 0). Possibly none.
  const int64_t n_qt = ceil_div(seq_q, kBr);
  int64_t qt_begin = 0;
  if (p.causal) {
    const int64_t first = causal_first_query(k0, seq_q, seq_k);
    if (first > 0) qt_begin = first / kBr;
  }
  // GQA: the group's query heads one after the other, n_per tiles each (bwd_v1's header).
  const int n_per = qt_begin < n_qt ? int(n_qt - qt_begin) : 0;
  const int n_iter = n_per * heads;
  // Iteration j's place (query head, Q tile qt_begin + i), stepped with j (GroupPlace).
  GroupPlace at{int(kv_bh * p.group + part * heads), 0};

  if (tid == 0) {
    hopper::mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&q_full[s], 1 + kBr);       // the expect_tx arrival, + kBr L/D rows
      hopper::mbar_init(&q_empty[s], kWarpgroups);  // one arrival per consumer warpgroup
    }
    hopper::mbar_fence_init();
    if (n_iter > 0) {
      hopper::mbar_arrive_expect_tx(kv_full, 2 * Sm::kKVBytes);
      for (int c = 0; c < H::kStrips; ++c) {  // all columns: S^T and dP^T contract over them
        hopper::tma_load_3d(sK + c * kBc * 128, &tm_k, kv_full, c * kSwizzleCols, int(k0),
                            int(kv_bh));
        hopper::tma_load_3d(sV + c * kBc * 128, &tm_v, kv_full, c * kSwizzleCols, int(k0),
                            int(kv_bh));
      }
    }
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  if (tid < 128) {
    // ---- Producer: gives its registers away; threads 0..63 fill the ring, tile after tile, as
    // in bwd_v6. A stage is free once both consumers' staging boxes in it were read.
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (tid < kBr) {
      GroupPlace pl = at;
      for (int j = 0; j < n_iter; ++j, pl.step(n_per)) {
        const int s = j % kStages;
        const int64_t row = (qt_begin + pl.i) * kBr, head_row0 = pl.head * seq_q;
        const float l2 = load_l2(p.lse + head_row0, row + tid, seq_q);
        const float d = row + tid < seq_q ? p.delta[head_row0 + row + tid] : 0.0f;
        if (j >= kStages) hopper::mbar_wait(&q_empty[s], (j / kStages - 1) & 1);
        if (tid == 0) {
          hopper::mbar_arrive_expect_tx(&q_full[s], 2 * Sm::kQBytes);
          for (int c = 0; c < H::kStrips; ++c) {
            hopper::tma_load_3d(sQ(s) + c * kStripBytes, &tm_q, &q_full[s], c * kSwizzleCols,
                                int(row), pl.head);
            hopper::tma_load_3d(sdO(s) + c * kStripBytes, &tm_do, &q_full[s], c * kSwizzleCols,
                                int(row), pl.head);
          }
        }
        sL[s * kBr + tid] = l2;
        sD[s * kBr + tid] = d;
        hopper::mbar_arrive(&q_full[s]);
      }
    }
    return;
  }

  // ---- Consumers: take the registers; warpgroup wg computes queries 32 wg .. of S^T and dP^T,
  // and columns 128 wg .. of dV, dK and dQ_tile.
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int wg = tid / 128 - 1, t = tid % 128, q = t % 4;
  const int h0 = wg * kHalfQ;                            // this warpgroup's first query of a tile
  const int col0 = wg * H::kCols;                        // and its first column
  const int kr = 16 * (t / 32) + (t % 32) / 4;           // this thread's key rows kr and kr + 8
  const int64_t key0 = k0 + kr;                          // and key0 + 8
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off
  // Thread 0 of the warpgroup issues its reduce-adds (bulk groups belong to the issuing thread)
  // and frees the stage for both, once they were read.
  const bool adder = t == 0;

  float dk[H::kCols / 2], dv[H::kCols / 2];
  zero(dk);
  zero(dv);

  if (n_iter > 0) hopper::mbar_wait(kv_full, 0);
  for (int j = 0; j < n_iter; ++j, at.step(n_per)) {
    const int s = j % kStages;
    const int64_t q0 = (qt_begin + at.i) * kBr;
    unsigned char* sP = smem + Sm::kPOffset + (j % kPBuffers) * Sm::kPBytes;
    unsigned char* sdS = smem + Sm::kdSOffset + (j % kPBuffers) * Sm::kPBytes;
    const bool need_mask = k0 + kBc > seq_k || (p.causal && k0 + kBc - 1 > q0 + off);
    hopper::mbar_wait(&q_full[s], (j / kStages) & 1);

    // ---- S^T = K Q^T and dP^T = V dO^T over this warpgroup's 32 queries (Q and dO rows h0 ..,
    // all 256 columns deep): 64 keys x 32 queries each, two commit groups.
    float st[kSAcc], dpt[kSAcc];
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kHalfQ, T, 0>(st, desc_k_major<kBc>(sK, kk),
                                     desc_k_major<kBr>(sQ(s) + h0 * 128, kk), kk > 0);
    hopper::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kHalfQ, T, 0>(dpt, desc_k_major<kBc>(sV, kk),
                                     desc_k_major<kBr>(sdO(s) + h0 * 128, kk), kk > 0);
    hopper::wgmma_commit();
    // The previous tile's staging boxes lie in its stage: once the TMA engine has read them (it
    // had the time of the two products just issued), that stage may be refilled.
    if (adder && j > 0) {
      hopper::bulk_wait_group_read<0>();
      hopper::mbar_arrive(&q_empty[(j - 1) % kStages]);
    }
    hopper::wgmma_wait<1>();  // S^T has landed; dP^T may still run
    hopper::fence_registers(st);

    // ---- P^T = exp2(S^T scale log2 e - L2): element i is key key0 + 8 ((i / 2) % 2), query
    // q0 + h0 + 8 (i / 4) + 2q + i % 2 (the accumulator layout, hopper.cuh).
    const float* l2 = sL + s * kBr + h0;
#pragma unroll
    for (int i = 0; i < kSAcc; i += 2) {
      const float2 l = *reinterpret_cast<const float2*>(l2 + 8 * (i / 4) + 2 * q);
      st[i] = ex2_approx(fmaf(st[i], p.scale_log2, -l.x));
      st[i + 1] = ex2_approx(fmaf(st[i + 1], p.scale_log2, -l.y));
    }
    if (need_mask) {
#pragma unroll
      for (int i = 0; i < kSAcc; ++i) {
        const int64_t key = key0 + 8 * ((i / 2) % 2);
        const int64_t query = q0 + h0 + 8 * (i / 4) + 2 * q + (i % 2);
        if (key >= seq_k || (p.causal && key > query + off)) st[i] = 0.0f;
      }
    }
    store_half<T>(sP, st, wg, t);

    // ---- dS^T = P^T o (dP^T - D), D per query (column).
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dpt);
    const float* dd = sD + s * kBr + h0;
#pragma unroll
    for (int i = 0; i < kSAcc; i += 2) {
      const float2 d2 = *reinterpret_cast<const float2*>(dd + 8 * (i / 4) + 2 * q);
      dpt[i] = st[i] * (dpt[i] - d2.x);
      dpt[i + 1] = st[i + 1] * (dpt[i + 1] - d2.y);
    }
    store_half<T>(sdS, dpt, wg, t);
    hopper::fence_proxy_async_smem();    // the generic stores, before wgmma reads them
    hopper::named_bar_sync(kPBar, 256);  // both warpgroups' halves are in

    // ---- dV += P^T dO and dK += dS^T Q over this warpgroup's columns: k = the 64 queries, A =
    // the P^T (dS^T) tile, K-major; B = dO (Q) MN-major from column col0 on (wgmma_cols).
    hopper::fence_registers(dv);
    hopper::fence_registers(dk);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk)
      wgmma_cols<D, kBr, T, 0>(dv, desc_k_major<kBc>(sP, kk), sdO(s), kk, wg, 1);
    hopper::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk)
      wgmma_cols<D, kBr, T, 0>(dk, desc_k_major<kBc>(sdS, kk), sQ(s), kk, wg, 1);
    hopper::wgmma_commit();

    // ---- dQ_tile = dS K over this warpgroup's columns: m = the 64 queries, A = dS read
    // transposed from the dS^T tile (k16 step kk is keys 16 kk ..), B = K MN-major from column
    // col0 on.
    float dq[H::kCols / 2];
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
      wgmma_cols<D, kBc, T, 1>(dq, desc_mn_major<kBc>(sdS, kk), sK, kk, wg, kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();  // dV, dK and dQ_tile have landed
    hopper::fence_registers(dq);
    hopper::fence_registers(dk);
    hopper::fence_registers(dv);

    // ---- dQ_tile -> staging boxes, box b holding columns col0 + 32 b ..: at D 256 in this
    // warpgroup's strips of the stage (header), Q's strip 2 wg + b for b < 2, dO's strip
    // 2 wg + b - 2 after; at D 192 beside the stage (Halves).
    // Thread t holds rows 16w + g and 16w + g + 8, columns 8i + 2q, +1 in dq[4i + 2h],
    // dq[4i + 2h + 1] (w = t / 32): column 8i + 2q is in box i / 4, 16-byte chunk 2 (i % 4) + q / 2,
    // at byte 8 (q % 2); the chunk is stored at chunk ^ g (row % 8 = g for both rows), which is
    // 2 (i % 4) ^ x with x = (q / 2) ^ g, since 2 (i % 4) is even. At D 192 chunk i lies in box
    // Cols192::box(i, wg) instead (wgmma_cols), at the same place within it.
    auto box = [&](int b) {
      if constexpr (H::kBoxesInStage)
        return (b < 2 ? sQ(s) : sdO(s)) + (2 * wg + b % 2) * kStripBytes;
      else
        return smem + Sm::kBoxOffset + (wg * H::kBoxes + b) * kBoxBytes;
    };
    {
      const int w = t / 32, g = (t % 32) / 4, x = (q / 2) ^ g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int i = 0; i < H::kCols / 8; ++i) {
          const int b = H::kBoxesInStage ? i / 4 : Cols192::box(i, wg);
          unsigned char* row = box(b) + (16 * w + g + 8 * h) * 128 + 8 * (q % 2);
          *reinterpret_cast<float2*>(row + (((2 * (i % 4)) ^ x) * 16)) =
              make_float2(dq[4 * i + 2 * h], dq[4 * i + 2 * h + 1]);
        }
      }
    }
    hopper::fence_proxy_async_smem();  // before the TMA engine reads the boxes
    hopper::named_bar_sync(stage_bar(wg), 128);
    if (adder) {
      // Rows q0 .. q0 + 63 of query head at.head, columns col0 + 32 b ..; rows past seq_q and
      // columns past d (a head dim rounded up) are clipped.
#pragma unroll
      for (int b = 0; b < H::kBoxes; ++b)
        hopper::tma_reduce_add_3d(&tm_dq, mma::smem_addr(box(b)), col0 + b * kBoxCols, int(q0),
                                  at.head);
      hopper::bulk_commit_group();
    }
  }
  // The last reduce-adds must have read their rows before the block's shared memory goes, and
  // have landed before the kernel counts as done (the convert kernel reads the workspace next).
  if (adder) hopper::bulk_wait_group<0>();

  // Keys no query sees (causal) leave with dK = dV = 0, as they must. Rows k0 .. k0 + 63,
  // columns col0 .. of this K/V head's [seq_k x d] dK and dV, summed over its group; the columns
  // past d (a head dim rounded up) are not stored.
  if constexpr (D == 192) {  // two runs of columns a warpgroup (Cols192)
    if (p.split > 1) {
      const int64_t head = int64_t(part) * p.kv_bh + kv_bh, all = p.split * p.kv_bh;
      store_cols_192<float>(p.parts + head * seq_k * p.d, dk, k0, seq_k, 1.0f, t, p.d, p.d, wg);
      store_cols_192<float>(p.parts + (all + head) * seq_k * p.d, dv, k0, seq_k, 1.0f, t, p.d, p.d,
                            wg);
      return;
    }
    store_cols_192<T>(static_cast<T*>(p.dk) + kv_bh * seq_k * p.d, dk, k0, seq_k, p.scale, t, p.d,
                      p.d, wg);
    store_cols_192<T>(static_cast<T*>(p.dv) + kv_bh * seq_k * p.d, dv, k0, seq_k, 1.0f, t, p.d, p.d,
                      wg);
    return;
  }
  const int cols = p.d - col0;
  if (p.split > 1) {  // this part's fp32 sums; sum_parts_kernel adds the parts (header, GQA)
    const int64_t head = int64_t(part) * p.kv_bh + kv_bh, all = p.split * p.kv_bh;
    store_acc_rows<float, H::kCols>(p.parts + head * seq_k * p.d + col0, dk, k0, seq_k, 1.0f, t,
                                    p.d, cols);
    store_acc_rows<float, H::kCols>(p.parts + (all + head) * seq_k * p.d + col0, dv, k0, seq_k,
                                    1.0f, t, p.d, cols);
    return;
  }
  // t59: 16 bytes a thread (header); the launcher checked that dK and dV are 16-byte aligned.
  store_acc_rows_16<T, H::kCols>(static_cast<T*>(p.dk) + kv_bh * seq_k * p.d + col0, dk, k0, seq_k,
                                 p.scale, t, p.d, cols);
  store_acc_rows_16<T, H::kCols>(static_cast<T*>(p.dv) + kv_bh * seq_k * p.d + col0, dv, k0, seq_k,
                                 1.0f, t, p.d, cols);
}

// ---- Launcher ------------------------------------------------------------------------------------
template <class T, int D>
void launch(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t n_kt = ceil_div(s.seq_k, kBc);
  const int64_t kv_bh = s.batch * s.kv_heads();  // K, V, dK, dV: batch * heads_kv heads (GQA)
  FA_UNSUPPORTED_IF(n_kt * s.bh() > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 thread blocks");
  // A block's iterations, the group's query heads x the Q tiles, count in an int.
  FA_UNSUPPORTED_IF(ceil_div(s.seq_q, kBr) * s.group() > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 query tiles per K/V head");
  BwdParams p{};
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq_acc = a.workspace;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.d = int(s.head_dim);
  p.n_tiles = n_kt;
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;
  p.group = int(s.group());
  p.kv_bh = kv_bh;
  // The split of each group (bwd_v1's header); its parts need memory of their own here, since the
  // workspace holds dQ's sum (PartsBuffer): without it the block runs the whole group.
  // The launch order: groups of units under the causal mask, head by head (groups of 1) without.
  const BlockOrder order = s.causal ? BlockOrder::kHeadGroups : BlockOrder::kHeadMajor;
  p.split = dkdv_split<dkdv_dq_kernel<T, D>, Smem<D>::kBytes>(s, kThreads, kBc, kBr, order);
  const PartsBuffer parts(s, p.split, stream);
  if (parts.ptr() == nullptr) p.split = 1;
  p.parts = parts.ptr();
  p.n_units = kv_bh * p.split;
  p.group_units =
      s.causal
          ? head_group_units(n_kt, resident_slots<dkdv_dq_kernel<T, D>, Smem<D>::kBytes>(kThreads),
                             p.n_units, p.group / p.split)
          : 1;

  // 2. dK, dV and dQ_tile: K/V boxes of kBc rows (kept), Q/dO boxes of 64 rows (streamed); every
  // box is 64 columns wide, one 128-byte swizzled strip.
  const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, p.d, kBr, a.dtype);
  const CUtensorMap tm_do = make_tmap(a.dout, s.bh(), s.seq_q, p.d, kBr, a.dtype);
  const CUtensorMap tm_k = make_tmap(a.k, kv_bh, s.seq_k, p.d, kBc, a.dtype);
  const CUtensorMap tm_v = make_tmap(a.v, kv_bh, s.seq_k, p.d, kBc, a.dtype);
  const CUtensorMap tm_dq = make_tmap_f32(a.workspace, s.bh(), s.seq_q, p.d, kBoxCols, kBr, kName);
  constexpr int kSmem = Smem<D>::kBytes;
  set_smem_limit_once<dkdv_dq_kernel<T, D>, kSmem>();
  dkdv_dq_kernel<T, D><<<unsigned(n_kt * kv_bh * p.split), kThreads, kSmem, stream>>>(
      tm_q, tm_k, tm_v, tm_do, tm_dq, p);
  FA_CHECK_LAUNCH();
  if (p.split > 1) sum_parts<T>(p.parts, a, p.split, p.scale, stream);

  // 3. dQ from the workspace (dq_convert, hopper_attention_bwd.cuh).
  dq_convert<T>(a, p.scale, stream);
}

void attention_bwd_t59(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.seq_k >= 0 && s.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  // Every head dim that is a multiple of 8 up to 256 runs as D 192 (up to 192) or D 256 (the
  // dispatch sends it only those above 128: below, bwd_v6 and bwd_t48 hold the whole row in fewer
  // columns).
  FA_UNSUPPORTED_IF(head_dim_instance(s.head_dim) == 0,
                    std::string(kName) +
                        " is instantiated for head_dim 192 and 256 (the multiples of 8 up to 256 "
                        "rounded up) only");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  FA_REQUIRE(s.valid_heads(), std::string(kName) + ": heads must be a multiple of heads_kv");
  if (s.bh() == 0) return;  // nothing to write
  FA_REQUIRE(a.workspace != nullptr, std::string(kName) + " needs the fp32 workspace (dQ's sum)");
  // The bulk reduce-adds need 16-byte aligned rows of the workspace (d * 4 bytes per row keeps
  // them so once the base is).
  // t59: and dK, dV 16-byte aligned for the epilogue's 16-byte stores.
  const bool can_load =
      tma_can_load(a) && aligned(a.workspace, 16) && aligned(a.dk, 16) && aligned(a.dv, 16);
  if (s.is_gqa() && !can_load) return grouped_fallback(a, stream, kName);
  if (!can_load) return run_fallback(a, stream);
  // 1. D = rowsum(dO o O), before the kernel that reads it (same stream).
  delta_preprocess_launch(a.o, a.dout, a.delta, s, a.dtype, stream);
  const bool d192 = s.head_dim <= 192;
  if (a.dtype == DType::BF16)
    d192 ? launch<__nv_bfloat16, 192>(a, stream) : launch<__nv_bfloat16, 256>(a, stream);
  else
    d192 ? launch<__half, 192>(a, stream) : launch<__half, 256>(a, stream);
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {kName,
             attention_bwd_t59,
             "bwd_t53 with dK and dV stored 16 bytes a thread (a quad transpose by shuffles "
             "first) instead of 4; not deterministic",
             {DType::BF16, DType::F16},
             {192, 256},
             90,
             /*deterministic=*/false,
             /*gqa=*/true,
             /*rounds_head_dim=*/true});

}  // namespace fa::ch07
