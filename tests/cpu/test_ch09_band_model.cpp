// Chapter 09's sliding window on the tiles (ch09_band.h), on the CPU:
//  * a model of the tiled windowed forward in double (query tiles of Br rows, each visiting only
//    key_tiles() of Bc keys, the online softmax, the element mask applied only where
//    tile_needs_mask says so, keys past seq_k read as zeros as the kernels' copies leave them)
//    against the float64 reference with the window (reference.h): ragged lengths, seq_q != seq_k
//    both ways, windows narrower than a tile and wider than the sequence, causal and not, rows that
//    see no key;
//  * the 32-bit arithmetic of 09/v2_window's warps (v2_window.cu: each warp's unmasked tiles as
//    one interval, each thread's mask from the window's edges of its first row, clamped) against
//    tile_needs_mask and Band::visible, for every row, key and tile of the same shapes, at
//    v2_window's tiles and at 09/v4_window_any_head_dim's (05/t17's: Bc 32, and Br 64 at D 256);
//  * the same for 09/bwd_v4_window_any_head_dim (its tile is S^T: a thread's rows are keys, each
//    key row's first and last query as 32-bit columns of the Q tile, clamped), and for the
//    warp-tile backwards 09/bwd_v2_window and bwd_v5_window_d256 (S not transposed: each row's
//    first and last key as 32-bit columns from a thread's first key, clamped);
//  * the same for 09/hopper_v4_window_persistent (t52's key tiles, one first key per thread for
//    both of its rows, the comparisons against compile-time columns).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ch09_band.h"
#include "cpu_inputs.h"
#include "reference.h"

namespace {

using fa::AttentionShape;
using fa::ch09::Band;
using fa::ch09::TileRange;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Window {
  int64_t left, right;
};

// The shapes of every test here: lengths around the tile sizes, windows (0, 0) (the diagonal
// alone), (16, -1), (100, 50) and none.
const std::vector<int64_t> kLengths = {1, 17, 127, 129, 300};
const std::vector<Window> kWindows = {{0, 0}, {16, -1}, {100, 50}, {-1, -1}};

AttentionShape shape_of(int64_t seq_q, int64_t seq_k, bool causal, Window w, int64_t d) {
  AttentionShape s;
  s.batch = 1;
  s.heads = 1;
  s.seq_q = seq_q;
  s.seq_k = seq_k;
  s.head_dim = d;
  s.causal = causal;
  s.window_left = w.left;
  s.window_right = w.right;
  return s;
}

std::string name_of(const AttentionShape& s, int64_t Br, int64_t Bc) {
  return "seq_q " + std::to_string(s.seq_q) + " seq_k " + std::to_string(s.seq_k) + " window (" +
         std::to_string(s.window_left) + ", " + std::to_string(s.window_right) + ")" +
         (s.causal ? " causal" : "") + " Br " + std::to_string(Br) + " Bc " + std::to_string(Bc);
}

struct Forward {
  std::vector<double> O, L;
  int64_t tiles_visited = 0, tiles_masked = 0;
};

// The tiled forward of one head as a kernel computes it, in double. Rows past seq_q are not
// computed (the kernels compute them from zero rows of Q and never store them).
Forward tiled_window_forward(const fa::HeadView& h, int64_t Br, int64_t Bc) {
  const Band band = Band::make(h.seq_q, h.seq_k, h.causal, h.window_left, h.window_right);
  Forward f;
  f.O.assign(static_cast<size_t>(h.seq_q * h.d), 0.0);
  f.L.assign(static_cast<size_t>(h.seq_q), -kInf);
  for (int64_t q0 = 0; q0 < h.seq_q; q0 += Br) {
    const int64_t rows = std::min(Br, h.seq_q - q0);
    std::vector<double> m(rows, -kInf), l(rows, 0.0), acc(rows * h.d, 0.0);
    const TileRange tiles = fa::ch09::key_tiles(band, q0, q0 + Br, Bc);
    for (int64_t j = tiles.begin; j < tiles.end; ++j) {
      const int64_t j0 = j * Bc;
      const bool masked = fa::ch09::tile_needs_mask(band, q0, q0 + Br, j0, j0 + Bc);
      ++f.tiles_visited;
      f.tiles_masked += masked ? 1 : 0;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = q0 + r;
        std::vector<double> s(Bc);
        double m_new = m[r];
        for (int64_t c = 0; c < Bc; ++c) {
          const int64_t key = j0 + c;
          double dot = 0.0;  // a key past seq_k is a row of zeros in shared memory
          if (key < h.seq_k)
            for (int64_t x = 0; x < h.d; ++x)
              dot += double(h.q[i * h.d + x]) * double(h.k[key * h.d + x]);
          s[c] = masked && !band.visible(i, key) ? -kInf : dot * h.scale;
          m_new = std::max(m_new, s[c]);
        }
        const double alpha = m_new == -kInf ? 1.0 : std::exp(m[r] - m_new);
        l[r] *= alpha;
        for (int64_t x = 0; x < h.d; ++x) acc[r * h.d + x] *= alpha;
        for (int64_t c = 0; c < Bc; ++c) {
          const double p = m_new == -kInf ? 0.0 : std::exp(s[c] - m_new);
          l[r] += p;
          const int64_t key = j0 + c;
          if (key < h.seq_k && p != 0.0)
            for (int64_t x = 0; x < h.d; ++x) acc[r * h.d + x] += p * double(h.v[key * h.d + x]);
        }
        m[r] = m_new;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = q0 + r;
      if (l[r] > 0.0) {
        for (int64_t x = 0; x < h.d; ++x) f.O[i * h.d + x] = acc[r * h.d + x] / l[r];
        f.L[i] = m[r] + std::log(l[r]);
      }
    }
  }
  return f;
}

// |got - ref| <= tol element by element; infinities (L = -inf) must match exactly.
void expect_close(const std::vector<double>& got, const std::vector<double>& ref, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      ASSERT_EQ(got[i], ref[i]) << what << "[" << i << "]";
      continue;
    }
    ASSERT_LE(std::fabs(got[i] - ref[i]), tol)
        << what << "[" << i << "] got " << got[i] << " ref " << ref[i];
  }
}

TEST(Ch09BandModel, TiledWindowedForwardMatchesReference) {
  constexpr int64_t kD = 16;
  for (int64_t seq_q : kLengths)
    for (int64_t seq_k : kLengths)
      for (bool causal : {false, true})
        for (Window w : kWindows)
          for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{128, 64}, {16, 32}}) {
            const AttentionShape s = shape_of(seq_q, seq_k, causal, w, kD);
            SCOPED_TRACE(name_of(s, Br, Bc));
            const fa_test::Inputs in = fa_test::draw(s, uint64_t(seq_q * 1009 + seq_k));
            const fa::HeadView h = fa::head_view(s, in.q.data(), in.k.data(), in.v.data(), 0);
            std::vector<double> O(static_cast<size_t>(seq_q * kD)), L(static_cast<size_t>(seq_q));
            fa::attention_forward_ref_head(h, {}, O.data(), L.data());
            const Forward got = tiled_window_forward(h, Br, Bc);
            expect_close(got.O, O, 1e-12, "O");
            expect_close(got.L, L, 1e-12, "L");
          }
}

// The window's point: a narrow window visits a few tiles per Q tile whatever seq_k is, and most
// of those need no mask.
TEST(Ch09BandModel, NarrowWindowVisitsFewTiles) {
  const AttentionShape s = shape_of(4096, 4096, true, {256, -1}, 16);
  const Band band = Band::make(s.seq_q, s.seq_k, s.causal, s.window_left, s.window_right);
  int64_t visited = 0;
  for (int64_t q0 = 0; q0 < s.seq_q; q0 += 128) {
    const TileRange t = fa::ch09::key_tiles(band, q0, q0 + 128, 64);
    EXPECT_LE(t.end - t.begin, (128 + 256) / 64 + 1) << "q0 " << q0;
    visited += t.end - t.begin;
  }
  EXPECT_LE(visited, 32 * 7);  // 32 Q tiles of at most 7 key tiles; causal alone: 1056
}

// The visited tiles hold every visible pair of the Q tile's rows (nothing is lost by the loop
// bounds), and a tile without a mask holds only visible pairs (nothing leaks in).
TEST(Ch09BandModel, KeyTilesCoverTheBandAndUnmaskedTilesAreInside) {
  for (int64_t seq_q : kLengths)
    for (int64_t seq_k : kLengths)
      for (bool causal : {false, true})
        for (Window w : kWindows)
          for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{128, 64}, {16, 32}}) {
            const Band band = Band::make(seq_q, seq_k, causal, w.left, w.right);
            SCOPED_TRACE(name_of(shape_of(seq_q, seq_k, causal, w, 16), Br, Bc));
            for (int64_t q0 = 0; q0 < seq_q; q0 += Br) {
              const TileRange t = fa::ch09::key_tiles(band, q0, q0 + Br, Bc);
              for (int64_t i = q0; i < std::min(q0 + Br, seq_q); ++i) {
                const fa::KeyRange kr =
                    fa::visible_key_range(i, seq_q, seq_k, causal, w.left, w.right);
                for (int64_t j = 0; j < seq_k; ++j) {
                  ASSERT_EQ(band.visible(i, j), j >= kr.first && j <= kr.last)
                      << "row " << i << " key " << j;
                  if (band.visible(i, j)) {
                    ASSERT_GE(j / Bc, t.begin) << "row " << i << " key " << j;
                    ASSERT_LT(j / Bc, t.end) << "row " << i << " key " << j;
                  }
                }
              }
              for (int64_t j = t.begin; j < t.end; ++j) {
                if (fa::ch09::tile_needs_mask(band, q0, q0 + Br, j * Bc, j * Bc + Bc)) continue;
                for (int64_t i = q0; i < q0 + Br; ++i)
                  for (int64_t key = j * Bc; key < j * Bc + Bc; ++key)
                    ASSERT_TRUE(band.visible(i, key)) << "row " << i << " key " << key;
              }
            }
          }
}

// ---- 09/v2_window's per-warp and per-thread arithmetic (v2_window.cu), restated ----------------
// A warp owns rows rows from warp_row0; lane (g, t) holds rows warp_row0 + g + o, o in {0, 8, ...,
// rows - 8}, and keys k0 + 2 t + c, c = 8 nt + (0 or 1), of a tile of bc keys. v2_window's tiles:
// Br 128, Bc 64, 32 rows a warp; 09/v4_window_any_head_dim (05/t17's tiles) also has Bc 32 (from
// D 96) and, at D 256, Br 64 with 16 rows a warp.
struct KernelTiles {
  int64_t br, bc, warp_rows;
};
const std::vector<KernelTiles> kWindowTiles = {{128, 64, 32}, {128, 32, 32}, {64, 32, 16}};

struct WarpPlan {
  int64_t row0, row1;
  TileRange tiles;               // the tiles some row of the warp sees
  int64_t free_first, free_end;  // the tiles that need no mask: [free_first, free_end)
};

WarpPlan warp_plan(const Band& band, int64_t warp_row0, const KernelTiles& kt) {
  WarpPlan w;
  w.row0 = warp_row0;
  w.row1 = std::min(warp_row0 + kt.warp_rows, band.seq_q);
  w.tiles = fa::ch09::key_tiles(band, w.row0, w.row1, kt.bc);
  const int64_t free_first_key = band.first_key(w.row1 - 1), free_last_key = band.last_key(w.row0);
  w.free_first = (free_first_key + kt.bc - 1) / kt.bc;
  w.free_end = std::max<int64_t>((free_last_key + 1) / kt.bc, w.free_first);
  return w;
}

// Whether the kernel masks key k0 + 2 t + c of row warp_row0 + g + o.
bool kernel_masks(const Band& band, int64_t warp_row0, int g, int t, int64_t k0, int c, int o) {
  const int64_t diagonal0 = band.diagonal(warp_row0 + g);
  const int64_t edge_first = diagonal0 - band.left, edge_last = diagonal0 + band.right;
  const int64_t seq_k = band.seq_k;
  const int row_first = int(edge_first < -32 ? -32 : (edge_first > seq_k ? seq_k : edge_first));
  const int row_last = int(edge_last < -32 ? -32 : (edge_last > seq_k ? seq_k : edge_last));
  const int lo = row_first - int(k0) - 2 * t, hi = row_last - int(k0) - 2 * t;
  const int last = int(seq_k) - 1 - int(k0) - 2 * t;
  return c - o < lo || c - o > hi || c > last;
}

TEST(Ch09BandModel, WindowKernelWarpArithmeticMatchesTheBand) {
  for (const KernelTiles& kt : kWindowTiles)
    for (int64_t seq_q : kLengths)
      for (int64_t seq_k : kLengths)
        for (bool causal : {false, true})
          for (Window w : kWindows) {
            const Band band = Band::make(seq_q, seq_k, causal, w.left, w.right);
            SCOPED_TRACE(name_of(shape_of(seq_q, seq_k, causal, w, 16), kt.br, kt.bc));
            for (int64_t q0 = 0; q0 < seq_q; q0 += kt.br) {
              const TileRange block = fa::ch09::key_tiles(band, q0, q0 + kt.br, kt.bc);
              for (int64_t warp_row0 = q0; warp_row0 < q0 + kt.br; warp_row0 += kt.warp_rows) {
                const WarpPlan wp = warp_plan(band, warp_row0, kt);
                for (int64_t j = block.begin; j < block.end; ++j) {
                  const int64_t k0 = j * kt.bc;
                  const bool seen = j >= wp.tiles.begin && j < wp.tiles.end;
                  if (!seen) {  // skipped: no real row of the warp sees a key of the tile
                    for (int64_t i = wp.row0; i < wp.row1; ++i)
                      for (int64_t key = k0; key < k0 + kt.bc; ++key)
                        ASSERT_FALSE(band.visible(i, key)) << "row " << i << " key " << key;
                    continue;
                  }
                  const bool masked = j < wp.free_first || j >= wp.free_end;
                  ASSERT_EQ(masked,
                            fa::ch09::tile_needs_mask(band, wp.row0, wp.row1, k0, k0 + kt.bc))
                      << "warp row " << wp.row0 << " tile " << j;
                  for (int g = 0; g < 8; ++g)
                    for (int o = 0; o < kt.warp_rows; o += 8) {
                      const int64_t i = warp_row0 + g + o;
                      if (i >= seq_q) continue;  // never stored
                      for (int t = 0; t < 4; ++t)
                        for (int c = 0; c < kt.bc; c += (c % 2 == 0 ? 1 : 7)) {
                          const int64_t key = k0 + 2 * t + c;
                          const bool hidden = !band.visible(i, key);
                          if (masked)
                            ASSERT_EQ(kernel_masks(band, warp_row0, g, t, k0, c, o), hidden)
                                << "row " << i << " key " << key;
                          else
                            ASSERT_FALSE(hidden) << "row " << i << " key " << key;
                        }
                    }
                }
              }
            }
          }
}

// ---- 09/bwd_v4_window_any_head_dim's per-key arithmetic (bwd_v4_window_any_head_dim.cu) --------
// A block owns kBwdBc keys from k0 and visits the Q tiles of kBwdBr queries that query_tiles
// gives; in a tile that tile_needs_mask masks, the thread holding key row `key` keeps query column
// col iff first <= col <= last, its key's first and last query rows as columns of the tile,
// clamped to [-1, kBwdBr] (none for a key past seq_k).
constexpr int64_t kBwdBr = 64, kBwdBc = 128;

int clamp_cols(int64_t x, int cols) {
  return int(x < -1 ? -1 : (x > cols ? cols : x));
}

bool bwd_kernel_keeps(const Band& band, int64_t q0, int64_t key, int col) {
  if (key >= band.seq_k) return false;
  const int first = clamp_cols(band.first_row(key) - q0, int(kBwdBr));
  const int last = clamp_cols(band.last_row(key) - q0, int(kBwdBr));
  return col >= first && col <= last;
}

TEST(Ch09BandModel, WindowBackwardKeyArithmeticMatchesTheBand) {
  for (int64_t seq_q : kLengths)
    for (int64_t seq_k : kLengths)
      for (bool causal : {false, true})
        for (Window w : kWindows) {
          const Band band = Band::make(seq_q, seq_k, causal, w.left, w.right);
          SCOPED_TRACE(name_of(shape_of(seq_q, seq_k, causal, w, 16), kBwdBr, kBwdBc));
          for (int64_t k0 = 0; k0 < seq_k; k0 += kBwdBc) {
            const TileRange q_tiles = fa::ch09::query_tiles(band, k0, k0 + kBwdBc, kBwdBr);
            for (int64_t qt = 0; qt * kBwdBr < seq_q; ++qt) {
              const int64_t q0 = qt * kBwdBr;
              const bool visited = qt >= q_tiles.begin && qt < q_tiles.end;
              const bool masked = fa::ch09::tile_needs_mask(band, q0, q0 + kBwdBr, k0, k0 + kBwdBc);
              for (int64_t key = k0; key < k0 + kBwdBc; ++key)
                for (int col = 0; col < kBwdBr; ++col) {
                  const int64_t i = q0 + col;
                  if (i >= seq_q) continue;  // L = +inf there: P = 0 whatever the mask
                  const bool visible = band.visible(i, key);
                  if (!visited)
                    ASSERT_FALSE(visible) << "skipped tile, row " << i << " key " << key;
                  else if (masked)
                    ASSERT_EQ(bwd_kernel_keeps(band, q0, key, col), visible)
                        << "row " << i << " key " << key;
                  else
                    ASSERT_TRUE(visible) << "unmasked tile, row " << i << " key " << key;
                }
            }
          }
        }
}

// ---- the warp-tile backwards' per-row arithmetic (bwd_v2_window.cu, bwd_v5_window_d256.cu) -----
// A block owns Bc keys from k0 and visits the Q tiles of Br queries that query_tiles gives; S is
// not transposed there: a warp holds 32 query rows x kw keys (kw = Bc / 4), and the thread (t) of
// a row keeps key column 8 nt + c (nt < kw / 8, c < 2) from its first key key0 = k0 + kw wn + 2t
// iff first <= 8 nt + c <= last, the row's first and last keys as columns from key0 clamped to
// [-1, kw]. bwd_v2: Bc 128 (kw 32); bwd_v5: Bc 64 (kw 16), both with Q tiles of 64.
bool warp_tile_bwd_keeps(const Band& band, int64_t i, int64_t key0, int col, int kw) {
  const int first = clamp_cols(band.first_key(i) - key0, kw);
  const int last = clamp_cols(band.last_key(i) - key0, kw);
  return col >= first && col <= last;
}

TEST(Ch09BandModel, WarpTileBackwardRowArithmeticMatchesTheBand) {
  constexpr int64_t kBr = 64;
  for (int64_t bc : {128, 64})
    for (int64_t seq_q : kLengths)
      for (int64_t seq_k : kLengths)
        for (bool causal : {false, true})
          for (Window w : kWindows) {
            const Band band = Band::make(seq_q, seq_k, causal, w.left, w.right);
            SCOPED_TRACE(name_of(shape_of(seq_q, seq_k, causal, w, 16), kBr, bc));
            const int kw = int(bc / 4);
            for (int64_t k0 = 0; k0 < seq_k; k0 += bc) {
              const TileRange q_tiles = fa::ch09::query_tiles(band, k0, k0 + bc, kBr);
              for (int64_t qt = 0; qt * kBr < seq_q; ++qt) {
                const int64_t q0 = qt * kBr;
                const bool visited = qt >= q_tiles.begin && qt < q_tiles.end;
                const bool masked = fa::ch09::tile_needs_mask(band, q0, q0 + kBr, k0, k0 + bc);
                for (int64_t i = q0; i < std::min(q0 + kBr, seq_q); ++i)  // L = +inf past seq_q
                  for (int wn = 0; wn < 4; ++wn)
                    for (int t = 0; t < 4; ++t)
                      for (int nt = 0; nt < kw / 8; ++nt)
                        for (int c = 0; c < 2; ++c) {
                          const int64_t key0 = k0 + kw * wn + 2 * t, key = key0 + 8 * nt + c;
                          const bool visible = band.visible(i, key);
                          if (!visited)
                            ASSERT_FALSE(visible) << "skipped tile, row " << i << " key " << key;
                          else if (masked)
                            ASSERT_EQ(warp_tile_bwd_keeps(band, i, key0, 8 * nt + c, kw), visible)
                                << "row " << i << " key " << key;
                          else
                            ASSERT_TRUE(visible) << "unmasked tile, row " << i << " key " << key;
                        }
              }
            }
          }
}

// ---- 09/hopper_v4_window_persistent's per-thread arithmetic (hopper_v4_window_persistent.cu) ---
// A work tile of Br = 128 query rows from q0 visits key tiles [begin, end) of key_tiles; turn j
// loads key tile begin + j, and masks it unless j is in [free_first, free_end). Consumer thread t
// (0..255 over both consumer warpgroups) holds rows r = q0 + 16 (t / 32) + (t % 32) / 4 and r + 8
// and, of a tile, columns 8 n + 2 q + c (q = t % 4, c < 2). Its bounds, counted from the first
// key tile: one first key (the first row's diagonal less the window, unclipped, clamped at -8),
// the second row's taken as 8 more, and two last keys clamped at -1; the comparisons put the
// column's compile-time part (8 n + c) alone. t52's key tile widths: 128 (D 64), 176 (D 96, 128),
// 112 (D 192), 80 (D 256).
struct PersistentWindowThread {
  int first_key, last_key[2];
};

PersistentWindowThread persistent_window_thread(const Band& band, int64_t row0, int64_t k_base) {
  PersistentWindowThread th;
  const int64_t first = band.diagonal(row0) - band.left - k_base;
  th.first_key = int(first < -8 ? -8 : first);
  for (int e = 0; e < 2; ++e) {
    const int64_t last = band.last_key(row0 + 8 * e) - k_base;
    th.last_key[e] = int(last < -1 ? -1 : last);
  }
  return th;
}

bool persistent_window_hides(const PersistentWindowThread& th, int k0, int q, int h, int col) {
  const int lo = th.first_key - k0 - 2 * q, hi = th.last_key[h] - k0 - 2 * q;
  return col - 8 * h < lo || col > hi;
}

TEST(Ch09BandModel, PersistentWindowThreadArithmeticMatchesTheBand) {
  constexpr int64_t kBr = 128;
  const std::vector<int64_t> lengths = {1, 129, 300, 1000};
  std::vector<Window> windows = kWindows;
  windows.push_back({500, -1});  // wide enough for unmasked tiles between the edges
  windows.push_back({300, 200});
  int64_t free_tiles = 0;  // tiles the kernel leaves unmasked, over every shape: some must be
  for (int64_t bc : {128, 176, 112, 80})
    for (int64_t seq_q : lengths)
      for (int64_t seq_k : lengths)
        for (bool causal : {false, true})
          for (Window w : windows) {
            const Band band = Band::make(seq_q, seq_k, causal, w.left, w.right);
            SCOPED_TRACE(name_of(shape_of(seq_q, seq_k, causal, w, 16), kBr, bc));
            for (int64_t q0 = 0; q0 < seq_q; q0 += kBr) {
              const TileRange range = fa::ch09::key_tiles(band, q0, q0 + kBr, bc);
              const int64_t q1 = std::min(q0 + kBr, seq_q);
              const int64_t free_first_key = band.first_key(q1 - 1);
              const int64_t free_last_key = band.last_key(q0);
              const int64_t n_tiles = std::max<int64_t>(range.end - range.begin, 0);
              const int free_first = int((free_first_key + bc - 1) / bc - range.begin);
              const int free_end =
                  std::max(int((free_last_key + 1) / bc - range.begin), free_first);
              // Keys outside the range are seen by no real row of the tile.
              for (int64_t i = q0; i < q1; ++i)
                for (int64_t key = 0; key < seq_k; ++key)
                  if (key / bc < range.begin || key / bc >= range.begin + n_tiles)
                    ASSERT_FALSE(band.visible(i, key)) << "row " << i << " key " << key;
              const int64_t k_base = range.begin * bc;
              for (int j = 0; j < int(n_tiles); ++j) {
                const int k0 = int(j * bc);
                const bool masked = j < free_first || j >= free_end;
                free_tiles += masked ? 0 : 1;
                ASSERT_EQ(masked,
                          fa::ch09::tile_needs_mask(band, q0, q1, k_base + k0, k_base + k0 + bc))
                    << "tile " << j;
                for (int t = 0; t < 256; ++t) {
                  const int64_t row0 = q0 + 16 * (t / 32) + (t % 32) / 4;
                  const PersistentWindowThread th = persistent_window_thread(band, row0, k_base);
                  const int q = t % 4;
                  for (int h = 0; h < 2; ++h) {
                    const int64_t i = row0 + 8 * h;
                    if (i >= seq_q) continue;  // the next sequence's row: never stored
                    for (int col = 0; col < bc; col += (col % 2 == 0 ? 1 : 7)) {
                      const int64_t key = k_base + k0 + col + 2 * q;
                      const bool hidden = !band.visible(i, key);
                      if (masked)
                        ASSERT_EQ(persistent_window_hides(th, k0, q, h, col), hidden)
                            << "row " << i << " key " << key;
                      else
                        ASSERT_FALSE(hidden) << "unmasked tile, row " << i << " key " << key;
                    }
                  }
                }
              }
            }
          }
  EXPECT_GT(free_tiles, 0) << "no shape left a tile unmasked: the test misses the free interval";
}

}  // namespace
