#!/usr/bin/env python3
"""fig_d192_columns.svg: how chapter 07's tuning step bwd_t53 splits the 192 columns of dV, dK and
dQ_tile between its two warpgroups at its D 192 instance
(chapters/07_flash_hopper/tuning/bwd_t53_d256_halves.cu, wgmma_cols).

Top: one row of a [rows x 192] tile in shared memory (dO, Q or K) as TMA wrote it, three strips
of 64 columns, each row of a strip 128 bytes in eight 16-byte chunks of 8 columns. Warpgroup 0
owns columns 0-95, warpgroup 1 columns 96-191. Both issue the same two wgmmas: N 64 on a whole
strip (strip 0, or strip 2), then N 32 on a half of strip 1 (its first half from the strip's
start, or its second half from 64 bytes into its rows). One N 96 would do for warpgroup 0, but
then the warpgroups' paths would branch around their wgmmas, which ptxas serializes.

Bottom: why the N 32 operand may start 64 bytes into the strip. TMA stored logical chunk c of row
r at chunk c ^ r (the 128-byte swizzle, r the row within the atom's 8). The tensor core computes
an address, start + 128 r + 16 c' for its chunk c' = 0..3, and applies the same XOR to its bits:
bits 4-6 (the chunk, 4 + c' here, since the start adds 64 bytes = 4 chunks) with bits 7-9 (the
row, r, since the strip begins on a 1024-byte atom). Its chunk c' lands on (4 + c') ^ r: where
TMA put logical chunk 4 + c'. The places are computed from the two formulas, not typed.
"""
import figstyle as fs

WG_FILL = [fs.tint(fs.BLUE, 0.35), fs.tint(fs.ORANGE, 0.45)]
WG_EDGE = [fs.BLUE, fs.ORANGE]
CHUNK_W = 4.0  # drawing units per 16-byte chunk
ROWS = 8  # one swizzle atom


def owner(col):
    """The warpgroup that owns a column of D 192 (96 a warpgroup)."""
    return col // 96


def tma_place(row, chunk):
    """The chunk TMA stores logical chunk `chunk` of a 128-byte row at (128-byte swizzle)."""
    return chunk ^ (row % 8)


def wgmma_place(start_bytes, row, chunk_in_operand):
    """The chunk the tensor core reads for chunk c' of an operand that starts start_bytes into
    the strip's first row: the swizzle applied to the address's bits 4-6 and 7-9."""
    address = start_bytes + 128 * row + 16 * chunk_in_operand
    return ((address >> 4) & 7) ^ ((address >> 7) & 7)


def main(out_dir):
    fig, ax = fs.canvas(150, 80)
    fs.text(ax, 75, 77.0, "bwd_t53 at D 192: 96 columns a warpgroup, three strips of 64",
            size=12, ha="center", weight="bold")

    # ---- top: one row, three strips, owners and the wgmma instructions
    y_row, x0 = 64.0, 6.0
    strip_w = 8 * CHUNK_W
    gap = 3.0
    for s in range(3):
        xs = x0 + s * (strip_w + gap)
        for c in range(8):
            col = 64 * s + 8 * c
            wg = owner(col)
            fs.rect(ax, xs + c * CHUNK_W, y_row, CHUNK_W, 5.0, fc=WG_FILL[wg], ec=WG_EDGE[wg],
                    lw=0.8)
            fs.text(ax, xs + (c + 0.5) * CHUNK_W, y_row + 2.5, "%d" % col, size=5.6, ha="center")
        fs.rect(ax, xs, y_row, strip_w, 5.0, fc="none", ec=fs.INK, lw=1.0)
        fs.text(ax, xs + strip_w / 2, y_row + 7.0, "strip %d (128 bytes a row)" % s, size=7.5,
                ha="center", weight="bold")
    fs.text(ax, x0, y_row - 1.8, "first column of each 16-byte chunk", size=6.5)

    def bracket(xa, xb, y, label, colour):
        ax.plot([xa, xa, xb, xb], [y + 1.2, y, y, y + 1.2], color=colour, lw=1.2)
        fs.text(ax, (xa + xb) / 2, y - 1.8, label, size=7, ha="center", color=colour)

    def col_x(col):
        s, within = col // 64, col % 64
        return x0 + s * (strip_w + gap) + within / 8 * CHUNK_W

    bracket(col_x(0), col_x(56) + CHUNK_W, y_row - 5.0, "wg 0: first, N 64 on strip 0",
            WG_EDGE[0])
    bracket(col_x(64), col_x(96), y_row - 5.0, "wg 0: then N 32 from\nstrip 1's start",
            WG_EDGE[0])
    bracket(col_x(96), col_x(128) - gap, y_row - 10.5, "wg 1: then N 32, start\n+64 bytes into "
            "strip 1", WG_EDGE[1])
    bracket(col_x(128), col_x(184) + CHUNK_W, y_row - 10.5, "wg 1: first, N 64 on strip 2",
            WG_EDGE[1])
    fs.text(ax, 118, y_row + 2.5, "dV += P\u1d40 dO, dK += dS\u1d40 Q,\ndQ_tile = dS K: "
            "B is dO, Q or K\nread MN-major, its columns\nthe product's N", size=7)

    # ---- bottom: strip 1's 8 rows as TMA stored them, and where the N 32 operand reads
    y_top = 40.0
    fs.text(ax, x0, y_top + 5.5, "Strip 1, one swizzle atom (8 rows): TMA stored logical chunk "
            "c of row r at c ^ r", size=8.5, weight="bold")
    gx = x0 + 12
    for c in range(8):
        fs.text(ax, gx + (c + 0.5) * CHUNK_W, y_top + 1.5, "%d" % c, size=6.5, ha="center")
    fs.text(ax, gx - 1.0, y_top + 1.5, "stored chunk", size=6.2, ha="right")
    cell_h = 3.6
    for r in range(ROWS):
        y = y_top - (r + 1) * cell_h
        fs.text(ax, gx - 1.0, y + cell_h / 2, "row %d" % r, size=6.2, ha="right")
        for logical in range(8):
            stored = tma_place(r, logical)
            col = 64 + 8 * logical
            wg = owner(col)
            fs.rect(ax, gx + stored * CHUNK_W, y, CHUNK_W, cell_h, fc=WG_FILL[wg], ec="#FFFFFF",
                    lw=0.5)
            fs.text(ax, gx + (stored + 0.5) * CHUNK_W, y + cell_h / 2, "%d" % logical, size=6.0,
                    ha="center")
        # the N 32 operand's chunks c' = 0..3, read from 64 bytes in: where the address lands
        for c_op in range(4):
            read = wgmma_place(64, r, c_op)
            assert read == tma_place(r, 4 + c_op), "the operand reads TMA's chunk 4 + c'"
            fs.rect(ax, gx + read * CHUNK_W + 0.3, y + 0.3, CHUNK_W - 0.6, cell_h - 0.6,
                    fc="none", ec=fs.VERMILLION, lw=1.1)
    fs.text(ax, gx + 4 * CHUNK_W, y_top - ROWS * cell_h - 2.5, "numbers: the logical chunk "
            "(columns 64 + 8c ..)", size=6.5, ha="center")

    tx = gx + 8 * CHUNK_W + 8
    lines = [
        "wg 1's N 32 operand starts 64 bytes (4 chunks) into the strip.",
        "For its chunk c' = 0..3 of row r the tensor core computes",
        "    address = start + 128 r + 16 c'",
        "and swizzles it as TMA did: bits 4-6 ^= bits 7-9.",
        "Bits 4-6 are 4 + c' (the 64 bytes in), bits 7-9 are r",
        "(the strip begins on a 1024-byte atom), so it reads",
        "chunk (4 + c') ^ r: where TMA put logical chunk 4 + c'",
        "(framed in red). An operand may start mid-row; a",
        "wgmma of N 96 from column 96 could not, since its",
        "next 64 columns would run on into the next row.",
        "Both warpgroups issue N 64 then N 32, with their own",
        "descriptors: no branch around the wgmmas.",
    ]
    for i, line in enumerate(lines):
        fs.text(ax, tx, y_top - 1.0 - i * 2.9, line, size=7.2)

    fs.swatch(ax, 118, 50.5, WG_FILL[0], "warpgroup 0's columns", size=7.5)
    fs.swatch(ax, 118, 47.0, WG_FILL[1], "warpgroup 1's columns", size=7.5)
    fs.save(fig, out_dir, "fig_d192_columns")


if __name__ == "__main__":
    fs.run_alone(main)
