// ch07_ring.cpp: 07/v1_tma_wgmma's K/V ring, tile by tile on the CPU (see ch07_ring.h).
// A CPU exercise (notes/coursework.md): the slot of a tile and the parity rule of an mbarrier wait.
// EXERCISE-KERNELS: cpu/07_kv_ring
#include "ch07_ring.h"

#include "check.h"
#include "exercise.h"

namespace fa::ch07 {

RingSlot kv_ring_slot(int64_t tile, int stages) {
  FA_REQUIRE(tile >= 0 && stages > 0, "kv_ring_slot: a tile >= 0 and at least one stage");
  RingSlot s;
  // EXERCISE(ring-slot): the stage tile j is loaded into, and the parity of the phase that its fill completes: how many fills of that stage came before this one?
  s.stage = int(tile % stages);
  s.parity = int((tile / stages) & 1);
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<RingSlot>("cpu/07_kv_ring", "ring-slot");
  // EXERCISE-END
  return s;
}

bool mbar_wait_returns(int64_t completed_phases, int parity) {
  // EXERCISE(wait-parity): the barrier is in phase number completed_phases; a wait for a parity returns once the most recent phase of that parity has completed, so it blocks exactly while the CURRENT phase has that parity
  return (completed_phases & 1) != parity;
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<bool>("cpu/07_kv_ring", "wait-parity");
  // EXERCISE-END
}

WaitOutcome play_ring_wait(int64_t tile, int stages, bool landed) {
  const RingSlot slot = kv_ring_slot(tile, stages);
  FA_REQUIRE(slot.stage >= 0 && slot.stage < stages, "kv_ring_slot: a stage outside the ring");
  // Stage `slot.stage` was filled for tiles stage, stage + stages, ..., tile - stages (all landed:
  // the consumer used them), and now for `tile`, in flight or landed.
  const int64_t before = tile / stages;
  if (mbar_wait_returns(landed ? before + 1 : before, slot.parity))
    return landed ? WaitOutcome::Correct : WaitOutcome::Race;
  if (!landed && mbar_wait_returns(before + 1, slot.parity)) return WaitOutcome::Correct;
  return WaitOutcome::Hang;  // waits for a fill that is requested only after this tile
}

std::string outcome_name(WaitOutcome w) {
  return w == WaitOutcome::Correct ? "returns on the tile's data"
         : w == WaitOutcome::Race  ? "returns before the tile landed (a race)"
                                   : "never returns (a hang)";
}

}  // namespace fa::ch07
