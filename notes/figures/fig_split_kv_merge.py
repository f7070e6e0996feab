#!/usr/bin/env python3
"""fig_split_kv_merge.svg: chapter 08's split-KV ("flash-decoding"). The keys of a row are cut
into S splits; one block per (head, split) runs chapter 05's online softmax over its keys only and
writes the partial state (m_s, l_s, o_s); the states are then merged with chapter 02's pair merge
(notes/02_online_softmax.md, notes/08_decoding.md), in any order and grouping, because the merge
is associative and commutative with identity (-inf, 0, 0). Drawn as a balanced tree of 8 splits.
"""
import figstyle as fs

SPLITS = 8
KEYS_PER_SPLIT = 4  # key tiles drawn per split

SPLIT_COLOURS = [fs.SKY, fs.ORANGE, fs.GREEN, fs.YELLOW, fs.BLUE, fs.VERMILLION, fs.PURPLE,
                 fs.GREY]


def state_box(ax, x, y, w, h, label, fill, size=7.4, bold=False):
    fs.rect(ax, x - w / 2, y - h / 2, w, h, fc=fill, ec=fs.INK, lw=1.1 if bold else 0.7)
    fs.text(ax, x, y, label, size=size, ha="center", weight="bold" if bold else "normal")


def main(out_dir):
    fig, ax = fs.canvas(150, 90)
    fs.text(ax, 75, 87.0, "Split-KV decoding: the keys cut into splits, each split's state "
            "merged with chapter 02's pair merge", size=12, ha="center", weight="bold")

    # Row labels on the left, one per stage.
    def row_label(y, title, body):
        fs.text(ax, 4.0, y + 1.6, title, size=8, weight="bold", va="center")
        fs.text(ax, 4.0, y - 0.4, body, size=6.8, va="top", linespacing=1.3, color="#333333")

    # ---- The keys of one row, cut into splits.
    x0, x1 = 36.0, 146.0
    ky = 76.0
    span = (x1 - x0) / SPLITS
    tile_w = span / KEYS_PER_SPLIT
    for s in range(SPLITS):
        for k in range(KEYS_PER_SPLIT):
            fs.rect(ax, x0 + s * span + k * tile_w, ky, tile_w, 3.0,
                    fc=fs.tint(SPLIT_COLOURS[s], 0.45), ec="#777777", lw=0.4)
        fs.rect(ax, x0 + s * span, ky, span, 3.0, ec=fs.INK, lw=1.0)
        fs.text(ax, x0 + (s + 0.5) * span, ky + 4.2, "split %d" % s, size=6.8, ha="center")
    row_label(ky + 1.5, "N_k keys", "of one (batch, K/V head), cut\ninto S = %d splits of "
              "whole key tiles" % SPLITS)

    # ---- One block per split: the online softmax, unnormalised.
    by = 63.0
    leaves = []
    for s in range(SPLITS):
        cx = x0 + (s + 0.5) * span
        fs.rect(ax, cx - span / 2 + 0.7, by - 3.2, span - 1.4, 6.4,
                fc=fs.tint(SPLIT_COLOURS[s], 0.25), ec=fs.INK, lw=0.7)
        fs.text(ax, cx, by + 1.4, "block (h, %d)" % s, size=6.8, ha="center", weight="bold")
        fs.text(ax, cx, by - 1.3, "online softmax", size=6.0, ha="center")
        fs.arrow(ax, (cx, ky), (cx, by + 3.2), lw=0.9, color="#555555")
        state_box(ax, cx, by - 9.5, span - 2.6, 3.6, "m%d, l%d, o%d" % (s, s, s),
                  fs.tint(SPLIT_COLOURS[s], 0.45), size=7)
        fs.arrow(ax, (cx, by - 3.2), (cx, by - 7.7), lw=0.9, color="#555555")
        leaves.append((cx, by - 9.5))
    row_label(by, "one block per split", "chapter 05's online softmax\nover its own keys only")
    row_label(by - 9.5, "partial states", "in a workspace, per row:\nm_s = max, l_s = Σ e^(s_j − m_s),"
              "\no_s = Σ e^(s_j − m_s) v_j, not / l_s")

    # ---- The merge tree.
    level = leaves
    y = by - 9.5
    depth = 0
    while len(level) > 1:
        depth += 1
        y -= 10.5
        nxt = []
        for k in range(0, len(level), 2):
            (xa, ya), (xb, yb) = level[k], level[k + 1]
            cx = (xa + xb) / 2
            for xs, ys in ((xa, ya), (xb, yb)):
                fs.arrow(ax, (xs, ys - 1.8), (cx + (xs - cx) * 0.15, y + 1.8), lw=0.9,
                         color=fs.BLUE)
            last = len(level) == 2
            state_box(ax, cx, y, 11.0 if not last else 24.0, 3.6,
                      "⊕" if not last else "(m, l, o) of the whole row", fs.tint(fs.BLUE, 0.25)
                      if not last else fs.tint(fs.BLUE, 0.45), size=9 if not last else 7.6,
                      bold=last)
            nxt.append((cx, y))
        level = nxt
    row_label(by - 20.0, "merge tree", "%d levels of the pair merge ⊕;\nany shape or order gives\n"
              "the same result (up to rounding)" % depth)
    root_x, root_y = level[0]
    fs.arrow(ax, (root_x, root_y - 1.8), (root_x, root_y - 5.6), lw=1.1, color=fs.INK)
    state_box(ax, root_x, root_y - 7.6, 40.0, 3.8, "O = o / l,   L = m + ln l   "
              "(O = 0, L = −∞ if l = 0)", fs.tint(fs.GREEN, 0.35), size=7.6, bold=True)

    # ---- The operator, and its normalised form.
    bx, bw = 4.0, 63.0
    fs.rounded(ax, bx, 2.0, bw, 19.0, fc="#F6F6F6", ec="#AAAAAA", lw=0.6)
    fs.text(ax, bx + 1.5, 18.8, "The pair merge (chapter 02), o carried along:", size=8,
            weight="bold")
    fs.text(ax, bx + 1.5, 15.4, "(m₁, l₁, o₁) ⊕ (m₂, l₂, o₂) = (M, a₁l₁ + a₂l₂, a₁o₁ + a₂o₂)",
            size=7.4, family="DejaVu Sans Mono")
    fs.text(ax, bx + 1.5, 12.8, "M = max(m₁, m₂),  aᵢ = e^(mᵢ − M)  (1 when mᵢ = M)", size=7.4,
            family="DejaVu Sans Mono")
    fs.text(ax, bx + 1.5, 10.2, "Associative and commutative, identity (−∞, 0, 0):\n"
            "• any cut of the keys gives the same row state;\n"
            "• any order or grouping: a chain, a tree, groups folded in parallel;\n"
            "• a split that a row cannot see (causal) drops out.", size=7.0, va="top",
            linespacing=1.3)
    cx2 = 114.0
    fs.rounded(ax, cx2 - 1.5, 2.0, 35.5, 19.0, fc="#F6F6F6", ec="#AAAAAA", lw=0.6)
    fs.text(ax, cx2, 18.8, "Or with normalised partials:", size=8, weight="bold")
    fs.text(ax, cx2, 15.4, "O_s = o_s / l_s,  L_s = m_s + ln l_s", size=7.2,
            family="DejaVu Sans Mono")
    fs.text(ax, cx2, 12.8, "L = ln(e^L₁ + e^L₂)", size=7.2, family="DejaVu Sans Mono")
    fs.text(ax, cx2, 10.2, "O = e^(L₁ − L) O₁ + e^(L₂ − L) O₂", size=7.2,
            family="DejaVu Sans Mono")
    fs.text(ax, cx2, 7.4, "Why split: at decode, one query row\nper head is too few blocks "
            "for the\nSMs; S splits make S times more.", size=6.8, va="top", linespacing=1.3)
    fs.save(fig, out_dir, "fig_split_kv_merge")


if __name__ == "__main__":
    fs.run_alone(main)
