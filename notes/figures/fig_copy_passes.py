#!/usr/bin/env python3
"""fig_copy_passes.svg: where one thread's 16-byte copies land in the swizzled ring of chapter 08's
decoder, at D 128 (08/t07) and at D 256 (08/t09_d256, 09/paged_v5_decode_d256).

The ring holds K (and V) tiles of 64 keys, each row of D elements in 16-byte chunks, swizzled:
logical chunk c of row r lies at chunk c ^ (r % 8), within its group of 8 chunks (128 bytes). The
block's 128 threads copy a tile in passes: thread t takes row t / (D / 8) and chunk t % (D / 8) of
the pass, and each pass moves down by the rows one pass covers, 128 / (D / 8).

Left: at D 128 a pass covers 8 rows, a whole period of the swizzle, so the thread's row is the
same modulo 8 in every pass and its chunk lands in the same column each time: one XOR, computed
once. Right: at D 256 a pass covers 4 rows, and the thread's rows alternate between r and r + 4
modulo 8: its chunk lands 4 chunks (64 bytes) away in the odd passes. t09 keeps both places (two
registers) and each unrolled pass picks its own at compile time. Only the first group of 8 chunks
of each row is drawn; the others repeat it. The places are computed from the kernels' formula,
not typed.
"""
import figstyle as fs

ROWS = 16  # two periods of the swizzle
CHUNKS = 8  # one 128-byte group
EVEN = fs.tint(fs.SKY, 0.35)
ODD = fs.tint(fs.ORANGE, 0.35)
HIT = fs.BLUE
HIT_ODD = fs.VERMILLION


def place(row, chunk):
    """The column the logical chunk of this row is stored in (attention_tiles.cuh)."""
    return chunk ^ (row % 8)


def panel(ax, x0, y_top, d, thread, title):
    chunks_per_row = d // 8
    rows_per_pass = 128 // chunks_per_row
    row0, chunk = thread // chunks_per_row, thread % chunks_per_row
    cell_w, cell_h = 5.0, 2.5
    fs.text(ax, x0, y_top + 5.5, title, size=9.5, weight="bold")
    fs.text(ax, x0, y_top + 2.8, "thread %d: row %d + %d p of pass p, logical chunk %d"
            % (thread, row0, rows_per_pass, chunk), size=7.5)
    fs.text(ax, x0 - 1.0, y_top + 0.9, "stored chunk", size=6.2, ha="right")
    for c in range(CHUNKS):
        fs.text(ax, x0 + (c + 0.5) * cell_w, y_top + 0.9, "%d" % c, size=6.5, ha="center")
    for r in range(ROWS):
        p = r // rows_per_pass
        y = y_top - (r + 1) * cell_h
        fs.rect(ax, x0, y, CHUNKS * cell_w, cell_h, fc=EVEN if p % 2 == 0 else ODD,
                ec="#FFFFFF", lw=0.4)
        for c in range(1, CHUNKS):
            ax.plot([x0 + c * cell_w] * 2, [y, y + cell_h], color="#FFFFFF", lw=0.4)
        fs.text(ax, x0 - 1.0, y + cell_h / 2, "row %d" % r, size=6.2, ha="right")
        fs.text(ax, x0 + CHUNKS * cell_w + 1.0, y + cell_h / 2, "pass %d" % p, size=6.2,
                color=fs.INK if r % rows_per_pass == 0 else "#FFFFFF")
        if r % rows_per_pass == row0:  # this thread's row in pass p
            col = place(r, chunk)
            colour = HIT if p % 2 == 0 or rows_per_pass % 8 == 0 else HIT_ODD
            fs.rect(ax, x0 + col * cell_w, y, cell_w, cell_h, fc=colour, ec=colour, lw=0.4)
            fs.text(ax, x0 + (col + 0.5) * cell_w, y + cell_h / 2, "%d" % chunk, size=6.2,
                    ha="center", color="#FFFFFF", weight="bold")
            fs.text(ax, x0 + CHUNKS * cell_w + 8.5, y + cell_h / 2,
                    "%d ^ (%d mod 8) = %d" % (chunk, r, col), size=6.5, color=colour)
    return y_top - ROWS * cell_h


def main(out_dir):
    fig, ax = fs.canvas(150, 64)
    fs.text(ax, 75, 61.5, "One thread's 16-byte copies into the swizzled ring, pass by pass "
            "(first 128-byte group of each row)", size=11, ha="center", weight="bold")
    bottom = panel(ax, 14, 50, 128, 19, "D 128 (08/t07): a pass covers 8 rows, one XOR")
    panel(ax, 89, 50, 256, 35, "D 256 (08/t09_d256): a pass covers 4 rows, two XORs")
    ly = bottom - 5.0
    fs.swatch(ax, 14, ly, EVEN, "rows of an even pass")
    fs.swatch(ax, 44, ly, ODD, "rows of an odd pass")
    fs.swatch(ax, 74, ly, HIT, "the thread's chunk (the XOR of its first row)", ec=HIT)
    fs.swatch(ax, 74, ly - 2.8, HIT_ODD, "the same chunk, 4 chunks away (the other XOR)",
              ec=HIT_ODD)
    fs.save(fig, out_dir, "fig_copy_passes")


if __name__ == "__main__":
    fs.run_alone(main)
