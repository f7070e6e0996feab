// 03/v4_vectorized: float4 loads everywhere, A transposed in shared memory, double buffering.
// What changed vs v3: four ideas in one rung (they are measured together, not one by one):
// float4 global loads, A transposed in shared memory, 4x4 quadrants for conflict-free shared
// reads, and double buffering. In detail:
//  * Global loads are float4 (16 bytes per thread per instruction): one A load and one B load per
//    thread per BK step instead of four scalar ones of each.
//  * The A tile is stored transposed, As[k][m], so the 8 A values a thread needs for one k are
//    two float4 loads from shared memory (like the B values), not 8 strided scalar loads.
//    As rows are padded by 4 floats so the transposing stores do not collide in the same bank.
//  * Each thread's 8x8 outputs are four 4x4 quadrants 64 rows / 64 columns apart. Then the 16
//    threads of a half-warp read 16 consecutive float4 of Bs (conflict-free), and the A reads of
//    a half-warp are one broadcast.
//  * Two shared buffers: the float4 loads of tile t+1 are issued before the FMAs of tile t and
//    stored after them, so the global latency hides behind 512 FMAs and a step needs one barrier.
// Ragged edges: a float4 load is used only when the whole vector is inside the matrix and the
// row stride keeps it 16-byte aligned (K % 4 == 0 for A, N % 4 == 0 for B and C); anything else
// falls back to scalar, zero-filling loads and predicated stores.
// Registers: __launch_bounds__(256, 2) caps them at 128 (two blocks per SM); ptxas (CUDA 13, sm_90)
// then spills ~48 bytes of loop-invariant values. Without the ", 2" it uses 143 and fits one block
// per SM. Which is faster is an H100 measurement.
// Speed (H200, 2026-12-02): 37.6 TFLOP/s fp32 at 4096^3, 73.1% of cuBLAS SGEMM (target >= 70%)
// (notes/measured/h200-2026-12-02/tour.log).
#include <cstdint>

#include "ch03_common.cuh"
#include "check.h"
#include "registry.h"

namespace fa::ch03 {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 8;
constexpr int kThreads = 256;   // 16 x 16 threads, 8x8 outputs each
constexpr int kQuad = 4;        // a thread's outputs are 2x2 quadrants of 4x4
constexpr int kHalf = kBM / 2;  // 64: distance between a thread's two quadrants
constexpr int kAPad = 4;        // As row padding (floats): keeps the transposing stores apart
constexpr int kAStride = kBM + kAPad;

struct Vec4Flags {
  bool a, b, c;  // may A, B, C be accessed as float4 (aligned rows)?
};

// Four consecutive elements p[col .. col+3] of one row (row_ok: the row exists; n: its length).
__device__ __forceinline__ float4 load4(const float* __restrict__ p, bool row_ok, int64_t col,
                                        int64_t n, bool vec_ok) {
  if (vec_ok && row_ok && col + 3 < n) return *reinterpret_cast<const float4*>(p + col);
  float v[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = (row_ok && col + e < n) ? p[col + e] : 0.0f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

__global__ void __launch_bounds__(kThreads, 2)
    gemm_vec4_kernel(const float* __restrict__ A, const float* __restrict__ B,
                     float* __restrict__ C, int64_t M, int64_t N, int64_t K, Vec4Flags vec) {
  __shared__ __align__(16) float As[2][kBK][kAStride];  // transposed: As[k][m]
  __shared__ __align__(16) float Bs[2][kBK][kBN];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t row0 = int64_t(blockIdx.y) * kBM;
  const int64_t col0 = int64_t(blockIdx.x) * kBN;
  // Which float4 of the A and B tiles this thread loads (128x8 and 8x128: 256 float4 each).
  const int a_row = tid / 2, a_col = (tid % 2) * 4;
  const int b_row = tid / 32, b_col = (tid % 32) * 4;

  auto store_a = [&](int buf, float4 v) {  // transpose on the way into shared memory
    As[buf][a_col + 0][a_row] = v.x;
    As[buf][a_col + 1][a_row] = v.y;
    As[buf][a_col + 2][a_row] = v.z;
    As[buf][a_col + 3][a_row] = v.w;
  };
  auto store_b = [&](int buf, float4 v) { *reinterpret_cast<float4*>(&Bs[buf][b_row][b_col]) = v; };

  // This thread's A row (fixed) and the column of B it loads (the row advances by kBK a step).
  const bool a_row_ok = row0 + a_row < M;
  const float* a_src = A + (a_row_ok ? (row0 + a_row) * K : 0);
  const int64_t b_col_g = col0 + b_col;
  auto load_b = [&](int64_t k) {
    const bool ok = k < K;
    return load4(B + (ok ? k * N : 0), ok, b_col_g, N, vec.b);
  };

  float acc[2 * kQuad][2 * kQuad] = {};
  float4 a_next = load4(a_src, a_row_ok, a_col, K, vec.a);
  float4 b_next = load_b(b_row);
  store_a(0, a_next);
  store_b(0, b_next);
  __syncthreads();

  int buf = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    const bool has_next = k0 + kBK < K;
    if (has_next) {  // issue the next tile's loads now; they complete while we compute
      a_next = load4(a_src, a_row_ok, k0 + kBK + a_col, K, vec.a);
      b_next = load_b(k0 + kBK + b_row);
    }
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][k][ty * kQuad]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][k][kHalf + ty * kQuad]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][k][tx * kQuad]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][k][kHalf + tx * kQuad]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int m = 0; m < 8; ++m)
#pragma unroll
        for (int n = 0; n < 8; ++n) acc[m][n] += a[m] * b[n];
    }
    if (has_next) {  // buf ^ 1 was last read before the previous barrier: safe to overwrite
      store_a(buf ^ 1, a_next);
      store_b(buf ^ 1, b_next);
    }
    __syncthreads();
    buf ^= 1;
  }

  // Epilogue: row m of the thread's outputs is tile row (m / 4) * 64 + ty * 4 + m % 4.
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    const int64_t gi = row0 + (m / kQuad) * kHalf + ty * kQuad + m % kQuad;
    if (gi >= M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t gj = col0 + h * kHalf + tx * kQuad;
      const float* v = &acc[m][h * kQuad];
      if (vec.c && gj + 3 < N) {
        *reinterpret_cast<float4*>(C + gi * N + gj) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int e = 0; e < kQuad; ++e)
          if (gj + e < N) C[gi * N + gj + e] = v[e];
      }
    }
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

void gemm_v4(const void* A, const void* B, float* C, GemmShape s, DType dtype,
             cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype != DType::F32, "03/v4_vectorized takes fp32 only");
  if (s.M == 0 || s.N == 0) return;
  FA_REQUIRE(ceil_div(s.M, kBM) <= kMaxGridY, "M too large for gridDim.y");
  Vec4Flags vec{s.K % 4 == 0 && aligned16(A), s.N % 4 == 0 && aligned16(B),
                s.N % 4 == 0 && aligned16(C)};
  dim3 grid(unsigned(ceil_div(s.N, kBN)), unsigned(ceil_div(s.M, kBM)));
  gemm_vec4_kernel<<<grid, kThreads, 0, stream>>>(
      static_cast<const float*>(A), static_cast<const float*>(B), C, s.M, s.N, s.K, vec);
  FA_CHECK_LAUNCH();
}

}  // namespace

FA_REGISTER(GemmKernel, {"03/v4_vectorized", gemm_v4,
                         "float4 loads, A transposed in shared, 2 buffers, 8x8 per thread"});

}  // namespace fa::ch03
