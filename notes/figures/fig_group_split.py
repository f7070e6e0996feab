#!/usr/bin/env python3
"""fig_group_split.svg: why chapter 07's backward (07/bwd_v1_tma_wgmma) splits a group of query
heads over several dK/dV blocks, drawn small. MQA, causal: one K/V head read by a group of
GROUP = 8 query heads; KT = 8 key tiles (of 128 keys), 16 query tiles (of 64 rows), so key tile k
is seen by the 16 - 2k query tiles from 2k on; a GPU of SLOTS = 8 SMs, one dK/dV block each.

A dK/dV block owns one key tile and loops over its group's query heads x the query tiles that
see its keys: that count is its time, in iterations. The blocks start in launch order (key tile 0
first), each on the SM that frees first, as the block scheduler hands them out; group_split in
bwd_v1_tma_wgmma.cu estimates exactly this, and keeps the split with the earliest end.

Top: split 1 (one block per key tile, the whole group in each): 8 blocks for 8 SMs, the first key
tile's 128 iterations set the time while the SMs of the last tiles idle. Bottom: the split the
estimate picks: each key tile's group cut into parts of GROUP / split heads, blocks of a part each,
their fp32 sums added by a second kernel (sum_parts_kernel). The same work ends near the average.
"""
import heapq

import figstyle as fs

GROUP = 8  # query heads per K/V head (MQA: all of them)
KT = 8  # key tiles of 128 keys
QT = 16  # query tiles of 64 rows
SLOTS = 8  # SMs, one dK/dV block resident on each
OVERHEAD = 2  # iterations' worth per block: its K/V tile in, dK and dV out (bwd_v1's estimate)
TILE_COLOURS = [fs.VERMILLION, fs.ORANGE, fs.YELLOW, fs.GREEN, fs.SKY, fs.BLUE, fs.PURPLE, fs.GREY]


def query_tiles(k):
    """Query tiles that see key tile k (causal, seq_q = seq_k): from 2k on."""
    return QT - 2 * k


def schedule(split):
    """The blocks in launch order on the SM that frees first: [(sm, start, length, k, part)]."""
    free = [(0.0, sm) for sm in range(SLOTS)]
    out = []
    for part in range(split):
        for k in range(KT):
            start, sm = heapq.heappop(free)
            length = query_tiles(k) * GROUP // split + OVERHEAD
            out.append((sm, start, length, k, part))
            heapq.heappush(free, (start + length, sm))
    return out


def end(split):
    return max(start + length for _, start, length, _, _ in schedule(split))


def best_split():
    splits = [s for s in range(1, GROUP + 1) if GROUP % s == 0]
    return min(splits, key=lambda s: (end(s), s))


def draw(ax, top, split, scale, title):
    lane = 3.2
    x0 = 16.0
    fs.text(ax, x0, top + 2.6, title, size=8.4, weight="bold")
    blocks = schedule(split)
    total = sum(length for _, _, length, _, _ in blocks)
    for sm in range(SLOTS):
        y = top - (sm + 1) * lane
        fs.text(ax, x0 - 1.0, y + lane / 2, "SM %d" % sm, size=6.6, ha="right")
        fs.rect(ax, x0, y + 0.35, end(1) * scale, lane - 0.7, fc="#F5F5F5", ec="none")
    for sm, start, length, k, part in blocks:
        y = top - (sm + 1) * lane
        fs.rect(ax, x0 + start * scale, y + 0.35, length * scale, lane - 0.7,
                fc=fs.tint(TILE_COLOURS[k], 0.6), ec=fs.INK, lw=0.5)
        label = "k%d" % k if split == 1 else "k%d.%d" % (k, part)
        if length * scale > 3.2:
            fs.text(ax, x0 + (start + length / 2) * scale, y + lane / 2, label, size=5.8,
                    ha="center")
    finish = end(split)
    mean = total / SLOTS
    bottom = top - SLOTS * lane
    ax.plot([x0 + finish * scale] * 2, [bottom - 0.6, top + 0.6], color=fs.VERMILLION, lw=1.2)
    fs.text(ax, x0 + finish * scale + 0.8, bottom - 0.2, "end %d" % finish, size=6.8,
            color=fs.VERMILLION)
    ax.plot([x0 + mean * scale] * 2, [bottom - 0.6, top + 0.6], color=fs.INK, lw=0.8,
            linestyle=(0, (3, 2)))
    fs.text(ax, x0 + mean * scale + 0.8, top + 0.9, "average %.0f" % mean, size=6.6)
    return finish


def main(out_dir):
    fig, ax = fs.canvas(150, 80)
    fs.text(ax, 75, 77, "Causal MQA backward: a block per key tile carries the whole group; "
            "splitting the group evens out the SMs", size=11.5, ha="center", weight="bold")
    scale = 118.0 / end(1)
    s = best_split()
    first = draw(ax, 70.0, 1, scale, "split 1: %d blocks (key tile k: %d query heads x "
                 "(%d - 2k) query tiles + %d)" % (KT, GROUP, QT, OVERHEAD))
    second = draw(ax, 36.0, s, scale, "split %d (the estimate's pick): %d blocks of %d heads, "
                  "key tile k part p drawn kk.p" % (s, KT * s, GROUP // s))
    fs.text(ax, 16.0, 5.5, "time in iterations (one iteration: 64 queries x 128 keys, 4 products); "
            "estimated end %d with split 1, %d with split %d (%.2fx); the parts' fp32 sums cost "
            "one more pass over dK and dV" % (first, second, s, first / second), size=6.8)
    fs.text(ax, 16.0, 2.6, "blocks start in launch order on the SM that frees first; "
            "07/bwd_v1_tma_wgmma.cu, group_split", size=6.8, color="#333333")
    fs.save(fig, out_dir, "fig_group_split")


if __name__ == "__main__":
    fs.run_alone(main)
