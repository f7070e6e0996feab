// ch07_dq_order.h: the order in which the key blocks of one head add their dQ tiles into each
// query tile in 07/bwd_v3_deterministic (sm90a/bwd_v3_deterministic.cu: its header says why this
// order and why it cannot deadlock). Plain integer arithmetic shared by the kernel (device) and
// the CPU test that checks it against a brute-force walk and sort of every block's adds
// (tests/cpu/test_ch07_dq_order.cpp), for ragged shapes, seq_q != seq_k, causal or not.
//
// One head: n_qt query tiles of Br rows, n_kt key blocks of Bc keys. Key block n visits, one per
// iteration j = 0, 1, .., the query tiles that see its keys:
//   causal (bottom-right): tiles f(n), f(n) + 1, .., n_qt - 1, where f(n) is the tile of the
//     first query that sees key Bc n (0 when every query sees it); f never decreases with n;
//   full, rotated: all n_qt tiles, from tile n mod n_qt on, wrapping around after the last;
//   full, not rotated: all n_qt tiles from tile 0 (used when the blocks of a head cannot all be
//     resident at once: see the kernel's header).
// The adds into query tile i come in the order in which the blocks would reach tile i if all
// of them ran at one speed, which is ascending iteration index (the iteration at which a block
// visits tile i), ties broken by descending n (the kernel launches a head's key blocks from the
// last to the first: the block launched earlier adds first):
//   causal: block n is at iteration i - f(n); ties: equal f, the blocks whose keys every query
//     sees when seq_k > seq_q. Since f never decreases, that is simply descending n: block m
//     adds before block n exactly when m > n;
//   full, rotated: block n is at iteration (i - n) mod n_qt; ties: blocks n_qt apart, only when
//     n_kt > n_qt;
//   full, not rotated: every block is at iteration i: descending n, as causal.
// rank(j): how many blocks add into the tile of block n's iteration j before block n does.
// A block whose dQ tile is split in two adders (the D = 64 key split) has position 2 rank + w
// for its warpgroup w; that product is the kernel's, not this header's.
#pragma once
#include <cstdint>

#include "shapes.h"  // FA_HD, causal_first_query

namespace fa::ch07 {

// One key block's walk: the tiles it visits and its rank at each. br: query rows per tile (Br);
// bc: keys per block (Bc). The constructor does the divisions, once per block; tile() and rank()
// are a few additions and comparisons (the kernel calls them every iteration). Trivially
// copyable: the kernel keeps its block's walk in shared memory.
// Needs n_qt and n_kt below 2^32 (the kernel's launcher makes sure): the divisions by n_qt are
// 32-bit, as a 64-bit division on the GPU is a called subroutine whose saved registers the
// kernel has no room for.
template <int64_t br, int64_t bc>
struct DqWalk {
  int64_t n;           // the key block
  int64_t n_qt, n_kt;  // query tiles and key blocks of the head
  int64_t off;         // seq_k - seq_q: query i sees keys j <= i + off (causal)
  int64_t first;       // the tile of iteration 0
  int64_t iters;       // how many tiles the block visits (causal: possibly none)
  int64_t a, b, ties;  // rotated: n_kt / n_qt, n_kt % n_qt, (n_kt - 1 - n) / n_qt (see rank)
  bool causal;
  bool rotate;  // full only: block n starts at tile n mod n_qt

  DqWalk() = default;
  FA_HD DqWalk(int64_t seq_q, int64_t seq_k, bool causal_, bool rotate_, int64_t n_)
      : n(n_),
        n_qt((seq_q + br - 1) / br),
        n_kt((seq_k + bc - 1) / bc),
        off(seq_k - seq_q),
        first(0),
        iters(0),
        a(0),
        b(0),
        ties(0),
        causal(causal_),
        rotate(rotate_ && !causal_) {
    if (causal) {
      const int64_t q = causal_first_query(bc * n, seq_q, seq_k);  // f(n): its tile
      first = q > 0 ? q / br : 0;
      iters = first < n_qt ? n_qt - first : 0;
    } else {
      first = rotate && n_qt > 0 ? uint32_t(n) % uint32_t(n_qt) : 0;
      iters = n_qt;
      if (rotate && n_qt > 0) {
        a = uint32_t(n_kt) / uint32_t(n_qt);
        b = uint32_t(n_kt) % uint32_t(n_qt);
        ties = uint32_t(n_kt - 1 - n) / uint32_t(n_qt);
      }
    }
  }

  // The query tile of iteration j (0 <= j < iters).
  FA_HD int64_t tile(int64_t j) const {
    const int64_t i = first + j;
    return i >= n_qt ? i - n_qt : i;  // wraps only when rotated
  }
  // Causal: how many key blocks visit query tile i, i.e. have f(m) <= i; they are blocks
  // 0 .. G(i) - 1 (f never decreases). f(m) <= i exactly when the first query that sees key Bc m,
  // Bc m - off, lies before the end of tile i, Br (i + 1): when m < (Br (i + 1) + off) / Bc.
  FA_HD int64_t causal_blocks_upto(int64_t i) const {
    const int64_t x = br * (i + 1) + off;  // m < x / Bc
    if (i < 0 || x <= 0) return 0;
    const int64_t g = (x + bc - 1) / bc;  // the m with Bc m < x: 0 .. ceil(x / Bc) - 1
    return g < n_kt ? g : n_kt;
  }
  // How many blocks add into tile(j) before this block does.
  FA_HD int64_t rank(int64_t j) const {
    if (causal) return causal_blocks_upto(tile(j)) - 1 - n;  // blocks n + 1 .. G(i) - 1
    if (!rotate) return n_kt - 1 - n;                        // blocks n + 1 .. n_kt - 1
    // Rotated: at tile i = tile(j) block m is at iteration (i - m) mod n_qt, so the blocks at
    // iterations d = 0 .. j - 1 are those with m mod n_qt = (i - d) mod n_qt: the residues
    // i - j + 1 .. i, taken cyclically. Residue r holds a = n_kt / n_qt blocks, one more when
    // r < b = n_kt % n_qt. Ties (iteration j itself, residue n mod n_qt): the blocks
    // n + n_qt, n + 2 n_qt, .. below n_kt, ties = (n_kt - 1 - n) / n_qt of them.
    const int64_t i = tile(j);
    const int64_t lo = i - j + 1;  // > i - n_qt: the residues lo .. i, or 0 .. i and lo + n_qt ..
    int64_t below_b = i + 1 < b ? i + 1 : b;  // residues 0 .. i below b
    if (lo > 0)
      below_b -= lo < b ? lo : b;  // minus residues 0 .. lo - 1 below b
    else if (lo < 0 && b > lo + n_qt)
      below_b += b - (lo + n_qt);  // plus residues lo + n_qt .. n_qt - 1 below b
    return j * a + below_b + ties;
  }
};

}  // namespace fa::ch07
