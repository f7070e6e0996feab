// ch05_cpu_model.h: the FlashAttention-2 forward pass as plain CPU loops, tile by tile.
//
// This is the algorithm of notes/05_flash_forward.md with nothing GPU-specific in the way: one Q
// tile of Br rows at a time, an inner loop over K/V tiles of Bc keys, a running max m and a
// running sum l per query row, an unnormalised output accumulator rescaled by exp(m_old - m_new),
// and one division by l at the very end. L = m + log(l) is kept for the backward pass.
//
// Causal masking is bottom-right aligned (shapes.h). Tiles entirely above the diagonal are never
// visited, tiles entirely below it are used without a mask, and only the tiles that the diagonal
// crosses are masked element by element (the "STAGE" classification of the notes).
//
// The model is templated on the accumulation type so the tests can run it in double (it must
// then agree with the float64 reference to ~1e-12) and in float (what the GPU kernels do).
#pragma once
#include <cstdint>
#include <vector>

#include "reference.h"
#include "shapes.h"

namespace fa::ch05 {

// How the K/V tiles of one run were classified (summed over every Q tile and head).
struct TileCounts {
  int64_t full = 0;     // every (query, key) pair of the tile is visible: no mask
  int64_t masked = 0;   // the causal diagonal or the ragged end of seq_k crosses the tile
  int64_t skipped = 0;  // entirely above the causal diagonal: never loaded
};

struct TiledForward {
  std::vector<double> O;  // [batch, heads, seq_q, head_dim]
  std::vector<double> L;  // [batch, heads, seq_q]; -inf for rows that see no key
  TileCounts tiles;
};

// One head (HeadView from reference.h: q [seq_q, d], k and v [seq_k, d]). O is [seq_q, d], L is
// [seq_q]. Acc is float or double: the type of m, l, S, P and the O accumulator.
template <class Acc>
void flash_forward_head(const HeadView& h, int64_t Br, int64_t Bc, double* O, double* L,
                        TileCounts* counts = nullptr);

// Every head of a [batch, heads, seq, d] problem.
template <class Acc>
TiledForward flash_forward_model(const float* q, const float* k, const float* v,
                                 const AttentionShape& s, int64_t Br, int64_t Bc);

// The naive "per-block softmax" that the notes warn about: each K/V tile is softmax-normalised on
// its own and the tile outputs are simply added. Kept so a test can show that it is wrong
// whenever there is more than one tile (and right when there is exactly one).
void per_block_softmax_wrong_head(const HeadView& h, int64_t Bc, double* O);

}  // namespace fa::ch05
