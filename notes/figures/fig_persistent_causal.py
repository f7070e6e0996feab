#!/usr/bin/env python3
"""fig_persistent_causal.svg: chapter 07's persistent forward (07/v5_persistent) on a causal
problem. Drawn small: one head, NQ = 8 query tiles of Br rows against 8 key tiles, causal
(bottom-right aligned; seq_q = seq_k), and G = 4 persistent blocks.

Left: the tiles of S a query tile visits (query tile i sees key tiles 0..i), coloured by the work
unit that computes them: v5 pairs query tile NQ - 1 - r with query tile r, so every unit visits
NQ + 1 key tiles however the diagonal cuts (07/v5_persistent.cu's header).
Right, top: one block per query tile (07/v4): 8 blocks of 1 to 8 key tiles, each paying its own
start (barriers, Q, the ring filled from empty) and end (O normalised and stored), marked S and E.
Right, bottom: v5's 4 blocks, one unit each: 9 key tiles apiece; the next query tile's Q and
first K/V tiles load while the consumers store the previous one's O, so only the block's first
start is from empty and the epilogue between two tiles is not drawn as idle time. With more units
than blocks, block b takes units b, b + G, ...: every unit the same length, the static schedule
stays even.
"""
import figstyle as fs

NQ = 8  # query tiles (= key tiles)
G = 4  # persistent blocks
UNIT_COLOURS = [fs.SKY, fs.ORANGE, fs.GREEN, fs.PURPLE]
START_END = fs.tint(fs.GREY, 0.35)


def units():
    """v5's causal work units: (long tile, short tile), the longest first."""
    return [(NQ - 1 - r, r) for r in range(NQ // 2)]


def main(out_dir):
    fig, ax = fs.canvas(150, 78)
    fs.text(ax, 75, 75.5, "Causal, persistent: v5 pairs a long query tile with a short one, so "
            "every block's work is the same length", size=11.5, ha="center", weight="bold")

    # ---- Left: the causal tiles, coloured by unit.
    cell, x0, y0 = 5.2, 8.0, 12.0
    owner = {}
    for u, (a, b) in enumerate(units()):
        owner[a] = u
        owner[b] = u
    for qi in range(NQ):
        y = y0 + (NQ - 1 - qi) * cell
        fs.text(ax, x0 - 1.0, y + cell / 2, "q%d" % qi, size=6.8, ha="right")
        for kj in range(NQ):
            visible = kj <= qi
            fc = fs.tint(UNIT_COLOURS[owner[qi]], 0.55) if visible else "#F3F3F3"
            fs.rect(ax, x0 + kj * cell, y, cell, cell, fc=fc, ec="#888888", lw=0.4)
    for kj in range(NQ):
        fs.text(ax, x0 + (kj + 0.5) * cell, y0 - 1.6, "k%d" % kj, size=6.8, ha="center")
    fs.text(ax, x0 + NQ * cell / 2, y0 + NQ * cell + 3.0, "S = Q K^T in tiles: query tile i "
            "sees key tiles 0..i", size=7.6, ha="center")
    for u, (a, b) in enumerate(units()):
        fs.swatch(ax, x0 + (u % 2) * 22, y0 - 6.5 - (u // 2) * 2.6,
                  fs.tint(UNIT_COLOURS[u], 0.55),
                  "unit %d: q%d + q%d = %d tiles" % (u, a, b, a + b + 2), size=6.8)

    # ---- Right: block timelines, in key tiles.
    rx, unit_w, lane_h, se = 66.0, 4.7, 3.4, 1.0
    top = 66.0
    fs.text(ax, rx, top + 2.4, "07/v4: one block per query tile (8 blocks, each with a start S "
            "and an end E)", size=7.6, weight="bold")
    for qi in range(NQ):
        y = top - (qi + 1) * lane_h
        fs.text(ax, rx - 1.0, y + lane_h / 2, "q%d" % qi, size=6.6, ha="right")
        fs.rect(ax, rx, y + 0.4, se, lane_h - 0.8, fc=START_END, ec=fs.INK, lw=0.5)
        fs.text(ax, rx + se / 2, y + lane_h / 2, "S", size=5.6, ha="center")
        fs.rect(ax, rx + se, y + 0.4, (qi + 1) * unit_w, lane_h - 0.8,
                fc=fs.tint(UNIT_COLOURS[owner[qi]], 0.55), ec=fs.INK, lw=0.5)
        fs.text(ax, rx + se + (qi + 1) * unit_w / 2, y + lane_h / 2, "%d" % (qi + 1), size=6.0,
                ha="center")
        fs.rect(ax, rx + se + (qi + 1) * unit_w, y + 0.4, se, lane_h - 0.8, fc=START_END,
                ec=fs.INK, lw=0.5)
        fs.text(ax, rx + se * 1.5 + (qi + 1) * unit_w, y + lane_h / 2, "E", size=5.6,
                ha="center")

    top2 = top - NQ * lane_h - 7.0
    fs.text(ax, rx, top2 + 2.4, "07/v5: %d persistent blocks, one unit each: %d key tiles apiece"
            % (G, NQ + 1), size=7.6, weight="bold")
    for b, (a, s) in enumerate(units()):
        y = top2 - (b + 1) * lane_h
        fs.text(ax, rx - 1.0, y + lane_h / 2, "block %d" % b, size=6.6, ha="right")
        x = rx
        fs.rect(ax, x, y + 0.4, se, lane_h - 0.8, fc=START_END, ec=fs.INK, lw=0.5)
        fs.text(ax, x + se / 2, y + lane_h / 2, "S", size=5.6, ha="center")
        x += se
        for qi in (a, s):
            w = (qi + 1) * unit_w
            fs.rect(ax, x, y + 0.4, w, lane_h - 0.8, fc=fs.tint(UNIT_COLOURS[b], 0.55),
                    ec=fs.INK, lw=0.5)
            fs.text(ax, x + w / 2, y + lane_h / 2, "q%d: %d" % (qi, qi + 1), size=6.0,
                    ha="center")
            x += w
        fs.rect(ax, x, y + 0.4, se, lane_h - 0.8, fc=START_END, ec=fs.INK, lw=0.5)
        fs.text(ax, x + se / 2, y + lane_h / 2, "E", size=5.6, ha="center")
    fs.text(ax, rx, top2 - G * lane_h - 2.4, "between a unit's two query tiles the first one's O is "
            "stored while the producer already loads\nthe next Q and K/V: the ring is never "
            "refilled from empty, and the tensor cores wait only for the store", size=6.8,
            va="top", color="#333333")
    fs.save(fig, out_dir, "fig_persistent_causal")


if __name__ == "__main__":
    fs.run_alone(main)
