// GENERATED from chapters/05_flash_forward/ch05_cpu_model.cpp by fa_make_exercise: this is the exercise.
// Fill in every TODO(exercise) block; the tests and benchmarks run your version when the
// project is configured with -DFA_BUILD_EXERCISES=ON (preset "exercises").
// ch05_cpu_model.cpp: the tiled FlashAttention-2 forward pass on the CPU (see ch05_cpu_model.h).
// Every loop below has a counterpart in v1_scalar_fp32.cu; the names are the paper's.
// A CPU exercise (notes/coursework.md): the causal tile classes and the online rescale.
// EXERCISE-KERNELS: cpu/05_tiled_forward
#include "ch05_cpu_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "check.h"
#include "exercise.h"

namespace fa::ch05 {

template <class Acc>
void flash_forward_head(const HeadView& h, int64_t Br, int64_t Bc, double* O, double* L,
                        TileCounts* counts) {
  FA_REQUIRE(Br > 0 && Bc > 0, "tile sizes must be positive");
  const Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  const int64_t Nq = h.seq_q, Nk = h.seq_k, D = h.d;
  const Acc scale = static_cast<Acc>(h.scale);
  // Bottom-right alignment (shapes.h): query i sees keys j <= last_key(i).
  auto last_key = [&](int64_t i) { return causal_last_key(i, Nq, Nk); };

  // Per-tile state, sized once: S and P are Br x Bc, the accumulator Br x D.
  std::vector<Acc> S(Br * Bc), m(Br), l(Br), acc(Br * D);

  // ---- The outer loop: one Q tile (Br query rows) at a time. On the GPU each iteration is a
  // thread block, and they all run in parallel: this is FlashAttention-2's loop order.
  for (int64_t row0 = 0; row0 < Nq; row0 += Br) {
    const int64_t rows = std::min(Br, Nq - row0);
    std::fill(m.begin(), m.end(), kNegInf);
    std::fill(l.begin(), l.end(), Acc(0));
    std::fill(acc.begin(), acc.end(), Acc(0));

    const int64_t last_row = row0 + rows - 1;
    // TODO(exercise tile-skip): where the key loop of this Q tile may stop: past some key no row of the tile sees anything, so the tiles after it are never loaded (without causal masking, every key is seen); stay within the sequence
    const int64_t kv_end = fa::exercise_todo<int64_t>("cpu/05_tiled_forward", "tile-skip");
    if (counts != nullptr) {
      const int64_t all_tiles = ceil_div(Nk, Bc), visited = ceil_div(kv_end, Bc);
      counts->skipped += all_tiles - visited;
    }

    // ---- The inner loop: K/V tiles of Bc keys.
    for (int64_t col0 = 0; col0 < kv_end; col0 += Bc) {
      const int64_t cols = std::min(Bc, Nk - col0);
      // Ragged ends need no mask here: the loops stop at `cols` (the GPU kernel pads the tile and
      // must mask them).
      // TODO(exercise tile-mask): does this tile need the element-wise causal mask? Only when some row of the Q tile must not see some key of it; ask which row sees the fewest keys
      const bool diagonal = fa::exercise_todo<bool>("cpu/05_tiled_forward", "tile-mask");
      if (counts != nullptr) (diagonal || cols < Bc ? counts->masked : counts->full) += 1;

      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = row0 + r;
        const float* qi = h.q + i * D;
        // S = scale * Q_tile K_tile^T for this row, with -inf where the mask hides a key.
        Acc m_tile = kNegInf;
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t j = col0 + c;
          Acc s = kNegInf;
          if (!diagonal || j <= last_key(i)) {
            const float* kj = h.k + j * D;
            Acc dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += Acc(qi[d]) * Acc(kj[d]);
            s = scale * dot;
          }
          S[r * Bc + c] = s;
          m_tile = std::max(m_tile, s);
        }
        // The new running max. If it is still -inf, this row has seen no key yet: nothing to add
        // (and exp(-inf - (-inf)) would be NaN).
        // TODO(exercise online-rescale): take the new running max of the row (skip the row while it is still -inf); rescale what l and the O accumulator hold by the factor that moves them from the old max to the new one; then add this tile's unnormalised probabilities to l and their weighted rows of V to the accumulator, and remember the new max
        fa::exercise_todo("cpu/05_tiled_forward", "online-rescale");
      }
    }

    // ---- Epilogue: one division per row, and L = m + log(l) for the backward pass.
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = row0 + r;
      const bool sees_nothing = l[r] == Acc(0);
      for (int64_t d = 0; d < D; ++d)
        O[i * D + d] = sees_nothing ? 0.0 : double(acc[r * D + d] / l[r]);
      L[i] =
          sees_nothing ? -std::numeric_limits<double>::infinity() : double(m[r] + std::log(l[r]));
    }
  }
}

template <class Acc>
TiledForward flash_forward_model(const float* q, const float* k, const float* v,
                                 const AttentionShape& s, int64_t Br, int64_t Bc) {
  TiledForward out;
  out.O.assign(s.q_numel(), 0.0);
  out.L.assign(s.lse_numel(), 0.0);
  for (int64_t bh = 0; bh < s.bh(); ++bh) {
    HeadView h = head_view(s, q, k, v, bh);
    flash_forward_head<Acc>(h, Br, Bc, out.O.data() + bh * s.seq_q * s.head_dim,
                            out.L.data() + bh * s.seq_q, &out.tiles);
  }
  return out;
}

void per_block_softmax_wrong_head(const HeadView& h, int64_t Bc, double* O) {
  const int64_t Nq = h.seq_q, Nk = h.seq_k, D = h.d;
  std::fill(O, O + Nq * D, 0.0);
  std::vector<double> s(Bc);
  for (int64_t i = 0; i < Nq; ++i)
    for (int64_t col0 = 0; col0 < Nk; col0 += Bc) {
      const int64_t cols = std::min(Bc, Nk - col0);
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(h.q[i * D + d]) * h.k[(col0 + c) * D + d];
        s[c] = h.scale * dot;
        mx = std::max(mx, s[c]);
      }
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(s[c] - mx);
      // The mistake: this tile's probabilities sum to 1 on their own, so every tile gets the
      // same total weight no matter how large its scores are compared with the other tiles'.
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t d = 0; d < D; ++d)
          O[i * D + d] += std::exp(s[c] - mx) / sum * h.v[(col0 + c) * D + d];
    }
}

template void flash_forward_head<float>(const HeadView&, int64_t, int64_t, double*, double*,
                                        TileCounts*);
template void flash_forward_head<double>(const HeadView&, int64_t, int64_t, double*, double*,
                                         TileCounts*);
template TiledForward flash_forward_model<float>(const float*, const float*, const float*,
                                                 const AttentionShape&, int64_t, int64_t);
template TiledForward flash_forward_model<double>(const float*, const float*, const float*,
                                                  const AttentionShape&, int64_t, int64_t);

}  // namespace fa::ch05

// Registered so that a failing test names this file (see common/exercise.h).
#include "registry.h"
FA_REGISTER(Exercise, {"chapters/05_flash_forward/exercises/ch05_cpu_model.cpp", {"cpu/05_tiled_forward"}, 3});
