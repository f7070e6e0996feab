// ch08_split_kv.cuh: what the split-KV kernels of chapter 08 share (device code and launch
// helpers): the kernel parameters, the per-dtype traits, the split kernel of 08/v1_split_kv (which
// 08/v2_parallel_merge runs unchanged), the cached workspace of the partials, the occupancy query the
// plan needs, and the dtype / head dim / rows dispatch. Each rung keeps its own merge (v1's carries the
// chapter's exercise) and, from v3 on, its own split kernel.
//
// Everything here is in an anonymous namespace, like chapter 06's delta_preprocess.cuh: every .cu
// file that includes it compiles its own private copy (its own kernels, its own workspace buffer),
// and no CUDA module launches a kernel compiled in another. The split kernel was moved here from
// v1_split_kv.cu without a change: v1's SASS is identical before and after (cuobjdump -sass,
// function names aside).
//
// The split kernel (v1_split_kv.cu's header tells the story): one block per (sequence, K/V head,
// tile of <= kRows query rows of the group, split of the keys), 128 threads; K/V tiles of kBc keys
// come in with 16-byte loads into registers one tile ahead, then go to padded shared memory;
// S = Q K^T one key per thread (Q in shared memory, fp32, pre-scaled by scale * log2 e), the
// online softmax one warp per row, O = alpha O + P V on CUDA cores; the partial (m, l, o) of each
// row goes to the workspace ([split][row][D] floats for o, [split][row] (m, l) pairs, m in
// natural-log units), or with a single split the final O and L straight to the output.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../02_online_softmax/ch02_softmax_device.cuh"  // Stats, merge, rescale: the pair merge
#include "buffer.h"
#include "ch08_split_kv.h"
#include "check.h"
#include "mma.cuh"  // unpack2: two 16-bit values -> two floats
#include "registry.h"

namespace {

using fa::AttentionFwdArgs;
using fa::DType;

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Per dtype: how many elements one 16-byte load carries, the key tile, and the conversions. The
// primary template is the 16-bit one (__half, __nv_bfloat16); fp32 below.
template <class T>
struct Traits {
  static constexpr int kVec = 8;
  static constexpr int kBc = 64;
  __device__ static void unpack(const uint4& u, float* f) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = fa::mma::unpack2<T>(w[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
  __device__ static float to_float(T x) {
    return static_cast<float>(x);
  }
  __device__ static T from_float(float x) {
    return T(x);
  }  // round to nearest
};
template <>
struct Traits<float> {
  static constexpr int kVec = 4;
  static constexpr int kBc = 32;
  __device__ static void unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  }
  __device__ static float to_float(float x) { return x; }
  __device__ static float from_float(float x) { return x; }
};
struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  float* ws_o;    // [num_splits][total_rows][D]: unnormalised partial o
  float2* ws_ml;  // [num_splits][total_rows]: (m in natural-log units, l)
  int64_t heads, heads_kv, group, seq_q, seq_k;
  int64_t rows_per_kv;  // group * seq_q: the query rows that read one K/V head
  int64_t row_tiles, num_splits, split_len;
  int64_t total_rows;  // batch * heads * seq_q
  float scale_log2;    // softmax scale * log2(e)
  bool causal;
};

// The split kernel's layout, shared by the kernel and the launcher (shared-memory bytes).
template <class T, int D, int kRows>
struct Layout {
  static constexpr int kVec = Traits<T>::kVec;
  static constexpr int kBc = Traits<T>::kBc;
  static constexpr int kChunks = D / kVec;  // 16-byte chunks per K/V row
  static constexpr int kPitch = D + kVec;   // a row padded by 16 bytes: conflict-free chunk reads
  // Phase 1 (S = Q K^T): thread t takes key t % kBc and rows g, g + kGroups1, ... (g = t / kBc).
  static constexpr int kGroups1 = kThreads / kBc;
  static constexpr int kRows1 = (kRows + kGroups1 - 1) / kGroups1;
  // Phase 3 (O += P V): thread t takes chunk t % kChunks of rows rg + kRG * i and keys
  // kg + kKG * u; the kKG key groups' sums are added at the end.
  static constexpr int kCombos = kThreads / kChunks;
  static constexpr int kRG = kRows < kCombos ? kRows : kCombos;
  static constexpr int kKG = kCombos / kRG;
  static constexpr int kRows3 = kRows / kRG;
  static constexpr int kLoads = kBc * kChunks / kThreads;  // 16-byte loads per thread per tensor
  static constexpr size_t kTileBytes = size_t(kBc) * kPitch * sizeof(T);
  static constexpr size_t kSmem = 2 * kTileBytes + 2 * kRows * sizeof(int64_t) +
                                  (size_t(kRows) * D + size_t(kRows) * kBc + 3 * kRows) * 4;
  static_assert(D % kVec == 0 && kThreads % kChunks == 0,
                "head dim must split into 16-byte chunks");
  static_assert((kBc * kChunks) % kThreads == 0 && kBc % kKG == 0, "tile must split over threads");
  static_assert(size_t(kKG) * kRows * D * 4 <= 2 * kTileBytes, "reduction must fit the K/V tiles");
  static_assert(kSmem <= 48 * 1024, "no opt-in to more than 48 KiB of shared memory here");
};

template <class T, int D, int kRows>
__global__ void __launch_bounds__(kThreads) split_kv_kernel(Params p) {
  using Tr = Traits<T>;
  using Lay = Layout<T, D, kRows>;
  constexpr int kVec = Lay::kVec, kBc = Lay::kBc, kChunks = Lay::kChunks, kPitch = Lay::kPitch;
  constexpr int kGroups1 = Lay::kGroups1, kRows1 = Lay::kRows1;
  constexpr int kRG = Lay::kRG, kKG = Lay::kKG, kRows3 = Lay::kRows3, kLoads = Lay::kLoads;
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(16) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kBc * kPitch;
  int64_t* last_s = reinterpret_cast<int64_t*>(Vs + kBc * kPitch);  // last visible key per row
  int64_t* row_s = last_s + kRows;                                  // output row index per row
  float* Qs = reinterpret_cast<float*>(row_s + kRows);              // [kRows][D], log2 units
  float* Ss = Qs + kRows * D;                                       // [kRows][kBc]: S, then P
  float* m_s = Ss + kRows * kBc;
  float* l_s = m_s + kRows;
  float* alpha_s = l_s + kRows;
  float* red = reinterpret_cast<float*>(smem);  // after the last tile: [kKG][kRows][D]

  // Which (sequence, K/V head), row tile and split this block owns. 64-bit from here on: the grid
  // has up to 2^31 - 1 blocks and the tensors more than 2^31 elements.
  const int64_t bid = blockIdx.x;
  const int64_t split = bid % p.num_splits;
  const int64_t rest = bid / p.num_splits;
  const int64_t r0 = (rest % p.row_tiles) * kRows;
  const int64_t bkv = rest / p.row_tiles;  // b * heads_kv + kv head
  const int64_t b = bkv / p.heads_kv, kvh = bkv % p.heads_kv;
  const int nrows = int(imin(kRows, p.rows_per_kv - r0));
  const int tid = threadIdx.x;

  // Rows: r0 + r = i * group + g is query i of query head kvh * group + g.
  if (tid < kRows) {
    const int64_t rr = r0 + tid;
    const int64_t i = rr / p.group, h = kvh * p.group + rr % p.group;
    row_s[tid] = (b * p.heads + h) * p.seq_q + i;
    last_s[tid] = tid >= nrows ? -1 : p.causal ? i + (p.seq_k - p.seq_q) : p.seq_k - 1;
    m_s[tid] = kNegInf;
    l_s[tid] = 0.0f;
  }
  const T* q = static_cast<const T*>(p.q);
  for (int idx = tid; idx < kRows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float x = 0.0f;
    if (r < nrows) {
      const int64_t rr = r0 + r;
      const int64_t h = kvh * p.group + rr % p.group;
      x = Tr::to_float(q[((b * p.heads + h) * p.seq_q + rr / p.group) * D + d]) * p.scale_log2;
    }
    Qs[idx] = x;
  }

  // This block's keys: its split, cut at the last key any of its rows sees.
  const int64_t k_begin = split * p.split_len;
  int64_t k_end = imin(p.seq_k, k_begin + p.split_len);
  if (p.causal) {
    const int64_t last_i = (r0 + nrows - 1) / p.group;
    k_end = imin(k_end, last_i + (p.seq_k - p.seq_q) + 1);
  }
  const int64_t ntiles = k_end > k_begin ? (k_end - k_begin + kBc - 1) / kBc : 0;

  const T* kbase = static_cast<const T*>(p.k) + bkv * p.seq_k * D;
  const T* vbase = static_cast<const T*>(p.v) + bkv * p.seq_k * D;
  uint4 kreg[kLoads], vreg[kLoads];
  auto load_tile = [&](int64_t k0) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int idx = tid + u * kThreads, j = idx / kChunks, c = idx % kChunks;
      const int64_t key = k0 + j;
      if (key < k_end) {
        kreg[u] = __ldg(reinterpret_cast<const uint4*>(kbase + key * D) + c);
        vreg[u] = __ldg(reinterpret_cast<const uint4*>(vbase + key * D) + c);
      } else {
        kreg[u] = vreg[u] = make_uint4(0, 0, 0, 0);  // past the split: zeros, never NaN
      }
    }
  };

  const int c3 = tid % kChunks, rg = (tid / kChunks) % kRG, kg = tid / kChunks / kRG;
  float acc[kRows3][kVec];
#pragma unroll
  for (int i = 0; i < kRows3; ++i)
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[i][e] = 0.0f;

  if (ntiles > 0) load_tile(k_begin);
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t k0 = k_begin + t * kBc;
    __syncthreads();  // the previous tile is done with Ks, Vs, Ss (and Qs, m_s, l_s are written)
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int idx = tid + u * kThreads, j = idx / kChunks, c = idx % kChunks;
      *reinterpret_cast<uint4*>(Ks + j * kPitch + c * kVec) = kreg[u];
      *reinterpret_cast<uint4*>(Vs + j * kPitch + c * kVec) = vreg[u];
    }
    __syncthreads();
    if (t + 1 < ntiles) load_tile(k0 + kBc);  // in flight while this tile is computed

    // Phase 1: S[r][j] = q_r . k_j (already scaled), -inf where row r must not see key j.
    {
      const int j = tid % kBc, g = tid / kBc;
      float s[kRows1];
#pragma unroll
      for (int i = 0; i < kRows1; ++i) s[i] = 0.0f;
      const T* krow = Ks + j * kPitch;
#pragma unroll 4
      for (int c = 0; c < kChunks; ++c) {
        float kf[kVec];
        Tr::unpack(*reinterpret_cast<const uint4*>(krow + c * kVec), kf);
#pragma unroll
        for (int i = 0; i < kRows1; ++i) {
          const int r = g + kGroups1 * i;
          if (r < kRows) {
            const float* qr = Qs + r * D + c * kVec;  // the same address across the warp: broadcast
#pragma unroll
            for (int e = 0; e < kVec; ++e) s[i] = fmaf(qr[e], kf[e], s[i]);
          }
        }
      }
      const int64_t key = k0 + j;
#pragma unroll
      for (int i = 0; i < kRows1; ++i) {
        const int r = g + kGroups1 * i;
        if (r < kRows) Ss[r * kBc + j] = (key < k_end && key <= last_s[r]) ? s[i] : kNegInf;
      }
    }
    __syncthreads();

    // Phase 2: the online softmax of each row over this tile (one warp per row). m and l live in
    // log2 units; alpha = 2^(m_old - m_new) rescales what was accumulated so far.
    {
      const int warp = tid / 32, lane = tid % 32;
      for (int r = warp; r < kRows; r += kThreads / 32) {
        float s[kBc / 32];
        float mx = kNegInf;
#pragma unroll
        for (int u = 0; u < kBc / 32; ++u) {
          s[u] = Ss[r * kBc + lane + 32 * u];
          mx = fmaxf(mx, s[u]);
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float m_old = m_s[r];
        const float m_new = fmaxf(m_old, mx);
        const float m_use = m_new == kNegInf ? 0.0f : m_new;  // nothing seen yet: no -inf - -inf
        float sum = 0.0f;
#pragma unroll
        for (int u = 0; u < kBc / 32; ++u) {
          const float pr = exp2f(s[u] - m_use);
          Ss[r * kBc + lane + 32 * u] = pr;
          sum += pr;
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        // Every lane read m_s[r] above; lane 0 overwrites it below. The shuffles keep the warp in
        // step, but only a warp barrier also orders the shared-memory accesses (racecheck reported
        // this write-after-read on the H100, 2026-11-23).
        __syncwarp();
        if (lane == 0) {
          const float alpha = exp2f(m_old - m_use);
          alpha_s[r] = alpha;
          l_s[r] = l_s[r] * alpha + sum;
          m_s[r] = m_new;
        }
      }
    }
    __syncthreads();

    // Phase 3: o_r = alpha_r o_r + sum_j P[r][j] v_j over this thread's rows, keys and columns.
    {
#pragma unroll
      for (int i = 0; i < kRows3; ++i) {
        const float a = alpha_s[rg + kRG * i];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[i][e] *= a;
      }
#pragma unroll 4
      for (int u = 0; u < kBc / kKG; ++u) {
        const int j = kg + kKG * u;
        float vf[kVec];
        Tr::unpack(*reinterpret_cast<const uint4*>(Vs + j * kPitch + c3 * kVec), vf);
#pragma unroll
        for (int i = 0; i < kRows3; ++i) {
          const float pr = Ss[(rg + kRG * i) * kBc + j];
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[i][e] = fmaf(pr, vf[e], acc[i][e]);
        }
      }
    }
  }

  // Epilogue: add up the key groups' sums, then write this split's partial (or, with one split,
  // the final O and L). A row that saw no key has m = -inf, l = 0, o = 0: O = 0 and L = -inf.
  __syncthreads();  // every thread is done with Ks and Vs, which `red` reuses
#pragma unroll
  for (int i = 0; i < kRows3; ++i)
#pragma unroll
    for (int e = 0; e < kVec; ++e) red[(kg * kRows + rg + kRG * i) * D + c3 * kVec + e] = acc[i][e];
  __syncthreads();
  for (int idx = tid; idx < nrows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float o = 0.0f;
#pragma unroll
    for (int g = 0; g < kKG; ++g) o += red[(g * kRows + r) * D + d];
    const float m = m_s[r], l = l_s[r];
    const int64_t row = row_s[r];
    if (p.num_splits == 1) {
      static_cast<T*>(p.o)[row * D + d] = Tr::from_float(l > 0.0f ? o / l : 0.0f);
      if (d == 0) p.lse[row] = l > 0.0f ? (m + log2f(l)) * kLn2 : kNegInf;
    } else {
      const int64_t w = split * p.total_rows + row;
      p.ws_o[w * D + d] = o;
      if (d == 0) p.ws_ml[w] = make_float2(m == kNegInf ? kNegInf : m * kLn2, l);
    }
  }
}

// The workspace of the partials: one buffer per process, grown when a plan needs more.
float* workspace(size_t bytes) {
  static fa::DeviceBuffer buf;
  if (buf.bytes() < bytes) {
    FA_CUDA_CHECK(cudaDeviceSynchronize());  // a smaller buffer may still be in use
    buf = fa::DeviceBuffer(bytes);
  }
  return buf.as<float>();
}

// SMs x blocks of `kernel` (threads, smem bytes) that one SM holds at once.
int resident_blocks(const void* kernel, int threads, size_t smem) {
  int device = 0, sms = 0, per_sm = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return sms * (per_sm > 0 ? per_sm : 1);
}

// The kernel parameters of a launch that follows `plan` (the workspace grown to fit, with more
// than one split). Every split kernel of the chapter takes these.
Params make_params(const AttentionFwdArgs& a, const fa::ch08::SplitPlan& plan) {
  const fa::AttentionShape& s = a.shape;
  Params p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.heads = s.heads;
  p.heads_kv = s.kv_heads();
  p.group = s.group();
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.rows_per_kv = s.group() * s.seq_q;
  p.row_tiles = plan.row_tiles;
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.total_rows = s.lse_numel();
  p.scale_log2 = s.softmax_scale() * kLog2e;
  p.causal = s.causal;
  p.ws_o = nullptr;
  p.ws_ml = nullptr;
  if (plan.num_splits > 1) {
    const size_t rows = size_t(plan.num_splits) * size_t(p.total_rows);
    float* ws = workspace(rows * (s.head_dim + 2) * sizeof(float));
    p.ws_o = ws;
    p.ws_ml = reinterpret_cast<float2*>(ws + rows * s.head_dim);  // rows * D floats: 8-byte aligned
  }
  return p;
}

// Plans and launches v1's split kernel for kRows rows per block; returns the parameters, which
// the caller's merge kernel takes when p.num_splits > 1 (with one split the kernel wrote O and L).
template <class T, int D, int kRows>
Params launch_split_kv(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Lay = Layout<T, D, kRows>;
  auto kernel = split_kv_kernel<T, D, kRows>;
  const fa::ch08::SplitPlan plan = fa::ch08::plan_split_kv(
      a.shape, Lay::kBc, resident_blocks((const void*)kernel, kThreads, Lay::kSmem));
  FA_REQUIRE(plan.rows_per_block == kRows, "internal: the plan and the launch disagree");
  FA_UNSUPPORTED_IF(plan.blocks > 0x7fffffff, "more than 2^31 - 1 blocks");
  const Params p = make_params(a, plan);
  kernel<<<unsigned(plan.blocks), kThreads, Lay::kSmem, stream>>>(p);
  FA_CHECK_LAUNCH();
  return p;
}

// The launcher of a rung that runs v1's split kernel: Rung::run<T, D, kRows>(args, stream) for
// the dtype, the head dim (64, 128) and the rows per block (the power of two >= group * seq_q,
// at most 16) of the problem. `name` goes into the refusals.
template <class Rung, class T, int D>
void dispatch_rows(const AttentionFwdArgs& a, cudaStream_t stream) {
  const int64_t rows = a.shape.group() * a.shape.seq_q;
  if (rows <= 1)
    Rung::template run<T, D, 1>(a, stream);
  else if (rows <= 2)
    Rung::template run<T, D, 2>(a, stream);
  else if (rows <= 4)
    Rung::template run<T, D, 4>(a, stream);
  else if (rows <= 8)
    Rung::template run<T, D, 8>(a, stream);
  else
    Rung::template run<T, D, 16>(a, stream);
}

template <class Rung, class T>
void dispatch_dim(const AttentionFwdArgs& a, cudaStream_t stream, const char* name) {
  switch (a.shape.head_dim) {
    case 64:
      return dispatch_rows<Rung, T, 64>(a, stream);
    case 128:
      return dispatch_rows<Rung, T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(name) + " takes head dims 64 and 128");
  }
}

template <class Rung>
void dispatch(const AttentionFwdArgs& a, cudaStream_t stream, const char* name) {
  FA_UNSUPPORTED_IF(!a.shape.valid_heads(), "heads must be a multiple of heads_kv");
  FA_UNSUPPORTED_IF(
      !ch02::gpu::aligned16(a.k) || !ch02::gpu::aligned16(a.v),
      std::string(name) + " loads K and V 16 bytes at a time: they must be 16-byte aligned");
  switch (a.dtype) {
    case DType::F32:
      return dispatch_dim<Rung, float>(a, stream, name);
    case DType::F16:
      return dispatch_dim<Rung, __half>(a, stream, name);
    case DType::BF16:
      return dispatch_dim<Rung, __nv_bfloat16>(a, stream, name);
  }
}

}  // namespace
