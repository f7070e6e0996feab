#!/usr/bin/env python3
"""fig_head_groups.svg: the launch order of chapter 07's causal dK/dV blocks, head by head
(07/bwd_v5_producer) and key tile by key tile inside groups of heads (07/bwd_v6_head_groups).

Drawn small so that every block is visible: 8 SMs (one block each at a time), 8 heads, 4 key
tiles a head and 8 query tiles, so that causally key tile k is seen by 8 - 2k query tiles; a
block's time is those iterations plus one for loading its K, V and storing its dK, dV (9, 7, 5,
3). The GPU's block scheduler hands the blocks out in launch order, each to the SM that frees
first: the list schedule computed below, not typed.

Top: head by head. Each head's heaviest block starts where the previous head's lightest ended, so
heavy blocks keep arriving until the end, and the last SMs to finish hold one (27 iteration-times
against an average of 24 a SM).
Bottom: groups of G heads (head_group_units in common/device/kv_tiles.h: a power of two near two
waves of blocks, here 2 x 8 / 4 = 4), key tile by key tile inside each (head_group_place): every
group starts with its heaviest blocks, and the run ends at the average. Only G heads' Q and dO are
read at a time, which is what keeps them in the L2 (launching every head's key tile 0 first, the
step tuning/bwd_t43, lost that).
"""
import heapq

import figstyle as fs

SMS = 8
HEADS = 8
KEY_TILES = 4
QUERY_TILES = 8
GROUP = 4  # head_group_units(KEY_TILES, SMS, HEADS)

# Heavier blocks in darker tints.
TILE_COLOURS = [fs.tint(fs.BLUE, a) for a in (0.85, 0.6, 0.4, 0.22)]
IDLE = "#F3F3F3"


def work(kt):
    """Iterations of the block of key tile kt, plus one for its K/V load and dK/dV store."""
    return QUERY_TILES - 2 * kt + 1


def head_group_place(b, units):
    """As common/device/kv_tiles.h: block b of the grid as (head, key tile)."""
    first = b // (units * KEY_TILES) * units
    here = min(units, HEADS - first)
    r = b - first * KEY_TILES
    return first + r % here, r // here


def schedule(order):
    """Per SM, the list of (head, key tile, start, end): each block to the SM that frees first."""
    free = [(0, sm) for sm in range(SMS)]
    heapq.heapify(free)
    lanes = [[] for _ in range(SMS)]
    for head, kt in order:
        start, sm = heapq.heappop(free)
        end = start + work(kt)
        lanes[sm].append((head, kt, start, end))
        heapq.heappush(free, (end, sm))
    return lanes


def draw_lanes(ax, lanes, y_top, x0, unit, lane_h):
    run_end = max(seg[3] for lane in lanes for seg in lane)
    for sm, segs in enumerate(lanes):
        y = y_top - (sm + 1) * lane_h
        fs.text(ax, x0 - 1.2, y + lane_h / 2, "SM %d" % sm, size=6.8, ha="right")
        end = 0
        for head, kt, s, e in segs:
            fs.rect(ax, x0 + s * unit, y + 0.35, (e - s) * unit, lane_h - 0.7, fc=TILE_COLOURS[kt],
                    ec=fs.INK, lw=0.6)
            fs.text(ax, x0 + (s + e) / 2 * unit, y + lane_h / 2, "h%d k%d" % (head, kt), size=6.0,
                    ha="center")
            end = max(end, e)
        if end < run_end:
            fs.rect(ax, x0 + end * unit, y + 0.35, (run_end - end) * unit, lane_h - 0.7, fc=IDLE,
                    ec="#BBBBBB", lw=0.4, ls=(0, (2, 2)))
    bottom = y_top - SMS * lane_h
    average = sum(work(kt) for kt in range(KEY_TILES)) * HEADS / SMS
    for x, colour, label in ((average, fs.GREEN, "the average SM's work"),
                             (run_end, fs.VERMILLION, "the run ends")):
        ax.plot([x0 + x * unit] * 2, [bottom - 0.4, y_top + 0.4], color=colour, lw=1.2)
    fs.text(ax, x0 + run_end * unit + 0.8, y_top - 1.0,
            "ends at %d%s" % (run_end, " (the average)" if run_end == average else ""), size=6.8,
            color=fs.VERMILLION)
    return bottom, run_end


def main(out_dir):
    fig, ax = fs.canvas(150, 100)
    fs.text(ax, 75, 97.0, "Causal dK/dV blocks on %d SMs: %d heads x %d key tiles, key tile k "
            "seen by %d - 2k query tiles" % (SMS, HEADS, KEY_TILES, QUERY_TILES), size=12,
            ha="center", weight="bold")
    x0, unit, lane_h = 16.0, 4.3, 4.2

    def axis(y, run_end):
        for t in range(0, run_end + 1, 3):
            fs.text(ax, x0 + t * unit, y - 1.6, "%d" % t, size=6.8, ha="center")
            ax.plot([x0 + t * unit] * 2, [y, y + SMS * lane_h], color="#CCCCCC", lw=0.4,
                    zorder=0)
        fs.text(ax, x0 + run_end * unit + 4.0, y - 1.6, "iteration-times", size=6.8)

    by_head = [(h, kt) for h in range(HEADS) for kt in range(KEY_TILES)]
    top = 90.0
    fs.text(ax, x0, top + 1.8, "bwd_v5, head by head: heavy blocks arrive until the end, and "
            "the SMs that finish early wait for them", size=8, weight="bold")
    bottom, end1 = draw_lanes(ax, schedule(by_head), top, x0, unit, lane_h)
    axis(bottom, end1)

    grouped = [head_group_place(b, GROUP) for b in range(HEADS * KEY_TILES)]
    top2 = bottom - 7.5
    fs.text(ax, x0, top2 + 1.8, "bwd_v6, key tile by key tile inside groups of %d heads: each "
            "group starts with its heaviest blocks" % GROUP, size=8, weight="bold")
    bottom2, end2 = draw_lanes(ax, schedule(grouped), top2, x0, unit, lane_h)
    axis(bottom2, end1)

    ly = bottom2 - 6.0
    for kt in range(KEY_TILES):
        fs.swatch(ax, x0 + 27 * kt, ly, TILE_COLOURS[kt],
                  "key tile %d: %d iterations" % (kt, work(kt)))
    fs.swatch(ax, x0, ly - 3.2, IDLE, "an idle SM", ec="#BBBBBB")
    fs.text(ax, x0 + 27, ly - 3.2, "green: the average SM's work (%d); red: where the run ends"
            % (sum(work(kt) for kt in range(KEY_TILES)) * HEADS // SMS), size=8)
    fs.save(fig, out_dir, "fig_head_groups")


if __name__ == "__main__":
    fs.run_alone(main)
