#!/usr/bin/env python3
"""fig_varlen_deal.svg: why chapter 09's persistent packed forward (09/hopper_v3_varlen_persistent)
loses its per-tile lead on a batch of long, uneven sequences. The batch is fa_bench's long one and
bench/compare_serving.py's varlen batch: 15 sequences of 260 to 4456 tokens (32768 in all),
H = 16 heads, D 128, causal; query tiles of Br = 128 rows, key tiles of 176 keys (t52's at D 128;
128 for 09/hopper_v1_varlen), G = 132 persistent blocks (an H100's SMs).

Each row is a deal of the batch's work units to the 132 SMs, drawn as each SM's work over the
deal's average (a unit's cost: the key tiles it visits plus one for its start and end, the cost
model of fig_window_deal.py, whose deal functions this script uses):

1. v3's static deal: units numbered sequence after sequence (a head's units in turn, causal pairs
   of query tiles), block b takes units b, b + G, ... A round of G units that straddles a long and
   a short sequence gives some blocks the long one, round after round.
2. hopper_v1's grid, a block per query tile, dealt by the hardware to the first SM that frees up.
3. A static deal with the sequences longest first and each round dealt in alternating directions.
4. A static deal of single query tiles in order of their cost: balanced, but consecutive units
   belong to different heads, so each head's K and V are read once per query tile level, which
   L2 (50 MB) cannot hold for this batch (268 MB of Q, K, V and O).

Rows 1 and 2 were measured: Nsight Compute counted the busiest SM's active cycles 12.7% (v3) and
1.8% (hopper_v1) above the mean (H100, 2026-12-06, notes/measured/h100-2026-12-06/ncu_long_batch.txt).

With --print the script prints each deal's busiest block over the average, causal and full: the
figures chapter 09's README quotes.
"""
import sys

import figstyle as fs
from fig_window_deal import excess, hardware_deal, static_deal

LENGTHS = [3889, 3645, 260, 664, 2387, 2661, 1843, 2414, 853, 3344, 2827, 2019, 4456, 1052, 454]
BR, HEADS, G = 128, 16, 132
MEASURED = {0: 0.127, 1: 0.018}  # the busiest SM over the mean, causal (ncu_long_batch.txt)


def key_tiles(q, seq, bc, causal):
    """Key tiles query tile q of a sequence of seq tokens visits (seq_q = seq_k, bottom-right)."""
    last = min(seq - 1, q * BR + BR - 1) if causal else seq - 1
    return last // bc + 1


def seq_units(seq, bc, causal, pairs):
    """The costs of one head's units of a sequence, heaviest first (t52's order)."""
    nq = (seq + BR - 1) // BR
    if pairs and causal:
        out = []
        for r in range((nq + 1) // 2):
            a, b = nq - 1 - r, r
            cost = key_tiles(a, seq, bc, causal) + 1
            if b < a:
                cost += key_tiles(b, seq, bc, causal) + 1
            out.append(cost)
        return out
    return [key_tiles(nq - 1 - r, seq, bc, causal) + 1 for r in range(nq)]


def batch_units(order, bc, causal, pairs):
    out = []
    for b in order:
        out += seq_units(LENGTHS[b], bc, causal, pairs) * HEADS
    return out


def alternating_deal(costs):
    """Static, round r dealt to blocks 0 .. G - 1 when r is even, G - 1 .. 0 when it is odd."""
    load = [0.0] * G
    for u, c in enumerate(costs):
        r, k = divmod(u, G)
        load[k if r % 2 == 0 else G - 1 - k] += c
    return load


def deals(causal):
    """(label, per-block loads) for the four deals."""
    natural = list(range(len(LENGTHS)))
    longest = sorted(natural, key=lambda b: -LENGTHS[b])
    return [
        ("static, sequence after sequence (09/hopper_v3)",
         static_deal(batch_units(natural, 176, causal, True))),
        ("the hardware's deal of a block per query tile (09/hopper_v1, 128-key tiles)",
         hardware_deal(batch_units(natural, 128, causal, False))),
        ("static, longest sequences first, rounds in alternating directions",
         alternating_deal(batch_units(longest, 176, causal, True))),
        ("static, every query tile in order of cost (no L2 reuse of K and V)",
         alternating_deal(sorted(batch_units(natural, 176, causal, False), reverse=True))),
    ]


def main(out_dir):
    fig, ax = fs.canvas(150, 82)
    fs.text(ax, 75, 79.5, "A static deal of uneven sequences: some SMs draw the long ones, round "
            "after round", size=11.5, ha="center", weight="bold")

    # ---- Left: the batch, one bar per sequence, in the order v3 numbers their units.
    x0, y0, w, h = 6.0, 14.0, 38.0, 52.0
    top = max(LENGTHS)
    bw = w / len(LENGTHS)
    for b, n in enumerate(LENGTHS):
        fs.rect(ax, x0 + b * bw, y0, bw * 0.8, h * n / top, fc=fs.tint(fs.SKY, 0.5), ec="none",
                lw=0)
        fs.text(ax, x0 + (b + 0.4) * bw, y0 + h * n / top + 1.0, "%d" % n, size=5.6,
                ha="center")
    fs.text(ax, x0 + w / 2, y0 - 3.0, "sequence 0 .. 14 (v3 numbers their units in this order)",
            size=6.8, ha="center")
    fs.text(ax, x0 + w / 2, y0 + h + 5.0, "the batch: 15 sequences, 32768 tokens, H 16",
            size=7.8, ha="center", weight="bold")

    # ---- Right: each block's load under the four deals (causal), over its deal's average.
    rx, rw, row_h, gap = 54.0, 76.0, 11.0, 5.0
    results = deals(True)
    low = 0.8  # bars start at 80% of the average
    high = max(max(load) / (sum(load) / len(load)) for _, load in results)
    colours = [fs.ORANGE, fs.SKY, fs.GREEN, fs.GREY]
    for k, (label, load) in enumerate(results):
        by = 71.0 - (k + 1) * row_h - k * gap
        avg = sum(load) / len(load)
        fs.text(ax, rx, by + row_h + 1.4, label, size=7.2, weight="bold")
        bw = rw / G
        for b, v in enumerate(load):
            fs.rect(ax, rx + b * bw, by, bw * 0.9, row_h * (v / avg - low) / (high - low),
                    fc=fs.tint(colours[k], 0.75), ec="none", lw=0)
        ya = by + row_h * (1.0 - low) / (high - low)
        ax.plot([rx, rx + rw], [ya, ya], color=fs.INK, linewidth=0.8, linestyle="--")
        fs.text(ax, rx + rw + 1.0, ya - 1.0, "average", size=6.4)
        note = "busiest +%.0f%%" % (100 * excess(load))
        if k in MEASURED:
            note += "\n(measured +%.1f%%)" % (100 * MEASURED[k])
        fs.text(ax, rx + rw + 1.0, by + row_h * (max(load) / avg - low) / (high - low) + 0.6,
                note, size=6.6, weight="bold")
    fs.text(ax, rx + rw / 2, 2.5, "causal: each of the 132 SMs' work over its deal's average (key "
            "tiles, plus one a unit for its start and end), SMs in order;\nbars start at 80% of "
            "the average; measured: Nsight Compute's busiest SM over the mean (H100, 2026-12-06)",
            size=6.4, ha="center")
    fs.save(fig, out_dir, "fig_varlen_deal")


if __name__ == "__main__":
    if "--print" in sys.argv:
        for causal in (True, False):
            for label, load in deals(causal):
                print("%-6s %-78s busiest block %.3fx the average"
                      % ("causal" if causal else "full", label, 1.0 + excess(load)))
    else:
        fs.run_alone(main)
