// ch07_timeline.cuh: the phase timestamps of chapter 07's measured timeline (notes/07, the
// timeline figure), in the rungs v1-v4. Three macros mark a phase in a kernel:
//
//   FA_TL_INIT(warpgroup);            once, at the top of the kernel: this thread's recorder
//   FA_TL_START(name);                a phase starts: name holds the clock
//   FA_TL_END(name, kPhase, tile);    it ends: the warpgroup's leader writes one Event
//
// In every normal build FA_CH07_TIMELINE is 0 and the three macros expand to nothing: the rungs
// compile to exactly the machine code they have without them (bench/sass_identical.py compares the
// cubins). The timeline build (CMake -DFA_CH07_TIMELINE=ON, program timeline/ch07_timeline.cpp)
// defines FA_CH07_TIMELINE=1; the record layout and the conversion to nanoseconds are in
// ch07_timeline.h.
//
// What a mark costs when on: every thread reads %clock64 (one instruction, no memory); the
// leader of a recorded block (the first Buffer::blocks blocks) then stores 16 bytes per phase and
// 16 more for the header's latest anchor. Where a mark sits is where the leader read the clock;
// ptxas may still move a few independent instructions (softmax arithmetic) across it, so a
// boundary is exact to a few tens of cycles, not to the instruction.
#pragma once
#ifndef FA_CH07_TIMELINE
#define FA_CH07_TIMELINE 0
#endif

#if FA_CH07_TIMELINE
#include <cuda_runtime.h>

#include <cstdint>

#include "ch07_timeline.h"
#include "check.h"

namespace fa::ch07::timeline {

// This module's copy of the buffer pointer (each .cu file is its own CUDA module, so each rung
// has its own), uploaded before every launch by upload().
static __device__ Buffer g_buffer;

inline void upload() {
  FA_CUDA_CHECK(cudaMemcpyToSymbol(g_buffer, &host_buffer(), sizeof(Buffer)));
}

__device__ __forceinline__ uint64_t clock_now() {
  uint64_t c;
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(c)::"memory");
  return c;
}
__device__ __forceinline__ uint64_t global_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t)::"memory");
  return t;
}

class Recorder {
 public:
  // Every thread constructs one; only thread 0 of the warpgroup in a recorded block writes.
  __device__ explicit Recorder(int warpgroup) {
    const Buffer b = g_buffer;
    if (threadIdx.x % 128 == 0 && int(blockIdx.x) < b.blocks) {
      slot_ = b.slots + (size_t(blockIdx.x) * kMaxWarpgroups + warpgroup) * kSlotEvents;
      Header* h = reinterpret_cast<Header*>(slot_);
      uint32_t sm;
      asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
      h->g0 = global_now();
      h->c0 = clock_now();
      h->sm = sm;
    }
  }
  __device__ void record(uint32_t phase, uint64_t start, int tile) {
    const uint64_t end = clock_now();
    if (slot_ != nullptr) {
      if (n_ < kCapacity)
        slot_[kHeaderEvents + n_] = Event{uint32_t(start), uint32_t(end), phase, uint32_t(tile)};
      Header* h = reinterpret_cast<Header*>(slot_);
      h->count = ++n_;  // past kCapacity it still counts: the program reports the overflow
      h->g1 = global_now();
      h->c1 = clock_now();
    }
  }

 private:
  Event* slot_ = nullptr;  // this warpgroup's slot, or null: not recorded
  uint32_t n_ = 0;
};

}  // namespace fa::ch07::timeline

#define FA_TL_INIT(warpgroup) fa::ch07::timeline::Recorder fa_tl_recorder(warpgroup)
#define FA_TL_START(name) [[maybe_unused]] const uint64_t name = fa::ch07::timeline::clock_now()
#define FA_TL_END(name, phase, tile) fa_tl_recorder.record(fa::ch07::timeline::phase, name, tile)
#else
#define FA_TL_INIT(warpgroup)
#define FA_TL_START(name)
#define FA_TL_END(name, phase, tile)
#endif
