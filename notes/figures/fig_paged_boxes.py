#!/usr/bin/env python3
"""fig_paged_boxes.svg: the TMA boxes of 09/hopper_paged_prefill_persistent (07/t52 with the block
table). t52's K/V tile is 176 keys at D 128, no power of two, so the pages (64 keys here) cut its
tiles at different rows: tile j starts at key 176 j. A box must lie in one page and in the tile.
Top: every box 16 rows, the first build (11 boxes a 64-column strip; 0.94-0.96x
09/hopper_paged_prefill at D 128, pages of 64 and 256, H100, 2026-12-06). Bottom: the kernel's two
sizes, a big box of min(page, 64) rows wherever the 64-key block holding a lane's rows lies wholly
in the tile (issued by its first lane), 16-row boxes around them: 5 boxes a strip, 0.98-1.02x.
The rule is the kernel's (`load_paged_tile` in sm90a/hopper_paged_prefill_persistent.cu), written
here again in Python: `python3 notes/figures/fig_paged_boxes.py --print` prints the boxes a
strip takes at every width and page size.
"""
import sys

import figstyle as fs

SMALL = 16  # rows of a small box
TILES = 4  # tiles drawn
WIDTHS = {"D 64": 128, "D 96, 128": 176, "D 192": 112, "D 256": 80}  # t52's Bc


def big_rows(bc, page):
    """The big box: min(page, 64), or min(page, 128) where the tile is 128 keys (D 64)."""
    return min(page, 128 if bc % 128 == 0 else 64)


def boxes(j, bc, page, two_sizes=True):
    """[(first row, rows)] of tile j's boxes, in the order of the lanes that issue them."""
    big = big_rows(bc, page) if two_sizes else SMALL
    out = []
    for lane in range(32):
        row = SMALL * lane
        if row >= bc:
            break
        key = j * bc + row
        start = row - (key & (big - 1))  # the first row of the big block holding the lane's key
        in_big = start >= 0 and start + big <= bc
        if in_big and start == row:
            out.append((row, big))
        elif not in_big:
            out.append((row, SMALL))
    return out


def check(bc, page, tiles=64):
    """Every row of every tile in exactly one box, each box inside one page: what the kernel needs."""
    for j in range(tiles):
        covered = [0] * bc
        for row, rows in boxes(j, bc, page):
            first, last = j * bc + row, j * bc + row + rows - 1
            assert first // page == last // page, (bc, page, j, row)
            for r in range(row, row + rows):
                covered[r] += 1
        assert covered == [1] * bc, (bc, page, j)


def average_boxes(bc, page, tiles=64):
    return sum(len(boxes(j, bc, page)) for j in range(tiles)) / tiles


def print_table():
    print("boxes a 64-column strip, averaged over 64 tiles (the kernel's rule):")
    print("%-10s %5s" % ("head dim", "Bc") + "".join("%9s" % ("page %d" % p) for p in (16, 64, 256)))
    for name, bc in WIDTHS.items():
        cells = []
        for page in (16, 64, 256):
            check(bc, page)
            cells.append("%9.2f" % average_boxes(bc, page))
        print("%-10s %5d" % (name, bc) + "".join(cells))


def draw_row(ax, y, j, bc, page, two_sizes, x0, scale, h):
    for row, rows in boxes(j, bc, page, two_sizes):
        big = rows > SMALL
        fs.rect(ax, x0 + row * scale, y, rows * scale, h,
                fc=fs.tint(fs.BLUE if big else fs.SKY, 0.55 if big else 0.3), ec=fs.INK, lw=0.5)
        if big:
            fs.text(ax, x0 + (row + rows / 2) * scale, y + h / 2, "%d rows" % rows, size=6.2,
                    ha="center")
    # The page boundaries inside the tile: keys that are multiples of the page.
    for row in range(bc):
        if (j * bc + row) % page == 0 and row > 0:
            fs.arrow(ax, (x0 + row * scale, y - 0.8), (x0 + row * scale, y + h + 0.8),
                     color=fs.VERMILLION, lw=1.0, style="-")
    fs.rect(ax, x0, y, bc * scale, h, fc="none", ec=fs.INK, lw=1.0)
    fs.text(ax, x0 - 1.0, y + h / 2, "tile %d: keys %d–%d, %d boxes" % (
        j, j * bc, j * bc + bc - 1, len(boxes(j, bc, page, two_sizes))), size=6.6, ha="right")


def main(out_dir):
    bc, page = WIDTHS["D 96, 128"], 64
    for name, width in WIDTHS.items():
        for p in (16, 64, 256):
            check(width, p)
    fig, ax = fs.canvas(150, 78)
    fs.text(ax, 75, 75.0, "09/hopper_paged_prefill_persistent: t52's 176-key K/V tile through "
            "pages of 64 keys", size=12, ha="center", weight="bold")
    x0, scale, h = 52.0, 0.52, 4.2
    panels = [(False, 66.0, "every box 16 rows: 11 a strip (first build; 0.94–0.96× "
               "hopper_paged_prefill at D 128, pages 64 and 256)"),
              (True, 34.0, "two sizes: 64-row boxes where a page's 64-key block lies in the "
               "tile, 16 rows around them (0.98–1.02×)")]
    for two_sizes, top, title in panels:
        fs.text(ax, 4.0, top + 2.6, title, size=8.2, weight="bold")
        for j in range(TILES):
            draw_row(ax, top - 1.6 - (j + 1) * (h + 2.2), j, bc, page, two_sizes, x0, scale, h)
    # Boxes a strip at every width and page size, two sizes (the same rule, averaged over tiles).
    fs.text(ax, 4.0, 58.0, "boxes a strip, two sizes", size=7.2, weight="bold")
    fs.text(ax, 4.0, 55.4, "%-9s %4s %5s %5s %5s" % ("", "Bc", "p 16", "p 64", "p 256"), size=6.4,
            family="monospace")
    for i, (name, width) in enumerate(WIDTHS.items()):
        fs.text(ax, 4.0, 52.8 - 2.6 * i, "%-9s %4d %5.1f %5.1f %5.1f" % (
            name, width, average_boxes(width, 16), average_boxes(width, 64),
            average_boxes(width, 256)), size=6.4, family="monospace")
    fs.text(ax, 4.0, 41.2, "(07/v4's 128-key tile: 8, 2, 1)", size=6.4)
    # Row axis under the last panel.
    for row in range(0, bc + 1, 16):
        fs.text(ax, x0 + row * scale, 6.4, "%d" % row, size=5.6, ha="center", color="#555555")
    fs.text(ax, x0 + bc * scale / 2, 3.8, "rows of the tile (a 64-column strip: 128 bytes a row)",
            size=6.6, ha="center")
    fs.swatch(ax, 4.0, 13.0, fs.tint(fs.BLUE, 0.55), "big box (one lane, one page)", size=6.6)
    fs.swatch(ax, 4.0, 10.4, fs.tint(fs.SKY, 0.3), "16-row box", size=6.6)
    fs.arrow(ax, (4.0, 7.6), (6.0, 7.6), color=fs.VERMILLION, lw=1.0, style="-")
    fs.text(ax, 6.8, 7.6, "page boundary", size=6.6)
    fs.save(fig, out_dir, "fig_paged_boxes")


if __name__ == "__main__":
    if "--print" in sys.argv[1:]:
        print_table()
    else:
        fs.run_alone(main)
