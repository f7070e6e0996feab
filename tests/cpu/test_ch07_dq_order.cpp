// The order of the dQ adds of 07/bwd_v3_deterministic (ch07_dq_order.h) against its definition:
// walk every key block of a head over the query tiles it visits (which tiles from the mask,
// element by element), sort the adders of each query tile by (iteration index, tie, warpgroup),
// and check that DqOrder::rank gives every adder its place, that the places at a tile are
// 0 .. count - 1 once each, and that an adder only ever comes after adds made at earlier
// iterations (or the same one, earlier in the tie order). Then the deadlock question, on a model
// of the GPU: blocks dispatched in blockIdx order (the kernel's: key blocks of a head from the
// last to the first, heads one after another) into a given number of resident slots, each
// doing its adds in program order when the tile's counter reaches its place. Causal and
// non-rotated orders finish with a single slot; the rotated order finishes once a head's blocks
// fit in the slots, and hangs when they do not (which is why the launcher rotates only then).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "ch07_dq_order.h"

namespace {

constexpr int64_t kBr = 64, kBc = 128;  // the kernel's tiles
using Walk = fa::ch07::DqWalk<kBr, kBc>;

// One head's shape and order; walk(n) is what the kernel's block n computes.
struct DqOrder {
  int64_t seq_q, seq_k;
  bool causal, rotate;
  int64_t n_qt, n_kt;
  DqOrder(int64_t q, int64_t k, bool c, bool r)
      : seq_q(q),
        seq_k(k),
        causal(c),
        rotate(r && !c),
        n_qt((q + kBr - 1) / kBr),
        n_kt((k + kBc - 1) / kBc) {}
  Walk walk(int64_t n) const { return Walk(seq_q, seq_k, causal, rotate, n); }
  int64_t iterations(int64_t n) const { return walk(n).iters; }
  int64_t first_tile(int64_t n) const { return walk(n).first; }
  int64_t tile(int64_t n, int64_t j) const { return walk(n).tile(j); }
  int64_t rank(int64_t n, int64_t j) const { return walk(n).rank(j); }
};

struct Add {
  int64_t j;    // the block's iteration index at this tile
  int64_t tie;  // the tie order: descending n
  int w;        // warpgroup: 0 adds before 1 (the D = 64 key split)
  int64_t n;
};

// The tiles block n visits from the mask alone: tile i when some query row of it sees some key
// of the block. (Full attention: every tile.)
std::vector<int64_t> visited_tiles(const DqOrder& o, int64_t n) {
  std::vector<int64_t> tiles;
  for (int64_t i = 0; i < o.n_qt; ++i) {
    bool any = false;
    for (int64_t r = i * kBr; r < (i + 1) * kBr && r < o.seq_q && !any; ++r)
      for (int64_t k = n * kBc; k < (n + 1) * kBc && k < o.seq_k && !any; ++k)
        any = !o.causal || k <= r + o.seq_k - o.seq_q;
    if (any) tiles.push_back(i);
  }
  return tiles;
}

std::string describe(const DqOrder& o) {
  return "seq_q " + std::to_string(o.seq_q) + " seq_k " + std::to_string(o.seq_k) +
         (o.causal   ? " causal"
          : o.rotate ? " full rotated"
                     : " full not rotated");
}

// The walk, the sort and the ranks of one shape; `split` adders per block (1 or 2).
void check_shape(const DqOrder& o, int split) {
  SCOPED_TRACE(describe(o) + " split " + std::to_string(split));
  std::vector<std::vector<Add>> at(size_t(o.n_qt));
  for (int64_t n = 0; n < o.n_kt; ++n) {
    // The walk: the visited tiles, each once; causal from the first on in order, full from
    // n mod n_qt (rotated) or 0, wrapping around.
    const std::vector<int64_t> want = visited_tiles(o, n);
    ASSERT_EQ(o.walk(n).n_qt, o.n_qt);
    ASSERT_EQ(o.walk(n).n_kt, o.n_kt);
    ASSERT_EQ(o.iterations(n), int64_t(want.size())) << "block " << n;
    if (!o.causal) {
      ASSERT_EQ(o.iterations(n), o.n_qt);
    }
    const int64_t start = o.causal ? (want.empty() ? 0 : want[0]) : o.rotate ? n % o.n_qt : 0;
    for (int64_t j = 0; j < o.iterations(n); ++j) {
      const int64_t i = o.tile(n, j);
      const int64_t expect = o.causal ? start + j : (start + j) % o.n_qt;
      ASSERT_EQ(i, expect) << "block " << n << " iteration " << j;
      ASSERT_TRUE(std::binary_search(want.begin(), want.end(), i));
      for (int w = 0; w < split; ++w) at[size_t(i)].push_back({j, -n, w, n});
    }
  }
  for (int64_t i = 0; i < o.n_qt; ++i) {
    std::vector<Add>& adds = at[size_t(i)];
    std::sort(adds.begin(), adds.end(), [](const Add& x, const Add& y) {
      return std::tie(x.j, x.tie, x.w) < std::tie(y.j, y.tie, y.w);
    });
    std::vector<int> seen(adds.size(), 0);
    for (size_t p = 0; p < adds.size(); ++p) {
      const Add& a = adds[p];
      const int64_t pos = split * o.rank(a.n, a.j) + a.w;
      ASSERT_EQ(pos, int64_t(p)) << "tile " << i << " block " << a.n << " warpgroup " << a.w;
      ASSERT_TRUE(pos >= 0 && pos < int64_t(adds.size()));
      ++seen[size_t(pos)];
      // Everything before it at this tile was added at an earlier iteration of its block, or at
      // the same one earlier in the tie order: never at a later iteration.
      for (size_t e = 0; e < p; ++e) {
        ASSERT_LE(adds[e].j, a.j);
        if (adds[e].j == a.j) {
          ASSERT_TRUE(std::tie(adds[e].tie, adds[e].w) < std::tie(a.tie, a.w));
        }
        // Causal and not rotated: only blocks with a larger n come first (blockIdx smaller:
        // the kernel launches the key blocks of a head from the last one), or the same block's
        // warpgroup 0.
        if (!o.rotate) {
          ASSERT_TRUE(adds[e].n > a.n || (adds[e].n == a.n && adds[e].w < a.w));
        }
      }
    }
    for (size_t p = 0; p < seen.size(); ++p) ASSERT_EQ(seen[p], 1) << "tile " << i;
  }
}

const int64_t kLengths[] = {1, 17, 63, 64, 65, 127, 128, 129, 191, 255, 256, 300, 640, 1000};

TEST(Ch07DqOrder, RanksMatchTheSortedWalk) {
  for (int64_t seq_q : kLengths)
    for (int64_t seq_k : kLengths)
      for (int mode = 0; mode < 3; ++mode)  // causal, full rotated, full not rotated
        for (int split : {1, 2}) {
          check_shape(DqOrder(seq_q, seq_k, mode == 0, mode == 1), split);
          if (HasFatalFailure()) return;
        }
  // Long heads, square and not; many more key blocks than query tiles (ties in the rotation).
  for (auto [seq_q, seq_k] : {std::pair<int64_t, int64_t>{4096, 4096},
                              {8192, 8192},
                              {3000, 5000},
                              {5000, 3000},
                              {64, 4096},
                              {200, 5000},
                              {4096, 64}})
    for (int mode = 0; mode < 3; ++mode)
      for (int split : {1, 2}) {
        check_shape(DqOrder(seq_q, seq_k, mode == 0, mode == 1), split);
        if (HasFatalFailure()) return;
      }
}

// Square causal: block n's first tile is 2n and the order is plain descending n (the block whose
// diagonal tile it is adds first). Square full rotated: block n starts at tile n and adds into
// it first.
TEST(Ch07DqOrder, SquareShapes) {
  for (int64_t len : {128, 1024, 4096}) {
    const DqOrder c(len, len, true, false);
    for (int64_t n = 0; n < c.n_kt; ++n) {
      EXPECT_EQ(c.first_tile(n), 2 * n);
      EXPECT_EQ(c.rank(n, 0), 0);
      for (int64_t j = 0; j < c.iterations(n); ++j)
        EXPECT_EQ(c.rank(n, j), (c.tile(n, j) + 2) / 2 - 1 - n);
    }
    const DqOrder f(len, len, false, true);
    for (int64_t n = 0; n < f.n_kt; ++n) EXPECT_EQ(f.rank(n, 0), 0);
  }
}

// The model of the GPU: `heads` heads of o.n_kt blocks; blockIdx b = head * n_kt + (n_kt - 1 -
// n), dispatched in increasing b into `slots` resident slots; a resident block does its adds in
// program order (iteration j, warpgroup w), each once the counter of (head, tile) equals its
// place; a finished block frees its slot. Returns whether every block finishes.
bool runs_to_completion(const DqOrder& o, int split, int64_t heads, int64_t slots) {
  struct Block {
    int64_t head, n, next = 0;  // next: the index of its next add, j * split + w
  };
  std::vector<int64_t> counter(size_t(heads * o.n_qt), 0);
  std::vector<Block> resident;
  int64_t dispatched = 0;
  const int64_t total = heads * o.n_kt;
  for (;;) {
    while (int64_t(resident.size()) < slots && dispatched < total) {
      resident.push_back({dispatched / o.n_kt, o.n_kt - 1 - dispatched % o.n_kt});
      ++dispatched;
    }
    bool progress = false;
    for (size_t r = 0; r < resident.size();) {
      Block& b = resident[r];
      const int64_t adds = o.iterations(b.n) * split;
      while (b.next < adds) {
        const int64_t j = b.next / split, w = b.next % split;
        int64_t& c = counter[size_t(b.head * o.n_qt + o.tile(b.n, j))];
        if (c != split * o.rank(b.n, j) + w) break;
        ++c;
        ++b.next;
        progress = true;
      }
      if (b.next == adds) {
        resident.erase(resident.begin() + r);
        progress = true;
      } else {
        ++r;
      }
    }
    if (resident.empty() && dispatched == total) return true;
    if (!progress) return false;
  }
}

TEST(Ch07DqOrder, NoDeadlockWithBlockIdxDispatch) {
  for (int64_t seq_q : {1, 65, 300, 1000, 2048})
    for (int64_t seq_k : {1, 129, 300, 1000, 2048})
      for (int split : {1, 2}) {
        const DqOrder causal(seq_q, seq_k, true, false);
        const DqOrder full(seq_q, seq_k, false, false);
        const DqOrder rotated(seq_q, seq_k, false, true);
        SCOPED_TRACE(describe(causal) + " split " + std::to_string(split));
        // Waits only on blocks dispatched earlier: any number of slots will do.
        for (int64_t slots : {1, 2, 3, 7})
          for (const DqOrder* o : {&causal, &full})
            EXPECT_TRUE(runs_to_completion(*o, split, 3, slots)) << describe(*o) << " " << slots;
        // Rotated: the blocks of a head wait on each other both ways; fine when they all fit.
        for (int64_t extra : {0, 1, 5})
          EXPECT_TRUE(runs_to_completion(rotated, split, 3, rotated.n_kt + extra)) << extra;
        // One slot short: the first-dispatched block (n = n_kt - 1) meets tile 0 after its wrap,
        // where block 0 (never dispatched) adds first. Hence the launcher's rule.
        if (rotated.n_kt >= 2 && rotated.n_kt <= rotated.n_qt) {
          EXPECT_FALSE(runs_to_completion(rotated, split, 3, rotated.n_kt - 1));
        }
      }
}

}  // namespace
