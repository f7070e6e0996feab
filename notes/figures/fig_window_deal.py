#!/usr/bin/env python3
"""fig_window_deal.svg: why chapter 09's persistent window forward deals single query tiles
(09/hopper_v5_window_single_units) where the causal forward deals pairs (07/t52, 09/hopper_v3,
09/hopper_v4_window_persistent). The problem of fa_bench's window rows: one sequence of N = 32768
tokens, H = 16 heads, causal, window W = 4096 (window_left 4095), query tiles of Br = 128 rows,
key tiles of Bc = 176 keys (t52's at D 128), G = 132 persistent blocks (an H100's SMs).

Left: the cost of query tile i, in key tiles (ch09_band.h's key_tiles, the count a kernel loops
over): causal rows grow with i, so tile NQ - 1 - r and tile r add up to about the same for every
r, and pairs make equal units; under the window every tile past the first W / Br costs the same,
so a pair is just two tiles (or, where r < W / Br, a light and a heavy one).

Right: a list-scheduling model of each deal, each block's total (a unit's cost: its key tiles plus
one for its start and end) over the deal's average, the blocks in order. Dealt statically (block b
takes units b, b + G, ...): pairs make 2048 units, 16 for 68 blocks and 15 for the other 64; single
tiles heaviest first make 4096, and the last round's units are the light ones. The third row is the
hardware's own deal of hopper_v2_window's grid (a block per query tile, heaviest first; 128-key
tiles), each new block to the first SM that frees up.

With --print the script prints the busiest block's excess over the average instead of drawing:
the figures quoted in hopper_v5_window_single_units.cu's header and chapter 09's README.
"""
import heapq
import sys

import figstyle as fs

N, W, BR, HEADS, G = 32768, 4096, 128, 16, 132
NQ = N // BR


def key_tiles(q, bc, window):
    """Key tiles query tile q visits (bottom-right causal, window_left = window - 1 or none)."""
    first = max(0, q * BR - (window - 1)) if window else 0
    last = min(N - 1, q * BR + BR - 1)
    return last // bc - first // bc + 1


def units(bc, window, pairs):
    """The costs of one head's units in the order the static deal numbers them."""
    if pairs:
        out = []
        for r in range((NQ + 1) // 2):
            a, b = NQ - 1 - r, r
            cost = key_tiles(a, bc, window) + 1
            if b < a:
                cost += key_tiles(b, bc, window) + 1
            out.append(cost)
        return out
    return [key_tiles(NQ - 1 - r, bc, window) + 1 for r in range(NQ)]


def static_deal(costs):
    load = [0.0] * G
    for u, c in enumerate(costs):
        load[u % G] += c
    return load


def hardware_deal(costs):
    """Each block to the SM that frees up first, in grid order (heapq: ties to the lowest SM)."""
    heap = [(0.0, sm) for sm in range(G)]
    load = [0.0] * G
    for c in costs:
        t, sm = heapq.heappop(heap)
        load[sm] = t + c
        heapq.heappush(heap, (t + c, sm))
    return load


def deals():
    """(label, per-block loads) for the three deals of the window problem."""
    pairs = static_deal(units(176, W, True) * HEADS)
    single = static_deal(units(176, W, False) * HEADS)
    grid = hardware_deal(units(128, W, False) * HEADS)
    return [("static, causal pairs (09/hopper_v4): 2048 units", pairs),
            ("static, single tiles heaviest first (09/hopper_v5): 4096 units", single),
            ("the hardware's deal of a block per tile (09/hopper_v2, 128-key tiles)", grid)]


def excess(load):
    return max(load) / (sum(load) / len(load)) - 1.0


def main(out_dir):
    fig, ax = fs.canvas(150, 76)
    fs.text(ax, 75, 73.5, "Under a window the query tiles cost alike: pairs (which even out "
            "causal rows) only make the static deal coarser", size=11.5, ha="center",
            weight="bold")

    # ---- Left: cost per query tile, causal and windowed.
    x0, y0, w, h = 8.0, 12.0, 44.0, 46.0
    causal = [key_tiles(q, 176, None) for q in range(NQ)]
    window = [key_tiles(q, 176, W) for q in range(NQ)]
    top = max(causal)
    fs.rect(ax, x0, y0, w, h, fc="none", ec="#888888", lw=0.5)
    for series, colour in ((causal, fs.GREY), (window, fs.VERMILLION)):
        xs = [x0 + w * (q + 0.5) / NQ for q in range(NQ)]
        ys = [y0 + h * c / top for c in series]
        ax.plot(xs, ys, color=colour, linewidth=1.4)
    for v in (0, 50, 100, 150):
        if v <= top:
            fs.text(ax, x0 - 0.8, y0 + h * v / top, "%d" % v, size=6.6, ha="right")
    for q in (0, 64, 128, 192, 255):
        fs.text(ax, x0 + w * (q + 0.5) / NQ, y0 - 1.8, "%d" % q, size=6.6, ha="center")
    fs.text(ax, x0 + w / 2, y0 - 4.6, "query tile i (128 rows each)", size=7.4, ha="center")
    fs.text(ax, x0 + w / 2, y0 + h + 2.4, "key tiles of 176 a query tile visits", size=7.8,
            ha="center", weight="bold")
    fs.text(ax, x0 + w * 0.42, y0 + h * 0.62, "causal: pair i with 255 - i,\nevery pair the same",
            size=7.0, color=fs.INK)
    fs.text(ax, x0 + w * 0.40, y0 + h * window[-1] / top + 4.0,
            "window W 4096: %d-%d for every tile\npast the first 32" % (min(window[40:]),
                                                                    max(window[40:])),
            size=7.0, color=fs.VERMILLION)
    fs.swatch(ax, x0, y0 - 9.5, fs.GREY, "causal (no window)", size=7.0)
    fs.swatch(ax, x0 + 24, y0 - 9.5, fs.VERMILLION, "causal, W 4096", size=7.0)

    # ---- Right: each block's load under the three deals, over its deal's average.
    rx, rw, row_h, gap = 60.0, 70.0, 14.0, 5.5
    results = deals()
    low = 0.8  # bars start at 80% of the average
    high = max(max(load) / (sum(load) / len(load)) for _, load in results)
    colours = [fs.ORANGE, fs.GREEN, fs.SKY]
    for k, (label, load) in enumerate(results):
        by = 64.0 - (k + 1) * row_h - k * gap
        avg = sum(load) / len(load)
        fs.text(ax, rx, by + row_h + 1.6, label, size=7.6, weight="bold")
        bw = rw / G
        for b, v in enumerate(load):
            fs.rect(ax, rx + b * bw, by, bw * 0.9, row_h * (v / avg - low) / (high - low),
                    fc=fs.tint(colours[k], 0.75), ec="none", lw=0)
        ya = by + row_h * (1.0 - low) / (high - low)
        ax.plot([rx, rx + rw], [ya, ya], color=fs.INK, linewidth=0.8, linestyle="--")
        fs.text(ax, rx + rw + 1.0, ya - 1.0, "average", size=6.6)
        fs.text(ax, rx + rw + 1.0, by + row_h * (max(load) / avg - low) / (high - low) + 0.8,
                "busiest +%.0f%%" % (100 * excess(load)), size=7.0, weight="bold")
    fs.text(ax, rx + rw / 2, 3.0, "each of the 132 blocks' work over its deal's average (key "
            "tiles, plus one a unit for its start and end),\nblocks in order; bars start at 80% "
            "of the average", size=6.8, ha="center")
    fs.save(fig, out_dir, "fig_window_deal")


if __name__ == "__main__":
    if "--print" in sys.argv:
        for label, load in deals():
            print("%-72s busiest block %.3fx the average" % (label, 1.0 + excess(load)))
    else:
        fs.run_alone(main)
