// hopper_attention_bwd.cuh: what the Hopper backward kernels (chapter 07's sm90a/bwd_*.cu and
// tuning/bwd_*.cu, chapter 09's sm90a/hopper_bwd_*.cu) share beyond the forward's pieces
// (hopper_attention.cuh: tile layout, K-major descriptors, pack_p, TMA maps):
//   * the MN-major descriptor of a tile of any height (dO and Q as B of dV += P^T dO and
//     dK += dS^T Q, K as B of dQ += dS K), the forward's desc_v with the row count as a parameter,
//     optionally starting at a later 64-column strip (the column half of D = 256);
//   * L and D of a query row in the form the loops use;
//   * the store of a 64 x N accumulator (dK, dV, dQ, or a column half of them at D = 256) into a
//     row-major matrix of any row length, with predicated rows (4 bytes a thread, or 16 after a
//     quad transpose);
//   * host side: which shapes TMA can take, the fallback, and the D = rowsum(dO o O) preprocess
//     (chapter 06's kernel, compiled into this module from its header: the chapter 07 program
//     does not link chapter 06's objects, so it cannot call chapter 06's copy);
//   * grouped K/V heads (GQA, MQA): the split of a group among dK/dV blocks (its estimate, which
//     takes a rung's keys per block and query rows per iteration), the kernel that adds the
//     split's fp32 parts, and what a grouped shape does where TMA cannot load it.
// Chapter 07 introduces them (notes/07_flash_hopper.md, 07/bwd_v1_tma_wgmma). Included by the
// sm_90a backward files only.
#pragma once
#include <algorithm>
#include <functional>
#include <queue>
#include <vector>

#include "hopper_attention.cuh"
#include "kv_tiles.h"
#include "delta_preprocess.cuh"
#include "gpu.h"

namespace fa::ch07 {

constexpr float kLog2e = 1.4426950408889634f;

// MN-major operand, a [ROWS x D] tile read along its rows (k = row, n = d): k16 step kk starts at
// row 16 kk, 2 atoms further; n crosses the 64-column strips, LBO = the strip size ROWS * 128;
// SBO = 1024 (the next 8 rows). desc_v<D> of hopper_attention.cuh is desc_mn_major<Tiles<D>::kBc>.
// col0 (a multiple of 64) starts n at column col0: strip col0 / 64 of the tile, which begins
// (col0 / 64) * ROWS * 128 bytes in, on an atom boundary since ROWS % 8 == 0; the strips after it
// follow at the same LBO. That is how a wgmma of N = 128 reads columns 128 .. 255 of a D = 256
// tile.
template <int ROWS>
__device__ __forceinline__ uint64_t desc_mn_major(const unsigned char* tile, int kk, int col0 = 0) {
  static_assert(ROWS % 8 == 0, "strips start on swizzle atoms");
  return hopper::smem_desc_sw128(tile + (col0 / kSwizzleCols) * ROWS * 128 + kk * 2 * kAtomBytes,
                                 ROWS * 128, kAtomBytes);
}

// L * log2(e), or +inf for a row that does not exist or sees no key (L = -inf): then
// P = exp2(s * scale * log2(e) - L2) = exp2(-inf) = 0 for every key, with no test in the loops,
// and the row contributes nothing to any gradient (never (-inf) - (-inf) = NaN).
__device__ __forceinline__ float load_l2(const float* lse, int64_t row, int64_t seq_q) {
  if (row >= seq_q) return INFINITY;
  const float l = lse[row];
  return l == -INFINITY ? INFINITY : l * kLog2e;
}

// Store a warpgroup's 64 x N fp32 accumulator times `mul` into rows row0 .. row0+63, columns
// 0 .. N-1 of a row-major matrix of T with `ld` elements per row (out points at the first column
// to write: a column half of a D = 256 gradient passes out + 128 and ld = 256), of which the
// first `cols` exist (a multiple of 8; nothing is stored where cols <= 0): the gradients of a
// head dim rounded up inside the kernel (head_dim_instance, hopper_attention.cuh), whose
// accumulator columns past the real head dim hold the zero padding and are not stored. Rows at or
// past seq are skipped. Thread t holds rows 16w + g and 16w + g + 8, columns 8j + 2q, +1 in
// acc[4j + 2h], acc[4j + 2h + 1] (hopper.cuh), so a quad's columns 8j .. 8j + 7 are all stored or
// all skipped. T = float stores the fp32 values themselves (the parts of a split sum, bwd_v1's
// grouped heads).
template <class T, int N>
__device__ __forceinline__ void store_acc_rows(T* out, const float (&acc)[N / 2], int64_t row0,
                                               int64_t seq, float mul, int t, int64_t ld,
                                               int cols) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + 16 * w + g + 8 * h;
    if (row >= seq) continue;
    T* dst = out + row * ld + 2 * q;
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      if (8 * j >= cols) continue;
      if constexpr (std::is_same_v<T, float>)
        *reinterpret_cast<float2*>(dst + 8 * j) =
            make_float2(acc[4 * j + 2 * h] * mul, acc[4 * j + 2 * h + 1] * mul);
      else
        *reinterpret_cast<uint32_t*>(dst + 8 * j) =
            mma::pack2<T>(acc[4 * j + 2 * h] * mul, acc[4 * j + 2 * h + 1] * mul);
    }
  }
}

// The same with a row length fixed at compile time and every column stored.
template <class T, int N, int LD>
__device__ __forceinline__ void store_acc_rows(T* out, const float (&acc)[N / 2], int64_t row0,
                                               int64_t seq, float mul, int t) {
  static_assert(N <= LD, "the accumulator's columns lie within a row");
  store_acc_rows<T, N>(out, acc, row0, seq, mul, t, LD, N);
}

// store_acc_rows for T = bf16 / fp16 with 16 bytes a thread instead of 4 (07/bwd_t58_wide_dkdv_stores
// introduces it, as 07/t56_wide_o_stores did for O): each group of four 8-column chunks is
// packed, transposed across the quad (quad_transpose, hopper_attention.cuh) and stored as one
// uint4 per thread, so a warp-wide store writes 64 contiguous bytes into each of 8 rows instead of
// 16, a quarter of the L1 tag requests. Same arguments and results as store_acc_rows; out + row *
// ld must be 16-byte aligned (ld a multiple of 8 and out 16-byte aligned). Every lane runs the
// shuffles, rows past seq included: only their stores are skipped.
template <class T, int N>
__device__ __forceinline__ void store_acc_rows_16(T* out, const float (&acc)[N / 2], int64_t row0,
                                                  int64_t seq, float mul, int t, int64_t ld,
                                                  int cols) {
  static_assert(!std::is_same_v<T, float>, "16-bit gradients (fp32 parts: store_acc_rows)");
  static_assert(N % 32 == 0, "groups of four 8-column chunks");
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + 16 * w + g + 8 * h;
#pragma unroll
    for (int a = 0; a < N / 32; ++a) {  // columns 32a .. 32a + 31
      uint32_t x[4];                    // x[jj]: columns 8(4a + jj) + 2q, +1
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = 4 * a + jj;
        x[jj] = mma::pack2<T>(acc[4 * j + 2 * h] * mul, acc[4 * j + 2 * h + 1] * mul);
      }
      quad_transpose(x, q);  // x[k]: columns 8(4a + q) + 2k, +1
      const int col = 8 * (4 * a + q);
      if (row < seq && col < cols)
        *reinterpret_cast<uint4*>(out + row * ld + col) = make_uint4(x[0], x[1], x[2], x[3]);
    }
  }
}

// threadIdx.x read anew: an asm volatile read the compiler may not merge with the kernel's own.
// For a store after a loop that holds every register: a value derived from the first read (such
// as t % 4) would otherwise be kept alive across the loop for it, or spilled there.
__device__ __forceinline__ int thread_index_again() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid;
}

template <int N>
__device__ __forceinline__ void zero(float (&a)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = 0.0f;
}

// Where a dK/dV block's loop is in its walk over a group of query heads (grouped K/V heads; the
// scheme is bwd_v1's, header "Grouped K/V heads"): query head `head` (b * heads + h) and the
// walk's i-th Q tile of that head, n_per tiles per head, the heads one after the other. The
// single-pass rungs (bwd_v2 on) step a place from one iteration to the next instead of taking
// j / n_per and j % n_per: a 32-bit division is some twenty instructions with registers of its
// own, and at D = 128 their loops have none to spare (dividing there cost bwd_v4 8 bytes more
// spill and 7% more instructions per iteration at a group of 1).
struct GroupPlace {
  int head, i;
  __device__ __forceinline__ void step(int n_per) {
    if (++i == n_per) i = 0, ++head;
  }
};

// ---- Host side -----------------------------------------------------------------------------------
// Shapes the TMA kernels cannot take run this registered kernel through the registry (as the
// forward's fallback, hopper_attention.cuh): it takes head dims 32, 64, 96, 128 and 256, so every
// head dim of this kernel has a fallback.
constexpr const char* kBwdFallback = "06/v2_mma";

// TMA's rules for Q, K, V, dO (16-byte aligned bases; d * 2 bytes per row is a multiple of 16 for
// a head dim d that is a multiple of 8; sizes and coordinates in int32; no empty sequence), and
// 4-byte aligned gradients for the paired stores. seq_q = 0 (dK = dV = 0) and seq_k = 0 (dQ = 0)
// go to the fallback too.
inline bool tma_can_load(const AttentionBwdArgs& a) {
  const AttentionShape& s = a.shape;
  return aligned(a.q, 16) && aligned(a.k, 16) && aligned(a.v, 16) && aligned(a.dout, 16) &&
         aligned(a.dq, 4) && aligned(a.dk, 4) && aligned(a.dv, 4) &&
         s.head_dim % kHeadDimStep == 0 && s.seq_q > 0 && s.seq_k > 0 && s.seq_q < INT_MAX - 512 &&
         s.seq_k < INT_MAX - 512 && s.bh() < INT_MAX;
}

inline void run_fallback(const AttentionBwdArgs& a, cudaStream_t stream) {
  const AttentionBwdKernel* k = find_entry<AttentionBwdKernel>(kBwdFallback);
  FA_REQUIRE(k != nullptr, std::string(kBwdFallback) + " is not linked in");
  k->run(a, stream);
}

// ---- Grouped K/V heads (GQA, MQA) ----------------------------------------------------------------
// 07/bwd_v1_tma_wgmma's header ("Grouped K/V heads") explains the scheme every rung follows: a
// dK/dV block loops over its K/V head's group of query heads, dK and dV summed in its registers,
// and where the grid would leave SMs idle the group is split among `split` blocks, each over
// group / split of the query heads, whose fp32 sums (the parts, [split][kv_bh][seq_k][D] of dK,
// then dV's likewise) a second kernel adds in a fixed order.

namespace {
// dK and dV from the split parts: element i of dK is scale * (part 0 + part 1 + ...), in that
// order, rounded once; dV the same without the scale. n = kv_bh * seq_k * D.
template <class T>
__global__ void sum_parts_kernel(const float* parts, T* dk, T* dv, int64_t n, int split,
                                 float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < 2 * n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool is_dv = i >= n;
    const int64_t e = is_dv ? i - n : i;
    const float* first = parts + (is_dv ? split * n : 0) + e;
    float sum = 0.0f;
    for (int s = 0; s < split; ++s) sum += first[s * n];
    if (is_dv)
      dv[e] = T(sum);  // round to nearest
    else
      dk[e] = T(sum * scale);
  }
}
}  // namespace

// dK and dV (n elements each) of a split group from its parts (one launch of sum_parts_kernel
// on the stream).
template <class T>
void sum_parts(const float* parts, void* dk, void* dv, int64_t n, int split, float scale,
               cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>(ceil_div(2 * n, 256), 8 * gpu_info().sm_count);
  sum_parts_kernel<T><<<unsigned(blocks), 256, 0, stream>>>(parts, static_cast<T*>(dk),
                                                            static_cast<T*>(dv), n, split, scale);
  FA_CHECK_LAUNCH();
}
template <class T>
void sum_parts(const float* parts, const AttentionBwdArgs& a, int split, float scale,
               cudaStream_t stream) {
  sum_parts<T>(parts, a.dk, a.dv, a.shape.k_numel(), split, scale, stream);
}
// A packed batch (chapter 09): its K/V heads' [heads_kv, total_k, D] slabs are the parts' rows.
template <class T>
void sum_parts(const float* parts, const VarlenBwdArgs& a, int split, float scale,
               cudaStream_t stream) {
  sum_parts<T>(parts, a.dk, a.dv, a.shape.k_numel(), split, scale, stream);
}

// The split of each group among dK/dV blocks: the divisor of the group with the least estimated
// time, the smallest on a tie. The estimate hands the blocks, in launch order (BlockOrder, below),
// to the GPU's `slots` (SMs x resident blocks), each to the slot that
// frees first, as the block scheduler does. A block's time is its iterations (its query tiles x
// its query heads) plus kBlockOverhead (loading its K/V tile, storing dK and dV); a split adds the
// parts' fp32 bytes, written by the dK/dV kernel and read by sum_parts_kernel, at
// kIterationsPerByte (an iteration, 64 queries x 128 keys x 4 products at D 128, takes about as
// long as an SM's share of 10 MB at the memory's bandwidth). The parts may take at most q_numel
// floats (bwd_v1 keeps them in the workspace, which has that size). A rung describes its tiles
// by kv_rows, the keys of a block, and q_rows, the query rows of an iteration.
constexpr double kBlockOverhead = 2.0;       // iterations
constexpr double kIterationsPerByte = 1e-7;  // iterations per byte of parts traffic

// The order of the dK/dV blocks in the grid: every key tile of a (K/V head, part) before the
// next (the rungs of the main path up to bwd_v5), or key tile 0 of every (K/V head, part) first,
// then key tile 1, ... (tuning/bwd_t43: causally the heaviest blocks first), or that key-tile
// order within groups of a few (K/V head, part) units at a time (07/bwd_v6_head_groups:
// heaviest first inside each group, the group's Q and dO few enough for the L2).
enum class BlockOrder { kHeadMajor, kKeyTileMajor, kHeadGroups };

// kHeadGroups: head_group_units and head_group_place (kv_tiles.h) give the groups and the place
// of a block in them.

inline double estimated_dkdv_time(const AttentionShape& s, int split, int slots, int kv_rows,
                                  int q_rows, BlockOrder order = BlockOrder::kHeadMajor) {
  const int64_t n_kt = ceil_div(s.seq_k, kv_rows), n_qt = ceil_div(s.seq_q, q_rows);
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int i = 0; i < slots; ++i) free_at.push(0.0);
  const double heads = double(s.group() / split);
  const int64_t n_units = s.batch * s.kv_heads() * split;
  const int64_t group_units =  // kHeadGroups only
      head_group_units(n_kt, slots, n_units, s.group() / split);
  double end = 0.0;
  for (int64_t b = 0; b < n_units * n_kt; ++b) {  // block b in launch order: its key tile kt
    const int64_t kt = order == BlockOrder::kHeadMajor ? b % n_kt
                       : order == BlockOrder::kKeyTileMajor
                           ? b / n_units
                           : head_group_place(b, n_kt, n_units, group_units).kt;
    int64_t qt_begin = 0;  // as in the dK/dV kernels
    if (s.causal) {
      const int64_t first = causal_first_query(kt * kv_rows, s.seq_q, s.seq_k);
      if (first > 0) qt_begin = std::min(first / q_rows, n_qt);
    }
    const double t = free_at.top() + double(n_qt - qt_begin) * heads + kBlockOverhead;
    free_at.pop();
    free_at.push(t);
    end = std::max(end, t);
  }
  const double parts_bytes = split > 1 ? 2.0 * 2.0 * split * double(s.k_numel()) * 4.0 : 0.0;
  return end + parts_bytes * kIterationsPerByte;
}

inline int group_split(const AttentionShape& s, int slots, int kv_rows, int q_rows,
                       BlockOrder order = BlockOrder::kHeadMajor) {
  // Greedy scheduling ends at most one block's time after the average slot's work (Graham's
  // list-scheduling bound), and no split does better than the average: where the largest block
  // (key tile 0, all query tiles, the whole group) is within 2% of the average, keep 1 without
  // estimating (a large grid, where the estimate would cost a loop over millions of blocks).
  const double n_qt = double(ceil_div(s.seq_q, q_rows));
  const double average = double(s.batch) * s.heads * n_qt * double(ceil_div(s.seq_k, kv_rows)) /
                         (s.causal ? 2.0 : 1.0) / slots;
  if (n_qt * s.group() <= 0.02 * average) return 1;
  int best = 1;
  double best_time = estimated_dkdv_time(s, 1, slots, kv_rows, q_rows, order);
  for (int split = 2; split <= s.group(); ++split) {
    if (s.group() % split != 0 || 2 * split * s.k_numel() > s.q_numel()) continue;
    const double time = estimated_dkdv_time(s, split, slots, kv_rows, q_rows, order);
    if (time < best_time) best = split, best_time = time;
  }
  return best;
}

// The blocks of kKernel (`threads` threads, kSmem bytes of shared memory) the GPU holds at once:
// its SMs times the blocks one SM holds (their shared memory allows one at D 128). Asked once per
// kernel and process (a kernel is always launched with the same block size).
template <auto kKernel, int kSmem>
int64_t resident_slots(int threads) {
  static const int64_t slots = [threads] {
    set_smem_limit_once<kKernel, kSmem>();
    int resident = 1;
    FA_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kKernel, threads, kSmem));
    return int64_t(std::max(resident, 1)) * gpu_info().sm_count;
  }();
  return slots;
}

// The split for dK/dV kernel kKernel (`threads` threads, kSmem bytes of shared memory): 1 without
// grouped heads, else group_split over the blocks the GPU holds at once.
template <auto kKernel, int kSmem>
int dkdv_split(const AttentionShape& s, int threads, int kv_rows, int q_rows,
               BlockOrder order = BlockOrder::kHeadMajor) {
  if (!s.is_gqa()) return 1;
  return group_split(s, int(resident_slots<kKernel, kSmem>(threads)), kv_rows, q_rows, order);
}

// The same for a packed batch (chapter 09's Hopper backwards): estimated on the fixed-length
// problem of its mean lengths (exact for a batch of one length; a mixed batch has more blocks of
// unequal work, which the mean underrates), then cut to a divisor of the group whose parts fit
// the q_numel() fp32 workspace of VarlenBwdArgs.
template <auto kKernel, int kSmem>
int dkdv_split(const VarlenShape& s, int threads, int kv_rows, int q_rows) {
  if (!s.is_gqa() || s.batch() == 0 || s.total_q() == 0) return 1;
  AttentionShape mean;
  mean.batch = s.batch();
  mean.heads = s.heads;
  mean.heads_kv = s.heads_kv;
  mean.seq_q = ceil_div(s.total_q(), s.batch());
  mean.seq_k = std::max<int64_t>(1, ceil_div(s.total_k(), s.batch()));
  mean.head_dim = s.head_dim;
  mean.causal = s.causal;
  int split = dkdv_split<kKernel, kSmem>(mean, threads, kv_rows, q_rows);
  const int64_t group = s.heads / s.kv_heads();
  while (split > 1 && (group % split != 0 || 2 * split * s.k_numel() > s.q_numel())) --split;
  return split;
}

// The parts of a split for a rung whose workspace holds dQ's fp32 sum (bwd_v2 on): a
// stream-ordered allocation of the same size bwd_v1 would take from the workspace, from the
// device's default memory pool, freed on the stream after sum_parts_kernel has read it (ordered
// on the stream, so two launches on two streams never share it). The pool hands freed memory back
// to the device at the next synchronisation unless its release threshold says otherwise, so a
// call after a synchronisation may map it afresh: a cost only the split shapes pay. No
// allocation, ptr() == nullptr, when split == 1 or the pool cannot give it; the launcher then
// runs the whole group in each block (split 1).
class PartsBuffer {
 public:
  PartsBuffer(const AttentionShape& s, int split, cudaStream_t stream) : stream_(stream) {
    if (split <= 1) return;
    const size_t bytes = size_t(2) * size_t(split) * size_t(s.k_numel()) * sizeof(float);
    if (cudaMallocAsync(reinterpret_cast<void**>(&ptr_), bytes, stream) != cudaSuccess) {
      (void)cudaGetLastError();  // not an error of the call: it runs unsplit
      ptr_ = nullptr;
    }
  }
  ~PartsBuffer() {
    if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
  }
  PartsBuffer(const PartsBuffer&) = delete;
  PartsBuffer& operator=(const PartsBuffer&) = delete;
  float* ptr() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
  cudaStream_t stream_;
};

// Grouped heads on a shape TMA cannot load: the fallback (06/v2_mma) takes no grouped heads.
// Without queries nothing flows back (dK = dV = 0); without keys K, V, dK and dV are empty and
// the fallback runs the shape as plain multi-head attention (dQ = 0, D from dO and O); unaligned
// or oversized grouped inputs are refused rather than read wrongly.
inline void grouped_fallback(const AttentionBwdArgs& a, cudaStream_t stream, const char* name) {
  const AttentionShape& s = a.shape;
  FA_UNSUPPORTED_IF(s.seq_q > 0 && s.seq_k > 0,
                    std::string(name) +
                        ": grouped K/V heads need inputs TMA can load (16-byte aligned, sizes "
                        "below 2^31); its fallback takes no grouped heads");
  if (s.seq_q == 0) {
    const size_t bytes = size_t(s.k_numel()) * dtype_size(a.dtype);
    FA_CUDA_CHECK(cudaMemsetAsync(a.dk, 0, bytes, stream));  // 0 is +0.0 in fp16 and bf16
    FA_CUDA_CHECK(cudaMemsetAsync(a.dv, 0, bytes, stream));
    return;
  }
  AttentionBwdArgs no_keys = a;
  no_keys.shape.heads_kv = 0;  // K, V, dK, dV are empty: no head of them is touched
  run_fallback(no_keys, stream);
}

// ---- dQ from the fp32 workspace (the single-pass rungs, bwd_v2 on) --------------------------------
// The dK/dV/dQ kernel adds every dQ tile into an fp32 workspace [bh][seq_q][D]; this pass scales
// it and rounds it once to the dtype. Four floats per thread and step (16-byte loads: the
// workspace is 16-byte aligned and q_numel a multiple of 4, since D is); the dtype's pairs stored
// as 4-byte words (dq is 4-byte aligned).
namespace {
template <class T>
__global__ void dq_convert_kernel(const float* __restrict__ acc, T* __restrict__ dq, int64_t n4,
                                  float scale) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(acc)[i];
    uint32_t* out = reinterpret_cast<uint32_t*>(dq + 4 * i);
    out[0] = mma::pack2<T>(v.x * scale, v.y * scale);
    out[1] = mma::pack2<T>(v.z * scale, v.w * scale);
  }
}
}  // namespace

// dQ = scale * workspace in the dtype: memory-bound, a few waves of 256-thread blocks.
template <class T>
void dq_convert(const AttentionBwdArgs& a, float scale, cudaStream_t stream) {
  const int64_t n4 = a.shape.q_numel() / 4;
  const int64_t blocks =
      std::min<int64_t>(ceil_div(n4, int64_t(256)), int64_t(gpu_info().sm_count) * 8);
  dq_convert_kernel<T>
      <<<unsigned(blocks), 256, 0, stream>>>(a.workspace, static_cast<T*>(a.dq), n4, scale);
  FA_CHECK_LAUNCH();
}

// The workspace as TMA sees it, for the rungs that add dQ tiles by tensor reduce-adds (bwd_v4
// on): fp32 [bh][seq][d], boxes of box_cols columns (32: 128 bytes, the widest a 128-byte
// swizzle takes) x box_rows rows x 1 head. `name` is the rung's, for the error.
inline CUtensorMap make_tmap_f32(float* base, int64_t bh, int64_t seq, int d, int box_cols,
                                 int box_rows, const char* name) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(seq), cuuint64_t(bh)};
  const cuuint64_t strides[2] = {cuuint64_t(d) * 4, cuuint64_t(seq) * cuuint64_t(d) * 4};  // bytes
  const cuuint32_t box[3] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult rc = tensor_map_encode_fn()(
      &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, base, dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FA_REQUIRE(rc == CUDA_SUCCESS, std::string(name) +
                                     ": cuTensorMapEncodeTiled (workspace) failed "
                                     "with CUresult " +
                                     std::to_string(int(rc)));
  return map;
}

}  // namespace fa::ch07
