// ch03_waves.h: the arithmetic of tile alignment and wave quantization (the "matmul mystery").
//
// A GEMM kernel splits C into tiles; each tile is one thread block. The GPU runs at most
// sms * blocks_per_sm blocks at once: one "wave". When the tile count is a little above a multiple
// of that, the last wave runs almost empty and the whole GEMM takes one wave longer than its work
// needs. Pure host arithmetic, so the CPU tests check it.
#pragma once
#include <cstdint>
#include <string>

namespace fa::ch03 {

struct WaveInfo {
  int64_t M = 0, N = 0;
  int tile_m = 0, tile_n = 0;
  int sms = 0, blocks_per_sm = 0;
  int64_t tiles_m = 0, tiles_n = 0, tiles = 0;  // ceil(M / tile_m) * ceil(N / tile_n)
  int64_t slots = 0;                            // blocks that run at once: sms * blocks_per_sm
  double waves = 0;                             // tiles / slots (fractional)
  int64_t waves_launched = 0;      // ceil(waves): how many rounds the GPU actually runs
  int64_t last_wave_tiles = 0;     // blocks in the final round
  double last_wave_occupancy = 0;  // last_wave_tiles / slots
  double useful_fraction = 0;      // M*N / (waves_launched * slots * tile_m * tile_n): work done
                                   // over the work the launched rounds could have done
  std::string str() const;         // one line
};

WaveInfo wave_info(int64_t M, int64_t N, int tile_m, int tile_n, int sms, int blocks_per_sm);

// "start:stop:step" (stop inclusive, step >= 1; "start:stop" means step 1). Throws fa::Error.
struct SweepRange {
  int64_t start = 0, stop = 0, step = 1;
};
SweepRange parse_sweep(const std::string& text);

}  // namespace fa::ch03
