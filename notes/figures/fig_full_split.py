#!/usr/bin/env python3
"""fig_full_split.svg: why a grouped backward at full attention splits its group where the grid is
short (06/t22_group_split's split_of; full_split in common/group_split_plan.h), drawn small. A GPU
of SLOTS = 8 SMs, one dK/dV block each; KT = 4 key tiles; H = 8 query heads. Every block of a full
backward does the same work, one unit per query head it walks, so the grid runs in waves.

Top: MHA, 4 key tiles x 8 heads = 32 blocks of one head: 4 waves of 8, end 4. Middle: MQA at split
1, t20's walk: 4 blocks of all 8 heads, half the SMs idle, end 8 (the 1.95x that B 2, N 4096 at
MQA measured on 132 SMs: 64 blocks for 132). Bottom: MQA at the split that ends soonest, 2: 8
blocks of 4 heads, one wave, end 4, and the dK, dV parts added by atomics.
"""
import figstyle as fs

SLOTS = 8  # SMs, one dK/dV block resident on each
KT = 4  # key tiles
HEADS = 8  # query heads
TILE_COLOURS = [fs.VERMILLION, fs.ORANGE, fs.GREEN, fs.BLUE]


def waves(kv_heads, split):
    """[(sm, start, length, key tile, label)]: the blocks in launch order, each on the SM that
    frees first; every block walks HEADS / kv_heads / split heads, one unit each."""
    group = HEADS // kv_heads
    length = group // split
    out = []
    for b in range(KT * kv_heads * split):
        k = b % KT
        out.append((b % SLOTS, (b // SLOTS) * length, length, k, b // KT))
    return out


def draw(ax, top, kv_heads, split, scale, title, end_of_mha):
    lane = 2.6
    x0 = 16.0
    fs.text(ax, x0, top + 2.4, title, size=8.2, weight="bold")
    blocks = waves(kv_heads, split)
    finish = max(start + length for _, start, length, _, _ in blocks)
    for sm in range(SLOTS):
        y = top - (sm + 1) * lane
        fs.text(ax, x0 - 1.0, y + lane / 2, "SM %d" % sm, size=6.4, ha="right")
        fs.rect(ax, x0, y + 0.3, 8 * scale, lane - 0.6, fc="#F5F5F5", ec="none")
    for sm, start, length, k, unit in blocks:
        y = top - (sm + 1) * lane
        fs.rect(ax, x0 + start * scale, y + 0.3, length * scale, lane - 0.6,
                fc=fs.tint(TILE_COLOURS[k], 0.6), ec=fs.INK, lw=0.5)
        label = ("k%d h%d" % (k, unit) if kv_heads == HEADS
                 else "k%d, heads %d-%d" % (k, unit * length, unit * length + length - 1))
        fs.text(ax, x0 + (start + length / 2) * scale, y + lane / 2, label, size=5.6,
                ha="center")
    bottom = top - SLOTS * lane
    ax.plot([x0 + finish * scale] * 2, [bottom - 0.5, top + 0.5], color=fs.VERMILLION, lw=1.2)
    fs.text(ax, x0 + finish * scale + 0.8, bottom, "end %d (%.1fx MHA)" % (
        finish, finish / end_of_mha), size=6.6, color=fs.VERMILLION)
    return finish


def main(out_dir):
    fig, ax = fs.canvas(150, 92)
    fs.text(ax, 75, 89, "Full-attention MQA backward: a short grid idles SMs; splitting the "
            "group fills them", size=11.0, ha="center", weight="bold")
    scale = 100.0 / 8
    mha = max(s + n for _, s, n, _, _ in waves(HEADS, 1))
    draw(ax, 83.0, HEADS, 1, scale, "MHA: %d key tiles x %d heads = %d blocks of one head, "
         "%d waves" % (KT, HEADS, KT * HEADS, KT * HEADS // SLOTS), mha)
    draw(ax, 56.5, 1, 1, scale, "MQA, split 1 (t20's walk): %d blocks of all %d heads; %d of %d "
         "SMs idle" % (KT, HEADS, SLOTS - KT, SLOTS), mha)
    draw(ax, 30.0, 1, 2, scale, "MQA, split 2: %d blocks of %d heads, one wave; the two parts "
         "of each key tile's dK, dV added by atomics" % (2 * KT, HEADS // 2), mha)
    fs.text(ax, 16.0, 2.4, "time in units (one query head's walk over the query tiles); the "
            "split whose waves end soonest: ceil(blocks x split / SMs) x group / split",
            size=6.6, color="#333333")
    fs.save(fig, out_dir, "fig_full_split")


if __name__ == "__main__":
    fs.run_alone(main)
