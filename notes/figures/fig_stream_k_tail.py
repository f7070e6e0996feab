#!/usr/bin/env python3
"""fig_stream_k_tail.svg: the wave tail of a persistent GEMM, and what Stream-K does to it
(chapter 03's tuning steps t10_tma_store and t11_stream_k, chapters/03_tiled_matmul/tuning/).

Drawn small so that every block is visible: G = 8 persistent blocks (one per SM) and 29 output
tiles of K_TILES k-steps each, 3.625 tiles a block (the H100 case it stands for: 132 blocks and
512 tiles at 4096^3, 3.88 a block; 2048 tiles at 8192^3, 15.52).

Top: t10. Block b computes tiles b, b + G, b + 2G, ... whole: every block runs 3 rounds and 5 of
the 8 a 4th, while 3 SMs idle; the run lasts 4 tile-times.
Bottom: t11. The tiles of the last, partial round are cut into k-iterations laid end to end and
dealt out in G equal contiguous ranges, so every block ends at the same time (3.625 tile-times).
A tile computed by two blocks is stored by the part that starts at k = 0 (its first part) and
added onto by the other (a later part: TMA reduce-add, after a flag the first part sets). Each
block does its first part before its later part, so no block waits for one that is waiting.
The schedule is computed here as t11_stream_k.cu computes it (kSkFullWaves = 0), not typed.
"""
import figstyle as fs

G = 8  # persistent blocks
TILES = 29  # output tiles
K_TILES = 8  # k-steps a tile

FULL_ROUND = fs.tint(fs.SKY, 0.55)
LAST_ROUND = fs.tint(fs.ORANGE, 0.6)
FIRST_PART = fs.tint(fs.GREEN, 0.55)
LATER_PART = fs.tint(fs.VERMILLION, 0.45)
IDLE = "#F3F3F3"


def data_parallel():
    """Per block, the list of (tile, start, end) in tile-times: t10's strided walk."""
    lanes = [[] for _ in range(G)]
    for t in range(TILES):
        b = t % G
        start = len(lanes[b])
        lanes[b].append((t, start, start + 1.0))
    return lanes


def stream_k():
    """Per block, the segments (tile, start, end, kind) in tile-times: the whole tiles of the full
    rounds, then its range of the last round's k-iterations (t11's order: the first part of the
    tile its range ends in, then whole tiles, then the later part of the tile it starts in)."""
    rounds = TILES // G
    sk_tiles = TILES - rounds * G  # the last, partial round
    total = sk_tiles * K_TILES
    lanes = []
    for b in range(G):
        segs = [(b + r * G, float(r), float(r + 1), "whole") for r in range(rounds)]
        lo = b * total // G
        hi = (b + 1) * total // G
        parts = []
        it = lo
        while it < hi:
            tile = it // K_TILES
            k0 = it % K_TILES
            k1 = min(K_TILES, k0 + (hi - it))
            kind = "whole" if (k0 == 0 and k1 == K_TILES) else ("first" if k0 == 0 else "later")
            parts.append((rounds * G + tile, k1 - k0, kind))
            it += k1 - k0
        order = ([p for p in parts if p[2] == "first"] + [p for p in parts if p[2] == "whole"] +
                 [p for p in parts if p[2] == "later"])
        t = float(rounds)
        for tile, n, kind in order:
            segs.append((tile, t, t + n / K_TILES, kind))
            t += n / K_TILES
        lanes.append(segs)
    return lanes


def draw_lanes(ax, lanes, y_top, x0, unit, lane_h, kinds, run_end):
    for b, segs in enumerate(lanes):
        y = y_top - (b + 1) * lane_h
        fs.text(ax, x0 - 1.2, y + lane_h / 2, "block %d" % b, size=6.8, ha="right")
        end = 0.0
        for seg in segs:
            tile, s, e = seg[0], seg[1], seg[2]
            kind = kinds(seg)
            fs.rect(ax, x0 + s * unit, y + 0.35, (e - s) * unit, lane_h - 0.7, fc=kind, ec=fs.INK,
                    lw=0.6)
            fs.text(ax, x0 + (s + e) / 2 * unit, y + lane_h / 2, "%d" % tile, size=6.2,
                    ha="center")
            end = max(end, e)
        if end < run_end:
            fs.rect(ax, x0 + end * unit, y + 0.35, (run_end - end) * unit, lane_h - 0.7, fc=IDLE,
                    ec="#BBBBBB", lw=0.4, ls=(0, (2, 2)))
    bottom = y_top - len(lanes) * lane_h
    ax.plot([x0 + run_end * unit] * 2, [bottom - 0.4, y_top + 0.4], color=fs.VERMILLION, lw=1.2)
    fs.text(ax, x0 + run_end * unit + 0.8, y_top + 0.9, "the run ends", size=6.8,
            color=fs.VERMILLION)
    return bottom


def main(out_dir):
    fig, ax = fs.canvas(150, 100)
    fs.text(ax, 75, 97.0, "The last wave of a persistent GEMM: %d tiles on %d blocks (%.3f a block)"
            % (TILES, G, TILES / G), size=12, ha="center", weight="bold")
    x0, unit, lane_h = 22.0, 28.0, 4.2

    def axis(y):
        for r in range(5):
            fs.text(ax, x0 + r * unit, y - 1.6, "%d" % r, size=6.8, ha="center")
            ax.plot([x0 + r * unit] * 2, [y, y + G * lane_h], color="#CCCCCC", lw=0.4, zorder=0)
        fs.text(ax, x0 + 4 * unit + 2.0, y - 1.6, "tile-times", size=6.8)

    dp = data_parallel()
    top = 90.0
    fs.text(ax, x0, top + 1.8, "t10: every block computes whole tiles, b, b + %d, b + %d, ...: "
            "the run lasts 4 tile-times, %d SMs idle through the 4th" % (G, 2 * G, G - TILES % G),
            size=8, weight="bold")
    bottom = draw_lanes(ax, dp, top, x0, unit, lane_h,
                        lambda seg: FULL_ROUND if seg[1] < TILES // G else LAST_ROUND,
                        max(seg[2] for lane in dp for seg in lane))
    axis(bottom)

    sk = stream_k()
    top2 = bottom - 7.5
    fs.text(ax, x0, top2 + 1.8, "t11: the last round's k-steps dealt out in %d equal ranges: "
            "every block ends at %.3f" % (G, TILES / G), size=8, weight="bold")
    colours = {"whole": LAST_ROUND, "first": FIRST_PART, "later": LATER_PART}
    bottom2 = draw_lanes(ax, sk, top2, x0, unit, lane_h,
                         lambda seg: FULL_ROUND if seg[3] == "whole" and seg[1] < TILES // G
                         else colours[seg[3]], max(seg[2] for lane in sk for seg in lane))
    axis(bottom2)

    ly = bottom2 - 6.0
    fs.swatch(ax, x0, ly, FULL_ROUND, "a whole tile, full rounds")
    fs.swatch(ax, x0 + 34, ly, LAST_ROUND, "a whole tile, last round")
    fs.swatch(ax, x0 + 68, ly, FIRST_PART, "first part (k from 0): TMA store, then its flag")
    fs.swatch(ax, x0, ly - 3.2, LATER_PART, "later part: waits for the flag, then TMA reduce-add")
    fs.swatch(ax, x0 + 68, ly - 3.2, IDLE, "an idle SM", ec="#BBBBBB")
    fs.save(fig, out_dir, "fig_stream_k_tail")


if __name__ == "__main__":
    fs.run_alone(main)
