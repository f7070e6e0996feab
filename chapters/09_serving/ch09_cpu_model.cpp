// ch09_cpu_model.cpp: the varlen forward, the paged gather and the paged split-KV decode in double
// (see ch09_cpu_model.h). A CPU exercise (notes/coursework.md): the paged address of a key.
// EXERCISE-KERNELS: cpu/09_paged_address
#include "ch09_cpu_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "check.h"
#include "exercise.h"

namespace fa::ch09 {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// e^(m - M) for M >= m: exactly 1 when nothing moved, which also covers two empty states
// (-inf - -inf would be NaN); chapter 02's convention.
double factor(double m, double M) {
  return m == M ? 1.0 : std::exp(m - M);
}

double dot(const float* a, const float* b, int64_t d) {
  double s = 0;
  for (int64_t x = 0; x < d; ++x) s += double(a[x]) * double(b[x]);
  return s;
}

// Cumulative offsets in 64 bits (the device gets int32 cu_seqlens; the model needs no limit).
std::vector<int64_t> cumulative(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu(lens.size() + 1, 0);
  for (size_t b = 0; b < lens.size(); ++b) cu[b + 1] = cu[b] + lens[b];
  return cu;
}

// One query row's partial state over a range of keys: m (max of the scaled scores, -inf when the
// range holds no key of the row), l = sum of e^(s - m), o = sum of e^(s - m) v (unnormalised).
struct Partial {
  double m = kNegInf, l = 0;
  std::vector<double> o;
};

// The pair merge (chapter 08's, written out here so this model does not lean on a CPU exercise).
void merge_into(Partial& acc, const Partial& p) {
  const double M = std::max(acc.m, p.m);
  const double fa = factor(acc.m, M), fb = factor(p.m, M);
  acc.l = acc.l * fa + p.l * fb;
  for (size_t x = 0; x < acc.o.size(); ++x) acc.o[x] = acc.o[x] * fa + p.o[x] * fb;
  acc.m = M;
}
}  // namespace

void band_forward_head(const HeadView& h, int64_t Br, int64_t Bc, double* O, double* L,
                       TileCounts* counts) {
  FA_REQUIRE(Br > 0 && Bc > 0, "tile sizes must be positive");
  const Band band = Band::make(h.seq_q, h.seq_k, h.causal, h.window_left, h.window_right);
  const int64_t d = h.d;
  const int64_t tiles_per_row_block = ceil_div(std::max<int64_t>(h.seq_k, 0), Bc);
  std::vector<double> m(Br), l(Br), acc(Br * d), s(Bc);
  for (int64_t i0 = 0; i0 < h.seq_q; i0 += Br) {
    const int64_t i1 = std::min(i0 + Br, h.seq_q);  // the rows that exist
    std::fill(m.begin(), m.end(), kNegInf);
    std::fill(l.begin(), l.end(), 0.0);
    std::fill(acc.begin(), acc.end(), 0.0);
    // Only the rows that exist decide which tiles are visited and which are masked (the Hopper
    // forward passes them so; a kernel that passes the whole block, i0 + Br, masks its last block
    // always, which costs time, never correctness).
    const TileRange tiles = key_tiles(band, i0, i1, Bc);
    const int64_t visited = std::max<int64_t>(0, tiles.end - tiles.begin);
    if (counts) counts->skipped += tiles_per_row_block - visited;
    for (int64_t t = tiles.begin; t < tiles.end; ++t) {
      const int64_t j0 = t * Bc, j1 = j0 + Bc;
      const bool mask = tile_needs_mask(band, i0, i1, j0, j1);
      if (counts) (mask ? counts->masked : counts->full) += 1;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r = i - i0;
        double m_tile = kNegInf;
        for (int64_t j = j0; j < j1; ++j) {
          // An unmasked tile is used whole: were tile_needs_mask wrong, a hidden key (or one past
          // the sequence, the next sequence's) would enter the sum and the check would catch it.
          if (mask && !band.visible(i, j)) {
            s[j - j0] = kNegInf;
            continue;
          }
          s[j - j0] = dot(h.q + i * d, h.k + j * d, d) * h.scale;
          m_tile = std::max(m_tile, s[j - j0]);
        }
        const double m_new = std::max(m[r], m_tile);
        if (m_new == kNegInf) continue;  // nothing visible yet: the row stays empty
        const double alpha = factor(m[r], m_new);
        l[r] *= alpha;
        for (int64_t x = 0; x < d; ++x) acc[r * d + x] *= alpha;
        for (int64_t j = j0; j < j1; ++j) {
          if (s[j - j0] == kNegInf) continue;
          const double p = std::exp(s[j - j0] - m_new);
          l[r] += p;
          for (int64_t x = 0; x < d; ++x) acc[r * d + x] += p * double(h.v[j * d + x]);
        }
        m[r] = m_new;
      }
    }
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i - i0;
      const bool empty = l[r] == 0.0;  // saw no key: O = 0, L = -inf (reference.h)
      for (int64_t x = 0; x < d; ++x) O[i * d + x] = empty ? 0.0 : acc[r * d + x] / l[r];
      L[i] = empty ? kNegInf : m[r] + std::log(l[r]);
    }
  }
}

HeadView varlen_head_view(const VarlenShape& s, const float* q, const float* k, const float* v,
                          int64_t b, int64_t h) {
  const std::vector<int64_t> cu_q = cumulative(s.seqlens_q), cu_k = cumulative(s.seqlens_k);
  const int64_t total_q = cu_q.back(), total_k = cu_k.back(), d = s.head_dim;
  const int64_t kv_head = h / (s.heads / s.kv_heads());  // GQA: consecutive heads share one
  const AttentionShape one = s.sequence(b);
  HeadView view;
  view.q = q + (h * total_q + cu_q[b]) * d;
  view.k = k + (kv_head * total_k + cu_k[b]) * d;
  view.v = v + (kv_head * total_k + cu_k[b]) * d;
  view.seq_q = one.seq_q;
  view.seq_k = one.seq_k;
  view.d = d;
  view.causal = one.causal;
  view.scale = one.softmax_scale();
  view.window_left = one.window_left;
  view.window_right = one.window_right;
  return view;
}

VarlenForward varlen_forward_model(const float* q, const float* k, const float* v,
                                   const VarlenShape& s, int64_t Br, int64_t Bc) {
  FA_REQUIRE(s.seqlens_q.size() == s.seqlens_k.size(), "one key length per sequence");
  FA_REQUIRE(s.heads % s.kv_heads() == 0, "heads must be a multiple of heads_kv");
  const std::vector<int64_t> cu_q = cumulative(s.seqlens_q);
  const int64_t total_q = cu_q.back(), d = s.head_dim;
  VarlenForward out;
  out.O.assign(static_cast<size_t>(s.heads * total_q * d), 0.0);
  out.L.assign(static_cast<size_t>(s.heads * total_q), kNegInf);
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t b = 0; b < s.batch(); ++b) {
      const int64_t row0 = h * total_q + cu_q[b];  // this head's first row of sequence b
      band_forward_head(varlen_head_view(s, q, k, v, b, h), Br, Bc, out.O.data() + row0 * d,
                        out.L.data() + row0, &out.tiles);
    }
  return out;
}

// ---- The paged cache ------------------------------------------------------------------------
PagedShape with_page_counts(PagedShape s, int64_t spare) {
  FA_REQUIRE(s.page_size > 0, "page_size must be positive");
  s.max_pages = 1;  // a table row even for a batch of empty sequences
  s.num_pages = std::max<int64_t>(0, spare);
  for (int64_t len : s.seqlens_k) {
    s.max_pages = std::max(s.max_pages, ceil_div(len, s.page_size));
    s.num_pages += ceil_div(len, s.page_size);
  }
  return s;
}

int64_t contiguous_offset(const PagedShape& s, int64_t b) {
  int64_t keys = 0;
  for (int64_t x = 0; x < b; ++x) keys += s.seqlens_k[x];
  return keys * s.kv_heads() * s.head_dim;
}

PagedCache build_paged_cache(const PagedShape& s, const float* k, const float* v, uint64_t seed) {
  const int64_t kvh = s.kv_heads(), d = s.head_dim, P = s.page_size;
  PagedCache c;
  c.k_pages.assign(static_cast<size_t>(s.page_numel()), std::numeric_limits<float>::quiet_NaN());
  c.v_pages = c.k_pages;
  c.block_table.assign(static_cast<size_t>(s.batch() * s.max_pages), -1);
  // Hand the pages out in a shuffled order, as an allocator that has served many requests does.
  std::vector<int32_t> order(static_cast<size_t>(s.num_pages));
  for (size_t x = 0; x < order.size(); ++x) order[x] = static_cast<int32_t>(x);
  std::mt19937_64 rng(seed);
  for (size_t x = order.size(); x > 1; --x) std::swap(order[x - 1], order[rng() % x]);
  size_t next = 0;
  for (int64_t b = 0; b < s.batch(); ++b) {
    const int64_t len = s.seqlens_k[b], pages = ceil_div(len, P);
    FA_REQUIRE(pages <= s.max_pages, "the block table is too narrow");
    for (int64_t p = 0; p < pages; ++p) {
      FA_REQUIRE(next < order.size(), "the page pool is too small");
      c.block_table[b * s.max_pages + p] = order[next++];
    }
    const int64_t base = contiguous_offset(s, b);
    for (int64_t h = 0; h < kvh; ++h)
      for (int64_t j = 0; j < len; ++j) {
        const int64_t page = c.block_table[b * s.max_pages + j / P];
        const int64_t dst = ((page * kvh + h) * P + j % P) * d, src = base + (h * len + j) * d;
        std::copy(k + src, k + src + d, c.k_pages.begin() + dst);
        std::copy(v + src, v + src + d, c.v_pages.begin() + dst);
      }
  }
  return c;
}

const float* paged_row(const PagedShape& s, const std::vector<float>& pages,
                       const std::vector<int32_t>& block_table, int64_t b, int64_t kv_head,
                       int64_t j) {
  // EXERCISE(paged-address): the first element of key j of sequence b, K/V head kv_head: its page from the sequence's row of the block table (the pages are shuffled, so j alone does not say where), then its offset in the pool [num_pages, heads_kv, page_size, D], in 64 bits
  const int64_t page = block_table[b * s.max_pages + j / s.page_size];
  return pages.data() +
         ((page * s.kv_heads() + kv_head) * s.page_size + j % s.page_size) * s.head_dim;
  // EXERCISE-PLACEHOLDER
  // return fa::exercise_todo<const float*>("cpu/09_paged_address", "paged-address");
  // EXERCISE-END
}

int64_t paged_split_forward(const PagedShape& s, const float* q, const PagedCache& cache,
                            int64_t split_len, double* O, double* L) {
  FA_REQUIRE(split_len > 0, "split_len must be positive");
  FA_REQUIRE(s.heads % s.kv_heads() == 0, "heads must be a multiple of heads_kv");
  const int64_t d = s.head_dim, group = s.heads / s.kv_heads();
  int64_t merged = 0;
  for (int64_t b = 0; b < s.batch(); ++b) {
    const AttentionShape one = s.sequence(b);
    const double scale = one.softmax_scale();
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const int64_t row = (b * s.heads + h) * s.seq_q + i;
        const float* qi = q + row * d;
        const KeyRange keys = visible_key_range(one, i);  // bottom-right causal, per sequence
        Partial total;
        total.o.assign(static_cast<size_t>(d), 0.0);
        // The splits are fixed ranges of the sequence's keys, as a kernel's grid has them; a
        // split that holds none of this row's keys contributes the identity (-inf, 0, 0).
        for (int64_t k0 = 0; k0 < one.seq_k; k0 += split_len) {
          const int64_t first = std::max(k0, keys.first);
          const int64_t last = std::min(k0 + split_len - 1, keys.last);
          Partial p;
          p.o.assign(static_cast<size_t>(d), 0.0);
          std::vector<double> sc;
          for (int64_t j = first; j <= last; ++j) {
            sc.push_back(
                dot(qi, paged_row(s, cache.k_pages, cache.block_table, b, h / group, j), d) *
                scale);
            p.m = std::max(p.m, sc.back());
          }
          for (int64_t j = first; j <= last; ++j) {
            const double e = std::exp(sc[j - first] - p.m);
            const float* vj = paged_row(s, cache.v_pages, cache.block_table, b, h / group, j);
            p.l += e;
            for (int64_t x = 0; x < d; ++x) p.o[x] += e * double(vj[x]);
          }
          merge_into(total, p);
          ++merged;
        }
        const bool empty = total.l == 0.0;
        for (int64_t x = 0; x < d; ++x) O[row * d + x] = empty ? 0.0 : total.o[x] / total.l;
        L[row] = empty ? kNegInf : total.m + std::log(total.l);
      }
  }
  return merged;
}

std::vector<int64_t> mixed_lengths(uint64_t seed, int64_t total, int64_t max_len) {
  std::vector<int64_t> out = {0};
  if (total <= 0) return out;
  out.push_back(1);
  int64_t sum = 1;
  std::mt19937_64 rng(seed);
  const double lo = std::log(16.0), hi = std::log(double(std::max<int64_t>(max_len, 17)));
  while (sum < total) {
    const double u = double(rng() >> 11) * 0x1.0p-53;  // uniform in [0, 1), the same everywhere
    int64_t len = static_cast<int64_t>(std::exp(lo + u * (hi - lo)));
    len = std::min(len, total - sum);
    out.push_back(len);
    sum += len;
  }
  return out;
}

}  // namespace fa::ch09
