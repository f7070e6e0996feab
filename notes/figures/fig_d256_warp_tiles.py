#!/usr/bin/env python3
"""fig_d256_warp_tiles.svg: the three warp layouts of chapter 06's tuning step t14 at D 256
(chapters/06_flash_backward/tuning/t14_d256_tiles.cu: 06/v5_warp_tiles's kernel with a block of 64
keys).

A block holds 64 keys (K and V, all 256 columns) and walks the Q tiles of 64 queries; its 8 warps
take three layouts in turn. Left: S = Q K^T and dP = dO V^T, warp (warp / 4, warp % 4) owns 32
queries x 16 keys, and stores its P and dS into shared memory. Middle: after one barrier,
dV += P^T dO and dK += dS^T Q, warp (warp % 2, warp / 2) owns 32 keys x 64 columns, its
accumulators kept in registers for the whole walk. Right: dQ_tile = dS K, warp (warp / 4,
warp % 4) owns 32 queries x 64 columns, added into the fp32 dQ accumulator by 32 float2 atomics
per warp: 64 KiB per Q tile and block, twice v5's per FLOP at D 128.
"""
import figstyle as fs

# Eight warps, eight fills: four hues, light and dark.
HUES = [fs.BLUE, fs.ORANGE, fs.GREEN, fs.PURPLE]
FILL = [fs.tint(HUES[w % 4], 0.30 if w < 4 else 0.65) for w in range(8)]
EDGE = [HUES[w % 4] for w in range(8)]
SCALE = 0.30  # drawing units per element (the 256-column tiles at half of it)


def warp_grid(ax, x, y, rows, cols, grid_rows, grid_cols, warp_at, col_scale, title, caption,
              cell_label):
    """A rows x cols tile at (x, y), lower left; grid_rows x grid_cols warp tiles, warp_at(r, c)
    the warp of grid cell (r, c) counted from the top left."""
    w, h = cols * col_scale, rows * SCALE
    cw, ch = w / grid_cols, h / grid_rows
    for r in range(grid_rows):
        for c in range(grid_cols):
            warp = warp_at(r, c)
            cx, cy = x + c * cw, y + h - (r + 1) * ch
            fs.rect(ax, cx, cy, cw, ch, fc=FILL[warp], ec=EDGE[warp], lw=1.0)
            fs.text(ax, cx + cw / 2, cy + ch / 2, "w%d" % warp, size=7.5, ha="center")
    fs.rect(ax, x, y, w, h, fc="none", ec=fs.INK, lw=0.9)
    fs.text(ax, x + w / 2, y + h + 1.4, title, size=8.5, ha="center", weight="bold")
    fs.text(ax, x + w / 2, y - 1.5, caption, size=7, ha="center")
    fs.text(ax, x + w / 2, y - 3.3, cell_label, size=7, ha="center", color=fs.VERMILLION)
    return w, h


def main(out_dir):
    fig, ax = fs.canvas(130, 40)
    fs.text(ax, 65, 37.0, "06/t14 at D 256: a block of 64 keys, 8 warps, three layouts per Q "
            "tile of 64 queries", size=12, ha="center", weight="bold")
    y = 12.0
    # 1. S and dP: 64 queries x 64 keys, warps 2 (queries) x 4 (keys).
    w1, h1 = warp_grid(ax, 4, y, 64, 64, 2, 4, lambda r, c: 4 * r + c, SCALE,
                       "1. S = Q K\u1d40, dP = dO V\u1d40",
                       "64 queries x 64 keys; P, dS to shared", "a warp: 32 queries x 16 keys")
    fs.arrow(ax, (4 + w1 + 1.5, y + h1 / 2), (4 + w1 + 8.5, y + h1 / 2))
    fs.text(ax, 4 + w1 + 5, y + h1 / 2 + 2.2, "barrier", size=7, ha="center")
    # 2. dK and dV: 64 keys x 256 columns, warps 2 (keys) x 4 (columns).
    x2 = 4 + w1 + 10
    w2, _ = warp_grid(ax, x2, y, 64, 256, 2, 4, lambda r, c: r + 2 * c, SCALE * 0.5,
                      "2. dV += P\u1d40 dO, dK += dS\u1d40 Q",
                      "64 keys x 256 columns, fp32, registers over the walk",
                      "a warp: 32 keys x 64 columns (128 registers)")
    # 3. dQ_tile: 64 queries x 256 columns, warps 2 (queries) x 4 (columns).
    x3 = x2 + w2 + 8
    w3, _ = warp_grid(ax, x3, y, 64, 256, 2, 4, lambda r, c: 4 * r + c, SCALE * 0.5,
                      "3. dQ_tile = dS K, then atomics",
                      "64 queries x 256 columns, fp32, one Q tile",
                      "a warp: 32 queries x 64 columns, 32 float2 atomics")
    fs.text(ax, x3 + w3 / 2, y - 6.0, "64 KiB of atomics per Q tile and block: in the profile, "
            "31% of the stall samples", size=7, ha="center")
    fs.save(fig, out_dir, "fig_d256_warp_tiles")


if __name__ == "__main__":
    fs.run_alone(main)
