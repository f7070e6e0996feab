#!/usr/bin/env python3
"""fig_varlen_packing.svg: chapter 09's variable-length batch. Three sequences of 150, 40 and 300
tokens packed without padding in the head-major layout of common/shapes.h VarlenShape: Q is
[heads, total_q, D], and query head h of sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1
of head h's slab. Each sequence is cut into its own query tiles of Br = 64 rows (the last one
short). Below: what a padded batch [batch, heads, max, D] holds and computes instead, and the
grid a varlen launch sizes by max_seq_q, where the blocks past a sequence's length return at once.
Every count printed is computed from LENGTHS.
"""
import figstyle as fs

LENGTHS = [150, 40, 300]
BR = 64
COLOURS = [fs.SKY, fs.ORANGE, fs.GREEN]
PAD = "#E4E4E4"
U = 0.22  # drawing units per token


def cu_seqlens(lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def main(out_dir):
    fig, ax = fs.canvas(150, 80)
    fs.text(ax, 75, 77.0, "A variable-length batch: packed without padding, each sequence its "
            "own attention problem", size=12, ha="center", weight="bold")
    cu = cu_seqlens(LENGTHS)
    total, longest, batch = cu[-1], max(LENGTHS), len(LENGTHS)
    x0 = 22.0

    # ---- Packed, head-major: two heads' slabs, cu_seqlens over them, each sequence's tiles.
    fs.text(ax, 4.0, 69.0, "Packed (head-major)", size=9, weight="bold")
    fs.text(ax, 4.0, 66.6, "Q [heads, total_q = %d, D]" % total, size=7.4)
    ys = {0: 59.0, 1: 52.5}
    for h, y in ys.items():
        fs.text(ax, x0 - 1.0, y + 1.7, "head %d" % h, size=7.4, ha="right")
        for b, n in enumerate(LENGTHS):
            fs.rect(ax, x0 + cu[b] * U, y, n * U, 3.4, fc=fs.tint(COLOURS[b], 0.45), ec=fs.INK,
                    lw=0.7)
            fs.text(ax, x0 + (cu[b] + n / 2) * U, y + 1.7, "seq %d: %d rows" % (b, n), size=6.8,
                    ha="center")
    fs.text(ax, x0 + total * U + 1.0, ys[1] + 1.7, "… up to head\nheads − 1", size=6.6,
            color="#555555")
    # cu_seqlens: an arrow from each entry to the row where its sequence starts (and the end).
    fs.text(ax, x0, 68.6, "cu_seqlens_q = [%s]" % ", ".join(str(c) for c in cu), size=8,
            weight="bold", color=fs.VERMILLION)
    for b, c in enumerate(cu):
        x = x0 + c * U
        fs.arrow(ax, (x, 65.4), (x, ys[0] + 3.6), color=fs.VERMILLION, lw=0.9)
        fs.text(ax, x + 0.5, 65.0, "cu[%d] = %d" % (b, c), size=6.4, color=fs.VERMILLION,
                va="bottom")
    fs.text(ax, x0 + total * U + 1.0, ys[0] + 1.7, "query i of seq b, head h:\nelement "
            "(h·total_q + cu[b] + i)·D", size=6.4, color="#333333")
    # Query tiles of Br rows, per sequence: the last one is short (masked, never stored past it).
    ty = 46.8
    fs.text(ax, x0 - 1.0, ty + 1.1, "query tiles", size=7.4, ha="right")
    for b, n in enumerate(LENGTHS):
        tiles = -(-n // BR)
        for t in range(tiles):
            r0, r1 = t * BR, min((t + 1) * BR, n)
            fs.rect(ax, x0 + (cu[b] + r0) * U + 0.15, ty, (r1 - r0) * U - 0.3, 2.2,
                    fc=fs.tint(COLOURS[b], 0.25 if r1 - r0 < BR else 0.6), ec=fs.INK, lw=0.6)
        fs.text(ax, x0 + (cu[b] + n / 2) * U, ty - 1.6, "%d tile%s" % (tiles, "s" * (tiles > 1)),
                size=6.6, ha="center")
    fs.text(ax, x0, ty - 4.2, "Tiles of Br = %d rows start at each sequence's first row; a "
            "short last tile masks its missing rows (they belong to the next sequence) and "
            "stores none of them." % BR, size=7)

    # ---- Padded: every sequence stretched to the longest, the padding greyed.
    py = 32.0
    fs.text(ax, 4.0, py + 3.4, "Padded instead", size=9, weight="bold")
    fs.text(ax, 4.0, py + 1.0, "Q [batch, heads, max = %d, D]" % longest, size=7.4)
    for b, n in enumerate(LENGTHS):
        y = py - 5.2 * b - 4.0
        fs.text(ax, x0 - 1.0, y + 1.7, "seq %d" % b, size=7.4, ha="right")
        fs.rect(ax, x0, y, n * U, 3.4, fc=fs.tint(COLOURS[b], 0.45), ec=fs.INK, lw=0.7)
        if n < longest:
            fs.rect(ax, x0 + n * U, y, (longest - n) * U, 3.4, fc=PAD, ec="#888888", lw=0.6,
                    hatch="//")
            fs.text(ax, x0 + (n + longest) / 2 * U, y + 1.7, "padding: %d rows" % (longest - n),
                    size=6.6, ha="center", color="#555555")
    pairs = sum(n * n for n in LENGTHS)
    padded_pairs = batch * longest * longest
    mean = total / batch
    yb = py - 5.2 * batch - 3.6
    fs.text(ax, x0, yb, "rows: %d of %d hold tokens (%.0f%%); max / mean = %.2f" % (
        total, batch * longest, 100.0 * total / (batch * longest), longest / mean), size=7.4)
    fs.text(ax, x0, yb - 2.4, "(i, j) pairs, no mask: Σ n² = %d packed, B · max² = %d padded "
            "(%.2f×)" % (pairs, padded_pairs, padded_pairs / pairs), size=7.4)
    fs.text(ax, x0, yb - 4.8, "between max / mean and (max / mean)²: the FLOPs are quadratic in "
            "the length", size=7.0, color="#555555")

    # ---- The grid of one head, sized by max_seq_q: blocks past a sequence's length return.
    gx, gy, cw, ch = 114.0, 28.0, 5.6, 4.0
    per_seq = -(-longest // BR)
    fs.text(ax, gx - 8.0, py + 3.4, "The varlen grid (one head)", size=9, weight="bold")
    fs.text(ax, gx - 8.0, py + 1.0, "ceil(max_seq_q / Br) = %d blocks per sequence" % per_seq,
            size=7.4)
    busy = 0
    for b, n in enumerate(LENGTHS):
        y = gy - ch * (b + 1)
        fs.text(ax, gx - 1.0, y + ch / 2, "seq %d" % b, size=7, ha="right")
        for m in range(per_seq):
            works = m * BR < n
            busy += works
            fs.rect(ax, gx + m * cw, y, cw, ch, fc=fs.tint(COLOURS[b], 0.6) if works else "white",
                    ec=fs.INK, lw=0.6)
            fs.text(ax, gx + (m + 0.5) * cw, y + ch / 2, "m %d" % m if works else "return",
                    size=5.6 if not works else 6.2, ha="center",
                    color=fs.INK if works else "#888888")
    blocks = per_seq * batch
    fs.text(ax, gx - 8.0, gy - ch * batch - 2.4, "%d blocks, %d with rows, %d return at once" % (
        blocks, busy, blocks - busy), size=7.4)
    fs.text(ax, gx - 8.0, gy - ch * batch - 4.8, "no FLOP on padding; the waste is empty blocks",
            size=7.0, color="#555555")

    # ---- Legend line.
    fs.text(ax, 4.0, 3.0, "Each sequence is its own problem: its causal diagonal, its window, its "
            "L; cu_seqlens_k places its keys the same way in K and V [heads_kv, total_k, D].",
            size=7.6)
    fs.save(fig, out_dir, "fig_varlen_packing")


if __name__ == "__main__":
    fs.run_alone(main)
