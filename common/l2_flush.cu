// l2_flush.cu: the kernel behind timing.h's clean flush (flush_l2 with Flush::Clean).
//
// Reading a buffer twice the size of L2 pushes everything else out of the cache, the timed
// kernel's inputs included, and leaves the cache full of that buffer's lines, all clean: the timed
// kernel evicts them for free. Overwriting the same buffer (a memset, Flush::Memset) empties the
// cache just as well but leaves up to one L2 of DIRTY lines, and the timed kernel pays for writing
// them back to DRAM while it runs. Measured on an H100 80GB HBM3 (2026-11-23, chapter 06's D
// preprocess, 0.05 ms): 82-83% of the copy bandwidth after a memset, 94-95% after this flush,
// whatever the kernel's loads in flight: about 45 MB of write-back inside the timed window.
#include <cstdint>

#include "check.h"
#include "timing.h"

namespace fa {
namespace {

constexpr int kFlushThreads = 256;
constexpr int kFlushBlocks = 1024;
constexpr unsigned kNeverSeen = 0x9e3779b9u;  // the buffer holds zeros: its XOR is never this

// Reads every 16 bytes of the buffer. The XOR and the store that never happens keep the compiler
// from dropping the loads.
__global__ void __launch_bounds__(kFlushThreads)
    read_every_line(const uint4* __restrict__ p, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * kFlushThreads + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kFlushThreads) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == kNeverSeen) *sink = acc;
}

}  // namespace

void read_to_flush_l2(const void* buffer, size_t bytes, unsigned* sink, cudaStream_t stream) {
  read_every_line<<<kFlushBlocks, kFlushThreads, 0, stream>>>(static_cast<const uint4*>(buffer),
                                                              int64_t(bytes / sizeof(uint4)), sink);
  FA_CHECK_LAUNCH();
}

}  // namespace fa
