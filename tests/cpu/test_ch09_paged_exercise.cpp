// Chapter 09's CPU exercise (notes/coursework.md): paged_row in ch09_cpu_model.cpp, the address of
// key j of sequence b, K/V head h_kv, in a paged KV cache. The caches here are built with every
// sequence's pages in a shuffled order and NaN in the spare pages and the unused rows of each last
// page, so a row read from the wrong page, head or slot is either another key or a NaN. Two
// checks, at pages of 16, 64 and 256 keys: every key's row is the contiguous row it was copied
// from, bit for bit, and the CPU model's split-KV decode through paged_row equals the float64
// reference over the contiguous keys. Suite CpuExercise* (label exercise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ch09_cpu_model.h"
#include "random.h"
#include "reference.h"

namespace {

using fa::PagedShape;

// Ragged caches: a long one, one key, a partial page, a page boundary plus one, an empty one, and
// lengths that end on a page boundary for some page sizes and not for others.
const std::vector<int64_t> kLens = {1000, 1, 17, 129, 0, 64, 256, 300};

PagedShape paged(int64_t page_size, int64_t seq_q, bool causal) {
  PagedShape s;
  s.seqlens_k = kLens;
  s.heads = 4;
  s.heads_kv = 2;
  s.head_dim = 32;
  s.seq_q = seq_q;
  s.page_size = page_size;
  s.causal = causal;
  return fa::ch09::with_page_counts(s, /*spare=*/3);
}

int64_t total_keys() {
  int64_t keys = 0;
  for (int64_t len : kLens) keys += len;
  return keys;
}

// True when some sequence's pages are not the pool's pages in ascending order from its first:
// the caches below must not let an address that ignores the table pass by luck.
bool pages_are_shuffled(const PagedShape& s, const std::vector<int32_t>& table) {
  for (int64_t b = 0; b < s.batch(); ++b)
    for (int64_t p = 1; p < fa::ceil_div(s.seqlens_k[b], s.page_size); ++p)
      if (table[b * s.max_pages + p] != table[b * s.max_pages + p - 1] + 1) return true;
  return false;
}

TEST(CpuExerciseCh09Paged, EveryKeyIsFoundThroughTheShuffledTable) {
  for (int64_t page : {16, 64, 256}) {
    const PagedShape s = paged(page, 1, false);
    SCOPED_TRACE(s.str());
    const int64_t d = s.head_dim, n = total_keys() * s.kv_heads() * d;
    const std::vector<float> k = fa::random_normal(n, 900 + page);
    const std::vector<float> v = fa::random_normal(n, 901 + page);
    const fa::ch09::PagedCache c = fa::ch09::build_paged_cache(s, k.data(), v.data(), 902 + page);
    ASSERT_TRUE(pages_are_shuffled(s, c.block_table)) << "the test's cache is not shuffled";
    int64_t wrong = 0;
    std::string first;
    for (int64_t b = 0; b < s.batch(); ++b)
      for (int64_t h = 0; h < s.kv_heads(); ++h)
        for (int64_t j = 0; j < s.seqlens_k[b]; ++j) {
          const int64_t src = fa::ch09::contiguous_offset(s, b) + (h * s.seqlens_k[b] + j) * d;
          const float* kr = fa::ch09::paged_row(s, c.k_pages, c.block_table, b, h, j);
          const float* vr = fa::ch09::paged_row(s, c.v_pages, c.block_table, b, h, j);
          // Inside the pool first: a wrong address must fail, not read past the vector.
          const bool inside =
              kr >= c.k_pages.data() && kr + d <= c.k_pages.data() + c.k_pages.size() &&
              vr >= c.v_pages.data() && vr + d <= c.v_pages.data() + c.v_pages.size();
          const bool same = inside && std::memcmp(kr, k.data() + src, sizeof(float) * d) == 0 &&
                            std::memcmp(vr, v.data() + src, sizeof(float) * d) == 0;
          if (same) continue;
          if (wrong++ == 0)
            first = "sequence " + std::to_string(b) + ", K/V head " + std::to_string(h) + ", key " +
                    std::to_string(j) +
                    (inside ? ": not the row it was stored in" : ": outside the page pool");
        }
    EXPECT_EQ(wrong, 0) << wrong << " keys found at the wrong place; the first: " << first;
  }
}

TEST(CpuExerciseCh09Paged, DecodeOverShuffledPagesEqualsTheReference) {
  for (int64_t page : {16, 64, 256})
    for (int64_t seq_q : {1, 7})
      for (bool causal : {false, true}) {
        const PagedShape s = paged(page, seq_q, causal);
        SCOPED_TRACE(s.str());
        const int64_t d = s.head_dim, group = s.heads / s.kv_heads();
        const int64_t n = total_keys() * s.kv_heads() * d;
        const std::vector<float> q = fa::random_normal(s.q_numel(), 910 + page + seq_q);
        const std::vector<float> k = fa::random_normal(n, 911 + page);
        const std::vector<float> v = fa::random_normal(n, 912 + page);
        const fa::ch09::PagedCache c =
            fa::ch09::build_paged_cache(s, k.data(), v.data(), 913 + page);
        std::vector<double> O(s.q_numel()), L(s.lse_numel());
        fa::ch09::paged_split_forward(s, q.data(), c, /*split_len=*/100, O.data(), L.data());
        double max_o = 0, max_l = 0;
        int64_t bad = 0;
        for (int64_t b = 0; b < s.batch(); ++b)
          for (int64_t h = 0; h < s.heads; ++h) {
            // The reference reads the contiguous K and V the pages were made from.
            const int64_t len = kLens[b];
            const int64_t kv0 = fa::ch09::contiguous_offset(s, b) + (h / group) * len * d;
            fa::HeadView view;
            view.q = q.data() + (b * s.heads + h) * s.seq_q * d;
            view.k = k.data() + kv0;
            view.v = v.data() + kv0;
            view.seq_q = s.seq_q;
            view.seq_k = len;
            view.d = d;
            view.causal = s.causal;
            view.scale = s.sequence(b).softmax_scale();
            std::vector<double> Or(s.seq_q * d), Lr(s.seq_q);
            fa::attention_forward_ref_head(view, {}, Or.data(), Lr.data());
            const int64_t row0 = (b * s.heads + h) * s.seq_q;
            for (int64_t x = 0; x < s.seq_q * d; ++x) {
              const double e = std::fabs(O[row0 * d + x] - Or[x]);
              if (!(e <= 1e-12)) ++bad;  // NaN counts
              if (e > max_o) max_o = e;
            }
            for (int64_t i = 0; i < s.seq_q; ++i) {
              const double got = L[row0 + i], want = Lr[i];
              if (std::isinf(want) ? got != want : !(std::fabs(got - want) <= 1e-12)) ++bad;
              if (!std::isinf(want) && std::fabs(got - want) > max_l) max_l = std::fabs(got - want);
            }
          }
        EXPECT_EQ(bad, 0) << "elements of O and L off by more than 1e-12 (or NaN): max |O err| "
                          << max_o << ", max |L err| " << max_l;
      }
}

}  // namespace
