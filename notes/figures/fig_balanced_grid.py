#!/usr/bin/env python3
"""fig_balanced_grid.svg: which tiles of C a persistent GEMM computes together, with one block per
SM and with a grid of whole rounds (chapter 03's tuning steps t13_lean_mainloop and
t15_balanced_grid, chapters/03_tiled_matmul/tuning/).

C at 4096^3 in tiles of 128 x 256: 32 tile rows by 16 tile columns, 512 tiles, numbered in the
grouped order of tile_coords (kGroupM = 8: groups of 8 tile rows, inside a group column by column,
each column top to bottom). Block b computes tiles b, b + G, b + 2G, ..., so round r is tiles
rG .. rG + G - 1. Each tile is coloured by its round; the thick lines are the group boundaries.

Left, G = 132 (t13): every round reaches into the next group, and the rounds' edges drift down a
column at a time, so a round needs A rows from up to 16 tile rows and the last round is 116
tiles, 16 SMs idle. Right, G = 128 (t15): every round is one whole group, 8 tile rows of A and all
16 tile columns of B, and no SM idles in the last round (4 idle from the start instead). The
rounds and the A and B bands are computed here as tile_coords computes them, not typed.
"""
import figstyle as fs

TILES_M, TILES_N = 32, 16  # 4096 / 128 and 4096 / 256
GROUP_M = 8
ROUND_FILLS = [fs.tint(fs.SKY, 0.55), fs.tint(fs.ORANGE, 0.55), fs.tint(fs.GREEN, 0.5),
               fs.tint(fs.PURPLE, 0.5)]


def tile_coords(tile):
    """(tile row, tile column) of tile number `tile` in the grouped order (t10's tile_coords)."""
    group_size = GROUP_M * TILES_N
    first_m = (tile // group_size) * GROUP_M
    group_rows = min(TILES_M - first_m, GROUP_M)
    return first_m + (tile % group_size) % group_rows, (tile % group_size) // group_rows


def rounds_of(blocks):
    """Per round, the list of (tile row, tile column) it computes."""
    tiles = TILES_M * TILES_N
    return [[tile_coords(t) for t in range(r * blocks, min(tiles, (r + 1) * blocks))]
            for r in range((tiles + blocks - 1) // blocks)]


def panel(ax, x0, y_top, blocks, title, cell_w, cell_h):
    rounds = rounds_of(blocks)
    fs.text(ax, x0, y_top + 3.2, title, size=9, weight="bold")
    for r, tiles in enumerate(rounds):  # one rectangle per run of a round's tiles in a column
        for n in range(TILES_N):
            rows = sorted(m for m, c in tiles if c == n)
            start = 0
            while start < len(rows):
                end = start
                while end + 1 < len(rows) and rows[end + 1] == rows[end] + 1:
                    end += 1
                fs.rect(ax, x0 + n * cell_w, y_top - (rows[end] + 1) * cell_h, cell_w,
                        (end - start + 1) * cell_h, fc=ROUND_FILLS[r], ec="none", lw=0)
                start = end + 1
    for n in range(1, TILES_N):  # the tiles' edges
        ax.plot([x0 + n * cell_w] * 2, [y_top, y_top - TILES_M * cell_h], color="#FFFFFF", lw=0.4)
    for m in range(1, TILES_M):
        ax.plot([x0, x0 + TILES_N * cell_w], [y_top - m * cell_h] * 2, color="#FFFFFF", lw=0.4)
    for g in range(TILES_M // GROUP_M + 1):  # group boundaries
        y = y_top - g * GROUP_M * cell_h
        ax.plot([x0, x0 + TILES_N * cell_w], [y, y], color=fs.INK, lw=1.4)
    ax.plot([x0, x0], [y_top, y_top - TILES_M * cell_h], color=fs.INK, lw=0.8)
    ax.plot([x0 + TILES_N * cell_w] * 2, [y_top, y_top - TILES_M * cell_h], color=fs.INK, lw=0.8)
    fs.text(ax, x0 - 0.8, y_top - GROUP_M * cell_h / 2, "group 0", size=6.5, ha="right")
    fs.text(ax, x0 + TILES_N * cell_w / 2, y_top + 1.2, "16 tile columns (256 wide): B",
            size=6.5, ha="center")
    # What each round needs: tile rows of A, tile columns of B, tiles (busy SMs).
    y = y_top - TILES_M * cell_h - 2.6
    for r, tiles in enumerate(rounds):
        a_rows = len({m for m, _ in tiles})
        b_cols = len({n for _, n in tiles})
        fs.swatch(ax, x0, y - 2.6 * r, ROUND_FILLS[r],
                  "round %d: %d tiles, A from %d tile rows, B from %d tile columns"
                  % (r, len(tiles), a_rows, b_cols), size=7)


def main(out_dir):
    fig, ax = fs.canvas(150, 92)
    fs.text(ax, 75, 89.0, "C at 4096\u00b3 in 128 \u00d7 256 tiles, coloured by the round that "
            "computes them (groups of 8 tile rows)", size=11, ha="center", weight="bold")
    cell_w, cell_h = 3.6, 1.8
    panel(ax, 14, 80, 132, "t13: 132 blocks, one per SM", cell_w, cell_h)
    panel(ax, 88, 80, 128, "t15: 128 blocks, ceil(512 / 4)", cell_w, cell_h)
    fs.save(fig, out_dir, "fig_balanced_grid")


if __name__ == "__main__":
    fs.run_alone(main)
