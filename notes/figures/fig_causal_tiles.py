#!/usr/bin/env python3
"""fig_causal_tiles.svg: the three classes of (Q tile, K tile) pairs under the causal mask, for a
square and two non-square problems, with the repository's bottom-right alignment: query row i sees
key j exactly when j <= i + N_k - N_q (common/shapes.h causal_last_key, notes/conventions.md).

Per pair of tiles:
  full     every row of the Q tile sees every key of the K tile: no mask at all;
  partial  some (row, key) pairs are masked: the kernel applies the element-wise mask;
  skipped  no row sees any key of it: never loaded, never computed (the loop stops before it).
Tiles of Br = 128 query rows and Bc = 64 keys, as the tensor-core forward at D <= 128. The
fraction of (i, j) pairs that are visible is printed per panel: it is one half only for a large
square problem (visible_pairs in common/shapes.h counts it the same way).
"""
import figstyle as fs

BR, BC = 128, 64
SCALE = 0.075  # drawing units per row or key

FULL = fs.tint(fs.GREEN, 0.55)
PARTIAL = fs.tint(fs.ORANGE, 0.75)
SKIPPED = "#F0F0F0"

PROBLEMS = [
    (512, 512, "Square: N_q = N_k = 512", "row i sees keys 0 … i"),
    (256, 512, "N_q = 256 < N_k = 512", "the queries are the last 256 positions"),
    (512, 320, "N_q = 512 > N_k = 320", "the first 192 rows see no key"),
]


def last_key(i, nq, nk):
    """common/shapes.h causal_last_key: the last key row i may see (negative: none)."""
    return i + (nk - nq)


def tile_class(qi, kj, nq, nk):
    rows = range(qi * BR, min((qi + 1) * BR, nq))
    k0, k1 = kj * BC, min((kj + 1) * BC, nk) - 1
    if all(last_key(i, nq, nk) >= k1 for i in rows):
        return "full"
    if all(last_key(i, nq, nk) < k0 for i in rows):
        return "skipped"
    return "partial"


def visible_pairs(nq, nk):
    return sum(min(max(last_key(i, nq, nk) + 1, 0), nk) for i in range(nq))


def draw_problem(ax, x0, top, nq, nk, title, subtitle):
    fills = {"full": FULL, "partial": PARTIAL, "skipped": SKIPPED}
    counts = {"full": 0, "partial": 0, "skipped": 0}
    fs.text(ax, x0, top + 8.6, title, size=9, weight="bold")
    fs.text(ax, x0, top + 6.0, subtitle, size=7.6)
    n_qt, n_kt = -(-nq // BR), -(-nk // BC)
    for qi in range(n_qt):
        for kj in range(n_kt):
            cls = tile_class(qi, kj, nq, nk)
            counts[cls] += 1
            h = (min((qi + 1) * BR, nq) - qi * BR) * SCALE
            w = (min((kj + 1) * BC, nk) - kj * BC) * SCALE
            x, y = x0 + kj * BC * SCALE, top - qi * BR * SCALE - h
            fs.rect(ax, x, y, w, h, fc=fills[cls], ec="#555555", lw=0.6,
                    hatch="xx" if cls == "skipped" else None)
    # Rows that see no key at all.
    blind = max(0, nq - nk)
    if blind:
        fs.rect(ax, x0 - 4.2, top - blind * SCALE, 1.2, blind * SCALE, fc=fs.VERMILLION,
                ec="none")
        fs.text(ax, x0 - 5.4, top - blind * SCALE / 2, "rows 0-%d: O = 0, L = −∞" % (blind - 1),
                size=6.5, ha="center", rotation=90, color=fs.VERMILLION)
    # The exact boundary: row i sees keys j <= i + N_k - N_q, so the visible region of row i ends
    # at x = i + N_k - N_q + 1 keys.
    # The line x = i + off, clipped to the grid [0, nk] x [0, nq].
    off = nk - nq
    i0 = max(0, -off)
    i1 = min(nq, nk - off)
    if i1 > i0:
        xs = [x0 + (i + off) * SCALE for i in (i0, i1)]
        ys = [top - i * SCALE for i in (i0, i1)]
        ax.plot(xs, ys, color=fs.VERMILLION, lw=1.4, zorder=5)
    # Axes labels.
    fs.text(ax, x0 + nk * SCALE / 2, top + 2.2, "keys j (K tiles of Bc = %d) →" % BC, size=7,
            ha="center")
    for kj in range(n_kt):
        fs.text(ax, x0 + (kj + 0.5) * BC * SCALE, top + 0.8, str(kj * BC), size=5.8,
                ha="center", color="#555555")
    for qi in range(n_qt):
        fs.text(ax, x0 - 0.5, top - qi * BR * SCALE - 0.9, str(qi * BR), size=5.8, ha="right",
                color="#555555")
    fs.text(ax, x0 + nk * SCALE + 1.2, top - nq * SCALE / 2, "query rows i\n(Q tiles of\n"
            "Br = %d)\n↓" % BR, size=7, va="center")
    vis = visible_pairs(nq, nk)
    yb = top - nq * SCALE - 2.5
    fs.text(ax, x0, yb, "tiles: %d full, %d partial, %d skipped of %d" % (
        counts["full"], counts["partial"], counts["skipped"], n_qt * n_kt), size=7.4)
    fs.text(ax, x0, yb - 2.4, "visible (i, j) pairs: %d of %d = %.1f%%" % (
        vis, nq * nk, 100.0 * vis / (nq * nk)), size=7.4)


def main(out_dir):
    fig, ax = fs.canvas(150, 72)
    fs.text(ax, 75, 69.0, "Causal masking by tile class (bottom-right aligned: row i sees keys "
            "j ≤ i + N_k − N_q)", size=12, ha="center", weight="bold")
    top = 54.0
    x = [10.0, 60.0, 116.0]
    for (nq, nk, title, subtitle), x0 in zip(PROBLEMS, x):
        draw_problem(ax, x0, top, nq, nk, title, subtitle)
    ly = 6.0
    fs.swatch(ax, 10.0, ly, FULL, "full: every row sees every key of the tile (no mask)")
    fs.swatch(ax, 60.0, ly, PARTIAL, "partial (on the diagonal): element-wise mask, s = −∞")
    fs.rect(ax, 116.0, ly, 2.0, 1.4, fc=SKIPPED, ec=fs.INK, lw=0.5, hatch="xx")
    fs.text(ax, 118.8, ly + 0.7, "skipped: never loaded or computed", size=8)
    ax.plot([10.0, 12.0], [ly - 2.6, ly - 2.6], color=fs.VERMILLION, lw=1.4)
    fs.text(ax, 12.8, ly - 2.6, "j = i + N_k − N_q: the last key of each row", size=8)
    fs.text(ax, 60.0, ly - 2.6, "The kernels stop the K loop at the last key of the Q tile's "
            "last row, and decide per warp (16 rows) whether to mask.", size=8)
    fs.save(fig, out_dir, "fig_causal_tiles")


if __name__ == "__main__":
    fs.run_alone(main)
