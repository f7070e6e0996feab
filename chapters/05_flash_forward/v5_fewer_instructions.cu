// v5_fewer_instructions.cu: v4 (v4_swizzled_pipelined.cu) with fewer instructions around the
// matmuls: each thread's K/V copies planned once, 64 keys per K/V tile again at D 128, and an
// epilogue with no address arithmetic per element. Chapter 05's final kernel: 1.04-1.13x
// FlashAttention-2 at D 128 on an H100. It is three measured steps of the tuning appendix
// (tuning/README.md, t10 to t12), in the order they were taken.
//
// What changed vs v4, and why
//   1. The K/V copies planned once per thread (KVCopyPlan). v4's Nsight Compute source page (D 128)
//      shows, between the barrier at the top of the key loop and the first ldmatrix, about 100
//      instructions per warp and step that only work out where tile j + 1 goes: load_tile_async
//      computes each 16-byte chunk's row, column, 64-bit source, bounds test and destination from
//      scratch. A thread's copies are the same from one tile to the next, only the tile moves: the
//      plan keeps a 32-bit destination and an element offset, and every pass is a compile-time
//      offset from them; only a tile that ends past seq_k tests its rows. Warp instructions at
//      D 128 N 1024 168.4 M -> 154.8 M, time 1.00-1.04x: the instructions went, the time mostly
//      stayed. The plan needs each pass to be whole rows with one swizzle, which D 96 and 256 do
//      not give (KVCopyPlan says why): those head dims are not this rung's (below).
//   2. Bc = 64 again at D 128. At Bc = 32 every 32 keys pay a step's fixed costs: Q's fragments
//      read again from shared memory (16 ldmatrix per warp at D 128, whatever Bc is), a barrier,
//      the row max and sum shuffles, the rescale vote; at N 1024 that is 12.6 M ldmatrix against
//      FlashAttention-2's 10.5 M (FA2 runs 128 x 64 tiles at D 128 on the H100). v4 took Bc down
//      to 32 for registers; its single set of lane addresses and the two-register copy plan gave
//      enough back: ptxas (CUDA 13.0, sm_90) fits Bc = 64 at D 128 in 255 registers with 8 bytes of
//      spills outside the loop. Without the rescale skip it spills 100 bytes, without the
//      pipelined loads 56: both stay on. 1.02-1.06x, the ldmatrix count down to FA2's.
//   3. The epilogue through stmatrix (store_o_m). v4's store_o_tile spends ~1000 instructions per
//      warp after the last MMA (FlashAttention-2 ~570) working out addresses. Two n8 accumulator
//      tiles packed to 16 bits are an A fragment (the layout P V relies on), so stmatrix.x4 (PTX,
//      sm_90: the inverse of ldmatrix.x4) stores them at the lane addresses Q was read through, a
//      base plus a constant; the warp's rows are contiguous in O, so its copy-out is a base plus
//      constants too, all shared loads before the global stores, both m16 tiles at once. 1043 ->
//      916 instructions per warp after the last MMA, 1.04-1.08x: the loop's code is v4's, but
//      ptxas schedules the whole kernel, and the loop's short-scoreboard samples halved too.
//      The values written are v4's: the same products, rounded the same way.
//
// What this rung does not serve. Two of its ideas are narrower than v4: stmatrix is an sm_90
// instruction, and the copy plan takes D 32, 64 and 128 only. Rather than carry v4's epilogue and
// v4's loader for the rest, this file is the kernel that was measured and nothing else: it
// registers head dims 32, 64 and 128 on compute capability 9.0 and newer, its launcher refuses
// code compiled for older GPUs, and the dispatch (common/dispatch.cpp) sends D 96, D 256 and the
// GPUs before sm_90 to 05/v4_swizzled_pipelined, the rung that serves them. At D 256 v4 ran
// 0.95-1.05x this kernel's speed when it still took D 256 (H200, 2026-12-01,
// notes/measured/h200-2026-12-01/ladder_fwd_d256.log).
//
// Map of the kernel: v4's (v3's header), with the K/V copies through the plan and O stored by
// store_o_m, for D 32, 64 and 128.
//
// Later rungs call these pieces instead of copying them: common/device/mma_fwd_v5.cuh holds this
// file's tiles, layout, Q copy, products and epilogue at D 64 and 128, and chapter 09's mma.sync
// forwards bring their own parameters, K/V copy plan and kernel to them.
//
// Speed (H100 80GB HBM3, 2026-11-25): bf16 D 128 N 8192 381.0 TFLOP/s, FlashAttention-2 352.3
// (medians of three alternating rounds of fa_bench and PyTorch SDPA, B = 16384/N, H = 2048/D;
// notes/measured/h100-2026-11-25c/rounds_d128_v12.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "attention_tiles.cuh"  // tiles::LaneAddr, a lane's ldmatrix addresses (05/v4)
#include "check.h"
#include "gpu.h"
#include "mma.cuh"
#include "registry.h"

namespace fa {
namespace {

constexpr const char* kName = "05/v5_fewer_instructions";  // the registered name
constexpr int kMinSm = 90;  // stmatrix (the O epilogue): compute capability 9.0 and newer

constexpr int kM16Rows = 16;  // rows of one m16 tile (mma.sync m16n8k16)

// The tiles of head dim D: 4 warps of kM m16 tiles each (the header says why). D 32, 64 and 128
// only: the head dims the copy plan takes (KVCopyPlan).
template <int D>
struct Tiles {
  static_assert(D == 32 || D == 64 || D == 128, "05/v5 serves D 32, 64, 128 (05/v4 the others)");
  static constexpr int kM = 2;  // m16 tiles per warp
  static constexpr int kRowsPerWarp = kM16Rows * kM;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;       // two blocks per SM at up to 255 registers
  static constexpr int kBr = kWarps * kRowsPerWarp;  // query rows per block: 128
  static constexpr int kBc = 64;                     // keys per K/V tile
  static constexpr int kSTiles = kBc / 8;            // n8 tiles of S per m16 tile
  static constexpr bool kQInRegs = kM * D <= 128;    // 32 rows x D x 2 B / 32 lanes <= 32 regs
  static constexpr int kQRegSlices = kQInRegs ? D / 16 : 1;
  // O is rescaled only where some row's max moved, at D = 128: with Bc = 64 ptxas spills 100
  // bytes there without the skip (the header says why).
  static constexpr bool kSkipRescale = D == 128;
  static_assert(kBc % 16 == 0, "P V takes the keys 16 at a time");
};

// The swizzled tile: rows of D elements with no padding, each row's 16-byte chunks permuted
// within their 128-byte group: logical chunk c of row r is stored at chunk c ^ (r % 8). Every row
// starts at a 128-byte boundary (so a warp's cp.async of whole rows fills whole lines), and the
// eight rows of an ldmatrix 8x8 matrix (same logical chunk, rows r .. r + 7) still land in eight
// different chunks of the group: no bank conflicts either. Rows of at least 8 chunks (D a multiple
// of 64); the tile must start at a 128-byte boundary.
constexpr int kSwizzleRows = 8;  // the permutation repeats every 8 rows

// Element offset of logical chunk `chunk` (8 elements) of row `row` in a swizzled tile.
template <int D>
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  static_assert(D % 64 == 0, "a swizzled row holds whole 128-byte groups of 8 chunks");
  return row * D + (chunk ^ (row % kSwizzleRows)) * 8;
}

// The same for a reader's 32-bit shared address (ldmatrix). If `plain` is where logical chunk c of
// row r would be without the swizzle (tile + (r * D + 8 c) * 2 bytes, tile 128-byte aligned), its
// bits 4-6 are c % 8, so plain ^ swizzle_xor(r) is where it is stored. Every row a lane reads in
// this kernel is lane % 8 modulo 8 (tiles of 16 rows, each lane at row lane % 8 of an 8-row
// matrix), so one XOR pattern serves all of its reads.
__device__ __forceinline__ uint32_t swizzle_xor(int row) {
  return uint32_t(row % kSwizzleRows) * 16;
}

// Shared memory: the Q tile, then K and V double-buffered, 16-bit elements. Swizzled rows of D
// elements where a row holds whole 128-byte groups (D 64, 128), every tile at a 128-byte
// boundary; else (D 32) rows padded by kPad elements (v2's header says why).
constexpr int kPad = 8;  // elements of padding per shared-memory row (16 bytes)

template <int D>
struct SmemLayout {
  static constexpr bool kSwizzle = D % 64 == 0;
  static constexpr int kPitch = kSwizzle ? D : D + kPad;  // elements between consecutive rows
  static constexpr int kQElems = Tiles<D>::kBr * kPitch;
  static constexpr int kKVElems = Tiles<D>::kBc * kPitch;     // one K (or V) buffer
  static constexpr int kTotalElems = kQElems + 4 * kKVElems;  // Q, K[2], V[2]
  static constexpr size_t kBytes = size_t(kTotalElems) * 2;
  static_assert(!kSwizzle || (kQElems * 2) % 128 == 0 && (kKVElems * 2) % 128 == 0,
                "swizzled tiles start at 128-byte boundaries");
  using Lane = tiles::LaneAddr<kSwizzle>;
};

// Row `row` of a shared tile: the cp.async writes, the ldmatrix lane addresses (unswizzled:
// LaneAddr makes the lane's read addresses from it) and the epilogue all start from it.
template <int D, class T>
__device__ __forceinline__ T* tile_row(T* tile, int row) {
  return tile + row * SmemLayout<D>::kPitch;
}

// Element offset of 16-byte chunk ch (8 elements) of row r in a shared tile, where the copies of
// the copy plan write and the 16-byte reads of the epilogue read.
template <int D>
__device__ __forceinline__ int chunk_at(int r, int ch) {
  if constexpr (SmemLayout<D>::kSwizzle)
    return swizzled_offset<D>(r, ch);
  else
    return r * SmemLayout<D>::kPitch + 8 * ch;
}

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t seq_q, seq_k;
  int num_q_tiles;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e)
};

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Copy rows [row0, row0 + ROWS) of the row-major [seq, D] matrix `gmem` into the shared tile
// `tile`, one 16-byte cp.async per chunk, the block's threads splitting the ROWS * D / 8 chunks
// evenly. Rows at or past `seq` are zero-filled: cp.async with src-size 0 reads nothing (an
// in-range pointer is still passed). The copies are only issued; the caller commits and waits
// (mma::cp_async_commit / cp_async_wait) before reading the tile.
template <int D, int ROWS, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* gmem, int64_t row0, int64_t seq,
                                                int tid) {
  static_assert(sizeof(T) == 2, "16-bit elements: 8 per 16-byte chunk");
  constexpr int kThreads = Tiles<D>::kThreads;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert((ROWS * kChunks) % kThreads == 0, "the tile must split evenly over the block");
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t grow = row0 + r;
    const bool valid = grow < seq;
    const T* src = gmem + (valid ? grow * D + ch * 8 : 0);
    T* dst;
    if constexpr (SmemLayout<D>::kSwizzle)
      dst = tile + swizzled_offset<D>(r, ch);
    else
      dst = tile_row<D>(tile, r) + ch * 8;
    mma::cp_async_16(dst, src, valid);
  }
}

// The copies of K/V tile j, planned once per thread. load_tile_async works out every 16-byte
// chunk's row, column, 64-bit source, bounds test and destination from scratch: about 100
// instructions per tile and warp at D 128, between the barrier and the first ldmatrix of each
// step. The plan is fixed: with kChunks = D / 8 chunks per row, thread tid copies chunk
// tid % kChunks of rows tid / kChunks + kRowsPerPass * i, i < kPasses. Pass i's source and
// destination are the thread's first ones plus compile-time constants (folded into the cp.async),
// tile j's source is kBc * D * j elements further, buffer b's destination b tiles further. The
// plan is two registers (a shared address and an offset into a tile; K and V are laid out alike),
// since D 64 and 128 have none to spare. Only a tile that ends past seq_k (the last one, when
// seq_k % kBc != 0) tests its rows, one comparison per pass. The plan needs the chunks to tile the
// block in whole rows and one swizzle for every pass: D 96 has 12 chunks a row for 128 threads,
// D 256 4 rows a pass, fewer than the swizzle's 8. Those head dims are not this rung's (05/v4
// serves them, the header says why).
template <class T, int D>
struct KVCopyPlan {
  using Sm = SmemLayout<D>;
  using Tl = Tiles<D>;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = Tl::kThreads / kChunks;
  static_assert(Tl::kThreads % kChunks == 0 && Tl::kBc % kRowsPerPass == 0 &&
                    (!Sm::kSwizzle || kRowsPerPass % kSwizzleRows == 0),
                "the copy plan: passes of whole rows, one swizzle for all of them");
  static constexpr int kPasses = Tl::kBc / kRowsPerPass;
  static constexpr uint32_t kTileBytes = Sm::kKVElems * 2;  // one K (or V) buffer
  static constexpr uint32_t kVBytes = 2 * kTileBytes;       // V buffer 0 from K buffer 0
  static constexpr uint32_t kPassBytes = kRowsPerPass * Sm::kPitch * 2;  // pass i to i + 1
  // The passes fill one buffer exactly, and V's buffers follow K's two (the kernel's sK).
  static_assert(kPasses * kPassBytes == kTileBytes && kVBytes == 2 * kTileBytes,
                "the copy plan's passes tile one K (or V) buffer");

  uint32_t dst;  // this thread's first chunk in K buffer 0 (32-bit shared address)
  uint32_t src;  // ... and its element offset in a tile of K or V (below 2^31: Bc x D)

  __device__ __forceinline__ KVCopyPlan(T* sK, int tid) {
    const int row = tid / kChunks, chunk = tid % kChunks;
    dst = mma::smem_addr(sK) + uint32_t(chunk_at<D>(row, chunk)) * 2;
    src = uint32_t(row * D + 8 * chunk);
  }

  // Tile j of K and V (rows j Bc ... of the head's [seq_k, D] matrices) into buffer buf. A tile
  // that ends past seq_k (rows_left = seq_k - j Bc < Bc) zero-fills the rows past the end:
  // cp.async with src-size 0, from the tile's first row (in range) rather than past the end.
  __device__ __forceinline__ void issue(const T* K, const T* V, int j, int buf, int rows_left,
                                        int tid) const {
    const uint32_t d = dst + uint32_t(buf) * kTileBytes;
    const int64_t tile = int64_t(j) * (Tl::kBc * D);
    const T* k = K + tile + src;
    const T* v = V + tile + src;
    if (rows_left >= Tl::kBc) {
#pragma unroll
      for (int i = 0; i < kPasses; ++i)
        mma::cp_async_16(d + i * kPassBytes, k + i * kRowsPerPass * D);
#pragma unroll
      for (int i = 0; i < kPasses; ++i)
        mma::cp_async_16(d + kVBytes + i * kPassBytes, v + i * kRowsPerPass * D);
    } else {
      const int row = tid / kChunks;
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const bool in = row + i * kRowsPerPass < rows_left;
        mma::cp_async_16(d + i * kPassBytes, in ? k + i * kRowsPerPass * D : K + tile, in);
        mma::cp_async_16(d + kVBytes + i * kPassBytes, in ? v + i * kRowsPerPass * D : V + tile,
                         in);
      }
    }
  }
};

// K/V tile j into buffer buf, through the copy plan.
template <class T, int D>
__device__ __forceinline__ void load_kv_tile(const T* K, const T* V, const KVCopyPlan<T, D>& plan,
                                             int j, int buf, int64_t seq_k, int tid) {
  plan.issue(K, V, j, buf, int(seq_k) - j * Tiles<D>::kBc, tid);  // the launcher keeps seq_k < 2^31
}

// This lane's ldmatrix.x4 address for the A fragment of k16 slice 0 of the 16 Q rows of m16 tile
// `slab` of the block (slice kk is kk * 16 elements further along). Lane l addresses row l % 8 of
// matrix l / 8; the four 8x8 matrices are
//   m0 = rows 0-7, cols 0-7   -> a[0]      m1 = rows 8-15, cols 0-7  -> a[1]
//   m2 = rows 0-7, cols 8-15  -> a[2]      m3 = rows 8-15, cols 8-15 -> a[3]
// (cols relative to the slice), exactly the A fragment order of mma.cuh.
template <int D, class T>
__device__ __forceinline__ const T* q_lane_ptr(const T* sQ, int slab, int lane) {
  const int row = slab * kM16Rows + (lane % 8) + 8 * ((lane / 8) & 1);
  const int col = 8 * (lane / 16);
  return sQ + row * SmemLayout<D>::kPitch + col;
}

// S = 0 for the warp's kM m16 tiles (the accumulators of S = Q K_j^T).
template <int D>
__device__ __forceinline__ void zero_s_m(float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4]) {
#pragma unroll
  for (int m = 0; m < Tiles<D>::kM; ++m)
#pragma unroll
    for (int nt = 0; nt < Tiles<D>::kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][nt][e] = 0.0f;
}

// S = Q K_j^T for the warp's kM m16 tiles. Each K fragment (ldmatrix.x4: two n8 tiles, one k16
// slice) is loaded once and used by every m16 tile. Q comes from q_frag where Tiles<D>::kQInRegs,
// else from shared memory at q (m16 tile m is 16 rows further per m); k: this lane's ldmatrix
// address in the K buffer. The fragment loads are software-pipelined: the Q and K fragments of
// k16 slice kk + 1 are loaded into a second set of registers before the MMAs of slice kk are
// issued, so that those MMAs never wait for a load issued just before them. The loop is unrolled
// in full (the two register sets are indexed by kk % 2 at compile time).
template <class T, int D>
__device__ __forceinline__ void compute_s_m(
    float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4],
    const uint32_t (&q_frag)[Tiles<D>::kM][Tiles<D>::kQRegSlices][4],
    const typename SmemLayout<D>::Lane& q, const typename SmemLayout<D>::Lane& k) {
  using Tl = Tiles<D>;
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  constexpr int kSlices = D / 16;
  constexpr int kPairs = Tl::kSTiles / 2;
  uint32_t qa[2][Tl::kM][4], kb[2][kPairs][4];  // slice kk lives in set kk % 2
  auto load_slice = [&](int kk, int set) {
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      if constexpr (Tl::kQInRegs) {
#pragma unroll
        for (int r = 0; r < 4; ++r) qa[set][m][r] = q_frag[m][kk][r];
      } else {
        mma::ldmatrix_x4(qa[set][m], q.at(kM16Rows * kRowBytes * m, kk));
      }
    }
#pragma unroll
    for (int np = 0; np < kPairs; ++np)
      mma::ldmatrix_x4(kb[set][np], k.at(16 * kRowBytes * np, kk));
  };
  zero_s_m<D>(s);
  load_slice(0, 0);
#pragma unroll
  for (int kk = 0; kk < kSlices; ++kk) {
    const int cur = kk % 2;
    if (kk + 1 < kSlices) load_slice(kk + 1, cur ^ 1);
#pragma unroll
    for (int np = 0; np < kPairs; ++np) {
      const uint32_t b_lo[2] = {kb[cur][np][0], kb[cur][np][1]};
      const uint32_t b_hi[2] = {kb[cur][np][2], kb[cur][np][3]};
#pragma unroll
      for (int m = 0; m < Tl::kM; ++m) {
        mma::mma_16816<T>(s[m][2 * np], qa[cur][m], b_lo);
        mma::mma_16816<T>(s[m][2 * np + 1], qa[cur][m], b_hi);
      }
    }
  }
}

// O *= alpha for the m16 tiles m where rescale[m] (a tile is skipped when every alpha of it is
// exactly 1).
template <int D>
__device__ __forceinline__ void rescale_o_m(float (&o_acc)[Tiles<D>::kM][D / 8][4],
                                            const float (&alpha)[Tiles<D>::kM][2],
                                            const bool (&rescale)[Tiles<D>::kM]) {
#pragma unroll
  for (int m = 0; m < Tiles<D>::kM; ++m) {
    if (!rescale[m]) continue;  // warp-uniform: the kernel's vote
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      o_acc[m][dn][0] *= alpha[m][0];
      o_acc[m][dn][1] *= alpha[m][0];
      o_acc[m][dn][2] *= alpha[m][1];
      o_acc[m][dn][3] *= alpha[m][1];
    }
  }
}

// O = alpha O + P V_j for the warp's kM m16 tiles; each V fragment is loaded once for all of them.
// The rescale of m16 tile m runs only where rescale[m]; v: this lane's ldmatrix .trans address in
// the V buffer. The V fragment loads are software-pipelined as in compute_s_m: the Bc / 16 x D / 16
// fragments of the tile are one sequence, and fragment i + 1 is loaded into a second set of
// registers before the MMAs of fragment i are issued. The P fragments of every k16 slice are
// packed first.
template <class T, int D>
__device__ __forceinline__ void rescale_o_add_pv_m(
    float (&o_acc)[Tiles<D>::kM][D / 8][4], const float (&s)[Tiles<D>::kM][Tiles<D>::kSTiles][4],
    const float (&alpha)[Tiles<D>::kM][2], const bool (&rescale)[Tiles<D>::kM],
    const typename SmemLayout<D>::Lane& v) {
  using Tl = Tiles<D>;
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  constexpr int kSlices = Tl::kBc / 16, kPairs = D / 16, kSteps = kSlices * kPairs;
  uint32_t vb[2][4];  // fragment i lives in set i % 2
  mma::ldmatrix_x4_trans(vb[0], v.at(0, 0));
  rescale_o_m<D>(o_acc, alpha, rescale);
  uint32_t p_frag[kSlices][Tl::kM][4];  // two S tiles of one m16 tile are one A fragment (v2)
#pragma unroll
  for (int kk = 0; kk < kSlices; ++kk)
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      p_frag[kk][m][0] = mma::pack2<T>(s[m][2 * kk][0], s[m][2 * kk][1]);
      p_frag[kk][m][1] = mma::pack2<T>(s[m][2 * kk][2], s[m][2 * kk][3]);
      p_frag[kk][m][2] = mma::pack2<T>(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
      p_frag[kk][m][3] = mma::pack2<T>(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
    }
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int kk = i / kPairs, dp = i % kPairs, cur = i % 2;
    if (i + 1 < kSteps)
      mma::ldmatrix_x4_trans(vb[cur ^ 1],
                             v.at(16 * kRowBytes * ((i + 1) / kPairs), (i + 1) % kPairs));
    const uint32_t b_lo[2] = {vb[cur][0], vb[cur][1]};
    const uint32_t b_hi[2] = {vb[cur][2], vb[cur][3]};
#pragma unroll
    for (int m = 0; m < Tl::kM; ++m) {
      mma::mma_16816<T>(o_acc[m][2 * dp], p_frag[kk][m], b_lo);
      mma::mma_16816<T>(o_acc[m][2 * dp + 1], p_frag[kk][m], b_hi);
    }
  }
}

// The warp's kM x 16 rows of O = o_acc * inv_l (16-bit) to global memory at O_warp (its first
// row), rows_left = seq_q - that row (the rows past seq_q are not written), with no address
// arithmetic per element. v4's store_o_tile computes each thread's 4-byte shared-memory write
// (row, chunk, swizzle) for every n8 tile, then each 16-byte copy's row, bounds test and 64-bit
// global address, one m16 tile at a time, each global store waiting on its shared load: ~1000
// instructions per warp at D 128, where FlashAttention-2's epilogue is ~570.
// * Into shared memory: two n8 accumulator tiles, packed to 16 bits, are an A fragment (the layout
//   P V relies on), so stmatrix (the inverse of ldmatrix) stores them at the lane addresses Q was
//   read through: q_addr.at(...) is a base plus a constant, 8 stores of 16 columns per m16 tile.
//   The rows are this warp's own slabs of sQ (only it ever read them, and no copy targets sQ any
//   more), so __syncwarp is the only barrier.
// * Into global memory: the warp's rows are contiguous there, so its chunk c (16 bytes, row-major
//   over its rows) lies at O_warp + 8 c, and lane l copies chunks l + 32 i: a base plus a
//   constant again. All shared loads are issued before the first global store.
template <class T, int D>
__device__ __forceinline__ void store_o_m(T* O_warp, int64_t rows_left,
                                          const float (&o_acc)[Tiles<D>::kM][D / 8][4],
                                          const float (&inv_l)[Tiles<D>::kM][2],
                                          const typename SmemLayout<D>::Lane& q_addr,
                                          const T* sQ_warp, int lane) {
  using Tl = Tiles<D>;
  constexpr int kRowBytes = SmemLayout<D>::kPitch * 2;
  constexpr int kChunks = D / 8;                             // 16-byte chunks per row
  constexpr int kPerLane = Tl::kRowsPerWarp * kChunks / 32;  // chunks each lane copies
  static_assert(Tl::kRowsPerWarp * kChunks % 32 == 0, "the warp's chunks split evenly");
  __syncwarp();  // every lane's ldmatrix reads of these rows (Q) are done
#pragma unroll
  for (int m = 0; m < Tl::kM; ++m)
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      const uint32_t a[4] = {
          mma::pack2<T>(o_acc[m][2 * j][0] * inv_l[m][0], o_acc[m][2 * j][1] * inv_l[m][0]),
          mma::pack2<T>(o_acc[m][2 * j][2] * inv_l[m][1], o_acc[m][2 * j][3] * inv_l[m][1]),
          mma::pack2<T>(o_acc[m][2 * j + 1][0] * inv_l[m][0], o_acc[m][2 * j + 1][1] * inv_l[m][0]),
          mma::pack2<T>(o_acc[m][2 * j + 1][2] * inv_l[m][1],
                        o_acc[m][2 * j + 1][3] * inv_l[m][1])};
      mma::stmatrix_x4(q_addr.at(16 * kRowBytes * m, j), a);
    }
  __syncwarp();
  uint4 chunk[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i, r = c / kChunks, ch = c % kChunks;
    chunk[i] = *reinterpret_cast<const uint4*>(sQ_warp + chunk_at<D>(r, ch));
  }
  // __stwb is a plain (write-back) 16-byte store. Assigning chunk[i] through a uint4 pointer
  // compiled to four 32-bit stores (nvcc 13.0: the values live in registers by then), four times
  // the L2 sectors in Nsight Compute.
  const int64_t valid = rows_left * kChunks;  // chunks of rows before seq_q
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < valid)
      __stwb(reinterpret_cast<uint4*>(O_warp + 8 * (lane + 32 * i)), chunk[i]);
}

// L = ln(sum_j exp(s_j)) of rows row0 + g and row0 + g + 8 of one m16 tile (l, m: this lane's
// row sums, already reduced over the quad, and raw-score maxima), written by the quad's first lane
// (t = 0); rows past seq_q are not.
__device__ __forceinline__ void write_lse(float* Lse, const float (&l)[2], const float (&m)[2],
                                          float c, int64_t row0, int64_t seq_q, int g, int t) {
  if (t == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + g + 8 * h;
      if (row < seq_q)
        Lse[row] = l[h] > 0.0f ? (m[h] * c + log2f(l[h])) * 0.6931471805599453f : -INFINITY;
    }
  }
}

template <class T, int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads, 2) flash_fwd_v5_kernel(const Params p) {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16 (k16 slices of Q K^T)");
  using Sm = SmemLayout<D>;
  constexpr int kM = Tiles<D>::kM;            // m16 tiles per warp
  constexpr int kBr = Tiles<D>::kBr;          // query rows per block
  constexpr int kBc = Tiles<D>::kBc;          // keys per K/V tile
  constexpr int kSTiles = Tiles<D>::kSTiles;  // n8 tiles of S per m16 tile
  constexpr int kOTiles = D / 8;              // n8 tiles of O
  constexpr float kNegInf = -INFINITY;
  // The epilogue's stmatrix is an sm_90 instruction: code compiled for an older GPU (a build with
  // CMAKE_CUDA_ARCHITECTURES below 90) stops here, and no block ever gets here, since the launcher
  // refuses such code before it launches anything.
  if constexpr (!mma::kHasStmatrix) {
    __trap();
    return;
  }

  // Swizzled tiles must start at 128-byte boundaries; so must the block's shared memory. Two arrays,
  // one per alignment: one name declared with both (D 32 padded and D 64/128 swizzled in one
  // translation unit) is one array with the first alignment (nvcc warning 1886), and the PTX of
  // the swizzled kernels would not ask for the 128-byte base they rely on.
  extern __shared__ __align__(16) unsigned char smem_padded[];
  extern __shared__ __align__(128) unsigned char smem_swizzled[];
  T* sQ = reinterpret_cast<T*>(Sm::kSwizzle ? smem_swizzled : smem_padded);
  T* sK = sQ + Sm::kQElems;  // buffer b at sK + b * kKVElems; V's two buffers follow K's

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  // ---- Which (batch*head) and which Q tile: both on blockIdx.x (gridDim.y/z stop at 65535).
  // Q tiles of one head are consecutive blocks (K/V of that head stay hot in L2), last tile first
  // (under causal masking the last Q tiles have the most work; starting them first evens the tail).
  const int64_t bh = blockIdx.x / p.num_q_tiles;
  const int q_tile = p.num_q_tiles - 1 - int(blockIdx.x % p.num_q_tiles);
  const int64_t q0 = int64_t(q_tile) * kBr;
  const int64_t seq_q = p.seq_q, seq_k = p.seq_k;

  const T* Q = static_cast<const T*>(p.q) + bh * seq_q * D;
  const T* K = static_cast<const T*>(p.k) + bh * seq_k * D;
  const T* V = static_cast<const T*>(p.v) + bh * seq_k * D;

  // ---- How many K/V tiles this Q tile needs. Causal (bottom-right): query i sees keys
  // j <= causal_last_key(i) = i + seq_k - seq_q, so the last real row of the tile bounds the loop;
  // tiles entirely above the diagonal are never loaded.
  int64_t n_tiles = ceil_div(seq_k, kBc);
  if (p.causal) {
    const int64_t last_row = (q0 + kBr < seq_q ? q0 + kBr : seq_q) - 1;
    const int64_t last_key = causal_last_key(last_row, seq_q, seq_k);
    n_tiles = last_key < 0 ? 0 : (last_key / kBc + 1 < n_tiles ? last_key / kBc + 1 : n_tiles);
  }

  // This thread's rows are g and g + 8 of each of the warp's kM m16 tiles: rows warp_row0 + 16 m +
  // g + 8 h. Their last visible keys are recomputed where a tile needs a mask (kept in registers
  // across the loop they pushed D = 128 into spills).
  const int64_t warp_row0 = q0 + warp * Tiles<D>::kRowsPerWarp;
  // The smallest last key over the warp (its first row): a tile whose keys all lie at or below it
  // needs no mask for any row of the warp. The largest (its last row): a tile starting after it is
  // invisible to the whole warp, which then skips it.
  const int warp_last_key = int(p.causal ? (causal_last_key(warp_row0, seq_q, seq_k) < seq_k - 1
                                                ? causal_last_key(warp_row0, seq_q, seq_k)
                                                : seq_k - 1)
                                         : seq_k - 1);
  const int warp_max_key = int(
      p.causal ? (causal_last_key(warp_row0 + Tiles<D>::kRowsPerWarp - 1, seq_q, seq_k) < seq_k - 1
                      ? causal_last_key(warp_row0 + Tiles<D>::kRowsPerWarp - 1, seq_q, seq_k)
                      : seq_k - 1)
               : seq_k - 1);

  // This thread's K/V copies, planned once.
  const KVCopyPlan<T, D> plan(sK, tid);

  // ---- Prologue: Q tile (group 0) and K/V tile 0 (group 1) in flight together.
  load_tile_async<D, kBr>(sQ, Q, q0, seq_q, tid);
  mma::cp_async_commit();
  if (n_tiles > 0) load_kv_tile<T, D>(K, V, plan, 0, 0, seq_k, tid);
  mma::cp_async_commit();
  mma::cp_async_wait<0>();
  __syncthreads();

  // Q: m16 tile m of this warp is the 16-row slab kM * warp + m of sQ. Fragments kept in
  // registers at D <= 64 only.
  constexpr int kRowBytes = Sm::kPitch * 2;
  // Every ldmatrix row of this lane is lane % 8 modulo 8: one XOR pattern for all of its reads
  // where the tiles are swizzled (LaneAddr; unused with padded rows).
  const uint32_t swz = swizzle_xor(lane);
  const T* q_lane = q_lane_ptr<D>(sQ, kM * warp, lane);  // m16 tile m: 16 m rows down
  const typename Sm::Lane q_addr(mma::smem_addr(q_lane), swz);
  uint32_t q_frag[kM][Tiles<D>::kQRegSlices][4];
  if constexpr (Tiles<D>::kQInRegs) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        mma::ldmatrix_x4(q_frag[m][kk], q_addr.at(kM16Rows * kRowBytes * m, kk));
  }

  float o_acc[kM][kOTiles][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int dn = 0; dn < kOTiles; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[m][dn][e] = 0.0f;
  float m_run[kM][2], l_run[kM][2];  // running max in raw score units, per-thread partial sum
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_run[m][h] = kNegInf;
      l_run[m][h] = 0.0f;
    }

  // Per-lane row/column offsets of the ldmatrix addresses for K (v2's kernel explains the
  // mapping), as 32-bit shared addresses of buffer 0.
  const int k_ld_row = (lane % 8) + 8 * (lane / 16);
  const int k_ld_col = 8 * ((lane / 8) & 1);
  const typename Sm::Lane k_addr0(mma::smem_addr(tile_row<D>(sK, k_ld_row) + k_ld_col), swz);
  constexpr uint32_t kKVBytes = Sm::kKVElems * 2;
  // V's lane mapping (.trans: row (lane % 8) + 8 ((lane / 8) & 1), column 8 (lane / 16) of a
  // 16 x 16 block) is Q's, so q_addr's bases reach V as well: V buffer b lies (Q tile + both K
  // buffers - this warp's Q offset + b * buffer) bytes further. (K's mapping differs: its own set
  // of bases stays.)
  const uint32_t v_from_q =
      uint32_t(Sm::kQElems * 2 + 2 * Sm::kKVElems * 2) - uint32_t(16 * kRowBytes * kM * warp);

  const int n_tiles32 = int(n_tiles);
  for (int j = 0; j < n_tiles32; ++j) {
    const int buf = int(j & 1);
    if (j > 0) {
      // Tile j (the only group in flight) has landed for this thread; the barrier makes it
      // visible to all, and also guarantees every warp is done with tile j-1, whose buffer the
      // next cp.async overwrites.
      mma::cp_async_wait<0>();
      __syncthreads();
    }
    if (j + 1 < n_tiles32) {
      load_kv_tile<T, D>(K, V, plan, j + 1, buf ^ 1, seq_k, tid);
      mma::cp_async_commit();
    }
    const int k0 = j * kBc;
    if (k0 > warp_max_key) continue;  // no row of this warp sees any key of tile j

    // ---- (1) S = Q K_j^T: 32 x Bc per warp (kM m16 tiles).
    float s[kM][kSTiles][4];
    const typename Sm::Lane k_addr(k_addr0, buf * kKVBytes);
    compute_s_m<T, D>(s, q_frag, q_addr, k_addr);

    if (p.scale_log2 < 0.0f) {  // negative scale: c * s = |c| * (-s), so the max stays a max
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[m][nt][e] = -s[m][nt][e];
    }

    // ---- (2) Mask: keys past seq_k, and (causal) keys after a row's last visible key. Uniform
    // per warp, so only the tiles at the ragged end or on the diagonal pay for it.
    if (k0 + kBc - 1 > warp_last_key) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        int lim[2];  // last visible key of each row, relative to k0, clamped to [-1, kBc]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // In 32 bits (the launcher keeps lengths below 2^31 - 256): causal_last_key's
          // row + seq_k - seq_q, capped at the last key.
          const int row = int(warp_row0) + 16 * m + g + 8 * h;
          int lk = int(p.seq_k) - 1;
          if (p.causal) lk = min(lk, row + int(p.seq_k - p.seq_q));
          const int r = lk - k0;
          lim[h] = r < -1 ? -1 : (r > kBc ? kBc : r);
        }
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = nt * 8 + 2 * t + (e & 1);
            if (col > lim[e >> 1]) s[m][nt][e] = kNegInf;
          }
      }
    }

    // ---- (3) Online softmax on rows g (h = 0) and g+8 (h = 1) of each m16 tile, the scale
    // c = |scale| * log2(e) inside the exponent's FMA. c is read from the kernel parameters
    // (constant memory) where it is used: kept in a register across the loop it pushed D = 64 past
    // its 128-register budget (at the time two blocks of 256 threads).
    const float c = fabsf(p.scale_log2);
    float alpha[kM][2];
    bool rescale[kM];  // whether m16 tile m's O is multiplied by alpha (a warp vote)
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float m_new[2] = {m_run[m][0], m_run[m][1]};
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        m_new[0] = fmaxf(m_new[0], fmaxf(s[m][nt][0], s[m][nt][1]));
        m_new[1] = fmaxf(m_new[1], fmaxf(s[m][nt][2], s[m][nt][3]));
      }
      float base[2];  // c * m_new, in log2 units
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the 4 threads of a quad hold the whole row
        m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 1));
        m_new[h] = fmaxf(m_new[h], __shfl_xor_sync(0xffffffffu, m_new[h], 2));
        base[h] = m_new[h] == kNegInf ? 0.0f : m_new[h] * c;  // no key seen yet: no -inf - -inf
        // An unmoved max gives alpha = 1 exactly; else 0 when m_run = -inf.
        alpha[m][h] = m_new[h] == m_run[m][h] ? 1.0f : ex2_approx(fmaf(m_run[m][h], c, -base[h]));
        m_run[m][h] = m_new[h];
        l_run[m][h] *= alpha[m][h];
      }
      rescale[m] = !Tiles<D>::kSkipRescale ||
                   __any_sync(0xffffffffu, alpha[m][0] != 1.0f || alpha[m][1] != 1.0f);
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        s[m][nt][0] = ex2_approx(fmaf(s[m][nt][0], c, -base[0]));
        s[m][nt][1] = ex2_approx(fmaf(s[m][nt][1], c, -base[0]));
        s[m][nt][2] = ex2_approx(fmaf(s[m][nt][2], c, -base[1]));
        s[m][nt][3] = ex2_approx(fmaf(s[m][nt][3], c, -base[1]));
        l_run[m][0] += s[m][nt][0] + s[m][nt][1];
        l_run[m][1] += s[m][nt][2] + s[m][nt][3];
      }
    }

    // ---- (4) O = alpha * O + P V_j.
    const typename Sm::Lane v_addr(q_addr, v_from_q + buf * kKVBytes);
    rescale_o_add_pv_m<T, D>(o_acc, s, alpha, rescale, v_addr);
  }

  // ---- Epilogue: finish the row sums (each thread summed only its own columns), then O of all
  // m16 tiles at once through store_o_m (stmatrix), then L.
  T* O = static_cast<T*>(p.o) + bh * seq_q * D;
  float* Lse = p.lse + bh * seq_q;
  const float c = fabsf(p.scale_log2);
  float inv_l[kM][2];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 1);
      l_run[m][h] += __shfl_xor_sync(0xffffffffu, l_run[m][h], 2);
      inv_l[m][h] = l_run[m][h] > 0.0f ? 1.0f / l_run[m][h] : 0.0f;  // no visible key: O = 0
    }
  store_o_m<T, D>(O + warp_row0 * D, seq_q - warp_row0, o_acc, inv_l, q_addr,
                  tile_row<D>(sQ, Tiles<D>::kRowsPerWarp * warp), lane);
#pragma unroll
  for (int m = 0; m < kM; ++m)
    write_lse(Lse, l_run[m], m_run[m], c, warp_row0 + 16 * m, seq_q, g, t);
}

template <class T, int D>
void launch(const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = ceil_div(s.seq_q, Tiles<D>::kBr);
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(kName) + ": more than 2^31-1 thread blocks");
  // 32-bit key indices: k0 + Bc and q0 + Br must not overflow; 256 = 2 x the largest Br.
  constexpr int64_t kSeqMargin = 256;
  FA_UNSUPPORTED_IF(s.seq_q > INT_MAX - kSeqMargin || s.seq_k > INT_MAX - kSeqMargin,
                    std::string(kName) + ": sequence lengths must stay below 2^31 - 256");
  Params p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.seq_q = s.seq_q;
  p.seq_k = s.seq_k;
  p.num_q_tiles = int(num_q_tiles);
  p.causal = s.causal;
  p.scale_log2 = s.softmax_scale() * 1.4426950408889634f;  // log2(e)

  constexpr size_t smem = SmemLayout<D>::kBytes;
  FA_UNSUPPORTED_IF(smem > smem_optin_bytes(),
                    std::string(kName) + ": head_dim " + std::to_string(D) + " needs " +
                        std::to_string(smem) +
                        " bytes of shared memory per block, more than this GPU allows");
  auto kernel = flash_fwd_v5_kernel<T, D>;
  // The code this GPU runs must be compiled for sm_90 or newer (the kernel's first lines say why):
  // an older GPU, or a build for older GPUs only whose PTX the driver compiles for this one, is
  // refused here. The registration's min_sm says the same to the harness and the dispatch.
  static const int ptx_arch = [kernel] {
    cudaFuncAttributes f{};
    FA_CUDA_CHECK(cudaFuncGetAttributes(&f, kernel));
    return f.ptxVersion;  // the virtual architecture compiled for, major * 10 + minor
  }();
  FA_UNSUPPORTED_IF(ptx_arch < kMinSm,
                    std::string(kName) + ": needs sm_" + std::to_string(kMinSm) +
                        " or newer (stmatrix); this GPU runs code compiled for compute_" +
                        std::to_string(ptx_arch) + " (05/v4_swizzled_pipelined runs it)");
  // Above 48 KiB of dynamic shared memory a kernel must opt in; also ask for the largest
  // shared-memory carveout so that two blocks fit per SM.
  FA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(blocks), Tiles<D>::kThreads, smem, stream>>>(p);
  FA_CHECK_LAUNCH();
}

template <class T>
void dispatch_head_dim(const AttentionFwdArgs& a, cudaStream_t stream) {
  switch (a.shape.head_dim) {
    case 32:
      return launch<T, 32>(a, stream);
    case 64:
      return launch<T, 64>(a, stream);
    case 128:
      return launch<T, 128>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": head_dim " +
                                  std::to_string(a.shape.head_dim) +
                                  " not instantiated (32, 64, 128: the head dims its K/V copy "
                                  "plan takes; 05/v4_swizzled_pipelined has 96 and 256)");
  }
}

void attention_fwd(const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  switch (a.dtype) {
    case DType::BF16:
      return dispatch_head_dim<__nv_bfloat16>(a, stream);
    case DType::F16:
      return dispatch_head_dim<__half>(a, stream);
    default:
      FA_UNSUPPORTED_IF(true, std::string(kName) + ": takes fp16 or bf16 inputs only");
  }
}

}  // namespace
}  // namespace fa

FA_REGISTER(AttentionFwdKernel,
            {fa::kName,
             fa::attention_fwd,
             "v4 with each thread's K/V copies planned once, Bc 64 again at D 128, O stored by "
             "stmatrix (sm_90; 05/v4 serves older GPUs and D 96, 256)",
             {fa::DType::BF16, fa::DType::F16},
             {32, 64, 128},
             fa::kMinSm});
FA_REGISTER_SMEM(fa::kName, [](int d) {
  return fa::smem_at<32, 64, 128>(
      d, [](auto D) { return fa::SmemLayout<decltype(D)::value>::kBytes; });
});
