// 07/bwd_t42_dq_red: a tuning step after bwd_v4, off the main path because it measured slower
// (tuning/README.md): each thread adds its part of dQ_tile into the fp32 workspace straight from
// its registers (red.global.add.v2.f32): no staging in shared memory, no TMA. Not deterministic,
// as bwd_v2 and bwd_v4.
// Copied from 07/bwd_v4_dq_tile_reduce (../sm90a/bwd_v4_dq_tile_reduce.cu, and bwd_v2 before it:
// read their headers first); one idea changed: the path dQ_tile takes to global memory.
//
// Why: the single pass traded tensor work for shared-memory traffic, and shared memory is what
// bwd_v4 runs short of. Per 64-query tile a block's two warpgroups read, from shared memory, the
// operands of S^T = K Q^T and dP^T = V dO^T (both wgmma_ss at N = 64: 4 KiB of A and B per
// m64n64k16 of 32 tensor cycles, 128 bytes a cycle, which is what an SM's shared memory delivers)
// and of dQ_tile = dS K (the same form), then the B operands of dV and dK (half that rate); TMA
// writes the next Q and dO tiles; the threads store dS^T (16 KiB); and the dQ path writes its
// staging boxes (32 KiB) and TMA reads them back (32 KiB). About 370 KiB a tile against 2,560
// cycles of tensor work: at 128 bytes a cycle, shared memory alone needs ~2,900 cycles, more than
// the tensor cores (bwd_v1's dK/dV kernel, without dS, dQ and staging: ~224 KiB, under its 2,048
// tensor cycles; it kept the pipe 66% busy where bwd_v2 managed 43.5%). The staging is the one
// piece of that traffic the algorithm does not need: the reduce-add can start from registers.
// FlashAttention-3's backward has this path too (hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp in the
// flash-attention repository: atomicAdd of float4 straight from the dQ accumulator when its dQ
// accumulator is not written by TMA).
//
// What changes: after dQ_tile has landed (the same wait as bwd_v4's), each thread issues 16
// red.global.add.v2.f32, one per pair of adjacent columns it holds (rows 16w + g and + 8, columns
// dq_col0 + 8i + 2q, +1): a warp's instruction covers 8 rows x 32 contiguous bytes, whole
// 32-byte sectors of L2. Rows past seq_q are not issued. Gone: the staging boxes (32 KiB of
// shared memory, written and read back once a tile), their fence and the 128-thread barrier, the
// wait for the previous tile's reduce-adds to have read them, the tensor map of the workspace.
// The adds are fire-and-forget (`red`, not `atom`: no value comes back); the convert kernel, next
// on the stream, sees them all, as a kernel boundary orders every global write before it.
//
// Shared memory: bwd_v4's without the staging: 82 KiB at D 64, 146 KiB at D 128.
//
// Prediction: the L2 receives the same bytes as before (D fp32 per query row per key block), in
// 8 x 32-byte pieces per instruction instead of 8 KiB boxes; the SM saves 64 KiB of its ~370 KiB
// of shared-memory traffic a tile, a barrier and a fence. If shared memory is the limit, 1.1-1.2x
// bwd_v4 at D 128 and N >= 4096, less at D 64 (whose products are half as long against the same
// element-wise work). If L2's atomic units are (1,024 sector reductions per block and tile, from
// 132 blocks at once), it measures as bwd_v4 or below: that is the test.
// Measured (NVIDIA H200, 2026-12-02, bf16, the protocol shapes at D 64 and 128, beside bwd_v4 in
// one run; notes/measured/h200-2026-12-02/bwd_t42_v4.log, timed under the name
// 07/bwd_v5_dq_red): 0.88-0.93x bwd_v4 at D 128, 0.83-0.92x at D 64. The prediction failed the
// other way: the adds from registers cost more than the staging they save. The TMA engine's box
// reduce-add hands L2 whole 128-byte lines; 16 red instructions a thread hand it 32-byte pieces,
// and each occupies the SM's load/store pipe that the other warpgroup's dS stores and fragment
// loads also need. Shared-memory traffic alone was not what held bwd_v4 back.
#include <cuda.h>

#include <algorithm>

#include "hopper_attention_bwd.cuh"
#include "gpu.h"

namespace fa::ch07 {
namespace {

constexpr const char* kName = "07/bwd_t42_dq_red";
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStages = 2;
constexpr int kWgRows = kRowsPerWarpgroup;  // 64: wgmma M, the keys one warpgroup owns
constexpr int kBc = kWarpgroups * kWgRows;  // 128 keys per block
constexpr int kBr = 64;                     // queries per streamed tile: N of S^T and dP^T
constexpr int kDqN = 64;                    // columns of dQ_tile per warpgroup (both head dims)

// How the two warpgroups share dQ_tile = dS K (see "How the warpgroups share" in the header).
template <int D>
struct DqSplit {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr bool kByColumns = D == 128;              // else by keys
  static constexpr int kKeys = kByColumns ? kBc : kWgRows;  // keys warpgroup w contracts over
  static constexpr int kBarThreads = kByColumns ? kThreads : 128;  // who shares the dS^T tile
  __device__ static int key0(int wg) { return kByColumns ? 0 : wg * kWgRows; }
  __device__ static int col0(int wg) { return kByColumns ? wg * kDqN : 0; }
  // Named barrier ids (0 is __syncthreads): the dS^T tile is written (one id for the block at
  // D = 128, one per warpgroup at D = 64).
  __device__ static int ds_bar(int wg) { return kByColumns ? 1 : 1 + wg; }
};

struct BwdParams {
  const float* lse;
  const float* delta;
  float* dq_acc;  // the workspace: fp32 [batch*heads][seq_q][D], zero on entry
  void* dk;
  void* dv;
  int64_t seq_q, seq_k;
  int64_t n_tiles;   // key tiles per (batch, head)
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): P = exp2(s * scale_log2 - L2)
  bool causal;
};

// ---- dK, dV and dQ_tile ----------------------------------------------------------------------------
template <int D>
struct Smem {
  static constexpr int kKVBytes = kBc * D * 2;  // K or V
  static constexpr int kQBytes = kBr * D * 2;   // Q or dO, one stage
  static constexpr int kdSBytes = kBc * kBr * 2;
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKVBytes;
  static constexpr int kQOffset = 2 * kKVBytes;                    // stage s at + s * kQBytes
  static constexpr int kdOOffset = kQOffset + kStages * kQBytes;   // stage s at + s * kQBytes
  static constexpr int kdSOffset = kdOOffset + kStages * kQBytes;  // [128 keys][64 queries]
  static constexpr int kLOffset = kdSOffset + kdSBytes;            // float [kStages][kBr]
  static constexpr int kDOffset = kLOffset + kStages * kBr * 4;    // float [kStages][kBr]
  static constexpr int kBarOffset = kDOffset + kStages * kBr * 4;
  static constexpr int kBytes = kBarOffset + (1 + kStages) * 8 + kAtomBytes;  // + alignment
  static_assert(kKVBytes % kAtomBytes == 0 && kQBytes % kAtomBytes == 0 &&
                    kdSBytes % kAtomBytes == 0,
                "atoms stay aligned");
  static_assert(kBytes <= 227 * 1024, "the most dynamic shared memory a block may opt in to");
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_dq_kernel(const __grid_constant__ CUtensorMap tm_q,
                   const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v,
                   const __grid_constant__ CUtensorMap tm_do, const BwdParams p) {
  using Sm = Smem<D>;
  using Dq = DqSplit<D>;
  constexpr int kStrips = D / kSwizzleCols;
  constexpr int kSAcc = kBr / 2;  // S^T (and dP^T) accumulators per thread
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  unsigned char* sK = smem + Sm::kKOffset;
  unsigned char* sV = smem + Sm::kVOffset;
  auto sQ = [&](int s) { return smem + Sm::kQOffset + s * Sm::kQBytes; };
  auto sdO = [&](int s) { return smem + Sm::kdOOffset + s * Sm::kQBytes; };
  unsigned char* sdS = smem + Sm::kdSOffset;                  // dS^T, row = key of the block
  float* sL = reinterpret_cast<float*>(smem + Sm::kLOffset);  // stage s at + s * kBr
  float* sD = reinterpret_cast<float*>(smem + Sm::kDOffset);
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Sm::kBarOffset);
  uint64_t* q_full = kv_full + 1;  // one per stage: Q and dO bytes of the tile have landed

  const int tid = threadIdx.x, wg = tid / 128, t = tid % 128, q = t % 4;
  const int64_t bh = int64_t(blockIdx.x) / p.n_tiles;
  const int64_t k0 = (int64_t(blockIdx.x) % p.n_tiles) * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  const float* lse = p.lse + bh * seq_q;
  const float* delta = p.delta + bh * seq_q;

  // The Q tiles that see this block's keys: causal, from the one holding the first query that
  // sees key k0 (every earlier tile is entirely masked, its dS is 0). Possibly none.
  const int64_t n_qt = ceil_div(seq_q, kBr);
  int64_t qt_begin = 0;
  if (p.causal) {
    const int64_t first = causal_first_query(k0, seq_q, seq_k);
    if (first > 0) qt_begin = first / kBr;
  }
  const int n_iter = qt_begin < n_qt ? int(n_qt - qt_begin) : 0;

  // Thread 0: Q and dO of iteration j (Q tile qt_begin + j) into stage j % kStages.
  auto request_q = [&](int j) {
    const int s = j % kStages;
    const int row = int((qt_begin + j) * kBr);
    hopper::mbar_arrive_expect_tx(&q_full[s], 2 * Sm::kQBytes);
    for (int c = 0; c < kStrips; ++c) {
      hopper::tma_load_3d(sQ(s) + c * kBr * 128, &tm_q, &q_full[s], c * kSwizzleCols, row, int(bh));
      hopper::tma_load_3d(sdO(s) + c * kBr * 128, &tm_do, &q_full[s], c * kSwizzleCols, row,
                          int(bh));
    }
  };
  // Warpgroup 0: threads 0..63 carry L2 of the tile's 64 queries, threads 64..127 their D.
  auto load_ld = [&](int j) {
    const int64_t row = (qt_begin + j) * kBr + tid % kBr;
    if (tid < kBr) return load_l2(lse, row, seq_q);
    return row < seq_q ? delta[row] : 0.0f;
  };
  auto store_ld = [&](int j, float x) {
    const int s = j % kStages;
    if (tid < kBr)
      sL[s * kBr + tid] = x;
    else if (tid < 2 * kBr)
      sD[s * kBr + tid - kBr] = x;
  };

  if (tid == 0) {
    hopper::mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) hopper::mbar_init(&q_full[s], 1);
    hopper::mbar_fence_init();
    if (n_iter > 0) {
      hopper::mbar_arrive_expect_tx(kv_full, 2 * Sm::kKVBytes);
      for (int c = 0; c < kStrips; ++c) {  // all D columns: S^T and dP^T contract over them
        hopper::tma_load_3d(sK + c * kBc * 128, &tm_k, kv_full, c * kSwizzleCols, int(k0), int(bh));
        hopper::tma_load_3d(sV + c * kBc * 128, &tm_v, kv_full, c * kSwizzleCols, int(k0), int(bh));
      }
    }
    for (int j = 0; j < kStages && j < n_iter; ++j) request_q(j);
  }
  if (tid < 2 * kBr)
    for (int j = 0; j < kStages && j < n_iter; ++j) store_ld(j, load_ld(j));
  __syncthreads();  // barriers initialised, L and D of the first stages stored

  // This warpgroup's 64 keys (rows of K and V in each strip) and this thread's two keys.
  const int wrow = wg * kWgRows;
  const unsigned char* sKw = sK + wrow * 128;
  const unsigned char* sVw = sV + wrow * 128;
  const int kr = wrow + 16 * (t / 32) + (t % 32) / 4;    // row of the dS^T tile; kr % 8 = lane / 4
  const int64_t key0 = k0 + kr;                          // and key0 + 8
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off
  // dQ_tile of this warpgroup: keys dq_key0 .. + Dq::kKeys - 1 of the block (rows of the dS^T and
  // K tiles), columns dq_col0 .. + 63 of D.
  const int dq_key0 = Dq::key0(wg), dq_col0 = Dq::col0(wg);
  // This thread's two rows of dQ_tile (16w + g and + 8, w = t / 32) and its first column, in this
  // head's workspace rows: row r of the tile starting at query q0 is at dq_rows + (q0 + r) * D.
  const int dq_r0 = 16 * (t / 32) + (t % 32) / 4;
  float* const dq_rows = p.dq_acc + bh * seq_q * D + dq_col0 + 2 * q;

  float dk[D / 2], dv[D / 2];
  zero(dk);
  zero(dv);

  if (n_iter > 0) hopper::mbar_wait(kv_full, 0);
  for (int j = 0; j < n_iter; ++j) {
    const int s = j % kStages;
    const int64_t q0 = (qt_begin + j) * kBr;
    const bool prefetch = j + kStages < n_iter && tid < 2 * kBr;
    const float next_ld = prefetch ? load_ld(j + kStages) : 0.0f;
    const bool need_mask = k0 + kBc > seq_k || (p.causal && k0 + kBc - 1 > q0 + off);
    hopper::mbar_wait(&q_full[s], (j / kStages) & 1);

    // ---- S^T = K Q^T and dP^T = V dO^T: 64 keys x 64 queries each, two commit groups.
    float st[kSAcc], dpt[kSAcc];
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kBr, T, 0>(st, desc_k_major<kBc>(sKw, kk), desc_k_major<kBr>(sQ(s), kk),
                                  kk > 0);
    hopper::wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopper::wgmma_ss<kBr, T, 0>(dpt, desc_k_major<kBc>(sVw, kk), desc_k_major<kBr>(sdO(s), kk),
                                  kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // S^T has landed; dP^T may still run
    hopper::fence_registers(st);

    // ---- P^T = exp2(S^T scale log2 e - L2): element i is key key0 + 8 ((i / 2) % 2), query
    // q0 + 8 (i / 4) + 2q + i % 2 (the accumulator layout, hopper.cuh).
    const float* l2 = sL + s * kBr;
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
        const int64_t query = q0 + 8 * (i / 4) + 2 * q + (i % 2);
        if (key >= seq_k || (p.causal && key > query + off)) st[i] = 0.0f;
      }
    }

    // ---- dV += P^T dO: k = the 64 queries, P^T from registers, dO MN-major.
    uint32_t pf[kBr / 16][4];
    pack_p<T>(st, pf);
    hopper::fence_registers(dv);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk)
      hopper::wgmma_rs<D, T, 1>(dv, pf[kk], desc_mn_major<kBr>(sdO(s), kk), 1);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // dP^T (committed before dV) has landed; dV may still run
    hopper::fence_registers(dpt);

    // ---- dS^T = P^T o (dP^T - D), D per query (column).
    const float* dd = sD + s * kBr;
#pragma unroll
    for (int i = 0; i < kSAcc; i += 2) {
      const float2 d2 = *reinterpret_cast<const float2*>(dd + 8 * (i / 4) + 2 * q);
      dpt[i] = st[i] * (dpt[i] - d2.x);
      dpt[i + 1] = st[i + 1] * (dpt[i + 1] - d2.y);
    }

    // ---- dK += dS^T Q: k = the 64 queries, dS^T from registers, Q MN-major.
    uint32_t dsf[kBr / 16][4];
    pack_p<T>(dpt, dsf);
    hopper::fence_registers(dk);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk)
      hopper::wgmma_rs<D, T, 1>(dk, dsf[kk], desc_mn_major<kBr>(sQ(s), kk), 1);
    hopper::wgmma_commit();

    // ---- dS^T -> the shared dS^T tile while dK runs: row kr (and kr + 8) = this thread's keys,
    // 64 queries = 128 bytes per row in eight 16-byte chunks, chunk c stored at c ^ (row % 8)
    // (the 128-byte swizzle TMA would write; row % 8 = lane / 4 for both rows). dsf[k] holds
    // queries 16k + 2q, +1 (chunk 2k) in [0] (row kr) and [1] (row kr + 8), and 16k + 8 + 2q, +1
    // (chunk 2k + 1) in [2] and [3]. For one store of a warp, its 8 rows put their 4-byte words in
    // 8 different chunks: the 32 words fall on 32 banks.
    {
      const int g = (t % 32) / 4;
      unsigned char* row_lo = sdS + kr * 128 + 4 * q;
      unsigned char* row_hi = row_lo + 8 * 128;
#pragma unroll
      for (int k = 0; k < kBr / 16; ++k) {
        *reinterpret_cast<uint32_t*>(row_lo + ((2 * k) ^ g) * 16) = dsf[k][0];
        *reinterpret_cast<uint32_t*>(row_hi + ((2 * k) ^ g) * 16) = dsf[k][1];
        *reinterpret_cast<uint32_t*>(row_lo + ((2 * k + 1) ^ g) * 16) = dsf[k][2];
        *reinterpret_cast<uint32_t*>(row_hi + ((2 * k + 1) ^ g) * 16) = dsf[k][3];
      }
    }
    hopper::fence_proxy_async_smem();  // the generic stores, before wgmma reads them
    hopper::named_bar_sync(Dq::ds_bar(wg), Dq::kBarThreads);

    // ---- dQ_tile = dS K: m = the 64 queries, A = dS read transposed from the dS^T tile rows
    // dq_key0 .., B = K rows dq_key0 .. (MN-major, from strip dq_col0 / 64 on). k16 step kk is
    // rows dq_key0 + 16 kk .. of both tiles.
    float dq[kDqN / 2];
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Dq::kKeys / 16; ++kk)
      hopper::wgmma_ss_n64_at<T>(dq, desc_mn_major<kBc>(sdS + dq_key0 * 128, kk),
                                 desc_mn_major<kBc>(sK + dq_key0 * 128, kk, dq_col0), kk > 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();  // dV, dK and dQ_tile have landed
    hopper::fence_registers(dq);
    hopper::fence_registers(dk);
    hopper::fence_registers(dv);
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk) {
      hopper::fence_registers(pf[kk]);
      hopper::fence_registers(dsf[kk]);
    }

    // ---- dQ_tile -> the workspace, from registers: thread t holds rows dq_r0 and dq_r0 + 8,
    // columns 8i + 2q, +1 in dq[4i + 2h], dq[4i + 2h + 1]; one red.global.add.v2.f32 per pair.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t query = q0 + dq_r0 + 8 * h;
      if (query < seq_q) {
        float* row = dq_rows + query * D;
#pragma unroll
        for (int i = 0; i < kDqN / 8; ++i)
          hopper::red_add_f32x2(row + 8 * i, dq[4 * i + 2 * h], dq[4 * i + 2 * h + 1]);
      }
    }

    // ---- Stage s and the dS^T tile are free once both warpgroups are done with them: refill
    // stage s with tile j + 2.
    __syncthreads();
    if (j + kStages < n_iter) {
      if (tid == 0) request_q(j + kStages);
      store_ld(j + kStages, next_ld);  // read again only after next iteration's barrier
    }
  }
  // Keys no query sees (causal) leave with dK = dV = 0, as they must. Rows k0 + wrow .. of this
  // head's [seq_k x D] dK and dV.
  const int64_t row0 = k0 + wrow;
  store_acc_rows<T, D, D>(static_cast<T*>(p.dk) + bh * seq_k * D, dk, row0, seq_k, p.scale, t);
  store_acc_rows<T, D, D>(static_cast<T*>(p.dv) + bh * seq_k * D, dv, row0, seq_k, 1.0f, t);
}

// ---- Launcher ------------------------------------------------------------------------------------
template <class T, int D>
void launch(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t n_kt = ceil_div(s.seq_k, kBc);
  FA_UNSUPPORTED_IF(n_kt * s.bh() > INT_MAX,
                    std::string(kName) + ": more than 2^31-1 thread blocks");
  BwdParams p{};
  p.lse = a.lse;
  p.delta = a.delta;
  p.dq_acc = a.workspace;
  p.dk = a.dk;
  p.dv = a.dv;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.n_tiles = n_kt;
  p.scale = s.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = s.causal;

  // 2. dK, dV and dQ_tile: K/V boxes of kBc rows (kept), Q/dO boxes of 64 rows (streamed); every
  // box is 64 columns wide, one 128-byte swizzled strip.
  const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, D, kBr, a.dtype);
  const CUtensorMap tm_do = make_tmap(a.dout, s.bh(), s.seq_q, D, kBr, a.dtype);
  const CUtensorMap tm_k = make_tmap(a.k, s.bh(), s.seq_k, D, kBc, a.dtype);
  const CUtensorMap tm_v = make_tmap(a.v, s.bh(), s.seq_k, D, kBc, a.dtype);
  constexpr int kSmem = Smem<D>::kBytes;
  set_smem_limit_once<dkdv_dq_kernel<T, D>, kSmem>();
  dkdv_dq_kernel<T, D>
      <<<unsigned(n_kt * s.bh()), kThreads, kSmem, stream>>>(tm_q, tm_k, tm_v, tm_do, p);
  FA_CHECK_LAUNCH();

  // 3. dQ from the workspace (dq_convert, hopper_attention_bwd.cuh).
  dq_convert<T>(a, p.scale, stream);
}

template <class T>
void dispatch_head_dim(const AttentionBwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) + " not instantiated (64, 128)");
  }
}

void attention_bwd_t42(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.seq_k >= 0 && s.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(kName) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(s.head_dim != 64 && s.head_dim != 128,
                    std::string(kName) + " is instantiated for head_dim 64 and 128 only");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(kName) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  if (s.bh() == 0) return;  // nothing to write
  FA_REQUIRE(a.workspace != nullptr, std::string(kName) + " needs the fp32 workspace (dQ's sum)");
  // The bulk reduce-adds need 16-byte aligned rows of the workspace (D * 4 bytes per row keeps
  // them so once the base is).
  if (!tma_can_load(a) || !aligned(a.workspace, 16)) return run_fallback(a, stream);
  // 1. D = rowsum(dO o O), before the kernel that reads it (same stream).
  delta_preprocess_launch(a.o, a.dout, a.delta, s, a.dtype, stream);
  if (a.dtype == DType::BF16)
    dispatch_head_dim<__nv_bfloat16>(a, stream);
  else
    dispatch_head_dim<__half>(a, stream);
}

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {kName,
             attention_bwd_t42,
             "bwd_v4 with dQ_tile added into the fp32 workspace from registers "
             "(red.global.add.v2.f32), no staging in shared memory and no TMA; not "
             "deterministic",
             {DType::BF16, DType::F16},
             {64, 128},
             90,
             false});

}  // namespace fa::ch07
