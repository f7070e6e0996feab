#!/usr/bin/env python3
"""fig_quad_transpose.svg: how chapter 07's tuning step t56 stores O 16 bytes a thread. A schematic
of the code (t56_wide_o_stores.cu, store_o_l_16), not a measurement.

One row of O, its columns 32a .. 32a + 31 (a group of four 8-column chunks), and the four lanes of
the quad that hold it. Left: after the accumulators are packed to 16 bits, lane q's register x[jj]
holds columns 8jj + 2q and 8jj + 2q + 1 (the wgmma accumulator layout): a lane holds one pair of
every chunk. Middle: stage 1, a shuffle with lane q ^ 2, swaps the values whose jj bit 1 differs
from q's. Right: stage 2, with lane q ^ 1, swaps the values whose jj bit 0 differs from q's: lane
q now holds chunk q whole, its four pairs in order, 16 contiguous bytes. Cells are coloured by the
lane the value started in; a red edge marks a value that moved in that stage. The script runs the
two stages as the kernel does. Below: what one warp-wide store writes into each of the 8 rows it
touches, before and after (8 L1 tag requests either way).
"""
import figstyle as fs

LANE_COLOURS = fs.QUAD_COLOURS
CELL_W, CELL_H = 11.0, 5.2


def stages():
    """The quad's registers before, after stage 1 and after stage 2, as (source lane, first column)."""
    x = [[(q, 8 * jj + 2 * q) for jj in range(4)] for q in range(4)]
    states = [[list(r) for r in x]]
    new = [list(r) for r in x]
    for q in range(4):  # stage 1, lane q ^ 2: what the partner sends lands where q sent from
        p, hi = q ^ 2, (q & 2) != 0
        for e in range(2):
            sent = x[p][e] if (p & 2) else x[p][2 + e]
            new[q][e if hi else 2 + e] = sent
    x = new
    states.append([list(r) for r in x])
    new = [list(r) for r in x]
    for q in range(4):  # stage 2, lane q ^ 1
        p, odd = q ^ 1, q & 1
        for b in range(2):
            sent = x[p][2 * b] if (p & 1) else x[p][2 * b + 1]
            new[q][2 * b if odd else 2 * b + 1] = sent
    states.append(new)
    return states


def grid(ax, x0, y0, state, before, title):
    fs.text(ax, x0 + 2 * CELL_W, y0 + 4 * CELL_H + 4.0, title, size=8.2, ha="center",
            weight="bold")
    for jj in range(4):
        fs.text(ax, x0 + (jj + 0.5) * CELL_W, y0 + 4 * CELL_H + 1.2, "x[%d]" % jj, size=7.0,
                ha="center")
    for q in range(4):
        y = y0 + (3 - q) * CELL_H
        for jj in range(4):
            lane, col = state[q][jj]
            moved = before is not None and before[q][jj] != state[q][jj]
            fs.rect(ax, x0 + jj * CELL_W, y, CELL_W, CELL_H, fc=LANE_COLOURS[lane],
                    ec=fs.VERMILLION if moved else fs.INK, lw=1.3 if moved else 0.5)
            fs.text(ax, x0 + (jj + 0.5) * CELL_W, y + CELL_H / 2, "%d,%d" % (col, col + 1),
                    size=7.0, ha="center")


def footprint(ax, x0, y, nbytes, label):
    fs.text(ax, x0 - 1.5, y + 1.2, label, size=7.4, ha="right")
    for r in range(8):
        fs.rect(ax, x0 + r * 14.0, y, 12.0, 2.4, fc=fs.GLOBAL_FILL, lw=0.4)
        fs.rect(ax, x0 + r * 14.0, y, 12.0 * nbytes / 64.0, 2.4, fc=fs.tint(fs.BLUE, 0.45),
                lw=0.4)
    fs.text(ax, x0 + 8 * 14.0 + 1.0, y + 1.2, "%d B in each of 8 rows" % nbytes, size=7.2)


def main(out_dir):
    fig, ax = fs.canvas(190, 60)
    fs.text(ax, 95.0, 57.5, "t56: a quad's four lanes trade values so that each stores 16 bytes",
            size=9.5, ha="center", weight="bold")
    states = stages()
    x0s = (26.0, 82.0, 138.0)
    titles = ("packed accumulators", "stage 1: shuffle with lane q^2", "stage 2: with lane q^1")
    for i, (x0, title) in enumerate(zip(x0s, titles)):
        grid(ax, x0, 30.0, states[i], states[i - 1] if i else None, title)
    for q in range(4):
        fs.text(ax, x0s[0] - 1.5, 30.0 + (3.5 - q) * CELL_H, "lane %d" % q, size=7.2, ha="right")
    for a, b in ((x0s[0] + 4 * CELL_W, x0s[1]), (x0s[1] + 4 * CELL_W, x0s[2])):
        fs.arrow(ax, (a + 1.0, 40.4), (b - 1.0, 40.4), lw=0.9)
    fs.text(ax, x0s[2] + 2 * CELL_W, 27.0, "lane q: columns 8q .. 8q+7, in order", size=7.2,
            ha="center")
    fs.text(ax, 30.0, 19.0, "one warp-wide store (lanes 4g+q, rows g = 0..7), into the 64 bytes "
            "of each row's group of 32 columns:", size=7.4)
    footprint(ax, 62.0, 11.0, 16, "t52: 4 bytes a lane")
    footprint(ax, 62.0, 5.0, 64, "t56: 16 bytes a lane")
    for q in range(4):
        fs.swatch(ax, 26.0 + q * 22.0, 0.8, LANE_COLOURS[q], "from lane %d" % q, size=7.0)
    fs.save(fig, out_dir, "fig_quad_transpose")


if __name__ == "__main__":
    fs.run_alone(main)
