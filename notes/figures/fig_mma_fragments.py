#!/usr/bin/env python3
"""fig_mma_fragments.svg: who holds what in mma.sync.m16n8k16 (bf16/fp16 in, fp32 accumulators),
and how the accumulators of S become the A operand of P V without leaving the lanes.

The layouts are the PTX ISA's ("Matrix Fragments for mma.m16n8k16 with floating point type"),
as common/device/mma.cuh states them: g = lane / 4 (groupID), t = lane % 4 (threadID_in_group);
  A 16x16: a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, +9]   a[3] = A[g+8][2t+8, +9]
  B 16x8:  b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
  C 16x8:  c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
The functions below compute the owner of every element from these formulas; the drawing only
colours and labels what they return.
"""
from matplotlib.collections import LineCollection

import figstyle as fs

CELL = 2.6  # drawing units per matrix element
HIGHLIGHT_LANE = 5  # followed through every panel (g = 1, t = 1)

REG_COLOURS = [fs.SKY, fs.ORANGE, fs.GREEN, fs.PURPLE]  # register 0, 1, 2, 3 of a fragment
REG_FILLS = [fs.tint(c, 0.45) for c in REG_COLOURS]


def a_owner(row, col):
    """(lane, register) holding A[row][col] of a 16x16 A fragment."""
    lane = 4 * (row % 8) + (col % 8) // 2
    reg = (row // 8) + 2 * (col // 8)
    return lane, reg


def b_owner(k, n):
    """(lane, register) holding B[k][n] of a 16x8 B fragment."""
    return 4 * n + (k % 8) // 2, k // 8


def c_owner(row, col):
    """(lane, first element index) holding C[row][col] of a 16x8 accumulator: c[i], c[i+1]."""
    return 4 * (row % 8) + col // 2, 2 * (row // 8)


def _check_layouts():
    """Each lane owns exactly its 8 A, 4 B and 4 C elements: the formulas above are a partition."""
    for owner, rows, cols, per_lane in ((a_owner, 16, 16, 8), (b_owner, 16, 8, 4),
                                        (c_owner, 16, 8, 4)):
        counts = [0] * 32
        for r in range(rows):
            for c in range(cols):
                counts[owner(r, c)[0]] += 1
        assert counts == [per_lane] * 32, owner.__name__
    # The repack: P's A fragment for keys 16kk .. 16kk+15 is held by the same lanes as the S
    # accumulators of n8 tiles 2kk (keys 0-7 of the slice) and 2kk + 1 (keys 8-15).
    for r in range(16):
        for c in range(16):
            lane, reg = a_owner(r, c)
            c_lane, first = c_owner(r, c % 8)
            assert lane == c_lane
            assert reg == (first // 2) + 2 * (c // 8)


def index_labels(ax, x0, top, rows, cols, step_rows=1, step_cols=1):
    for c in range(0, cols, step_cols):
        fs.text(ax, x0 + (c + 0.5) * CELL, top + 0.9, str(c), size=5.5, ha="center",
                color="#555555")
    for r in range(0, rows, step_rows):
        fs.text(ax, x0 - 0.6, top - (r + 0.5) * CELL, str(r), size=5.5, ha="right",
                color="#555555")


def draw_pairs(ax, x0, top, rows, cols, owner_of_pair, fill_of_pair, vertical=False):
    """Draw a rows x cols matrix whose elements come in pairs held by one lane (two 16-bit halves
    of one register, or two consecutive fp32 accumulators): one box per pair, labelled by lane."""
    # The boundary between the two elements of each pair: one thin line per pair, drawn as a
    # single path on top of the boxes.
    if vertical:
        segs = [[(x0 + c * CELL, top - (r + 1) * CELL), (x0 + (c + 1) * CELL, top - (r + 1) * CELL)]
                for r in range(0, rows, 2) for c in range(cols)]
    else:
        segs = [[(x0 + (c + 1) * CELL, top - r * CELL), (x0 + (c + 1) * CELL, top - (r + 1) * CELL)]
                for r in range(rows) for c in range(0, cols, 2)]
    ax.add_collection(LineCollection(segs, colors="#999999", linewidths=0.3, zorder=3.5))
    pairs = [(r, c) for r in range(0, rows, 2) for c in range(cols)] if vertical else [
        (r, c) for r in range(rows) for c in range(0, cols, 2)]
    for r, c in pairs:
        w, h = (CELL, 2 * CELL) if vertical else (2 * CELL, CELL)
        lane = owner_of_pair(r, c)
        x, y = x0 + c * CELL, top - r * CELL - h
        bold = lane == HIGHLIGHT_LANE
        fs.rect(ax, x, y, w, h, fc=fill_of_pair(r, c), ec=fs.INK if bold else "#666666",
                lw=1.6 if bold else 0.5, zorder=3 if bold else 2)
        fs.text(ax, x + w / 2, y + h / 2, str(lane), size=6.5, ha="center",
                weight="bold" if bold else "normal", zorder=4)


def legend_lines(ax, x, y, entries, dy=2.3, size=7.5):
    for i, (fill, label) in enumerate(entries):
        fs.swatch(ax, x, y - i * dy, fill, label, size=size, w=1.8, h=1.3)


def main(out_dir):
    _check_layouts()
    fig, ax = fs.canvas(150, 128)
    fs.text(ax, 75, 125, "mma.sync.aligned.m16n8k16: which lane holds which element "
            "(D = A·B + C, one warp of 32 lanes)", size=12, ha="center", weight="bold")
    fs.text(ax, 75, 121.6, "g = lane / 4 (groupID, 0-7),  t = lane %% 4 (thread in group, 0-3).  "
            "Each box is one 32-bit register (two 16-bit values) or two fp32 accumulators; "
            "the number is the lane.  Lane %d (g = 1, t = 1) is outlined everywhere."
            % HIGHLIGHT_LANE, size=8, ha="center")

    # ---- Top row: A, B, C.
    top = 112.0
    ax_x, bx_x, cx_x = 7.0, 62.0, 92.0
    fs.text(ax, ax_x, top + 3.6, "A: 16 × 16 (row major), 4 registers per lane", size=9.5,
            weight="bold")
    index_labels(ax, ax_x, top, 16, 16)
    draw_pairs(ax, ax_x, top, 16, 16, lambda r, c: a_owner(r, c)[0],
               lambda r, c: REG_FILLS[a_owner(r, c)[1]])
    # ldmatrix.x4's four 8x8 matrices are exactly the four registers.
    # Labelled outside the grid: m0, m1 on the left (rows 0-7, 8-15), m2, m3 on the right.
    for i, (qr, qc) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1))):
        fs.rect(ax, ax_x + qc * 8 * CELL, top - (qr + 1) * 8 * CELL, 8 * CELL, 8 * CELL,
                ec=fs.INK, lw=1.3, zorder=5)
        fs.text(ax, ax_x - 4.2 if qc == 0 else ax_x + 16 * CELL + 1.0,
                top - (qr + 0.5) * 8 * CELL, "m%d" % i, size=8, ha="right" if qc == 0 else "left",
                weight="bold")
    ya = top - 16 * CELL - 2.6
    legend_lines(ax, ax_x, ya, [
        (REG_FILLS[0], "a[0] = A[g][2t, 2t+1]"),
        (REG_FILLS[1], "a[1] = A[g+8][2t, 2t+1]"),
        (REG_FILLS[2], "a[2] = A[g][2t+8, 2t+9]"),
        (REG_FILLS[3], "a[3] = A[g+8][2t+8, 2t+9]"),
    ])
    fs.text(ax, ax_x + 22, ya + 0.7, "ldmatrix.x4 loads it in one instruction:\n"
            "lanes 8i … 8i+7 give the addresses of the\n8 rows of 8×8 matrix m_i; every lane gets\n"
            "register i = its 2 elements of m_i\n(row lane/4, columns 2·(lane%4), +1).",
            size=7.2, va="top")

    fs.text(ax, bx_x, top + 3.6, "B: 16 × 8 (column major), 2 registers", size=9.5,
            weight="bold")
    index_labels(ax, bx_x, top, 16, 8)
    draw_pairs(ax, bx_x, top, 16, 8, lambda r, c: b_owner(r, c)[0],
               lambda r, c: REG_FILLS[b_owner(r, c)[1]], vertical=True)
    legend_lines(ax, bx_x, ya, [
        (REG_FILLS[0], "b[0] = B[2t, 2t+1][g]"),
        (REG_FILLS[1], "b[1] = B[2t+8, 2t+9][g]"),
    ])
    fs.text(ax, bx_x, ya - 5.2, "Rows k, columns n. A column of B is\n16 consecutive k: "
            "for S = Q·Kᵀ that is a\nrow of K as stored (ldmatrix, no .trans);\n"
            "for P·V a column of V (ldmatrix .trans).", size=7.2, va="top")

    fs.text(ax, cx_x, top + 3.6, "C, D: 16 × 8 fp32, 4 registers", size=9.5, weight="bold")
    index_labels(ax, cx_x, top, 16, 8)
    c_fills = [fs.tint(fs.BLUE, 0.3), fs.tint(fs.VERMILLION, 0.3)]
    draw_pairs(ax, cx_x, top, 16, 8, lambda r, c: c_owner(r, c)[0],
               lambda r, c: c_fills[c_owner(r, c)[1] // 2])
    legend_lines(ax, cx_x, ya, [
        (c_fills[0], "c[0], c[1] = C[g][2t, 2t+1]"),
        (c_fills[1], "c[2], c[3] = C[g+8][2t, 2t+1]"),
    ])
    fs.text(ax, cx_x, ya - 5.2, "A quad (4 lanes, same g) holds rows g\nand g+8 whole: a row "
            "max or sum is\n2 local ops + 2 shuffles (xor 1, xor 2).", size=7.2, va="top")

    note_x = 122.0
    fs.rounded(ax, note_x, top - 30.0, 26.0, 30.0, fc="#F6F6F6", ec="#AAAAAA", lw=0.6)
    fs.text(ax, note_x + 1.2, top - 1.6, "In the forward kernel\n(per m16 tile of a warp)",
            size=8, va="top", weight="bold")
    fs.text(ax, note_x + 1.2, top - 8.0,
            "S = Q·Kᵀ:\n  A = 16 rows of Q × 16 dims\n  B = 16 dims × 8 keys (K rows)\n"
            "  C = S, 16 rows × 8 keys\n\n"
            "O += P·V:\n  A = P, 16 rows × 16 keys\n  B = 16 keys × 8 dims of V\n"
            "  C = O, 16 rows × 8 dims\n\n"
            "P is born as C (fp32) and\nis needed as A (16-bit):\nsee below.", size=7.4,
            va="top", linespacing=1.35)

    # ---- Bottom row: two S accumulator tiles become one A fragment of P.
    top2 = 47.0
    fs.text(ax, 7.0, top2 + 7.6, "P stays in registers: the accumulators of two n8 tiles of S "
            "are, element for element, the A fragment of P for one k16 slice of P·V",
            size=10, weight="bold")
    sx0, sx1 = 7.0, 7.0 + 8 * CELL + 2.5
    for k, x0 in enumerate((sx0, sx1)):
        fs.text(ax, x0, top2 + 3.6, "s[2kk+%d]: keys %d-%d (fp32)" % (k, 8 * k, 8 * k + 7)
                if k else "s[2kk]: keys 0-7 (fp32)", size=8, weight="bold")
        index_labels(ax, x0, top2, 16, 8)
        draw_pairs(ax, x0, top2, 16, 8, lambda r, c: c_owner(r, c)[0],
                   lambda r, c, k=k: REG_FILLS[c_owner(r, c)[1] // 2 + 2 * k])
    ax_p = 93.0
    fs.text(ax, ax_p, top2 + 3.6, "A fragment of P, keys 16kk … 16kk+15 (16-bit)", size=8,
            weight="bold")
    index_labels(ax, ax_p, top2, 16, 16)
    draw_pairs(ax, ax_p, top2, 16, 16, lambda r, c: a_owner(r, c)[0],
               lambda r, c: REG_FILLS[a_owner(r, c)[1]])

    # The arrow and lane 5's registers between them.
    ax0, ax1 = sx1 + 8 * CELL + 2.0, ax_p - 3.0
    fs.arrow(ax, (ax0, top2 - 8), (ax1, top2 - 8), lw=1.6)
    fs.text(ax, (ax0 + ax1) / 2, top2 - 6.0, "pack2: two fp32 → one register of two bf16",
            size=7.8, ha="center", va="bottom")
    fs.text(ax, (ax0 + ax1) / 2, top2 - 10.0, "no shuffle, no shared memory", size=7.8,
            ha="center", va="top", style="italic")
    tx, ty = ax0 + 0.5, top2 - 15.5
    fs.text(ax, tx, ty, "Lane %d (g = 1, t = 1):" % HIGHLIGHT_LANE, size=7.8, weight="bold")
    rows = [
        ("s[2kk][0], s[2kk][1]", "a[0]", "P[1][2, 3]"),
        ("s[2kk][2], s[2kk][3]", "a[1]", "P[9][2, 3]"),
        ("s[2kk+1][0], s[2kk+1][1]", "a[2]", "P[1][10, 11]"),
        ("s[2kk+1][2], s[2kk+1][3]", "a[3]", "P[9][10, 11]"),
    ]
    for i, (src, dst, elems) in enumerate(rows):
        y = ty - 3.0 - 2.6 * i
        fs.rect(ax, tx, y - 0.7, 1.4, 1.4, fc=REG_FILLS[i], ec=fs.INK, lw=0.4)
        fs.text(ax, tx + 2.0, y, "%s → %s = %s" % (src, dst, elems), size=7.2)
    fs.text(ax, 7.0, 2.2, "Why it works: C's columns 2t, 2t+1 of rows g and g+8 are A's columns "
            "2t, 2t+1 (a[0], a[1]) and, from the second tile, 2t+8, 2t+9 (a[2], a[3]). "
            "The lanes already hold P where the next mma wants it.", size=7.8)
    fs.save(fig, out_dir, "fig_mma_fragments")


if __name__ == "__main__":
    fs.run_alone(main)
