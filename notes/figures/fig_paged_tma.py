#!/usr/bin/env python3
"""fig_paged_tma.svg: chapter 09's paged Hopper rungs. Left: 09/hopper_paged_prefill loads a
128-key K tile (D 128: two 64-column strips of 128-byte swizzled rows) through the block table in
TMA boxes of one page each: at pages of 16 keys, 8 boxes per strip, box u issued by lane u of the
producer's warp from page block_table[b, (j * 128 + 16 u) / 16], landing 16 u rows down the
strip (a whole number of 1024-byte swizzle atoms, so the boxes together are 07's tile). The last
tile of a sequence of 1000 keys holds 104 real keys: the rows past them come from the last page's
unwritten rows and are zeroed in V before P V. Right: 09/hopper_paged_pack_gqa's Q: the group of
one K/V head (4 query heads) is 4 x seq_q consecutive rows of [batch, heads, seq_q, d], so one
tile holds them all; packed row r is position r mod seq_q. The table entries are a fixed list
(no random numbers).
"""
import figstyle as fs

BC = 128  # keys per K/V tile (D 128)
PAGE = 16
BOXES = BC // PAGE
TABLE = [41, 7, 93, 12, 60, 28, 75, 3]  # the tile's pages, in key order (fixed, shuffled)
SEQ_K = 1000  # the sequence's keys; its last tile is tile 7 (keys 896 .. 1023)
LAST_TILE = 7
GROUP = 4
HEADS = 8
SEQ_Q = 3  # the packed panel's chunk


def main(out_dir):
    fig, ax = fs.canvas(150, 84)
    fs.text(ax, 75, 81.0, "Paged K/V on Hopper: one TMA box per page, and a group's query heads "
            "in one Q tile", size=12, ha="center", weight="bold")

    # ---- Left: the K tile in shared memory, two strips, eight boxes each.
    sx, sy, sw, sh = 30.0, 14.0, 14.0, 56.0  # one strip
    row_h = sh / BC
    fs.text(ax, 4.0, 74.6, "09/hopper_paged_prefill: K tile j in shared memory (Bc 128, D 128, "
            "pages of 16)", size=9, weight="bold")
    for c in range(2):
        x = sx + c * (sw + 2.0)
        fs.text(ax, x + sw / 2, sy + sh + 1.6, "strip %d: columns %d–%d" % (c, 64 * c, 64 * c + 63),
                size=6.6, ha="center")
        for u in range(BOXES):
            y = sy + sh - (u + 1) * PAGE * row_h
            fs.rect(ax, x, y, sw, PAGE * row_h, fc=fs.tint(fs.SKY, 0.25 + 0.25 * (u % 2)),
                    ec=fs.INK, lw=0.6)
            if c == 0:
                fs.text(ax, x + sw / 2, y + PAGE * row_h / 2, "box %d" % u, size=6.4, ha="center")
            else:
                fs.text(ax, x + sw / 2, y + PAGE * row_h / 2, "page %d" % TABLE[u], size=6.4,
                        ha="center")
        fs.rect(ax, x, sy, sw, sh, fc="none", ec=fs.INK, lw=1.2)
    # The producer's lanes and the table.
    for u in range(BOXES):
        y = sy + sh - (u + 0.5) * PAGE * row_h
        fs.text(ax, sx - 1.2, y, "lane %d: table[b, 8j + %d] = %d" % (u, u, TABLE[u]), size=6.2,
                ha="right")
        fs.arrow(ax, (sx - 1.0, y), (sx, y), color=fs.BLUE, lw=0.6, rad=0.0)
    fs.text(ax, 4.0, 9.2, "Box u: rows 16u … 16u + 15 of the tile = keys 128j + 16u …, one page's "
            "16 rows of K/V head h_kv;", size=6.8)
    fs.text(ax, 4.0, 6.4, "16 rows × 128 B = 2 swizzle atoms, so the 8 boxes of a strip are the "
            "tile 07's single box would write.", size=6.8)
    fs.text(ax, 4.0, 3.6, "One lane per box: the 8 table entries are one warp-wide load (one "
            "thread: 8 dependent loads, pages of 16 at 0.61× pages of 64).", size=6.8)

    # ---- Middle: the last tile, rows past seq_k.
    lx, ly = 64.0, 14.0
    real = SEQ_K - LAST_TILE * BC
    fs.text(ax, lx, 74.6 - 4.0, "its last tile (j = %d), seq_k %d:" % (LAST_TILE, SEQ_K), size=7.6, weight="bold")
    fs.rect(ax, lx, ly + sh - real * row_h, 9.0, real * row_h, fc=fs.tint(fs.SKY, 0.45),
            ec=fs.INK, lw=0.6)
    fs.text(ax, lx + 4.5, ly + sh - real * row_h / 2, "%d keys" % real, size=6.4, ha="center",
            rotation=90)
    fs.rect(ax, lx, ly, 9.0, sh - real * row_h, fc="white", ec=fs.VERMILLION, lw=0.8,
            hatch="///")
    fs.text(ax, lx + 10.0, ly + (sh - real * row_h) / 2,
            "%d rows from the last page\nthat no key was written to:\nK masked (−inf);\nV zeroed "
            "before P V\n(0 × NaN is NaN)" % (BC - real), size=6.4, va="center")

    # ---- Right: pack GQA.
    qx, qw = 100.0, 16.0
    rh = 1.9
    fs.text(ax, 96.0, 74.6, "09/hopper_paged_pack_gqa: Q of one sequence", size=9, weight="bold")
    fs.text(ax, 96.0, 71.6, "[heads %d, seq_q %d, d]: heads 4g … 4g + 3 share K/V head g" % (
        HEADS, SEQ_Q), size=6.8)
    top = 66.0
    for h in range(HEADS):
        g = h // GROUP
        colour = fs.GREEN if g == 0 else fs.ORANGE
        for s in range(SEQ_Q):
            r = h * SEQ_Q + s
            y = top - (r + 1) * rh
            fs.rect(ax, qx, y, qw, rh, fc=fs.tint(colour, 0.3 + 0.2 * (h % 2)), ec=fs.INK,
                    lw=0.4)
            fs.text(ax, qx + qw / 2, y + rh / 2, "head %d, position %d" % (h, s), size=5.4,
                    ha="center")
            if g == 0:
                fs.text(ax, qx - 0.8, y + rh / 2, "r %d" % r, size=5.6, ha="right",
                        color="#555555")
    for g in range(HEADS // GROUP):
        y0 = top - (g + 1) * GROUP * SEQ_Q * rh
        fs.rect(ax, qx - 0.3, y0, qw + 0.6, GROUP * SEQ_Q * rh, fc="none", ec=fs.INK, lw=1.4)
        fs.text(ax, qx + qw + 1.2, y0 + GROUP * SEQ_Q * rh / 2,
                "K/V head %d's group:\n%d × %d = %d rows,\ncontiguous: one Q tile\n"
                "(one block, each K/V\ntile loaded once)" % (g, GROUP, SEQ_Q, GROUP * SEQ_Q),
                size=6.4, va="center")
    fs.text(ax, 96.0, 11.0, "Q, O, L described as [batch · heads_kv, group · seq_q, d]: the same "
            "bytes.", size=6.8)
    fs.text(ax, 96.0, 8.2, "Packed row r is position r mod seq_q of head 4g + r / seq_q: only "
            "the", size=6.8)
    fs.text(ax, 96.0, 5.4, "causal mask needs it. Decoding (seq_q 1): 4 rows a tile, not 1.",
            size=6.8)
    fs.save(fig, out_dir, "fig_paged_tma")


if __name__ == "__main__":
    fs.run_alone(main)
