// ch07_launch.cuh: the host side the chapter 07 forward rungs share. Every rung launches the same
// way (one block per 64- or 128-row Q tile of one (batch, head), TMA maps of Q, K and V, Params)
// and refuses the same inputs, so a rung file holds its kernel, its shared-memory layout and a
// launch of a few lines:
//
// constexpr const char* kName = "07/v1_tma_wgmma";  // also the registered name
//
// template <class T, int D>
// struct Launch {  // one (dtype, head dim): which kernel, its block and its shared memory
//   static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
//     launch_fwd<flash_fwd_v1_kernel<T, D>, D, kBr, kThreads, V1Smem<D>::kBytes>(kName, a, stream);
//   }
// };
//
// void attention_fwd_v1(const AttentionFwdArgs& a, cudaStream_t stream) {
//   run_fwd_rung<Launch>(kName, a, stream);
// }
//
// Why a class template and not a function: run_fwd_rung picks T (bf16 or fp16) and D (64, 128,
// 256) at run time and must instantiate the rung's launch for each pair; a function template
// cannot be passed as a template argument, a class template can. The kernel itself is a template
// argument of launch_fwd (not a runtime pointer) so that set_smem_limit_once keeps one flag per
// kernel (hopper_attention.cuh).
// It also brings the rungs the timeline's phase marks (ch07_timeline.cuh: the macros FA_TL_*,
// nothing unless the timeline build defines FA_CH07_TIMELINE=1), which are chapter 07's own
// measurement and so stay out of the shared hopper_attention.cuh.
// Included by the sm_90a forward rungs only.
#pragma once
#include <climits>
#include <cstdint>
#include <string>

#include "ch07_timeline.cuh"
#include "gpu.h"
#include "hopper_attention.cuh"

namespace fa::ch07 {

// One launch of a forward kernel for head dim D: grid = q tiles x batch*heads on blockIdx.x (no
// 65535 limit), Q in boxes of kBr rows, K and V in boxes of kBc rows (Tiles<D> unless a rung
// widens them).
template <auto kKernel, int D, int kBr, int kThreads, int kSmemBytes, int kBc = Tiles<D>::kBc>
void launch_fwd(const char* name, const AttentionFwdArgs& a, cudaStream_t stream) {
  const AttentionShape& s = a.shape;
  const int64_t num_q_tiles = (s.seq_q + kBr - 1) / kBr;
  const int64_t blocks = num_q_tiles * s.bh();
  FA_UNSUPPORTED_IF(blocks > INT_MAX, std::string(name) + ": more than 2^31-1 thread blocks");
  set_smem_limit_once<kKernel, kSmemBytes>();
#if FA_CH07_TIMELINE
  timeline::upload();  // where this launch records its phases (ch07_timeline.cuh)
#endif
  const int d = int(s.head_dim);  // <= D: the boxes' columns past it arrive as zeros
  const CUtensorMap tm_q = make_tmap(a.q, s.bh(), s.seq_q, d, kBr, a.dtype);
  const CUtensorMap tm_k = make_tmap(a.k, s.bh(), s.seq_k, d, kBc, a.dtype);
  const CUtensorMap tm_v = make_tmap(a.v, s.bh(), s.seq_k, d, kBc, a.dtype);
  kKernel<<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(tm_q, tm_k, tm_v,
                                                              make_params(a, int(num_q_tiles)));
  FA_CHECK_LAUNCH();
}

// Launch<T, D>::run for the head dims every rung instantiates; a head dim between them that is a
// multiple of 8 runs the next (head_dim_instance, hopper_attention.cuh). kWith192, kWith96: the
// rung also has an instance at 192 (t52), where 136-192 run, and at 96, where 72-96 run.
template <template <class, int> class Launch, class T, bool kWith192 = false, bool kWith96 = false>
void dispatch_head_dim(const char* name, const AttentionFwdArgs& a, cudaStream_t stream) {
  launch_head_dim_instance<kWith192, kWith96>(
      name, a.shape.head_dim, [&](auto d) { Launch<T, decltype(d)::value>::run(a, stream); });
}

// The registered entry of a forward rung: refuse what no rung runs, write nothing for empty
// shapes, hand shapes TMA cannot load to the fallback (hopper_attention.cuh), else launch the rung.
template <template <class, int> class Launch, bool kWith192 = false, bool kWith96 = false>
void run_fwd_rung(const char* name, const AttentionFwdArgs& a, cudaStream_t stream) {
  FA_REQUIRE(a.shape.seq_q >= 0 && a.shape.seq_k >= 0 && a.shape.bh() >= 0, "negative size");
  FA_UNSUPPORTED_IF(a.dtype != DType::BF16 && a.dtype != DType::F16,
                    std::string(name) + " takes bf16 and fp16 only");
  FA_UNSUPPORTED_IF(gpu_info().sm != 90,
                    std::string(name) +
                        " uses sm_90a instructions (wgmma, TMA): it runs on compute capability "
                        "9.0 (H100, H200) only");
  if (a.shape.seq_q == 0 || a.shape.bh() == 0) return;  // nothing to write
  if (!tma_can_load(a)) return run_fallback(a, stream);
  if (a.dtype == DType::BF16)
    dispatch_head_dim<Launch, __nv_bfloat16, kWith192, kWith96>(name, a, stream);
  else
    dispatch_head_dim<Launch, __half, kWith192, kWith96>(name, a, stream);
}

}  // namespace fa::ch07
