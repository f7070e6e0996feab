#!/usr/bin/env python3
"""fig_d256_halves.svg: how chapter 07's tuning step bwd_t53 shares one tile of the backward at
D 256 between its two consumer warpgroups (chapters/07_flash_hopper/tuning/bwd_t53_d256_halves.cu).

A block holds 64 keys (K and V, all 256 columns); a tile streams 64 queries (Q and dO). Top row,
before the barrier: warpgroup w computes S^T and dP^T for queries 32w .. 32w + 31 (a wgmma of
N = 32, 256 columns deep) and stores its half of P^T and dS^T, 16-bit, into two shared
[64 keys x 64 queries] tiles; then one barrier of both. Middle row, after it: warpgroup w computes
columns 128w .. 128w + 127 of dV += P^T dO, dK += dS^T Q (64 keys, registers kept over the loop)
and of dQ_tile = dS K (64 queries). Bottom row: the stage that held the tile's Q and dO, four
strips of 64 columns each (8 KiB); after the barrier a warpgroup reads only its own two strips of
each, so its four staging boxes of dQ_tile (64 rows x 32 fp32 columns, 8 KiB) go there.
"""
import figstyle as fs

WG_FILL = [fs.tint(fs.BLUE, 0.35), fs.tint(fs.ORANGE, 0.45)]
WG_EDGE = [fs.BLUE, fs.ORANGE]
SCALE = 0.16  # drawing units per element


def split_tile(ax, x, y, rows, cols, label, by, title, fill=None):
    """A rows x cols tile at (x, y) (lower left), split in halves by 'cols' or 'rows' between the
    two warpgroups (top half / left half is warpgroup 0)."""
    w, h = cols * SCALE, rows * SCALE
    for wg in range(2):
        if by == "cols":
            rx, ry, rw, rh = x + wg * w / 2, y, w / 2, h
        else:
            rx, ry, rw, rh = x, y + (1 - wg) * h / 2, w, h / 2
        fs.rect(ax, rx, ry, rw, rh, fc=fill or WG_FILL[wg], ec=WG_EDGE[wg], lw=1.0)
        fs.text(ax, rx + rw / 2, ry + rh / 2, "wg %d" % wg, size=7, ha="center")
    fs.rect(ax, x, y, w, h, fc="none", ec=fs.INK, lw=0.8)
    fs.text(ax, x + w / 2, y + h + 1.2, title, size=8, ha="center", weight="bold")
    fs.text(ax, x + w / 2, y - 1.3, label, size=6.8, ha="center")
    return w, h


def main(out_dir):
    fig, ax = fs.canvas(150, 96)
    fs.text(ax, 75, 93.0, "bwd_t53 at D 256: one tile of 64 keys x 64 queries, two warpgroups",
            size=12, ha="center", weight="bold")

    # ---- before the barrier: S^T and dP^T by queries (D drawn at half the scale)
    y1 = 60.0
    fs.text(ax, 4, y1 + 25.5, "1. S\u1d40 = K Q\u1d40 and dP\u1d40 = V dO\u1d40, split by "
            "queries (N = 32 each, 256 columns deep)", size=8.5, weight="bold")
    kw, kh = 256 * SCALE * 0.5, 64 * SCALE
    fs.rect(ax, 4, y1, kw, kh, fc=fs.SHARED_FILL, lw=0.8)
    fs.text(ax, 4 + kw / 2, y1 + kh / 2, "K, V\n64 keys x 256", size=7, ha="center")
    fs.text(ax, 4 + kw / 2, y1 + kh + 1.2, "shared (kept)", size=8, ha="center", weight="bold")
    fs.text(ax, 4 + kw + 3, y1 + kh / 2, "x", size=12, ha="center")
    qx, qw, qh = 4 + kw + 6, 64 * SCALE, 256 * SCALE * 0.5
    for wg in range(2):
        fs.rect(ax, qx + wg * qw / 2, y1, qw / 2, qh, fc=WG_FILL[wg], ec=WG_EDGE[wg], lw=1.0)
        fs.text(ax, qx + (wg + 0.5) * qw / 2, y1 + qh / 2, "wg %d" % wg, size=7, ha="center")
    fs.rect(ax, qx, y1, qw, qh, fc="none", ec=fs.INK, lw=0.8)
    fs.text(ax, qx + qw / 2, y1 + qh + 1.2, "Q\u1d40, dO\u1d40 (the stage)", size=8,
            ha="center", weight="bold")
    fs.text(ax, qx + qw / 2, y1 - 1.6, "256 x 64 queries", size=6.8, ha="center")
    fs.arrow(ax, (qx + qw + 2, y1 + kh / 2), (qx + qw + 10, y1 + kh / 2))
    px = qx + qw + 12
    split_tile(ax, px, y1, 64, 64, "64 keys x 64 queries, 16-bit", "cols",
               "P\u1d40 and dS\u1d40 tiles (shared)")
    fs.text(ax, px + 32 * SCALE, y1 - 4.2, "each warpgroup stores its 32 columns, then one "
            "barrier of both", size=7, ha="center", color=fs.VERMILLION)

    # ---- after it: dV, dK, dQ_tile by columns
    y2 = 30.0
    fs.text(ax, 4, y2 + 20.5, "2. dV += P\u1d40 dO, dK += dS\u1d40 Q, dQ_tile = dS K, split by "
            "columns (N = 128 each)", size=8.5, weight="bold")
    split_tile(ax, 4, y2, 64, 256, "64 keys x 256 columns, fp32 registers over the loop", "cols",
               "dV and dK (registers)")
    split_tile(ax, 52, y2, 64, 256, "64 queries x 256 columns, fp32", "cols",
               "dQ_tile (registers, one tile)")
    fs.text(ax, 100, y2 + 6, "A: the P\u1d40 / dS\u1d40 tile (dS read\ntransposed for "
            "dQ_tile); B: dO, Q\nor K from strip 2w on", size=7)

    # ---- the stage: staging boxes in the warpgroup's own strips
    y3 = 6.0
    fs.text(ax, 4, y3 + 15.5, "3. dQ_tile's staging boxes go into the warpgroup's own strips of "
            "the stage, then TMA reduce-adds them into L2", size=8.5, weight="bold")
    strip_w = 64 * SCALE
    for t, name in enumerate(("Q", "dO")):
        x0 = 4 + t * 48
        for c in range(4):
            wg = c // 2
            fs.rect(ax, x0 + c * strip_w, y3, strip_w, 64 * SCALE, fc=WG_FILL[wg], ec=WG_EDGE[wg],
                    lw=1.0)
            box = c % 2 + 2 * t  # Q: boxes 0, 1; dO: boxes 2, 3
            fs.text(ax, x0 + (c + 0.5) * strip_w, y3 + 64 * SCALE / 2,
                    "strip %d\nwg %d box %d" % (c, wg, box), size=6.2, ha="center")
        fs.text(ax, x0 + 2 * strip_w, y3 - 1.3, "%s of the stage: 4 strips of 64 columns" % name,
                size=6.8, ha="center")
    fs.text(ax, 100, y3 + 8, "box b of warpgroup w: columns\n128w + 32b .. of dQ_tile; "
            "the stage\nis freed once TMA has read them", size=7)

    fs.swatch(ax, 112, 84, WG_FILL[0], "warpgroup 0", size=7.5)
    fs.swatch(ax, 112, 80.5, WG_FILL[1], "warpgroup 1", size=7.5)
    fs.save(fig, out_dir, "fig_d256_halves")


if __name__ == "__main__":
    fs.run_alone(main)
