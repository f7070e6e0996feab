// t04_bc128_8warps.cu: 06/v3_atomic_dq plus one idea, FlashAttention-2's tile: a block owns
// Bc = 128 keys instead of 64, with 8 warps instead of 4 (16 keys each, as before), one block per
// SM instead of two. bf16 / fp16 in, mma.sync m16n8k16, fp32 accumulate. Not bitwise deterministic
// (dQ by atomics, as in v3). The first step of the tuning appendix (README.md beside this file).
//
// What changed vs v3, and why. A warp's own work per (query, key) is the same: it still owns 16
// keys (16 rows of S^T, dP^T, dS^T, dK, dV) and all Br = 64 queries of the tile, with the same
// registers. What doubles is what the block shares, per Q tile:
//   - one load of Q_i, dO_i, L_i, D_i (cp.async, global -> shared) now serves 128 keys, not 64;
//   - one round of "dS^T -> shared memory, barrier, dQ_i += dS K_j, barrier" covers 128 keys,
//     so per key there are half the barriers;
//   - dQ_i's partial sum runs over 128 keys before its atomics, so every element of dQaccum is
//     added ceil(N_k / 128) times instead of ceil(N_k / 64): half the L2 reduction traffic.
// Those are the three lines of v3's profile against FlashAttention-2 (notes/06_flash_backward.md,
// section 5b): 2x the reduction sectors, 2.5x the barrier stalls, half the key tile. The warps
// per SM stay 8 (v3: two blocks of 4; here one block of 8).
//
// The map (three launches on one stream, after the caller's memset of the workspace), as v3:
//   1. launch_delta_preprocess: D = rowsum(dO * O)                    (ch06_preprocess.h)
//   2. dkdv_kernel: one block per (K/V tile of Bc = 128 keys, batch*head). K_j, V_j stay in
//      shared memory; the block walks the Q tiles (Br = 64) that can see K_j and for each Q_i:
//        S^T = K_j Q_i^T,  P^T = exp(scale S^T - L_i),  dV_j += P^T dO_i,
//        dP^T = V_j dO_i^T,  dS^T = P^T * (dP^T - D_i),  dK_j += dS^T Q_i,
//        dS^T -> shared memory, barrier, dQaccum_i += dS K_j by atomics
//      then writes dK_j * scale and dV_j.
//   3. convert_dq_kernel: dQ = dQaccum * scale in the dtype.
//
// The dQ product with 8 warps. dQ_i = dS K_j is 64 queries x D, summed over the 128 keys. Warp w
// takes query rows 16 (w % 4) .. + 15 and the column half (w / 4) of D: 16 x D/2 per warp, each
// summed over all 128 keys (8 k-steps) before its atomics, kDqCols columns at a time. Per warp
// that is as many MMAs as in v3 (16 x D over 64 keys), and as many ldmatrix.
//
// Head dim 256 is not instantiated: K_j and V_j alone would take 2 x 128 x 264 x 2 B = 132 KiB,
// with Q_i, dO_i double-buffered 264 KiB in all, past the 227 KiB a block can have on an H100.
// v3 keeps serving D = 256 (its column split). D = 32, 64, 96, 128 are.
//
// Shared memory (one block per SM):
//   K_j, V_j (128 rows) | Q_i x2 | dO_i x2 (64 rows) | L_i*log2(e) x2 | D_i x2 | dS^T (128 x 72)
//   = 59 / 91 / 123 / 155 KiB at D = 32 / 64 / 96 / 128: an H100 or an A100 (163 KiB) has it,
//   sm_86/89 (99 KiB) only up to D = 64; the launcher refuses the rest as UNSUPPORTED.
//
// Cost: as v3 (the order of the atomics is the scheduler's: dQ may differ between runs in the
// last bits). Diagonal tiles of a causal mask are wider: a 128-key tile crossing the diagonal
// holds up to 64 more masked (query, key) pairs than two 64-key tiles would, and computes them.
//
// Masking: as v3. Rows past seq_q / seq_k are zero-filled; L' = +inf makes P = 0 for rows that do
// not exist or see no key; keys past seq_k and the causal triangle are masked on the tiles that
// need it.
//
// The code: the kernel is here; Params, the launcher and the pieces t05-t12 share with it are in
// ch06_kv128.cuh.
//
// Measured (H100 80GB HBM3, 2026-11-23, bf16, B = 16384/N, H = 2048/D, TFLOP/s in the 2.5x
// convention, notes/measured/h100-2026-11-23f/bench_final.log): D 128 full N 1024 180.8 (v3
// 179.3 in the same run). D 64 full N 8192: 182.7 (v3 182.8). t04 is slower than v3 at D 64 up to
// N 4096 full (156.4 against 165.8 at N 1024) and N 8192 causal, and at D 128 causal up to N 2048
// (the wider diagonal tiles). Nsight Compute (ncu_bwd_v4.txt in that folder): the L2
// reductions halved exactly (805,306,368 -> 402,653,184 sectors), the barrier stalls per warp did
// not (126 K against v3's 77 K: one block of 8 warps waits for its slowest warp, not two blocks
// of 4), and the instruction count fell 15% (3.40 G -> 2.89 G). FlashAttention-2's kernel on that
// shape: 2.12 G instructions, 10.45 ms against our 15.53 ms. Where the other 0.77 G come from is
// t05's and t06's story.
//
// A bug the tests caught: the first version kept v3's `64 * kLd` as the size of every tile, so V
// started in the middle of the 128-row K tile and Q in the middle of V. Every ragged shape failed,
// dV included (ctest_v4_bug.log.gz in that folder); its timing was already this step's (the
// same instructions).
// Speed (H100 80GB HBM3, 2026-11-23): D 128 N 8192 bf16 210.3 TFLOP/s, v3_atomic_dq 206.2.
#include "ch06_kv128.cuh"  // the tile, Params, the fragment loaders, the host side
#include "mma.cuh"
#include "registry.h"

namespace {

using fa::bwd_tc::acc_to_a;
using fa::bwd_tc::load_a;
using fa::bwd_tc::load_a_xt;
using fa::bwd_tc::load_b_x;
using fa::bwd_tc::load_b_xt;
using fa::bwd_tc::mma_pair;
using fa::bwd_tc::store_a;

constexpr int kChunk = 32;         // columns of S^T held in registers at a time
constexpr int kQWarps = kBr / 16;  // warps per column half of dQ (one per 16 query rows)
static_assert(kWarps == 2 * kQWarps, "dQ: two column halves of kQWarps warps");
static_assert(kBr % kChunk == 0 && kBc % kChunk == 0 && kChunk % 16 == 0, "chunking");

// Columns of the partial dQ held in registers at a time (16 x kDqCols per warp) before their
// atomics: 32 where it divides the warp's half of D (64, 128), 16 where it does not (32, 96).
template <int D>
constexpr int kDqCols = (D / 2) % 32 == 0 ? 32 : 16;
static_assert(kDqCols<128> == 32 && kDqCols<96> == 16 && kDqCols<32> == 16, "dQ chunks");

// ---- dK, dV, and the dQ atomics ------------------------------------------------------------
template <class T, int D>
__global__ void __launch_bounds__(kThreads, 1) dkdv_kernel(Params p) {
  constexpr int kLd = D + kPad;
  constexpr int kTile = kBr * kLd;    // a Q or dO tile (kBr rows)
  constexpr int kKvTile = kBc * kLd;  // a K or V tile (kBc rows: twice v3's)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                   // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of kBr: L * log2(e)
  float* sD = sL + 2 * kBr;                               // two buffers of kBr: D
  T* sdS = reinterpret_cast<T*>(sD + 2 * kBr);            // dS^T: kBc keys x kBr queries

  constexpr int kDqHalf = D / 2;  // columns of dQ one warp adds
  static_assert(kDqHalf % kDqCols<D> == 0, "dQ chunks");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;  // bh * n_tiles + key tile
  const int64_t bh = tile_bh / p.n_tiles;
  const int64_t k0 = (tile_bh % p.n_tiles) * kBc;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  // Causal (bottom-right): query i sees keys j <= causal_last_key(i) = i + off (shapes.h).
  const int64_t off = causal_last_key(0, seq_q, seq_k);

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* dO = static_cast<const T*>(p.dout) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;
  float* dQacc = p.dq_accum + bh * seq_q * D;
  const float* lse = p.lse + bh * seq_q;
  const float* delta = p.delta + bh * seq_q;

  // The Q tiles that can see this K tile: with causal masking the first query to see key k0 is
  // k0 - off; every tile before the one holding it is entirely masked and skipped.
  const int64_t n_qt = ceil_div(seq_q, kBr);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBr;  // may be >= n_qt: no work

  // Prologue: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i by plain loads.
  load_tile_async<T, D, kBc, kThreads>(sK, K, k0, seq_k, tid);
  load_tile_async<T, D, kBc, kThreads>(sV, V, k0, seq_k, tid);
  if (qt_begin < n_qt) {
    const int64_t q0 = qt_begin * kBr;
    load_tile_async<T, D, kBr, kThreads>(sQ, Q, q0, seq_q, tid);
    load_tile_async<T, D, kBr, kThreads>(sdO, dO, q0, seq_q, tid);
    const int64_t row = q0 + (tid & (kBr - 1));
    if (tid < kBr)
      sL[tid] = load_l2(lse, row, seq_q);
    else if (tid < 2 * kBr)
      sD[tid - kBr] = row < seq_q ? delta[row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  float dv[D / 8][4], dk[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[nt][e] = dk[nt][e] = 0.0f;

  const int kr0 = warp * 16;                   // this warp's first key row in the tile
  const int qr0 = (warp % kQWarps) * 16;       // its first query row, for dQ,
  const int dq0 = (warp / kQWarps) * kDqHalf;  // and its first column of dQ

  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int buf = int(qt - qt_begin) & 1;
    const int64_t q0 = qt * kBr;
    const bool has_next = qt + 1 < n_qt;

    // Prefetch Q_{i+1}, dO_{i+1} into the other buffer (always commit: an empty group keeps the
    // wait<1> below correct on the last tile). L and D go through registers, stored after the
    // math so their latency hides behind it.
    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = q0 + kBr;
      load_tile_async<T, D, kBr, kThreads>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, tid);
      load_tile_async<T, D, kBr, kThreads>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, tid);
      const int64_t row = q1 + (tid & (kBr - 1));
      if (tid < kBr)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBr)
        next_ld = row < seq_q ? delta[row] : 0.0f;
    }
    fa::mma::cp_async_commit();
    fa::mma::cp_async_wait<1>();
    __syncthreads();

    const T* q_s = sQ + buf * kTile;
    const T* do_s = sdO + buf * kTile;
    const float* l_s = sL + buf * kBr;
    const float* d_s = sD + buf * kBr;
    // Mask only where needed: keys past seq_k, or a tile crossing the causal diagonal (some key
    // of the tile lies beyond what the tile's first query sees).
    const bool need_mask = (k0 + kBc > seq_k) || (p.causal && k0 + kBc - 1 > q0 + off);

#pragma unroll
    for (int qc = 0; qc < kBr / kChunk; ++qc) {
      constexpr int kNt = kChunk / 8;  // n-tiles of the chunk
      const int c0 = qc * kChunk;      // first query column of the chunk, within the tile

      // S^T = K_j Q^T over this chunk of queries.
      float s[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        load_a<kLd>(a, sK, kr0, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          load_b_xt<kLd>(b, q_s, c0 + np * 16, ks * 16, lane);
          mma_pair<T>(s[2 * np], s[2 * np + 1], a, b);
        }
      }

      // P^T = exp(scale S^T - L), masked. Element (nt, e): key row kr0 + g + 8*(e/2), query
      // column c0 + 8*nt + 2t + e%2.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = c0 + nt * 8 + 2 * t + (e & 1);
          float pv = exp2f(fmaf(s[nt][e], p.scale_log2, -l_s[col]));
          if (need_mask) {
            const int64_t key = k0 + kr0 + g + 8 * (e >> 1);
            const int64_t query = q0 + col;
            if (key >= seq_k || (p.causal && key > query + off)) pv = 0.0f;
          }
          s[nt][e] = pv;
        }
      }

      // dV_j += P^T dO: k runs over the chunk's queries, 16 at a time.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          load_b_x<kLd>(b, do_s, c0 + kk * 16, np * 16, lane);
          mma_pair<T>(dv[2 * np], dv[2 * np + 1], a, b);
        }
      }

      // dP^T = V_j dO^T over the same chunk.
      float dp[kNt][4];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        load_a<kLd>(a, sV, kr0, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t b[4];
          load_b_xt<kLd>(b, do_s, c0 + np * 16, ks * 16, lane);
          mma_pair<T>(dp[2 * np], dp[2 * np + 1], a, b);
        }
      }

      // dS^T = P^T * (dP^T - D): D belongs to the query, the column.
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dp[nt][e] = s[nt][e] * (dp[nt][e] - d_s[c0 + nt * 8 + 2 * t + (e & 1)]);

          // dK_j += dS^T Q; the same 16-bit dS^T into sdS for dQ.
#pragma unroll
      for (int kk = 0; kk < kNt / 2; ++kk) {
        uint32_t a[4];
        acc_to_a<T>(a, dp[2 * kk], dp[2 * kk + 1]);
        store_a<kLdS>(sdS, a, kr0, c0 + kk * 16, lane);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          uint32_t b[4];
          load_b_x<kLd>(b, q_s, c0 + kk * 16, np * 16, lane);
          mma_pair<T>(dk[2 * np], dk[2 * np + 1], a, b);
        }
      }
    }

    // dQaccum_i += dS K_j: warp w takes query rows qr0.. and columns dq0 .. dq0 + D/2 - 1, A =
    // dS = sdS^T (all kBc keys, written by the eight warps), B = K_j; kDqCols columns at a time.
    __syncthreads();         // sdS complete
    if (q0 + qr0 < seq_q) {  // else every row of this warp lies past seq_q
#pragma unroll
      for (int dc = 0; dc < kDqHalf / kDqCols<D>; ++dc) {
        const int n0 = dq0 + dc * kDqCols<D>;  // first column of the chunk
        float acc[kDqCols<D> / 8][4];
#pragma unroll
        for (int nt = 0; nt < kDqCols<D> / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kBc / 16; ++ks) {
          uint32_t a[4];
          load_a_xt<kLdS>(a, sdS, qr0, ks * 16, lane);
#pragma unroll
          for (int np = 0; np < kDqCols<D> / 16; ++np) {
            uint32_t b[4];
            load_b_x<kLd>(b, sK, ks * 16, n0 + np * 16, lane);
            mma_pair<T>(acc[2 * np], acc[2 * np + 1], a, b);
          }
        }
        // Element (nt, e): query row qr0 + g + 8*(e/2), column n0 + 8*nt + 2t + e%2.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = q0 + qr0 + g + 8 * h;
          if (row >= seq_q) continue;
          float* dst = dQacc + row * D + n0 + 2 * t;
#pragma unroll
          for (int nt = 0; nt < kDqCols<D> / 8; ++nt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            // sm_90 adds a float2 in one atomic (the two columns are adjacent and 8-byte
            // aligned: 2t is even): half the atomic instructions and L2 sector updates of two
            // scalar ones (Nsight Compute, H100: 1.61 G reduction sectors with scalar atomics).
            atomicAdd(reinterpret_cast<float2*>(dst + 8 * nt),
                      make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]));
#else
            atomicAdd(dst + 8 * nt, acc[nt][2 * h]);
            atomicAdd(dst + 8 * nt + 1, acc[nt][2 * h + 1]);
#endif
          }
        }
      }
    }

    // L, D of the next tile into the other buffer (nobody reads it during this iteration).
    if (has_next) {
      if (tid < kBr)
        sL[(buf ^ 1) * kBr + tid] = next_ld;
      else if (tid < 2 * kBr)
        sD[(buf ^ 1) * kBr + tid - kBr] = next_ld;
    }
    __syncthreads();  // everyone is done with `buf` before the next prefetch overwrites it
  }
  fa::mma::cp_async_wait<0>();

  // Rows of keys that no query sees (causal) leave here with dK = dV = 0, as they must.
  T* dK = static_cast<T*>(p.dk) + bh * seq_k * D;
  T* dV = static_cast<T*>(p.dv) + bh * seq_k * D;
  store_rows<T, D, D>(dK, dk, k0 + kr0, 0, seq_k, p.scale, lane);
  store_rows<T, D, D>(dV, dv, k0 + kr0, 0, seq_k, 1.0f, lane);
}

struct T04 : KvStep {
  static constexpr const char* kName = "06/t04_bc128_8warps";
  template <class T, int D>
  static auto kernel() {
    return dkdv_kernel<T, D>;
  }
};

}  // namespace

FA_REGISTER(AttentionBwdKernel,
            {T04::kName,
             kv128_backward<T04>,
             "v3 + FA2's tile: Bc = 128 keys and 8 warps a block (half the dQ atomics, barriers "
             "and Q/dO loads per key)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 96, 128},
             80,
             false});
