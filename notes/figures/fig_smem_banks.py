#!/usr/bin/env python3
"""fig_smem_banks.svg: where the 16-byte chunks of a bf16 tile land among the 32 banks of shared
memory, without padding, padded, and swizzled, and why one ldmatrix 8x8 read is conflict-free in
the last two.

Shared memory has 32 banks of 4 bytes: an address's bank is (address / 4) % 32, and one 128-byte
line covers every bank once. A 16-byte chunk covers 4 consecutive banks, a "bank group"
(address / 16) % 8. ldmatrix reads an 8x8 matrix as 8 row addresses of 16 bytes each; the 8 reads
are served in one pass (one wavefront) exactly when they fall in 8 different bank groups.

The layouts are the repository's (common/device/attention_tiles.cuh):
  padded   row r at r * (D + kPad) * 2 bytes, kPad = 8 elements (padded_row);
  swizzled row r at r * D * 2 bytes, logical chunk c stored at chunk c ^ (r % 8) (swizzled_offset).
The tile drawn is D = 64 (one 128-byte line per unpadded row); at D = 128 a row is two such
groups of 8 chunks, each permuted the same way.
"""
import figstyle as fs

D = 64
ELEM_BYTES = 2
CHUNK_BYTES = 16
K_PAD = 8  # common/device/attention_tiles.cuh kPad
K_SWIZZLE_ROWS = 8  # common/device/attention_tiles.cuh kSwizzleRows
CHUNKS = D * ELEM_BYTES // CHUNK_BYTES  # 8 logical chunks per row
ROWS = 8
GROUPS = 8  # 16-byte bank groups per 128-byte line

CW, CH = 4.8, 3.3  # drawing units per chunk cell
MAX_LINES = 9  # the padded tile's 8 rows of 144 bytes span 9 lines of 128

CHUNK_COLOURS = [fs.SKY, fs.ORANGE, fs.GREEN, fs.YELLOW, fs.BLUE, fs.VERMILLION, fs.PURPLE,
                 fs.GREY]
CHUNK_FILLS = [fs.tint(c, 0.38) for c in CHUNK_COLOURS]

READ_SOLID = 0  # ldmatrix of tile columns 0-7 (logical chunk 0) of rows 0-7
READ_DASHED = 5  # and of columns 40-47 (logical chunk 5)


def plain_address(r, c):
    return r * D * ELEM_BYTES + c * CHUNK_BYTES


def padded_address(r, c):
    return r * (D + K_PAD) * ELEM_BYTES + c * CHUNK_BYTES


def swizzled_address(r, c):
    return r * D * ELEM_BYTES + (c ^ (r % K_SWIZZLE_ROWS)) * CHUNK_BYTES


def bank_group(address):
    return (address // CHUNK_BYTES) % GROUPS


LAYOUTS = [
    ("No padding", "row r at 128·r bytes: chunk c → bank group c", plain_address, False),
    ("Padded rows (+8 elements)", "row pitch 144 B: chunk c → bank group (r + c) mod 8",
     padded_address, True),
    ("Swizzled rows", "row pitch 128 B, chunk c stored at c ⊕ (r mod 8): → bank group c ⊕ r",
     swizzled_address, False),
]


def draw_layout(ax, x0, top, title, subtitle, address_of, padded):
    fs.text(ax, x0, top + 9.0, title, size=10, weight="bold")
    fs.text(ax, x0, top + 6.4, subtitle, size=7.6)
    # Bank group headers.
    for gi in range(GROUPS):
        fs.text(ax, x0 + (gi + 0.5) * CW, top + 3.2, "%d" % gi, size=7.5, ha="center",
                weight="bold")
        fs.text(ax, x0 + (gi + 0.5) * CW, top + 1.3, "%d-%d" % (4 * gi, 4 * gi + 3), size=5.6,
                ha="center", color="#555555")
    lines = (max(address_of(r, CHUNKS - 1) for r in range(ROWS)) + CHUNK_BYTES + 127) // 128
    if padded:
        lines = max(lines, (ROWS * (D + K_PAD) * ELEM_BYTES + 127) // 128)
    for line in range(lines):
        fs.text(ax, x0 - 0.8, top - (line + 0.5) * CH, "%d" % (line * 128), size=6.2, ha="right",
                color="#555555")
        for gi in range(GROUPS):
            fs.rect(ax, x0 + gi * CW, top - (line + 1) * CH, CW, CH, ec="#CCCCCC", lw=0.3)
    if padded:  # the 16 bytes of padding after each row
        for r in range(ROWS):
            a = r * (D + K_PAD) * ELEM_BYTES + D * ELEM_BYTES
            line, gi = a // 128, bank_group(a)
            fs.rect(ax, x0 + gi * CW, top - (line + 1) * CH, CW, CH, fc="#F2F2F2", ec="#AAAAAA",
                    lw=0.4, hatch="////")
            fs.text(ax, x0 + (gi + 0.5) * CW, top - (line + 0.5) * CH, "pad", size=6,
                    ha="center", color="#666666")
    hits = {READ_SOLID: [0] * GROUPS, READ_DASHED: [0] * GROUPS}
    for r in range(ROWS):
        for c in range(CHUNKS):
            a = address_of(r, c)
            line, gi = a // 128, bank_group(a)
            x, y = x0 + gi * CW, top - (line + 1) * CH
            read = c in hits
            if read:
                hits[c][gi] += 1
            fs.rect(ax, x, y, CW, CH, fc=CHUNK_FILLS[c], ec=fs.INK if read else "#888888",
                    lw=1.5 if read else 0.4, ls="--" if c == READ_DASHED else "-",
                    zorder=3 if read else 2)
            fs.text(ax, x + CW / 2, y + CH / 2, "r%d c%d" % (r, c), size=6.4, ha="center",
                    weight="bold" if read else "normal", zorder=4)
    # What one ldmatrix 8x8 read costs in each layout.
    yb = top - MAX_LINES * CH - 2.4
    for k, (c, style) in enumerate(((READ_SOLID, "solid outline"), (READ_DASHED, "dashed"))):
        worst = max(hits[c])
        verdict = "conflict-free, 1 pass" if worst == 1 else "%d-way conflict, %d passes" % (
            worst, worst)
        fs.text(ax, x0, yb - 5.0 * k, "ldmatrix of chunk %d, rows 0-7 (%s):" % (c, style),
                size=7.2)
        fs.text(ax, x0, yb - 5.0 * k - 2.2, "rows per bank group %s → %s" % (
            " ".join(str(h) for h in hits[c]), verdict), size=7.2,
                color=fs.VERMILLION if worst > 1 else fs.GREEN, weight="bold")


def main(out_dir):
    fig, ax = fs.canvas(150, 69)
    fs.text(ax, 75, 66.2, "Shared-memory banks: a 64-wide bf16 tile (8 chunks of 16 bytes per "
            "row), rows 0-7", size=12, ha="center", weight="bold")
    fs.text(ax, 75, 62.9, "Columns: the 8 bank groups of a 128-byte line (4 banks of 4 bytes "
            "each).  Rows: byte address of the line.  Cell: which row r and logical chunk c "
            "(tile columns 8c … 8c+7) is stored there.", size=8, ha="center")
    top = 48.0
    for i, (title, subtitle, address_of, padded) in enumerate(LAYOUTS):
        draw_layout(ax, 5.0 + i * 49.0, top, title, subtitle, address_of, padded)
    fs.text(ax, 5.0, 3.4, "One ldmatrix 8×8 read = 8 row addresses of 16 bytes at the same tile column. "
            "Unpadded, they are 128 bytes apart: one bank group, 8 passes. Padding shifts each row "
            "by one group; the swizzle XORs the chunk with the row: both use all 8 groups.", size=7.4)
    fs.text(ax, 5.0, 1.2, "Why swizzle rather than pad: a swizzled row keeps its whole 128-byte "
            "line (a padded row straddles two), so 16-byte cp.async writes of whole rows stay "
            "aligned to lines; rows of D = 128 are two 8-chunk groups, each permuted the same "
            "way.", size=7.4)
    fs.save(fig, out_dir, "fig_smem_banks")


if __name__ == "__main__":
    fs.run_alone(main)
