// ch08_split_kv.h: the split-KV ("flash-decoding") forward, on the host: a CPU model of its
// arithmetic. The chapter program and the tests use it; the kernel (v1_split_kv.cu) follows the
// launch plan (plan_split_kv, in common/split_kv_plan.h: chapter 09's paged decode follows it too)
// and this model step by step.
//
// A block of the split kernel owns one K/V head of one sequence, a tile of at most kMaxRows query
// rows that read it (the rows of all `group` query heads that share the K/V head: GQA's saving is
// that K/V are loaded once for all of them), and one split: a contiguous range of keys. It writes
// the partial state (m, l, o) of each of its rows, and a second kernel merges the splits of a row
// with chapter 02's pair merge:
//
//   (m1, l1, o1) (+) (m2, l2, o2) = (M, l1 a1 + l2 a2, o1 a1 + o2 a2),  a_i = e^(m_i - M),
//   M = max(m1, m2);  O = o / l,  L = M + ln l.
//
// The (m, l) part is chapter 02's operator; o rides along with the same factors. Associativity is
// what makes any split of the keys, merged in any grouping, equal the whole row.
#pragma once
#include <cstdint>
#include <vector>

#include "reference.h"
#include "shapes.h"
#include "split_kv_plan.h"  // the launch plan, kMaxRows

namespace fa {
namespace ch08 {

// One query row's partial state over keys [k0, k1): m (max of the scaled scores, -inf when the
// row sees none of these keys), l = sum of e^(s - m), and the unnormalised o = sum of e^(s - m) v.
struct Partial {
  double m = 0, l = 0;
  std::vector<double> o;
};
Partial partial_over_keys(const HeadView& h, int64_t row, int64_t k0, int64_t k1);
// The pair merge above (chapter 02's (m, l) operator, with o carried along).
Partial merge(const Partial& a, const Partial& b);

// The split-KV forward of one head in double: each row's keys cut into `num_splits` ranges of
// split_len keys (the kernel's split), partials merged left to right. O is [seq_q, d], L [seq_q].
void split_kv_forward_head(const HeadView& h, int64_t split_len, double* O, double* L);

// 08/v4_block_stream and v5's partition of the same splits: a split is walked in tiles of `tile` keys, and warp
// w of `warps` takes keys [w * tile / warps, (w + 1) * tile / warps) of every tile, so its keys are
// every warps-th slice of the split, not a contiguous range. Each warp's partial is the merge of
// its slices; the block folds its warps' partials in warp order, then the splits are merged left to
// right. Associativity and commutativity of the merge say this equals the whole row.
void block_stream_forward_head(const HeadView& h, int64_t split_len, int64_t tile, int64_t warps,
                               double* O, double* L);

}  // namespace ch08
}  // namespace fa
