// ch07_timeline.h: the host half of chapter 07's measured timeline (the device half, and the
// macros the rungs use, are in ch07_timeline.cuh). Plain C++: the record layout the kernels write,
// the phase names, and the conversion of one launch's records into CSV rows in nanoseconds.
//
// The timeline build (CMake option FA_CH07_TIMELINE) compiles the forward rungs v1-v4 with
// FA_CH07_TIMELINE=1 into the program ch07_timeline (timeline/ch07_timeline.cpp). For the first
// few thread blocks of a launch, thread 0 of every warpgroup (its leader) reads the SM's cycle
// counter at the start and the end of each phase of its loop and writes one Event per phase:
//
//   memory   a Slot per (block, warpgroup): a Header, then up to kCapacity Events
//   Header   %globaltimer (ns, the same clock on every SM) and %clock64 (this SM's cycles) read
//            together when the warpgroup starts, and again at its latest event; %smid
//   Event    phase, tile, and the low 32 bits of %clock64 at the phase's start and end
//
// Cycles are what the leader can read cheaply and precisely within a block; the two header pairs
// convert them to the global clock: t_ns = g0 + (cycles - c0) / (cycles per ns), the rate taken
// over the block's whole life (a few tens of microseconds or more), so that %globaltimer's coarse
// steps (up to a microsecond on some GPUs) cost a few percent of the rate at most.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fa::ch07::timeline {

// What a warpgroup's leader is doing between two reads of the clock. The names are the CSV's.
enum Phase : uint32_t {
  kWaitQ,         // the Q tile's mbarrier (once, before the loop)
  kWaitKV,        // the mbarrier(s) of the K and V tiles this step needs
  kWaitTurn,      // v3, v4: bar.sync on this consumer's named barrier (the ping-pong token)
  kSync,          // v1: the __syncthreads that frees the stage for the next TMA copy
  kQK,            // S = Q K^T: the first wgmma issued .. the wait that makes S readable returned
  kPV,            // O += P V: its first wgmma issued .. the wait for it returned
  kQKPV,          // v3: S_j and P_{j-1} V_{j-1} in one commit group, issued .. waited for
  kSoftmax,       // mask, online softmax, rescale of O, P packed to 16 bits
  kProducerWait,  // v2-v4 producer: the "empty" mbarrier of the slot it is about to refill
  kEpilogue,      // O / l and L stored
  kPhases
};

inline const char* phase_name(uint32_t p) {
  static const char* const names[kPhases] = {
      "wait_q", "wait_kv", "wait_turn", "sync",          "qk",
      "pv",     "qk_pv",   "softmax",   "producer_wait", "epilogue",
  };
  return p < kPhases ? names[p] : "unknown";
}

struct alignas(16) Event {  // 16 bytes: one vector store
  uint32_t start, end;      // low 32 bits of %clock64, unwrapped against the header's anchor
  uint32_t phase, tile;
};
struct Header {     // 48 bytes: the first three Event places of a slot
  uint64_t g0, c0;  // %globaltimer (ns) and %clock64 at the warpgroup's start
  uint64_t g1, c1;  // the same pair at its latest event
  uint32_t sm, count;
  uint32_t pad[2];
};
static_assert(sizeof(Event) == 16 && sizeof(Header) == 48, "the layout the kernels write");

constexpr int kMaxWarpgroups = 4;  // slots per block (v1 uses 1, v2-v4 use 3)
constexpr int kCapacity = 1024;    // events per warpgroup: v3 at N 8192 writes about 5 per tile
constexpr int kHeaderEvents = 3;
constexpr int kSlotEvents = kHeaderEvents + kCapacity;

// The recording buffer of one launch, as the kernels see it (blocks = 0: record nothing).
struct Buffer {
  Event* slots = nullptr;  // [blocks][kMaxWarpgroups][kSlotEvents], zeroed before the launch
  int blocks = 0;
};

// The buffer the next launch records into: set by the program, uploaded by every rung's launch
// into its own module (ch07_launch.cuh). One instance in the program (an inline function's static).
inline Buffer& host_buffer() {
  static Buffer b;
  return b;
}

// The header of block b's warpgroup w in a launch's raw slots (a copy: the bytes are Events).
inline Header slot_header(const std::vector<Event>& raw, int b, int w) {
  Header h;
  std::memcpy(&h, &raw[(size_t(b) * kMaxWarpgroups + w) * kSlotEvents], sizeof h);
  return h;
}

// One CSV row: times in ns from the kernel's first recorded event.
struct Row {
  int64_t block;
  int warpgroup;
  uint32_t phase, tile, sm;
  double t_start_ns, t_end_ns;
};

// The rows of one launch from its raw slots (the device buffer copied back). fallback_ghz: the
// cycles per ns used when no block lived long enough to measure the rate (< 10 us). rate_ghz
// returns the rate used: the median over the blocks that did.
inline std::vector<Row> to_rows(const std::vector<Event>& raw, int blocks, double fallback_ghz,
                                double* rate_ghz = nullptr) {
  auto header = [&](int b, int w) { return slot_header(raw, b, w); };
  // Per block: the anchor (g0, c0) of its earliest-starting warpgroup, and its rate.
  std::vector<double> rates;
  std::vector<uint64_t> ref_g(blocks, 0), ref_c(blocks, 0);
  std::vector<bool> seen(blocks, false);
  for (int b = 0; b < blocks; ++b) {
    uint64_t last_g = 0, last_c = 0;
    for (int w = 0; w < kMaxWarpgroups; ++w) {
      const Header h = header(b, w);
      if (h.g0 == 0) continue;  // this warpgroup does not exist in this rung
      if (!seen[b] || h.c0 < ref_c[b]) ref_g[b] = h.g0, ref_c[b] = h.c0;
      seen[b] = true;
      if (h.count > 0 && h.c1 > last_c) last_g = h.g1, last_c = h.c1;
    }
    if (seen[b] && last_g > ref_g[b] + 10000 && last_c > ref_c[b])
      rates.push_back(double(last_c - ref_c[b]) / double(last_g - ref_g[b]));
  }
  double rate = fallback_ghz;
  if (!rates.empty()) {
    std::sort(rates.begin(), rates.end());
    rate = rates[rates.size() / 2];
  }
  if (rate_ghz != nullptr) *rate_ghz = rate;

  // %globaltimer is ns since the epoch, ~1.8e18: a double holds that only to 256 ns. Times are
  // taken from the earliest anchor in integers first, so the doubles stay small and exact.
  uint64_t g_min = UINT64_MAX;
  for (int b = 0; b < blocks; ++b)
    if (seen[b]) g_min = std::min(g_min, ref_g[b]);
  std::vector<Row> rows;
  for (int b = 0; b < blocks; ++b) {
    if (!seen[b]) continue;
    const uint32_t c_lo = uint32_t(ref_c[b]);
    auto ns = [&](uint32_t cycles) {  // cycles come after the anchor: unwrap relative to it
      return double(ref_g[b] - g_min) + double(uint32_t(cycles - c_lo)) / rate;
    };
    for (int w = 0; w < kMaxWarpgroups; ++w) {
      const Header h = header(b, w);
      if (h.g0 == 0) continue;
      const Event* e = &raw[(size_t(b) * kMaxWarpgroups + w) * kSlotEvents + kHeaderEvents];
      const uint32_t n = std::min<uint32_t>(h.count, kCapacity);
      for (uint32_t i = 0; i < n; ++i)
        rows.push_back({b, w, e[i].phase, e[i].tile, h.sm, ns(e[i].start), ns(e[i].end)});
    }
  }
  double t0 = rows.empty() ? 0.0 : rows.front().t_start_ns;
  for (const Row& r : rows) t0 = std::min(t0, r.t_start_ns);
  for (Row& r : rows) r.t_start_ns -= t0, r.t_end_ns -= t0;
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.block != b.block           ? a.block < b.block
           : a.warpgroup != b.warpgroup ? a.warpgroup < b.warpgroup
                                        : a.t_start_ns < b.t_start_ns;
  });
  return rows;
}

// The rows worth drawing: those of blocks 0 .. blocks-1, and of every other block that ran on
// the same SM at the same time as one of them (at D 64, v1 fits three blocks on an SM, and
// the timeline should show all three), with times again from the first row kept.
inline std::vector<Row> keep_coresident(const std::vector<Row>& rows, int64_t blocks) {
  struct Span {
    double t0 = 1e300, t1 = -1e300;
    uint32_t sm = 0;
  };
  std::vector<Span> span;
  for (const Row& r : rows) {
    if (r.block >= int64_t(span.size())) span.resize(size_t(r.block) + 1);
    Span& s = span[size_t(r.block)];
    s.t0 = std::min(s.t0, r.t_start_ns);
    s.t1 = std::max(s.t1, r.t_end_ns);
    s.sm = r.sm;
  }
  auto kept = [&](int64_t b) {
    if (b < blocks) return true;
    for (int64_t k = 0; k < blocks && k < int64_t(span.size()); ++k)
      if (span[size_t(k)].t1 >= span[size_t(k)].t0 && span[size_t(k)].sm == span[size_t(b)].sm &&
          span[size_t(k)].t0 < span[size_t(b)].t1 && span[size_t(b)].t0 < span[size_t(k)].t1)
        return true;
    return false;
  };
  std::vector<Row> out;
  for (const Row& r : rows)
    if (kept(r.block)) out.push_back(r);
  double t0 = out.empty() ? 0.0 : out.front().t_start_ns;
  for (const Row& r : out) t0 = std::min(t0, r.t_start_ns);
  for (Row& r : out) r.t_start_ns -= t0, r.t_end_ns -= t0;
  return out;
}

}  // namespace fa::ch07::timeline
