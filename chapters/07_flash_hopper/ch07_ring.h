// ch07_ring.h: the K/V ring of 07/v1_tma_wgmma on paper. K and V tile j go into stage j % kStages
// of a ring of shared-memory buffers, each with an mbarrier that completes one phase per fill (TMA
// counts the bytes in). The consumer waits with mbarrier.try_wait.parity, which names the parity
// of the phase it waits for; the producer refills a stage once the consumer is done with it. The
// CPU can play the ring tile by tile, with each fill either still in flight or landed, and say
// what every wait does: return on the right data, return too early (a race: S from a tile still in
// flight) or never return (a hang).
// A CPU exercise (notes/coursework.md): the two functions of ch07_ring.cpp.
#pragma once
#include <cstdint>
#include <string>

namespace fa::ch07 {

// Where tile j lives in a ring of `stages` buffers, and the parity the consumer's wait names.
struct RingSlot {
  int stage = 0;
  int parity = 0;
};
RingSlot kv_ring_slot(int64_t tile, int stages);

// mbarrier.try_wait.parity(parity) on a barrier that has completed `completed_phases` phases:
// does it return? (A fresh barrier is in its phase 0.)
bool mbar_wait_returns(int64_t completed_phases, int parity);

// One consumer wait of the ring, played with kv_ring_slot and mbar_wait_returns: tile j's fill
// either landed before the wait or is still in flight (it lands while the consumer waits); the
// fill after it is requested only once tile j is done.
enum class WaitOutcome { Correct, Race, Hang };
WaitOutcome play_ring_wait(int64_t tile, int stages, bool landed);
std::string outcome_name(WaitOutcome w);

}  // namespace fa::ch07
