// t14_d256_tiles.cu: 06/v5_warp_tiles's kernel at D 256, with one idea: a block owns 64 keys
// instead of 128, so that its dK and dV fit in registers. bf16 / fp16 in, mma.sync m16n8k16, fp32
// accumulate. Not bitwise deterministic (dQ by atomics, as in v3 to v5).
//
// Why. v5 keeps dK and dV of its 128 keys in registers for the whole walk over the queries: 2 x
// 128 keys x D fp32 values over 256 threads, 128 registers each at D 128. At D 256 that is 256
// registers for the accumulators alone, and the tiles (K, V, Q x2, dO x2 of 128 or 64 rows of
// 512 bytes) would take 256 KiB of shared memory, past the 227 KiB a block may have. So D 256
// went to 06/v3_atomic_dq (64 keys, 4 warps, each warp 16 keys and all 256 columns, P and dS in
// registers), at 99-116 TFLOP/s on the H200 where FlashAttention-2 runs 145-255 (0.43-0.68x).
// FlashAttention-2 itself runs D 256 with 64 keys and 8 warps (its flash_bwd_launch_template.h,
// run_mha_bwd_hdim256: a 64 x 64 tile, 8 warps, for GPUs with at least 176 KiB of shared memory
// a block).
//
// What changed against v5 at D 128 (the kernel below is v5's, line for line, with these tiles):
//   * Bc = 64 keys a block (kBcW), Br = 64 queries a tile, 8 warps.
//   * S and dP: warp (wm, wn) = (warp / 4, warp % 4) computes 32 queries x 16 keys (v5: 32 x 32):
//     per k16 step 2 Q (or dO) fragments and 1 K (or V) fragment for 4 MMAs.
//   * dK and dV: warp (wk, wd) = (warp % 2, warp / 2) owns 32 keys x 64 columns (v5: 32 x D / 2):
//     2 x 2 x 8 x 4 = 128 registers, v5's count at D 128.
//   * dQ += dS K: warp (wq, wc) = (wm, wn), 32 queries x 64 columns (v5: 32 x D / 4), k over the
//     64 keys.
//   * P and dS: 64 queries x 64 keys, rows of 72 (the padding of v5's 136-element rows).
//   Shared memory: K, V (32 KiB each), Q and dO double-buffered (128 KiB), L and D (1 KiB), P
//   and dS (18 KiB): 211 KiB, one block of 8 warps per SM, as v5.
// The price: each Q tile's dQ is added once per 64 keys instead of once per 128, so the dQ
// atomics per FLOP double against v5 at D 128 (FlashAttention-2 pays the same: its D 256 tile is
// 64 keys too).
//
// ptxas (CUDA 13.0, sm_90): 254 registers, no spills.
//
// Speed (H200, 2026-12-04, bf16, B = 16384/N, H = 2048/D; medians of three alternating rounds with
// PyTorch SDPA in each, notes/measured/h200-2026-12-04/rounds_bwd_d256_t14.md)
//   1.48-1.87x v3 at every D 256 shape; N 8192 207.7 TFLOP/s (v3 115.2). Against
//   FlashAttention-2: 1.03 (N 512), 0.97 (1024), 0.88 (2048), 0.86 (4096), 0.84 (8192), 0.82
//   (16384); causal 1.15, 1.13, 0.97, 0.91, 0.90, 0.87.
// What is left (Nsight Compute, D 256 N 8192, ncu_bwd_D256_*.txt): the same ldmatrix count
// (352.3 M), copies and L2 reduction sectors of the dQ atomics (805.3 M) as FlashAttention-2's
// kernel, but 17.4 ms against 13.8 and the tensor pipe busy 33% against 42%. 31% of the warp-stall
// samples fall in the 32 float2 atomics a warp issues per Q tile: the load/store queue is full (LG
// stalls), and ptxas, at 254 registers, rebuilds the atomics' address register between groups of
// eight and waits for the previous eight to read it (long-scoreboard stalls, 324 K per warp against
// 193 K). Without dQ at all (a wrong result, timed as a bound) the kernel runs 347 TFLOP/s at N
// 8192. Tried and dropped (the tuning README's rows): one address for a warp's 32 atomics, dQ in
// two halves of 32 columns, both together (the best: 1.015-1.025x t14, inside the 2% that one
// run's spread allows), and dQ with its atomics before the dK product (0.97-1.00x).

#include "ch06_warp_tiles_kernel.cuh"  // v5's pieces: rows_times_keys, keys_times_cols, add_dq, ...
#include "registry.h"

namespace {

constexpr const char* kT14Name = "06/t14_d256_tiles";
constexpr int kD256 = 256;          // the one head dim of this step
constexpr int kBcW = 64;            // keys per block (v5: 128)
constexpr int kBrW256 = 64;         // queries per Q tile
constexpr int kLdPW = kBcW + kPad;  // a row of the P or dS tile: 64 keys + padding
constexpr int kColsKV = kD256 / 4;  // columns of dK, dV per warp: 64
constexpr int kColsDq = kD256 / 4;  // columns of dQ per warp: 64
static_assert(kWarps == 8, "warps: 2 x 4 (S, dP, dQ), 2 x 4 (dK, dV)");

// K, V | Q x2 | dO x2 (swizzled rows of 256 elements) | L x2 | D x2 | P | dS: 211 KiB.
constexpr int d256_smem_bytes() {
  return (2 * kBcW + 4 * kBrW256) * kD256 * 2 + 4 * kBrW256 * int(sizeof(float)) +
         2 * kBrW256 * kLdPW * 2;
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1) d256_tiles_kernel(Params p) {
  constexpr int D = kD256;
  constexpr int kTile = kBrW256 * D;  // a Q or dO buffer (elements)
  constexpr int kKvTile = kBcW * D;   // K or V
  constexpr int kKw = 16;             // keys of S, dP per warp
  constexpr int kSn = kKw / 8;        // their n8 tiles
  extern __shared__ __align__(128) unsigned char smem_d256[];
  T* sK = reinterpret_cast<T*>(smem_d256);
  T* sV = sK + kKvTile;
  T* sQ = sV + kKvTile;                                   // two buffers
  T* sdO = sQ + 2 * kTile;                                // two buffers
  float* sL = reinterpret_cast<float*>(sdO + 2 * kTile);  // two buffers of 64: L * log2(e)
  float* sD = sL + 2 * kBrW256;                           // two buffers of 64: D
  T* sP = reinterpret_cast<T*>(sD + 2 * kBrW256);         // P: 64 queries x 64 keys
  T* sdS = sP + kBrW256 * kLdPW;                          // dS: the same layout

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile_bh = blockIdx.x;  // bh * n_tiles + key tile
  const int64_t bh = tile_bh / p.n_tiles;
  const int64_t k0 = (tile_bh % p.n_tiles) * kBcW;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;
  const int64_t off = causal_last_key(0, seq_q, seq_k);  // query i sees keys j <= i + off

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* dO = static_cast<const T*>(p.dout) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;
  float* dQacc = p.dq_accum + bh * seq_q * D;
  const float* lse = p.lse + bh * seq_q;
  const float* delta = p.delta + bh * seq_q;

  const int64_t n_qt = ceil_div(seq_q, kBrW256);
  int64_t qt_begin = 0;
  if (p.causal && k0 - off > 0) qt_begin = (k0 - off) / kBrW256;  // may be >= n_qt: no work

  // Prologue: K_j, V_j and the first Q_i, dO_i in one cp.async group; L_i, D_i.
  load_tile_async<T, D, kBcW, kThreads, true>(sK, K, k0, seq_k, tid);
  load_tile_async<T, D, kBcW, kThreads, true>(sV, V, k0, seq_k, tid);
  if (qt_begin < n_qt) {
    const int64_t q0 = qt_begin * kBrW256;
    load_tile_async<T, D, kBrW256, kThreads, true>(sQ, Q, q0, seq_q, tid);
    load_tile_async<T, D, kBrW256, kThreads, true>(sdO, dO, q0, seq_q, tid);
    const int64_t row = q0 + (tid & (kBrW256 - 1));
    if (tid < kBrW256)
      sL[tid] = load_l2(lse, row, seq_q);
    else if (tid < 2 * kBrW256)
      sD[tid - kBrW256] = row < seq_q ? delta[row] : 0.0f;
  }
  fa::mma::cp_async_commit();

  // The warp layouts (the header's list).
  const int wm = warp >> 2, wn = warp & 3;  // S, dP: queries 32 wm .., keys 16 wn ..
  const int wk = warp & 1, wd = warp >> 1;  // dK, dV: keys 32 wk .., columns 64 wd ..
  const int wq = wm, wc = wn;               // dQ: queries 32 wq .., columns 64 wc ..

  float dv[2][kColsKV / 8][4], dk[2][kColsKV / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kColsKV / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dv[mt][nt][e] = dk[mt][nt][e] = 0.0f;

  // Every address of the loop as a base plus a compile-time offset, as in v5.
  const uint32_t swz = fa::bwd_tc::swizzle_xor(lane);
  const uint32_t rows_d = lane_rows<D>(lane), trans_d = lane_trans<D>(lane);
  const uint32_t q_a0 = smem_addr(sQ) + rows_d + at<D>(32 * wm, 0);         // S: A = Q
  const uint32_t do_a0 = smem_addr(sdO) + rows_d + at<D>(32 * wm, 0);       // dP: A = dO
  const uint32_t k_b = smem_addr(sK) + trans_d + at<D>(kKw * wn, 0);        // S: B = K^T
  const uint32_t v_b = smem_addr(sV) + trans_d + at<D>(kKw * wn, 0);        // dP: B = V^T
  const uint32_t do_x0 = smem_addr(sdO) + rows_d + at<D>(0, kColsKV * wd);  // dV: B = dO
  const uint32_t q_x0 = smem_addr(sQ) + rows_d + at<D>(0, kColsKV * wd);    // dK: B = Q
  const uint32_t k_x = smem_addr(sK) + rows_d + at<D>(0, kColsDq * wc);     // dQ: B = K
  const uint32_t p_at = smem_addr(sP) + lane_trans<kLdPW>(lane) + at<kLdPW>(0, 32 * wk);
  const uint32_t ds_at = smem_addr(sdS) + lane_trans<kLdPW>(lane) + at<kLdPW>(0, 32 * wk);
  const uint32_t ds_a = smem_addr(sdS) + lane_rows<kLdPW>(lane) + at<kLdPW>(32 * wq, 0);
  // Where this thread stores its P and dS elements: row 32 wm + g, columns 16 wn + 2t.
  T* const p_st = sP + (32 * wm + g) * kLdPW + kKw * wn + 2 * t;
  T* const ds_st = sdS + (32 * wm + g) * kLdPW + kKw * wn + 2 * t;
  const TileCopy<T, D, true> copy(tid);
  const uint32_t sq_addr = smem_addr(sQ), sdo_addr = smem_addr(sdO);
  constexpr uint32_t kTileBytes = kTile * 2;

  for (int64_t qt = qt_begin; qt < n_qt; ++qt) {
    const int buf = int(qt - qt_begin) & 1;
    const int64_t q0 = qt * kBrW256;
    const bool has_next = qt + 1 < n_qt;

    // One barrier: tile i has arrived, and every warp is done with tile i - 1 (v5's order).
    fa::mma::cp_async_wait<0>();
    __syncthreads();

    float next_ld = 0.0f;
    if (has_next) {
      const int64_t q1 = q0 + kBrW256;
      if (q1 + kBrW256 <= seq_q) {
        const uint32_t next = uint32_t(buf ^ 1) * kTileBytes;
        copy.full(sq_addr + next, Q + q1 * D);
        copy.full(sdo_addr + next, dO + q1 * D);
      } else {
        load_tile_async<T, D, kBrW256, kThreads, true>(sQ + (buf ^ 1) * kTile, Q, q1, seq_q, tid);
        load_tile_async<T, D, kBrW256, kThreads, true>(sdO + (buf ^ 1) * kTile, dO, q1, seq_q, tid);
      }
      const int64_t row = q1 + (tid & (kBrW256 - 1));
      if (tid < kBrW256)
        next_ld = load_l2(lse, row, seq_q);
      else if (tid < 2 * kBrW256)
        next_ld = row < seq_q ? delta[row] : 0.0f;
    }
    fa::mma::cp_async_commit();

    const uint32_t cur = uint32_t(buf) * kTileBytes;
    const uint32_t q_a = q_a0 + cur, do_a = do_a0 + cur, do_x = do_x0 + cur, q_x = q_x0 + cur;
    const float* l_s = sL + buf * kBrW256;
    const float* d_s = sD + buf * kBrW256;
    const bool need_mask = (k0 + kBcW > seq_k) || (p.causal && k0 + kBcW - 1 > q0 + off);

    // S = Q K^T and dP = dO V^T, 32 x 16 per warp: element (mt, nt, e) is query row
    // 32 wm + 16 mt + g + 8 (e / 2), key column 16 wn + 8 nt + 2t + e % 2 of the tile.
    float s[2][kSn][4], dp[2][kSn][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = dp[mt][nt][e] = 0.0f;
    rows_times_keys<T, D, kSn>(s, q_a, k_b, swz);    // S = Q K^T
    rows_times_keys<T, D, kSn>(dp, do_a, v_b, swz);  // dP = dO V^T

    // P = exp(scale S - L), masked where needed; dS = P (dP - D); both into shared memory.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 32 * wm + 16 * mt + g + 8 * h;
        const float l2 = l_s[row], dd = d_s[row];
#pragma unroll
        for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int e = 2 * h + c;
            float pv = ex2_ftz(fmaf(s[mt][nt][e], p.scale_log2, -l2));
            if (need_mask) {
              const int64_t key = k0 + kKw * wn + 8 * nt + 2 * t + c;
              if (key >= seq_k || (p.causal && key > q0 + row + off)) pv = 0.0f;
            }
            s[mt][nt][e] = pv;
            dp[mt][nt][e] = pv * (dp[mt][nt][e] - dd);
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < kSn; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int o = (16 * mt + 8 * h) * kLdPW + 8 * nt;
          *reinterpret_cast<uint32_t*>(p_st + o) =
              fa::mma::pack2<T>(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]);
          *reinterpret_cast<uint32_t*>(ds_st + o) =
              fa::mma::pack2<T>(dp[mt][nt][2 * h], dp[mt][nt][2 * h + 1]);
        }
      }
    }
    __syncthreads();  // P and dS complete

    // dV += P^T dO and dK += dS^T Q: 32 keys x 64 columns per warp, k over the 64 queries.
    keys_times_cols<T, D, kBrW256, kColsKV, true, kLdPW>(dv, p_at, do_x, swz);
    keys_times_cols<T, D, kBrW256, kColsKV, true, kLdPW>(dk, ds_at, q_x, swz);

    // dQaccum_i += dS K_j: 32 queries x 64 columns per warp, k over the 64 keys.
    if (q0 + 32 * wq < seq_q) {  // else every row of this warp lies past seq_q
      float acc[2][kColsDq / 8][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < kColsDq / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      keys_times_cols<T, D, kBcW, kColsDq, false, kLdPW>(acc, ds_a, k_x, swz);
      const int64_t row0 = q0 + 32 * wq + g;
      float* const dst0 = dQacc + row0 * D + kColsDq * wc + 2 * t;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (row0 + 16 * mt + 8 * h >= seq_q) continue;
#pragma unroll
          for (int nt = 0; nt < kColsDq / 8; ++nt)
            add_dq(dst0 + (16 * mt + 8 * h) * D + 8 * nt, acc[mt][nt][2 * h],
                   acc[mt][nt][2 * h + 1]);
        }
    }

    if (has_next) {  // L, D of the next tile into the other buffer
      if (tid < kBrW256)
        sL[(buf ^ 1) * kBrW256 + tid] = next_ld;
      else if (tid < 2 * kBrW256)
        sD[(buf ^ 1) * kBrW256 + tid - kBrW256] = next_ld;
    }
  }
  fa::mma::cp_async_wait<0>();

  // Keys that no query sees (causal) leave here with dK = dV = 0, as they must.
  T* dK = static_cast<T*>(p.dk) + bh * seq_k * D;
  T* dV = static_cast<T*>(p.dv) + bh * seq_k * D;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    store_rows<T, D, kColsKV>(dK, dk[mt], k0 + 32 * wk + 16 * mt, kColsKV * wd, seq_k, p.scale,
                              lane);
    store_rows<T, D, kColsKV>(dV, dv[mt], k0 + 32 * wk + 16 * mt, kColsKV * wd, seq_k, 1.0f, lane);
  }
}

// The host side: the D preprocess, this kernel over (batch * heads) x key tiles, dQ from the
// accumulator (ch06_kv128.cuh's convert_dq_kernel).
template <class T>
void launch_d256(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
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

  const int64_t n_kt = ceil_div(s.seq_k, kBcW);
  FA_REQUIRE(n_kt * s.bh() <= INT32_MAX, "batch * heads * key tiles must fit in gridDim.x");
  if (n_kt > 0 && s.bh() > 0) {
    constexpr int kSmem = d256_smem_bytes();
    const auto kernel = d256_tiles_kernel<T>;
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

void attention_bwd_t14(const fa::AttentionBwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(a.dtype != fa::DType::BF16 && a.dtype != fa::DType::F16,
                    std::string(kT14Name) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(a.shape.head_dim != kD256, std::string(kT14Name) +
                                                   " is instantiated for head_dim 256 only "
                                                   "(06/v5_warp_tiles has 64 and 128)");
  // 211 KiB per block: an H100 or H200 (227 KiB) has it, an A100 (163 KiB) not. Refuse before
  // anything runs.
  constexpr size_t kSmem = size_t(d256_smem_bytes());
  FA_UNSUPPORTED_IF(kSmem > smem_optin_bytes(),
                    std::string(kT14Name) + ": head_dim 256 needs " + std::to_string(kSmem) +
                        " bytes of shared memory per block, more than this GPU allows");
  FA_REQUIRE(a.workspace != nullptr,
             std::string(kT14Name) + " needs the fp32 workspace (dQ accumulator)");
  fa::launch_delta_preprocess(a.o, a.dout, a.delta, a.shape, a.dtype, stream);
  if (a.dtype == fa::DType::BF16)
    launch_d256<__nv_bfloat16>(a, stream);
  else
    launch_d256<__half>(a, stream);
}

}  // namespace

FA_REGISTER(AttentionBwdKernel, {kT14Name,
                                 attention_bwd_t14,
                                 "v5's kernel at D 256: 64 keys a block, so that dK and dV fit "
                                 "in registers (FlashAttention-2's D 256 tile)",
                                 {fa::DType::BF16, fa::DType::F16},
                                 {256},
                                 80,
                                 false});
