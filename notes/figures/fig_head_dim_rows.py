#!/usr/bin/env python3
"""fig_head_dim_rows.svg: chapter 05's t14 and t15 (and chapter 06's t16 and t17), the head dims
between a kernel's instances. Above: two rows of K in global memory, element by element, cut
into the 16-byte chunks (8 bf16 elements) that cp.async copies. At d = 80 every row starts on a
chunk boundary; at d = 59 row 1 starts 118 bytes in, inside chunk 7, which holds the end of row 0
and the start of row 1. Below: the same rows in the shared-memory tile, rows of the instance D
(96 and 64), the columns d .. D - 1 zero: t14 zero-fills whole chunks past d (cp.async with
src-size 0); t15 fills chunk 7 of each row element by element (3 of row 0's, then 5 zeros).
Every count printed is computed from the constants below.
"""
import figstyle as fs

CHUNK = 8  # bf16 elements per 16-byte chunk
ROWS = 2
CELL = 0.62  # drawing units per element
ROW_COLOURS = [fs.SKY, fs.ORANGE]
ZERO = "#FFFFFF"


def instance(d):
    """The head dim a kernel of chapter 05 computes d at (t14, t15)."""
    return next(D for D in (32, 64, 96, 128, 256) if D >= d)


def global_strip(ax, x0, y, d, title):
    """ROWS rows of d elements, consecutive in memory, and the 16-byte chunk grid over them."""
    n = ROWS * d
    chunks = -(-n // CHUNK)
    fs.text(ax, x0, y + 4.3, title, size=8.6, weight="bold")
    for e in range(chunks * CHUNK):
        row = e // d
        fc = fs.tint(ROW_COLOURS[row], 0.55) if row < ROWS else "#EEEEEE"
        fs.rect(ax, x0 + e * CELL, y, CELL, 2.4, fc=fc, ec="#FFFFFF", lw=0.25)
    straddling = []
    for c in range(chunks + 1):  # the chunk boundaries cp.async copies between
        x = x0 + c * CHUNK * CELL
        ax.plot([x, x], [y - 0.5, y + 2.9], color=fs.INK, lw=0.8)
        if c < chunks and (c * CHUNK) // d != (c * CHUNK + CHUNK - 1) // d and \
                (c * CHUNK + CHUNK - 1) < n:
            straddling.append(c)
    for r in range(ROWS):
        fs.text(ax, x0 + (r * d + d / 2) * CELL, y + 1.2, "row %d: %d elements (%d bytes)"
                % (r, d, 2 * d), size=6.8, ha="center",
                bbox=dict(boxstyle="square,pad=0.15", fc="#FFFFFF", ec="none"))
    for c in straddling:
        fs.rect(ax, x0 + c * CHUNK * CELL, y - 0.5, CHUNK * CELL, 3.4, fc="none",
                ec=fs.VERMILLION, lw=1.4)
        fs.text(ax, x0 + (c + 0.5) * CHUNK * CELL, y - 1.6, "chunk %d holds rows 0 and 1" % c,
                size=6.6, ha="center", color=fs.VERMILLION)
    return straddling


def shared_tile(ax, x0, y, d, note):
    """The same ROWS rows in shared memory: rows of D = instance(d), the columns past d zero."""
    D = instance(d)
    for r in range(ROWS):
        yr = y - r * 3.0
        fs.text(ax, x0 - 1.0, yr + 1.1, "row %d" % r, size=6.8, ha="right")
        for e in range(D):
            fc = fs.tint(ROW_COLOURS[r], 0.55) if e < d else ZERO
            fs.rect(ax, x0 + e * CELL, yr, CELL, 2.2, fc=fc, ec="#DDDDDD", lw=0.25)
        for c in range(D // CHUNK + 1):
            x = x0 + c * CHUNK * CELL
            ax.plot([x, x], [yr - 0.2, yr + 2.4], color=fs.INK, lw=0.8)
        if d % CHUNK:  # the chunk that holds the row's end: copied element by element
            c = d // CHUNK
            fs.rect(ax, x0 + c * CHUNK * CELL, yr - 0.2, CHUNK * CELL, 2.6, fc="none",
                    ec=fs.VERMILLION, lw=1.3)
    fs.text(ax, x0 + d * CELL + 0.4, y + 3.4, "columns %d .. %d: 0" % (d, D - 1), size=6.8,
            color="#555555")
    fs.arrow(ax, (x0 + (d + (D - d) / 2) * CELL, y + 2.9), (x0 + (d + (D - d) / 2) * CELL,
             y + 2.3), color="#555555", lw=0.8)
    fs.text(ax, x0, y - ROWS * 3.0 + 0.6, note, size=7.0)


def main(out_dir):
    fig, ax = fs.canvas(150, 74)
    fs.text(ax, 75, 71.0, "Head dims between the instances: rows of d in global memory, rows of "
            "D in shared memory", size=12, ha="center", weight="bold")

    x0 = 10.0
    global_strip(ax, x0, 59.0, 80, "Global memory, d = 80 (a multiple of 8): every row starts "
                 "on a 16-byte chunk, %d chunks a row" % (80 // CHUNK))
    straddle = global_strip(ax, x0, 46.0, 59, "Global memory, d = 59: row 1 starts %d bytes in, "
                            "inside a chunk; cp.async (16 bytes, 16-byte aligned) cannot copy it"
                            % (2 * 59))
    assert straddle == [59 // CHUNK], straddle

    fs.text(ax, 4.0, 36.6, "Shared memory (the tile's rows are D long, swizzled in the kernel; "
            "drawn unswizzled)", size=8.6, weight="bold")
    shared_tile(ax, x0, 30.0, 80, "t14: D = %d. Chunks 0-%d of a row by cp.async from the row's "
                "own start; chunks %d-%d past d zero-filled by cp.async with src-size 0."
                % (instance(80), 80 // CHUNK - 1, 80 // CHUNK, instance(80) // CHUNK - 1))
    shared_tile(ax, x0, 16.0, 59, "t15: D = %d. Every chunk of the row from its %d elements, "
                "one 2-byte load each, zeros after them, one 16-byte store (chunk %d: %d of "
                "the row's, %d zeros)." % (instance(59), 59, 59 // CHUNK, 59 % CHUNK,
                                           CHUNK - 59 % CHUNK))
    fs.swatch(ax, 108.0, 34.0, fs.tint(ROW_COLOURS[0], 0.55), "row 0's elements", size=7)
    fs.swatch(ax, 108.0, 31.6, fs.tint(ROW_COLOURS[1], 0.55), "row 1's elements", size=7)
    fs.swatch(ax, 108.0, 29.2, ZERO, "zero (never read, never stored)", size=7)
    fs.text(ax, 4.0, 3.0, "S = Q Kᵀ gains 0 from the zero columns of Q and K, the columns of O past "
            "d are P times V's zero columns; O is stored for the columns below d only.", size=7.2)
    fs.save(fig, out_dir, "fig_head_dim_rows")


if __name__ == "__main__":
    fs.run_alone(main)
