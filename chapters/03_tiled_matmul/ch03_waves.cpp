#include "ch03_waves.h"

#include <iomanip>
#include <sstream>
#include <vector>

#include "check.h"
#include "cli.h"
#include "shapes.h"

namespace fa::ch03 {

WaveInfo wave_info(int64_t M, int64_t N, int tile_m, int tile_n, int sms, int blocks_per_sm) {
  FA_REQUIRE(M > 0 && N > 0 && tile_m > 0 && tile_n > 0 && sms > 0 && blocks_per_sm > 0,
             "wave_info needs positive sizes");
  WaveInfo w;
  w.M = M;
  w.N = N;
  w.tile_m = tile_m;
  w.tile_n = tile_n;
  w.sms = sms;
  w.blocks_per_sm = blocks_per_sm;
  w.tiles_m = ceil_div(M, tile_m);
  w.tiles_n = ceil_div(N, tile_n);
  w.tiles = w.tiles_m * w.tiles_n;
  w.slots = int64_t(sms) * blocks_per_sm;
  w.waves = double(w.tiles) / double(w.slots);
  w.waves_launched = ceil_div(w.tiles, w.slots);
  w.last_wave_tiles = w.tiles - (w.waves_launched - 1) * w.slots;
  w.last_wave_occupancy = double(w.last_wave_tiles) / double(w.slots);
  w.useful_fraction =
      double(M) * double(N) / (double(w.waves_launched) * double(w.slots) * tile_m * tile_n);
  return w;
}

std::string WaveInfo::str() const {
  std::ostringstream os;
  os << M << "x" << N << " with " << tile_m << "x" << tile_n << " tiles: " << tiles_m << " x "
     << tiles_n << " = " << tiles << " tiles on " << sms << " SMs x " << blocks_per_sm
     << " blocks = " << slots << " slots -> " << std::fixed << std::setprecision(2) << waves
     << " waves (" << waves_launched << " launched), last wave " << last_wave_tiles << "/" << slots
     << " = " << std::setprecision(1) << 100.0 * last_wave_occupancy << "% full, useful work "
     << 100.0 * useful_fraction << "%";
  return os.str();
}

SweepRange parse_sweep(const std::string& text) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : text) {
    if (c == ':') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  if (parts.size() != 2 && parts.size() != 3)
    throw Error("--sweep: expected start:stop[:step], got '" + text + "'");
  SweepRange r;
  r.start = parse_int("--sweep start", parts[0]);
  r.stop = parse_int("--sweep stop", parts[1]);
  if (parts.size() == 3) r.step = parse_int("--sweep step", parts[2]);
  if (r.start < 1 || r.stop < r.start || r.step < 1)
    throw Error("--sweep: need 1 <= start <= stop and step >= 1, got '" + text + "'");
  return r;
}

}  // namespace fa::ch03
