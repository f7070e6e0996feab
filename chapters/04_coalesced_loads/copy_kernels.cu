// Demo copies: the same bytes moved in a coalesced and an uncoalesced order, and with three
// vector widths. Measured: see notes/04_coalesced_loads.md.
#include "ch04_kernels.h"
#include "check.h"

namespace fa::ch04 {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSmHint = 16;
constexpr int kSmsHint = 132;  // enough blocks for any current GPU; grid-stride covers the rest

int grid_for(int64_t work) {
  const int64_t want = ceil_div(work, kThreads);
  const int64_t cap = int64_t(kSmsHint) * kBlocksPerSmHint;
  return int(want < cap ? (want > 0 ? want : 1) : cap);
}

// Thread i copies element i in row-major order: a warp reads 32 consecutive floats = 128 bytes.
__global__ void walk_rows_kernel(const float* __restrict__ in, float* __restrict__ out,
                                 int64_t rows, int64_t cols) {
  const int64_t n = rows * cols, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = in[i];
}

// Thread i copies element i in column-major order: neighbours in a warp are one row apart, so a
// warp's 32 loads hit 32 different DRAM bursts (cols * 4 bytes apart).
__global__ void walk_cols_kernel(const float* __restrict__ in, float* __restrict__ out,
                                 int64_t rows, int64_t cols) {
  const int64_t n = rows * cols, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i % rows, c = i / rows;
    out[r * cols + c] = in[r * cols + c];
  }
}

template <class V>
__global__ void copy_vec_kernel(const V* __restrict__ in, V* __restrict__ out, int64_t n_vec) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += stride)
    out[i] = in[i];
}

template <class V>
void launch_vec(const float* in, float* out, int64_t n, cudaStream_t stream) {
  constexpr int kWidth = sizeof(V) / sizeof(float);
  const int64_t n_vec = n / kWidth;
  if (n_vec > 0) {
    copy_vec_kernel<V><<<grid_for(n_vec), kThreads, 0, stream>>>(reinterpret_cast<const V*>(in),
                                                                 reinterpret_cast<V*>(out), n_vec);
    FA_CHECK_LAUNCH();
  }
  const int64_t done = n_vec * kWidth;
  if (done < n) {  // at most 3 leftover floats
    copy_vec_kernel<float><<<1, kThreads, 0, stream>>>(in + done, out + done, n - done);
    FA_CHECK_LAUNCH();
  }
}

}  // namespace

void copy_walk_rows(const float* in, float* out, TransposeShape s, cudaStream_t stream) {
  if (s.numel() == 0) return;
  walk_rows_kernel<<<grid_for(s.numel()), kThreads, 0, stream>>>(in, out, s.rows, s.cols);
  FA_CHECK_LAUNCH();
}

void copy_walk_cols(const float* in, float* out, TransposeShape s, cudaStream_t stream) {
  if (s.numel() == 0) return;
  walk_cols_kernel<<<grid_for(s.numel()), kThreads, 0, stream>>>(in, out, s.rows, s.cols);
  FA_CHECK_LAUNCH();
}

void copy_vector_width(const float* in, float* out, int64_t n, int bytes, cudaStream_t stream) {
  if (n == 0) return;
  FA_REQUIRE(
      reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
      "vector copies need 16-byte aligned buffers");
  switch (bytes) {
    case 4:
      launch_vec<float>(in, out, n, stream);
      break;
    case 8:
      launch_vec<float2>(in, out, n, stream);
      break;
    case 16:
      launch_vec<float4>(in, out, n, stream);
      break;
    default:
      FA_REQUIRE(false, "bytes per access must be 4, 8 or 16");
  }
}

}  // namespace fa::ch04
