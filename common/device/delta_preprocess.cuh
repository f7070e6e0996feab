// delta_preprocess.cuh: the kernel of D_i = rowsum(dO_i o O_i) and its launcher, in a header so
// that every CUDA module that needs it compiles its own copy: chapter 06's delta_preprocess.cu
// (which defines launch_delta_preprocess, chapters/06_flash_backward/ch06_preprocess.h), chapter
// 07's sm_90a backward and chapter 09's, whose programs do not link chapter 06's objects. Everything here is in an anonymous namespace:
// each including .cu file gets private symbols, and no module uses a kernel compiled in another.
//
// What it is for: the softmax Jacobian turns dP into dS = P o (dP - D), where D_i = rowsum(P_i o
// dP_i). That rowsum is over a whole row of the attention matrix, which the tiled kernels never
// hold at once. But D_i = rowsum(dO_i o O_i) too (notes/06_flash_backward.md proves it), and that
// is a dot product of two head_dim-long vectors we already have. So one cheap pass computes it.
//
// How: memory-bound (2 * head_dim loads per 1 store), so the only goal is to stream O and dO at
// full bandwidth with every lane busy. Each lane loads 16 bytes at a time (float4, or 8 halves /
// bfloat16s) when the head dim and the pointers allow it. A row of R such vectors gets
// kLanes = min(32, R rounded up to a power of two) lanes and a warp handles 32 / kLanes rows at
// once: a bf16 row of 64 (128 bytes, 8 vectors) takes 8 lanes, 4 rows per warp, where one row per
// warp left 24 of the 32 lanes idle (bf16 D64 ran at 55% of copy bandwidth, notes/06).
//
// Bytes in flight: each lane takes U (kUnroll) such rows per step and issues all 2U loads of O
// and dO before any arithmetic. Little's law: bandwidth = bytes in flight / latency, so at a
// fixed DRAM latency the bytes a lane keeps in flight (32 U) bound what it can stream; the
// chapter program prints GB/s for U = 1, 2, 4 (delta_preprocess.h says which U the launcher uses).
// Blocks of 256 threads loop over the steps (grid-stride), the grid capped at kDeltaWaves times
// what the GPU holds at once, so a block is launched and retired a few times per SM, not once per
// 8 KiB as before.
//
// Results: products are summed in fp32 whatever the storage type, in element order within each
// lane, then across the row's lanes with xor shuffles. The sums are bitwise those of one row per
// warp (there a lane past the row's vectors contributed an exact 0, and the xor tree over the
// remaining lanes is this one), and U, the grid and the cache hints do not change them: each row
// sees the same lanes, the same order and the same tree. Without 16-byte alignment a scalar loop
// with 32 lanes per row (U = 1, untuned) does the same work.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "delta_preprocess.h"
#include "check.h"
#include "dtype.h"
#include "shapes.h"

namespace fa {
namespace {

constexpr int kDeltaThreads = kDeltaBlockThreads;  // 256 (delta_preprocess.h)
constexpr int kDeltaWarp = 32;
constexpr int kDeltaWarpsPerBlock = kDeltaThreads / kDeltaWarp;
// The grid: at most this many times the blocks the GPU holds at once. Not 1: should some SMs be
// busy (another stream's kernel), exactly one wave would leave their share for a second, nearly
// empty round. Not many: every extra block is a launch and a retire, the overhead the grid-stride
// loop removes.
constexpr int kDeltaWaves = 2;

__device__ __forceinline__ float delta_to_f32(float x) {
  return x;
}
__device__ __forceinline__ float delta_to_f32(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float delta_to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// 16 bytes of T: 4 floats or 8 halves / bfloat16s.
template <class T>
struct DeltaVec16 {
  static constexpr int kElems = 16 / int(sizeof(T));
  alignas(16) T v[kElems];
};

// One 16-byte load, kept as raw bits until the arithmetic. kEvictFirst: ld.global.cs, the hint
// for data read once (its lines are the first L2 evicts, so it does not push out lines others
// want); otherwise ld.global.nc, a plain read-only load.
template <bool kEvictFirst>
__device__ __forceinline__ uint4 delta_load16(const void* p) {
  if constexpr (kEvictFirst)
    return __ldcs(static_cast<const uint4*>(p));
  else
    return __ldg(static_cast<const uint4*>(p));
}

// acc + the dot product of the 16 bytes a and b, element by element (the order fixes the bits).
template <class T>
__device__ __forceinline__ float delta_dot16(uint4 a, uint4 b, float acc) {
  DeltaVec16<T> x, y;
  memcpy(&x, &a, sizeof x);
  memcpy(&y, &b, sizeof y);
#pragma unroll
  for (int e = 0; e < DeltaVec16<T>::kElems; ++e)
    acc += delta_to_f32(x.v[e]) * delta_to_f32(y.v[e]);
  return acc;
}

// This lane's partial sums of the U rows row0 + u * rows_apart (u < kUnroll), 16 bytes at a time:
// element vectors sub, sub + kLanes, ... of each row. All 2U loads of one pass are issued before
// the first product, so they are in flight together.
template <class T, int kLanes, int kUnroll, bool kEvictFirst>
__device__ __forceinline__ void delta_partial_vectorised(const T* o, const T* dout, int64_t rows,
                                                         int64_t head_dim, int64_t row0,
                                                         int rows_apart, int sub,
                                                         float (&acc)[kUnroll]) {
  const int64_t nvec = head_dim / DeltaVec16<T>::kElems;  // 16-byte vectors per row
  // One pass unless a row has more than 32 vectors (fp32 beyond D128, bf16 beyond D256).
#pragma unroll 1
  for (int64_t pass = 0; pass < nvec; pass += kLanes) {
    // No branch around a load: with one, the compiler put each row's loads just before its
    // products, one round trip to memory after another. A lane past the row's vectors and a row
    // past the end read the last ones instead; the first adds nothing, the second is not written.
    const bool in_row = pass + sub < nvec;
    const int64_t x = in_row ? pass + sub : nvec - 1;
    uint4 a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t want = row0 + int64_t(u) * rows_apart;
      const int64_t row = want < rows ? want : rows - 1;
      const int64_t at = (row * nvec + x) * 16;  // byte offset: 64-bit, rows may exceed 2^31
      a[u] = delta_load16<kEvictFirst>(reinterpret_cast<const char*>(o) + at);
      // dO is read again by the dK/dV and dQ kernels: no evict-first hint for it.
      b[u] = delta_load16<false>(reinterpret_cast<const char*>(dout) + at);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float sum = delta_dot16<T>(a[u], b[u], acc[u]);
      acc[u] = in_row ? sum : acc[u];
    }
  }
}

// The fallback, one element per lane per step (kLanes is 32 here).
template <class T, int kLanes, int kUnroll>
__device__ __forceinline__ void delta_partial_scalar(const T* o, const T* dout, int64_t rows,
                                                     int64_t head_dim, int64_t row0, int rows_apart,
                                                     int sub, float (&acc)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t row = row0 + int64_t(u) * rows_apart;
    if (row >= rows) continue;
    const T* orow = o + row * head_dim;
    const T* drow = dout + row * head_dim;
    for (int64_t x = sub; x < head_dim; x += kLanes)
      acc[u] += delta_to_f32(orow[x]) * delta_to_f32(drow[x]);
  }
}

// kLanes lanes per row, 32 / kLanes rows per warp, kUnroll such groups of rows per lane per step.
// kVectorised: 16-byte loads (the launcher checks the alignment); otherwise one element per lane
// per step (kLanes is then 32). The launch bounds' 1 (blocks per SM at least) lets ptxas take the
// registers that 2U loads in flight need (62 at U = 4, still 4 blocks per SM); without it, ptxas
// issued only 3 to 6 of the 8 loads of U = 4 before the first product.
template <class T, bool kVectorised, int kLanes, int kUnroll, bool kEvictFirst>
__global__ void __launch_bounds__(kDeltaThreads, 1)
    delta_preprocess_kernel(const T* __restrict__ o, const T* __restrict__ dout,
                            float* __restrict__ delta, int64_t rows, int64_t head_dim) {
  constexpr int kRowsPerWarp = kDeltaWarp / kLanes;
  constexpr int kRowsPerStep = kRowsPerWarp * kUnroll;  // rows one warp finishes per step
  const int lane = threadIdx.x % kDeltaWarp;
  const int sub = lane % kLanes;  // this lane's place in its rows
  const int64_t steps = ceil_div(rows, kRowsPerStep);
  const int64_t warps = int64_t(gridDim.x) * kDeltaWarpsPerBlock;
  // The loop bounds are the warp's, not the lane's: all 32 lanes reach the shuffles together.
  for (int64_t step = int64_t(blockIdx.x) * kDeltaWarpsPerBlock + threadIdx.x / kDeltaWarp;
       step < steps; step += warps) {
    // Rows row0 + u * kRowsPerWarp: for each u the warp reads kRowsPerWarp consecutive rows, one
    // contiguous stretch of memory, as one row per warp did.
    const int64_t row0 = step * kRowsPerStep + lane / kLanes;
    float acc[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc[u] = 0.0f;
    if constexpr (kVectorised)
      delta_partial_vectorised<T, kLanes, kUnroll, kEvictFirst>(o, dout, rows, head_dim, row0,
                                                                kRowsPerWarp, sub, acc);
    else
      delta_partial_scalar<T, kLanes, kUnroll>(o, dout, rows, head_dim, row0, kRowsPerWarp, sub,
                                               acc);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int off = kLanes / 2; off > 0; off /= 2)
        acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], off);
      const int64_t row = row0 + int64_t(u) * kRowsPerWarp;
      if (sub == 0 && row < rows) delta[row] = acc[u];
    }
  }
}

// The SMs and how many blocks of this kernel each holds at once (the occupancy calculator: it
// falls as U adds registers). Asked once per kernel and process (one GPU per process, as the rest
// of the repository assumes).
template <class T, bool kVectorised, int kLanes, int kUnroll, bool kEvictFirst>
DeltaGrid delta_occupancy() {
  static const DeltaGrid g = [] {
    DeltaGrid r;
    int device = 0;
    FA_CUDA_CHECK(cudaGetDevice(&device));
    FA_CUDA_CHECK(cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, device));
    FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &r.blocks_per_sm, delta_preprocess_kernel<T, kVectorised, kLanes, kUnroll, kEvictFirst>,
        kDeltaThreads, 0));
    return r;
  }();
  return g;
}

template <class T, bool kVectorised, int kLanes, int kUnroll, bool kEvictFirst>
DeltaGrid delta_launch_lanes(const T* o, const T* dout, float* delta, int64_t rows,
                             int64_t head_dim, cudaStream_t st) {
  constexpr int64_t kRowsPerBlockStep = kDeltaWarpsPerBlock * (kDeltaWarp / kLanes) * kUnroll;
  DeltaGrid g = delta_occupancy<T, kVectorised, kLanes, kUnroll, kEvictFirst>();
  FA_REQUIRE(g.blocks_per_sm > 0, "the D preprocess kernel does not fit on an SM");
  const int64_t wave = int64_t(g.sms) * g.blocks_per_sm;
  g.blocks = std::min(ceil_div(rows, kRowsPerBlockStep), kDeltaWaves * wave);
  delta_preprocess_kernel<T, kVectorised, kLanes, kUnroll, kEvictFirst>
      <<<static_cast<unsigned>(g.blocks), kDeltaThreads, 0, st>>>(o, dout, delta, rows, head_dim);
  FA_CHECK_LAUNCH();
  return g;
}

template <class T, int kUnroll, bool kEvictFirst>
DeltaGrid delta_launch_typed(const void* o, const void* dout, float* delta, const AttentionShape& s,
                             cudaStream_t st) {
  const int64_t rows = s.lse_numel();
  if (rows == 0) return DeltaGrid{};
  constexpr int kElems = DeltaVec16<T>::kElems;
  const T* op = static_cast<const T*>(o);
  const T* dp = static_cast<const T*>(dout);
  // Every row starts on a 16-byte boundary when head_dim is a multiple of the vector width and
  // the tensors themselves are 16-byte aligned (cudaMalloc gives 256).
  const bool vectorised = s.head_dim % kElems == 0 && reinterpret_cast<uintptr_t>(o) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(dout) % 16 == 0;
  if (!vectorised)
    return delta_launch_lanes<T, false, 32, 1, false>(op, dp, delta, rows, s.head_dim, st);
  const int64_t nvec = s.head_dim / kElems;  // 16-byte vectors per row
  const int64_t d = s.head_dim;
  if (nvec <= 1)
    return delta_launch_lanes<T, true, 1, kUnroll, kEvictFirst>(op, dp, delta, rows, d, st);
  if (nvec <= 2)
    return delta_launch_lanes<T, true, 2, kUnroll, kEvictFirst>(op, dp, delta, rows, d, st);
  if (nvec <= 4)
    return delta_launch_lanes<T, true, 4, kUnroll, kEvictFirst>(op, dp, delta, rows, d, st);
  if (nvec <= 8)
    return delta_launch_lanes<T, true, 8, kUnroll, kEvictFirst>(op, dp, delta, rows, d, st);
  if (nvec <= 16)
    return delta_launch_lanes<T, true, 16, kUnroll, kEvictFirst>(op, dp, delta, rows, d, st);
  return delta_launch_lanes<T, true, 32, kUnroll, kEvictFirst>(op, dp, delta, rows, d, st);
}

// D = rowsum(dO o O) for o, dout of dtype t (layout of Q), delta fp32 [batch, heads, seq_q], with
// U = kUnroll rows per lane group and O loaded evict-first or not. Returns the grid it used.
template <int kUnroll, bool kEvictFirst>
DeltaGrid delta_preprocess_launch_as(const void* o, const void* dout, float* delta,
                                     const AttentionShape& s, DType t, cudaStream_t st) {
  switch (t) {
    case DType::F32:
      return delta_launch_typed<float, kUnroll, kEvictFirst>(o, dout, delta, s, st);
    case DType::F16:
      return delta_launch_typed<__half, kUnroll, kEvictFirst>(o, dout, delta, s, st);
    case DType::BF16:
      return delta_launch_typed<__nv_bfloat16, kUnroll, kEvictFirst>(o, dout, delta, s, st);
  }
  return DeltaGrid{};
}

// The launcher every backward calls: the U and the load hint chosen in delta_preprocess.h.
inline DeltaGrid delta_preprocess_launch(const void* o, const void* dout, float* delta,
                                         const AttentionShape& s, DType t, cudaStream_t st) {
  return delta_preprocess_launch_as<kDeltaLauncherUnroll, kDeltaLauncherEvictFirst>(o, dout, delta,
                                                                                    s, t, st);
}

// The same over a packed batch (VarlenShape, head-major [heads, total_q, d], chapter 09's
// backwards): D's rows are the heads * total_q rows of O and dO in order, so the preprocess takes
// them as one sequence of total_q queries per head, and D of (sequence b, head h) starts at
// element h * total_q + cu_seqlens_q[b], where the kernels read it.
inline DeltaGrid delta_preprocess_launch_packed(const void* o, const void* dout, float* delta,
                                                const VarlenShape& s, DType t, cudaStream_t st) {
  AttentionShape rows;
  rows.batch = 1;
  rows.heads = s.heads;
  rows.seq_q = s.total_q();
  rows.seq_k = s.total_k();
  rows.head_dim = s.head_dim;
  return delta_preprocess_launch(o, dout, delta, rows, t, st);
}

}  // namespace
}  // namespace fa
