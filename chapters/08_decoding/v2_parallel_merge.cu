// 08/v2_parallel_merge: 08/v1_split_kv with a merge kernel that spreads each row's splits over a
// block. fp32/fp16/bf16, D 64 and 128, grouped-query attention included, like v1.
//
// What changed, and why. The split kernel is v1's, unchanged (ch08_split_kv.cuh). The merge was
// the whole gap to FlashAttention-2 on the one-sequence shape: at B 1, H 16, seq_k 131072 (bf16,
// D 128, 24 splits of 16 rows) Nsight Compute on an H100 (2026-11-23) timed v1's split kernel at
// 364.0 us and FA2's at 362.8 us, but v1's merge at 22.6 us against FA2's combine at 10.8 us. v1's
// merge gives a row one warp, which folds the 24 splits one after another, each step waiting for
// its loads: 24 dependent trips to memory, 4 blocks on a 132-SM GPU. The merge moves only 200 KB,
// so its time is latency, and the cure is to ask for everything at once.
//
// The map (ch08_parallel_merge.cuh has the details): one block of 256 threads per output row;
// thread t owns one float4 column chunk and every G-th split (G = 8 at D 128); it issues the loads
// of up to 8 of its splits' (m, l) pairs and o chunks together, then folds them with chapter 02's
// pair merge; the G groups' partial states are merged through shared memory by one thread per
// column with the same operator (its associativity allows any grouping). At 24 splits: 3 splits
// per thread, one round trip, 16 blocks instead of 4.
//
// Speed (NVIDIA H100 80GB HBM3, 2026-11-23, fourth session, call 3 at commit f7dd6aa;
// bench/compare_decode.py, bf16 D 128, seq_q 1, read-only L2 flush, copy ceiling 2852 GB/s in the
// same run, PyTorch SDPA on the same shapes: notes/measured/h100-2026-11-23d/call3_decode.log):
// B 1, H 16, seq_k 131072: 2902 GB/s (101.7% of copy; FlashAttention-2 2896, cuDNN 2983; v1
// 2830). The merge took 5.95 us there (grid 16 x 256; Nsight Compute in the same call, table at
// the end of call3_sdpa.log) against v1's 22.6 us and FA2's 10.8 us (call 1 of the session,
// call1_ncu_ours_decode_b1.txt, call1_ncu_fa2_decode_b1.txt); the split kernel is v1's, 364.16 us
// at 2.95 TB/s of DRAM. So v2 is level with FA2 on this shape: ahead by 0.2%, which is within
// run-to-run spread, not a win. B 8, H 32, seq_k 32768: 3048 (106.9%; FA2 2787,
// cuDNN 3106; v1 3009). The same with H_kv 8 (GQA): 2505 (87.8%; FA2 2987; v1 2604): the split
// kernel is the limit there (v1's, instruction-bound), which is 08/v3's job. That v2 ran 16 us
// behind v1 there with the same split kernel (the parallel merge took 7.07 us at that shape, v1's
// 8.51 us in call 1) is run-to-run spread, and it is larger than v2's 0.6 us lead over FA2 above.
// Above 100%: the ceiling is a read-and-write copy, decoding only reads.
// Tests on that GPU (call 3): the default label, 333 of 333, with v2's DecodingKernels tests
// (ragged caches and GQA groups, every dtype, 131072 keys, many rows per K/V head, B * H past
// 65535; notes/measured/h100-2026-11-23d/call3_ctest.log); compute-sanitizer memcheck,
// racecheck, synccheck and initcheck clean; the long tests (Q, and K/V, past 2^31 elements)
// passed (both in the footer of call3_sdpa.log).
#include <cuda_runtime.h>

#include "ch08_parallel_merge.cuh"  // the merge
#include "ch08_split_kv.cuh"        // Params, v1's split kernel and its launch, the dispatch
#include "registry.h"

namespace {

struct V2 {
  template <class T, int D, int kRows>
  static void run(const AttentionFwdArgs& a, cudaStream_t stream) {
    launch_parallel_merge<T, D>(launch_split_kv<T, D, kRows>(a, stream), stream);
  }
};

void parallel_merge_forward(const AttentionFwdArgs& a, cudaStream_t stream) {
  dispatch<V2>(a, stream, "08/v2_parallel_merge");
}

}  // namespace

FA_REGISTER(AttentionFwdKernel,
            {"08/v2_parallel_merge",
             parallel_merge_forward,
             "08/v1's split kernel; the merge spreads each row's splits over a 256-thread block "
             "and issues their loads together (v1: one warp per row, one split after another)",
             {DType::F32, DType::F16, DType::BF16},
             {64, 128},
             /*min_sm=*/80,
             /*gqa=*/true,
             /*decoding=*/true});
