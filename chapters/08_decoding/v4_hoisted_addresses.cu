// 08/v4_hoisted_addresses: 08/v3_mma_split with its shared- and global-memory addresses computed
// once per lane, before the loop over steps. One idea: in a warp that waits on its own serial
// chain, every instruction of address arithmetic is time on that chain.
//
// Why. Nsight Compute on v3 at the grouped shape (B 8, H 32, H_kv 8, seq_k 32768, bf16, D 128;
// H100, 2026-11-23, notes/measured/h100-2026-11-23d/call5_ncu_dec_v3_gqa.txt) counts the warp's
// cycles per issued instruction: 5.45, with about 1.4 warps per scheduler. Its stall reasons,
// summed over the run, are led by short scoreboard (ldmatrix, shuffles, exp2) and long scoreboard
// (waiting for the copies), then "selected" (issuing) and "wait" (fixed-latency dependencies):
// the warp spends most of its time on its own chain, not on memory, so DRAM stays at 2.70 TB/s. In
// v3's PTX a step is about 445 instructions, and 189 of them issue the step's 16 cp.async of K and
// V: fa::tiles::load_tile_async computes every chunk's row, column, 64-bit source and bounds test
// from scratch (11 instructions per copy), and every ldmatrix address is rebuilt from a generic
// pointer.
//
// What changed. The lane's copy plan is fixed: with kChunks = D / 8 chunks per row and 32 lanes,
// lane copies chunk lane % kChunks of rows lane / kChunks + kRowsPerPass * i. Its source and
// destination for pass i are a base plus a compile-time constant, so ptxas folds the constant into
// the instruction. A step adds st * kKeys * D to the source and the stage's offset to the 32-bit
// destination. Only the split's last step can hold fewer than kKeys keys; it alone takes v3's
// bounded loader (zero-filled rows past k_end). The ldmatrix addresses get the same treatment: a
// 32-bit base per lane, plus the stage, plus a constant per fragment (as 05/v4 did in chapter 05).
// Nothing else differs from v3: same map, same ring, same arithmetic, bit-identical results.
//
// Speed (NVIDIA H100 80GB HBM3, 2026-11-23, fifth session; bench/compare_decode.py, bf16 D 128,
// seq_q 1, copy ceiling 2854 GB/s, SDPA in the same run: notes/measured/h100-2026-11-23e/
// call1_decode.log). Grouped shape (B 8, H 32, H_kv 8, seq_k 32768): 2741 GB/s (96.0% of copy),
// v3 2710, FlashAttention-2 3017. B 1, H 16, seq_k 131072: 2790 (v3 2729); B 8, H 32: 2873 (v3
// 2843). About 1%: Nsight Compute (call1_ncu_v4_hoisted_addresses.txt) has the kernel at 393.0 us
// and 2.73 TB/s of DRAM, 41.8 M warp instructions, 238 registers. Fewer instructions did not make
// it faster, and the throwaway variants that removed more of them did not either (call 1, the
// table in notes/08_decoding.md): the step's arithmetic is not what holds DRAM at 2.7 TB/s.
// v5 changes the shape of the memory traffic instead.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention_tiles.cuh"      // padded tiles and their cp.async loader
#include "ch08_parallel_merge.cuh"  // v2's merge
#include "ch08_split_kv.cuh"        // Params, make_params, resident_blocks
#include "check.h"
#include "mma.cuh"
#include "registry.h"

namespace {

constexpr int kWarp = 32;      // threads per block: one warp
constexpr int kTileRows = 16;  // query rows per warp: one m16 tile
constexpr int kKeys = 16;      // keys per pipeline step: two n8 tiles of S, one k16 slice of P V
constexpr int kStages = 4;     // shared-memory stages per warp (kStages - 1 in flight)

template <int D>
struct MmaLayout {
  static constexpr int kPitch = fa::tiles::kPitch<D>;                 // D + 8 elements per row
  static constexpr int kStageElems = 2 * kKeys * kPitch;              // K rows, then V rows
  static constexpr size_t kSmem = size_t(kStages) * kStageElems * 2;  // 16-bit elements
  static_assert(kSmem <= 48 * 1024, "no opt-in to more than 48 KiB of shared memory here");
};

template <class T, int D>
__global__ void __launch_bounds__(kWarp) mma_split_kernel(Params p) {
  using Lay = MmaLayout<D>;
  constexpr int kPitch = Lay::kPitch;
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const stages = reinterpret_cast<T*>(smem);

  const int lane = threadIdx.x;
  const int g = lane / 4, t4 = lane % 4;  // this lane holds rows g and g + 8 of every fragment

  // Which (sequence, K/V head), row tile and split this warp owns (64-bit, as in v1).
  const int64_t bid = blockIdx.x;
  const int64_t split = bid % p.num_splits;
  const int64_t rest = bid / p.num_splits;
  const int64_t r0 = (rest % p.row_tiles) * kTileRows;
  const int64_t bkv = rest / p.row_tiles;  // b * heads_kv + kv head
  const int64_t b = bkv / p.heads_kv, kvh = bkv % p.heads_kv;
  const int nrows = int(imin(kTileRows, p.rows_per_kv - r0));

  // This lane's two rows: r0 + r = i * group + gq is query i of query head kvh * group + gq. Rows
  // past the group's (padding) see no key (last = -1) and are never written.
  int64_t out_row[2], last[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const int64_t rr = r0 + r;
    const int64_t i = rr / p.group, qh = kvh * p.group + rr % p.group;
    out_row[h] = (b * p.heads + qh) * p.seq_q + i;
    last[h] = r >= nrows ? -1 : p.causal ? i + (p.seq_k - p.seq_q) : p.seq_k - 1;
  }

  // Q as A fragments, straight from global memory (mma.cuh: a[0] = A[g][2t, 2t+1], a[1] = A[g+8]
  // [2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9] of each k16 slice).
  uint32_t qf[D / 16][4];
  {
    const T* q = static_cast<const T*>(p.q);
    const uint32_t* qrow[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      qrow[h] = g + 8 * h < nrows ? reinterpret_cast<const uint32_t*>(q + out_row[h] * D) : nullptr;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t* src = qrow[j & 1];
        const int col = kk * 16 + 8 * (j / 2) + 2 * t4;  // even: one 32-bit word, two elements
        qf[kk][j] = src != nullptr ? __ldg(src + col / 2) : 0u;
      }
  }

  // This warp's keys: its split, cut at the last key any of its rows sees (as in v1).
  const int64_t k_begin = split * p.split_len;
  int64_t k_end = imin(p.seq_k, k_begin + p.split_len);
  if (p.causal) {
    const int64_t last_i = (r0 + nrows - 1) / p.group;
    k_end = imin(k_end, last_i + (p.seq_k - p.seq_q) + 1);
  }
  const int64_t nsteps = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  const T* kbase = static_cast<const T*>(p.k) + bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + bkv * p.seq_k * D;

  // The copies, planned once. A step's K (and V) is kKeys rows of kChunks 16-byte chunks; this
  // lane copies chunk cp_col / 8 of rows cp_row + kRowsPerPass * i, i < kPasses. From one i to the
  // next, its global source moves by kRowsPerPass * D elements and its shared destination by
  // kRowsPerPass * kPitch: compile-time constants that ptxas folds into the instruction. From one
  // step to the next the source moves by kKeys * D and the stage by kStageBytes. So a full step is
  // 2 * kPasses cp.async and a few adds; only the split's last step, which may hold fewer than
  // kKeys keys, tests each row (and zero-fills the rows past k_end, as v3 does for every step).
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kWarp / kChunks;
  constexpr int kPasses = kKeys / kRowsPerPass;
  constexpr uint32_t kStageBytes = Lay::kStageElems * 2, kVBytes = kKeys * kPitch * 2;
  static_assert(kWarp % kChunks == 0 && kKeys % kRowsPerPass == 0, "chunks must tile the warp");
  const int cp_row = lane / kChunks, cp_col = (lane % kChunks) * 8;
  const uint32_t cp_dst = fa::mma::smem_addr(stages) + uint32_t(cp_row * kPitch + cp_col) * 2;
  const T* const k_src = kbase + (k_begin + cp_row) * D + cp_col;
  const T* const v_src = vbase + (k_begin + cp_row) * D + cp_col;

  // Step `st` into stage st % kStages; one commit group per step, an empty one past the last step,
  // so that "wait until kStages - 1 groups are pending" always means "step st has landed".
  auto issue = [&](int64_t st) {
    if (st < nsteps) {
      const uint32_t dst = cp_dst + uint32_t(st % kStages) * kStageBytes;
      const int64_t off = st * (kKeys * D);
      const int64_t left = k_end - (k_begin + st * kKeys);  // keys of the split from this step on
      if (left >= kKeys) {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          fa::mma::cp_async_16(dst + i * kRowsPerPass * kPitch * 2,
                               k_src + off + i * kRowsPerPass * D);
          fa::mma::cp_async_16(dst + kVBytes + i * kRowsPerPass * kPitch * 2,
                               v_src + off + i * kRowsPerPass * D);
        }
      } else {
        T* sk = stages + int(st % kStages) * Lay::kStageElems;
        const int64_t k0 = k_begin + st * kKeys;
        fa::tiles::load_tile_async<D, kKeys, kWarp>(sk, kbase, k0, k_end, lane);
        fa::tiles::load_tile_async<D, kKeys, kWarp>(sk + kKeys * kPitch, vbase, k0, k_end, lane);
      }
    }
    fa::mma::cp_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) issue(st);

  // ldmatrix lane offsets, as in chapter 05 (ch05_mma_fwd.cuh). K: x4 = keys 0-7 / 8-15 times
  // columns 0-7 / 8-15 of a k16 slice (b of n8 tiles 0 and 1). V (.trans): x4 = keys 0-7 / 8-15
  // times columns 0-7 / 8-15 of a 16-wide slice of D (b of n8 tiles 2dp and 2dp + 1).
  // As 32-bit shared addresses of stage 0, in bytes: a step adds its stage's offset, a fragment a
  // compile-time constant.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16), k_ld_col = 8 * ((lane / 8) & 1);
  const int v_ld_row = (lane % 8) + 8 * ((lane / 8) & 1), v_ld_col = 8 * (lane / 16);
  const uint32_t k_ld = fa::mma::smem_addr(stages) + uint32_t(k_ld_row * kPitch + k_ld_col) * 2;
  const uint32_t v_ld = k_ld - uint32_t(k_ld_row * kPitch + k_ld_col) * 2 + kVBytes +
                        uint32_t(v_ld_row * kPitch + v_ld_col) * 2;

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
    const uint32_t stage = uint32_t(st % kStages) * kStageBytes;

    // S = Q K^T: 16 rows x 16 keys, two n8 accumulator tiles.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kb[4];
      fa::mma::ldmatrix_x4(kb, k_ld + stage + kk * 16 * 2);
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
      fa::mma::ldmatrix_x4_trans(vb, v_ld + stage + dp * 16 * 2);
      const uint32_t b_lo[2] = {vb[0], vb[1]}, b_hi[2] = {vb[2], vb[3]};
      fa::mma::mma_16816<T>(o[2 * dp], pa, b_lo);
      fa::mma::mma_16816<T>(o[2 * dp + 1], pa, b_hi);
    }
    __syncwarp();  // every lane's ldmatrix of this stage is done before it is refilled
  }
  fa::mma::cp_async_wait<0>();  // nothing of this warp's left in flight (empty groups only)

  // Epilogue: the row sums over the quad, then each real row's partial (or O and L).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (g + 8 * h >= nrows) continue;  // padding rows write nothing
    const int64_t row = out_row[h];
    if (p.num_splits == 1) {
      const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
      T* orow = static_cast<T*>(p.o) + row * D;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<uint32_t*>(orow + dn * 8 + 2 * t4) =
            fa::mma::pack2<T>(o[dn][2 * h] * inv, o[dn][2 * h + 1] * inv);
      if (t4 == 0) p.lse[row] = l[h] > 0.0f ? (m[h] + log2f(l[h])) * kLn2 : kNegInf;
    } else {
      const int64_t w = split * p.total_rows + row;
      float* wrow = p.ws_o + w * D;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<float2*>(wrow + dn * 8 + 2 * t4) =
            make_float2(o[dn][2 * h], o[dn][2 * h + 1]);
      if (t4 == 0) p.ws_ml[w] = make_float2(m[h] == kNegInf ? kNegInf : m[h] * kLn2, l[h]);
    }
  }
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Lay = MmaLayout<D>;
  auto kernel = mma_split_kernel<T, D>;
  const fa::ch08::SplitPlan plan = fa::ch08::plan_split_kv(
      a.shape, kKeys, resident_blocks((const void*)kernel, kWarp, Lay::kSmem));
  // The plan tiles group * seq_q rows by at most 16 (kMaxRows): one m16 tile per tile.
  FA_REQUIRE(plan.row_tiles == fa::ceil_div(a.shape.group() * a.shape.seq_q, kTileRows),
             "internal: the plan's row tiles and the kernel's m16 tiles disagree");
  FA_UNSUPPORTED_IF(plan.blocks > 0x7fffffff, "more than 2^31 - 1 blocks");
  const Params p = make_params(a, plan);
  kernel<<<unsigned(plan.blocks), kWarp, Lay::kSmem, stream>>>(p);
  FA_CHECK_LAUNCH();
  launch_parallel_merge<T, D>(p, stream);
}

template <class T>
void launch_dtype(const AttentionFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "08/v4_hoisted_addresses takes head dims 64 and 128");
  }
}

bool aligned4(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 4 == 0;
}

void mma_split_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_UNSUPPORTED_IF(!a.shape.valid_heads(), "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(
      !ch02::gpu::aligned16(a.k) || !ch02::gpu::aligned16(a.v),
      "08/v4_hoisted_addresses copies K and V 16 bytes at a time: they must be 16-byte "
      "aligned");
  FA_UNSUPPORTED_IF(
      !aligned4(a.q) || !aligned4(a.o),
      "08/v4_hoisted_addresses reads Q and writes O two elements at a time: they must be "
      "4-byte aligned");
  switch (a.dtype) {
    case DType::F16:
      return launch_dtype<__half>(a, stream);
    case DType::BF16:
      return launch_dtype<__nv_bfloat16>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, "08/v4_hoisted_addresses runs on tensor cores: fp16 and bf16 only");
  }
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {"08/v4_hoisted_addresses",
             mma_split_forward,
             "v3 with every copy and ldmatrix address a per-lane base plus a constant: a full "
             "step issues its cp.async with no address arithmetic; only a split's last step "
             "tests rows",
             {DType::F16, DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true});
