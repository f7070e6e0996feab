// 03/t07_warp_specialized: v6 with the warpgroups' registers moved to where the work is
// (setmaxnreg).
// Status: verified: the GPU tests pass (RaggedShapes, Long4096Cubed, LongRaggedManyTiles; H100
// 80GB HBM3, CUDA 13.0, 2026-11-26).
// Speed: measured in chapters/03_tiled_matmul/tuning/README.md: bf16 4096^3 701.6 TFLOP/s (v6
// 701.1, cuBLAS 754.8: 93.0%); 8192^3 752.5 (v6 755.0, cuBLAS 778.5: 96.7%).
//
// What changed vs v6: v6 already splits the block into a TMA producer warpgroup and two wgmma
// consumer warpgroups around a full/empty mbarrier ring. What it lacks of the pattern the fastest
// public Hopper GEMMs use is the register split. A block is launched with one register count for
// all its threads: 384 threads get at most 168 each (65536 / 384, rounded down to 8). The producer
// warpgroup, one thread of which issues TMA copies, needs a few dozen; the consumers hold 128 fp32
// accumulators each plus descriptors, addresses and the epilogue's indices, so 168 is tight for
// them and ptxas must either keep fewer values live or (worse) serialise the wgmmas of a batch when
// it cannot give the asynchronous MMAs their accumulator registers for the whole batch. setmaxnreg
// moves the producer's unused registers to the consumers at run time:
//   producer  setmaxnreg.dec 40   (CUTLASS's load-warpgroup count for this shape)
//   consumers setmaxnreg.inc 232  (40 + 232 + 232 = 504 = 3 x 168: the counts must add up, or the
//                                  inc waits forever for registers nobody releases)
// Nothing else changes: the tile, the ring, the order of blocks, the ragged handling and the
// epilogue are v6's, line for line, so the diff is the register split and nothing more.
//
//   block tile  128 x 256 of C, BK = 64, 4 stages of 48 KiB in shared memory (192 KiB)
//   warps       3 warpgroups of 128 threads, specialised:
//               producer   (warpgroup 0): gives its registers away (dec 40); one thread issues
//                          the TMA copies of each stage (A: one 128 x 64 box; B: four 64 x 64
//                          boxes, 128 bytes wide as the swizzle requires) after waiting for the
//                          stage to be free ("empty" mbarrier)
//               consumers  (warpgroups 1, 2): take them (inc 232); each owns 64 rows x 256
//                          columns of C (128 fp32 accumulators per thread); per stage: wait for
//                          "full", four wgmma m64n256k16, commit, and release the *previous* stage
//                          once its wgmmas are known to be done (wait_group 1)
//   ring        stage s = kt % 4, use u = kt / 4; full[s] completes once per use when the
//               48 KiB have landed (parity u & 1); empty[s] when all 256 consumer threads have
//               arrived (the producer waits for parity (u - 1) & 1 before refilling)
//   layouts     A tile K-major and B tile MN-major, both in the 128-byte swizzle that TMA writes
//               and wgmma reads (hopper.cuh explains the descriptors)
//   ragged      TMA zero-fills the parts of a box outside the matrix, so M, N and K tails cost
//               nothing; C is stored from the accumulators with predicates. TMA needs 16-byte
//               aligned row strides (K % 8 == 0 and N % 8 == 0) and aligned pointers; other
//               shapes run v5's mma.sync code (ch03_mma_gemm.cuh).
//   block order grouped by 8 block rows, as in v5 and v6, for L2 reuse.
//
// Prediction: small on its own, 0-3% over v6 at 4096^3. ptxas -v gives v6 154 registers of its 168
// and no spills (nvcc 13.0, sm_90a), so v6 was not starved; t07 reports 168 (ptxas pins a kernel
// that uses setmaxnreg to its launch-bound count, which is what makes 40 + 232 + 232 add up). The
// consumers now have 232 and the scheduler more room, but the wgmma rate, not registers, bounds a
// stage. The value is what it enables: t08 keeps a tile loop's state live beside the 128
// accumulators in a persistent kernel. If t07 measures the same as v6, that is the expected
// outcome.
// Measured (H100, 2026-11-26, one run): +0.1% at 4096^3 (701.1 -> 701.6), -0.3% at 8192^3
// (755.0 -> 752.5): the same as v6 within run-to-run noise, as predicted.
// Not done (the next steps): a persistent tile scheduler (t08), clusters with TMA multicast (t09),
// a bf16 C written through shared memory and TMA.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "ch03_gemm.h"
#include "ch03_mma_gemm.cuh"
#include "gpu.h"
#include "hopper.cuh"
#include "tensor_map.h"
#include "registry.h"

namespace fa::ch03 {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;
constexpr int kStages = 4;
constexpr int kConsumers = 2;                     // warpgroups that multiply
constexpr int kThreads = 128 * (1 + kConsumers);  // + the producer warpgroup
// Registers per thread after the split. Launched at 168 (65536 / 384): 40 + 2 x 232 = 3 x 168.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (1 + kConsumers) * 168,
              "setmaxnreg: the consumers cannot take more than the block was launched with");
constexpr int kRowsPerConsumer = kBM / kConsumers;    // 64: one wgmma M
constexpr int kSwizzleCols = 64;                      // 128 bytes of 16-bit elements
constexpr int kABytes = kBM * kBK * 2;                // 16 KiB
constexpr int kBStripBytes = kBK * kSwizzleCols * 2;  // 8 KiB: 64 k-rows of one 64-column strip
constexpr int kBBytes = kBK * kBN * 2;                // 32 KiB = 4 strips
constexpr int kStageBytes = kABytes + kBBytes;        // what TMA delivers per stage
constexpr int kAtomBytes = 1024;                      // 8 rows x 128 bytes: one swizzle atom
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + kAtomBytes;  // + barriers,
                                                                                  // + alignment
// Shapes TMA cannot load run this registered kernel. Called through the registry, not by
// instantiating its template here: a kernel template instantiated in two translation units shares
// its host-side "attribute already set" flag but not its device code (each file is its own CUDA
// module), so the second copy would launch without its shared-memory opt-in.
constexpr const char* kFallback = "03/v5_tensor_core";
static_assert(kStageBytes % kAtomBytes == 0 && kABytes % kAtomBytes == 0, "atoms stay aligned");

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_t07_kernel(const __grid_constant__ CUtensorMap tmap_a,
                    const __grid_constant__ CUtensorMap tmap_b, float* __restrict__ C, int64_t M,
                    int64_t N, int64_t K, bool pair_ok) {
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes and wgmma assumes atoms start at multiples of
  // 1024: align the stage buffers by hand (dynamic shared memory only promises 16 bytes).
  const uint32_t raw = mma::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((kAtomBytes - raw % kAtomBytes) % kAtomBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);  // TMA -> MMA
  uint64_t* empty = full + kStages;                                            // MMA -> TMA
  auto a_tile = [&](int s) { return smem + s * kStageBytes; };
  auto b_tile = [&](int s) { return smem + s * kStageBytes + kABytes; };

  // Grouped block order, as in v5.
  const int64_t tiles_m = ceil_div(M, kBM), tiles_n = ceil_div(N, kBN);
  const int64_t bid = blockIdx.x;
  const int64_t group_size = int64_t(mma_gemm::kGroupM) * tiles_n;
  const int64_t first_m = (bid / group_size) * mma_gemm::kGroupM;
  const int64_t group_rows =
      (tiles_m - first_m < mma_gemm::kGroupM) ? tiles_m - first_m : mma_gemm::kGroupM;
  const int tile_m = int(first_m + (bid % group_size) % group_rows);
  const int tile_n = int((bid % group_size) / group_rows);
  const int row0 = tile_m * kBM, col0 = tile_n * kBN;

  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;
  const int k_tiles = int(ceil_div(K, kBK));

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&full[s], 1);                  // the producer's expect_tx arrival
      hopper::mbar_init(&empty[s], 128 * kConsumers);  // every consumer thread, once per use
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ---- producer: gives its registers back to the block's pool, then one thread keeps kStages
    // copies in flight. All four warps execute the dec (it is .sync.aligned per warp).
    hopper::setmaxnreg_dec<kProducerRegs>();
    if (t == 0) {
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % kStages, use = kt / kStages;
        if (use > 0) hopper::mbar_wait(&empty[s], (use - 1) & 1);  // consumers freed it
        hopper::mbar_arrive_expect_tx(&full[s], kStageBytes);
        hopper::tma_load_2d(a_tile(s), &tmap_a, &full[s], kt * kBK, row0);
        for (int j = 0; j < kBN / kSwizzleCols; ++j)
          hopper::tma_load_2d(b_tile(s) + j * kBStripBytes, &tmap_b, &full[s],
                              col0 + j * kSwizzleCols, kt * kBK);
      }
    }
    return;  // the producer's other threads have nothing to do
  }

  // ---- consumers: take the producer's registers (waits until the dec has released them) ----
  hopper::setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % kStages;
    hopper::mbar_wait(&full[s], (kt / kStages) & 1);
    hopper::fence_registers(acc);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      // A: this consumer's 64 rows (64 x 128 bytes further), 16 k = 32 bytes further per step.
      const uint64_t da = hopper::smem_desc_sw128(
          a_tile(s) + consumer * kRowsPerConsumer * 128 + kk * 32, 16, kAtomBytes);
      // B: 16 k-rows = two 8-row groups = 2048 bytes further per step; strips 8 KiB apart.
      const uint64_t db =
          hopper::smem_desc_sw128(b_tile(s) + kk * 2 * kAtomBytes, kBStripBytes, kAtomBytes);
      if constexpr (std::is_same_v<T, __nv_bfloat16>)
        hopper::wgmma_m64n256k16_bf16(acc, da, db, 1);
      else
        hopper::wgmma_m64n256k16_f16(acc, da, db, 1);
    }
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // the batch of stage kt-1 is done reading its shared memory
    hopper::fence_registers(acc);
    if (kt > 0) hopper::mbar_arrive(&empty[(kt - 1) % kStages]);
  }
  hopper::wgmma_wait<0>();
  hopper::fence_registers(acc);

  // Epilogue: thread t holds rows 16w + g and 16w + g + 8 of this consumer's 64, columns
  // 8j + 2q and 8j + 2q + 1 for j = 0..31 (hopper.cuh, the accumulator layout).
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  const int64_t r = int64_t(row0) + consumer * kRowsPerConsumer + 16 * w + g;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int64_t c = int64_t(col0) + 8 * j + 2 * q;
    mma_gemm::store_pair(C, r, c, M, N, acc[4 * j], acc[4 * j + 1], pair_ok);
    mma_gemm::store_pair(C, r + 8, c, M, N, acc[4 * j + 2], acc[4 * j + 3], pair_ok);
  }
}

// ---- host side -------------------------------------------------------------------------------------

// A row-major [rows, cols] 16-bit matrix, read in boxes of box_rows x 64 columns (128 bytes, the
// widest box the 128-byte swizzle allows), swizzled in shared memory, zeros outside the matrix.
CUtensorMap make_tmap(const void* base, int64_t rows, int64_t cols, int box_rows, DType dtype) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};  // bytes between rows
  const cuuint32_t box[2] = {cuuint32_t(kSwizzleCols), cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult rc = tensor_map_encode_fn()(
      &map,
      dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FA_REQUIRE(rc == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult " +
                                     std::to_string(int(rc)) + " (rows " + std::to_string(rows) +
                                     ", cols " + std::to_string(cols) + ")");
  return map;
}

template <class T>
void set_smem_limit() {
  static const bool done = [] {
    FA_CUDA_CHECK(cudaFuncSetAttribute(gemm_t07_kernel<T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)done;
}

template <class T>
void launch(const void* A, const void* B, float* C, GemmShape s, DType dtype, cudaStream_t stream) {
  // TMA's rules: 16-byte aligned base and row strides, sizes below 2^31 (coordinates are int32).
  const bool tma_ok = s.K % 8 == 0 && s.N % 8 == 0 && mma_gemm::aligned16(A) &&
                      mma_gemm::aligned16(B) && s.M < (int64_t(1) << 31) &&
                      s.N < (int64_t(1) << 31) && s.K < (int64_t(1) << 31);
  if (!tma_ok) {  // ragged strides: v5's mma.sync code, which assembles odd chunks by hand
    const GemmKernel* v5 = find_entry<GemmKernel>(kFallback);
    FA_REQUIRE(v5 != nullptr, std::string(kFallback) + " is not linked in");
    v5->run(A, B, C, s, dtype, stream);
    return;
  }
  if (s.M == 0 || s.N == 0) return;
  set_smem_limit<T>();
  const CUtensorMap tmap_a = make_tmap(A, s.M, s.K, kBM, dtype);
  const CUtensorMap tmap_b = make_tmap(B, s.K, s.N, kBK, dtype);
  const int64_t blocks = ceil_div(s.M, kBM) * ceil_div(s.N, kBN);
  const bool pair_ok = reinterpret_cast<uintptr_t>(C) % 8 == 0;  // N is even here
  gemm_t07_kernel<T><<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(tmap_a, tmap_b, C, s.M,
                                                                         s.N, s.K, pair_ok);
  FA_CHECK_LAUNCH();
}

void gemm_t07(const void* A, const void* B, float* C, GemmShape s, DType dtype,
              cudaStream_t stream) {
  FA_UNSUPPORTED_IF(dtype == DType::F32, "03/t07_warp_specialized takes bf16 and fp16 only");
  const GpuInfo& gpu = gpu_info();
  FA_UNSUPPORTED_IF(
      gpu.sm != 90,
      "03/t07_warp_specialized uses sm_90a instructions (wgmma, TMA): it runs on compute "
      "capability 9.0 (H100, H200) only");
  if (dtype == DType::BF16)
    launch<__nv_bfloat16>(A, B, C, s, dtype, stream);
  else
    launch<__half>(A, B, C, s, dtype, stream);
}

}  // namespace

FA_REGISTER(GemmKernel, {"03/t07_warp_specialized",
                         gemm_t07,
                         "v6 + setmaxnreg: TMA producer warpgroup (40 registers), 2 wgmma consumer "
                         "warpgroups (232), mbarrier ring, 128x256x64, 4 stages",
                         {DType::BF16, DType::F16},
                         90});

}  // namespace fa::ch03
