#!/usr/bin/env python3
"""fig_paged_kv.svg: chapter 09's paged KV cache (common/shapes.h PagedShape). Three sequences of
70, 40 and 100 keys in pages of 16 keys; the block table maps each sequence's logical blocks
(keys 16k .. 16k + 15) to physical pages of one shared pool, in no particular order (the harness
shuffles them the same way). A page is [heads_kv, page_size, D] (FlashInfer's "HND"): one head's
16 keys are contiguous rows, 16 x 256 B = 4 KiB at D 128 in bf16. A kernel's 64-key tile of
sequence 2 spans four pages: four table entries, four base addresses. The table and the pool are
fixed lists below (no random numbers), checked to be a partition of the pool.
"""
import figstyle as fs

PAGE = 16
TILE = 64
D = 128
ELEM_BYTES = 2  # bf16
SEQLENS = [70, 40, 100]
# Physical page of each logical block, per sequence; the one page not listed is free.
TABLE = [[9, 2, 14, 5, 11], [0, 12, 7], [4, 15, 1, 10, 6, 13, 3]]
POOL = 16
COLOURS = [fs.SKY, fs.ORANGE, fs.GREEN]
HEADS_DRAWN = 4


def owners():
    """Page -> (sequence, keys it holds); asserts the table fits the lengths and the pool."""
    own = {}
    for b, (n, pages) in enumerate(zip(SEQLENS, TABLE)):
        assert len(pages) == -(-n // PAGE), "sequence %d: wrong number of pages" % b
        for k, p in enumerate(pages):
            assert p not in own and 0 <= p < POOL
            own[p] = (b, min(PAGE, n - k * PAGE))
    return own


def main(out_dir):
    own = owners()
    max_pages = max(len(t) for t in TABLE)
    fig, ax = fs.canvas(150, 86)
    fs.text(ax, 75, 83.0, "A paged KV cache: a block table maps each sequence's key blocks to "
            "pages of one pool", size=12, ha="center", weight="bold")

    # ---- The block table: [batch, max_pages] int32.
    tx, cw, chh = 26.0, 5.2, 3.6
    top = 70.0
    fs.text(ax, 4.0, top + 6.2, "block_table [batch, max_pages = %d]" % max_pages, size=9,
            weight="bold")
    for k in range(max_pages):
        fs.text(ax, tx + (k + 0.5) * cw, top + 2.8, str(k), size=6.4, ha="center",
                color="#555555")
    fs.text(ax, tx + max_pages * cw + 1.0, top + 2.8, "← logical block (keys 16k … 16k + 15)",
            size=6.4, color="#555555")
    cells = {}
    for b, pages in enumerate(TABLE):
        y = top - (b + 1) * chh - 0.2 * b
        fs.text(ax, tx - 1.0, y + chh / 2, "seq %d: %d keys" % (b, SEQLENS[b]), size=7,
                ha="right")
        for k in range(max_pages):
            used = k < len(pages)
            fs.rect(ax, tx + k * cw, y, cw, chh,
                    fc=fs.tint(COLOURS[b], 0.45) if used else "white", ec=fs.INK, lw=0.6)
            fs.text(ax, tx + (k + 0.5) * cw, y + chh / 2, str(pages[k]) if used else "·",
                    size=7, ha="center", color=fs.INK if used else "#999999")
            if used:
                cells[(b, k)] = (tx + (k + 0.5) * cw, y)

    # ---- The pool of pages.
    px, pw, ph, py = 16.0, 7.6, 6.0, 42.0
    fs.text(ax, 4.0, py + ph + 3.6, "the page pool: k_pages [num_pages = %d, heads_kv, %d, D] "
            "(v_pages alike)" % (POOL, PAGE), size=9, weight="bold")
    for p in range(POOL):
        x = px + p * pw
        if p in own:
            b, keys = own[p]
            fs.rect(ax, x, py, pw, ph, fc="white", ec=fs.INK, lw=0.7)
            fs.rect(ax, x, py, pw * keys / PAGE, ph, fc=fs.tint(COLOURS[b], 0.55), ec="none")
            fs.rect(ax, x, py, pw, ph, fc="none", ec=fs.INK, lw=0.7)
            label = "s%d" % b if keys == PAGE else "s%d: %d" % (b, keys)
        else:
            fs.rect(ax, x, py, pw, ph, fc="white", ec="#888888", lw=0.6, hatch="..")
            label = "free"
        fs.text(ax, x + pw / 2, py - 1.4, "page %d" % p, size=6.0, ha="center", color="#555555")
        fs.text(ax, x + pw / 2, py + ph / 2, label, size=6.2, ha="center")
    # Sequence 2's entries, drawn to their pages.
    for k, p in enumerate(TABLE[2]):
        cx, cy = cells[(2, k)]
        fs.arrow(ax, (cx, cy), (px + (p + 0.5) * pw, py + ph), color=fs.GREEN, lw=0.7,
                 rad=0.0, alpha=0.9)
    fs.text(ax, tx + max_pages * cw + 3.0, top - 0.6, "sequence 2's entries point to "
            "pages 4, 15, 1, … in no order; a last page is\npartly filled (s0: 6 of 16 keys): "
            "at most page_size − 1 keys per sequence are spare", size=6.8, color="#333333",
            va="top")

    # ---- One 64-key tile of sequence 2: four pages.
    ty = 26.0
    fs.text(ax, 4.0, ty + 6.4, "a kernel's key tile: keys 0 … %d of sequence 2, Bc = %d, page "
            "%d" % (TILE - 1, TILE, PAGE), size=9, weight="bold")
    tw = 1.1  # units per key
    for s in range(TILE // PAGE):
        p = TABLE[2][s]
        x = 16.0 + s * PAGE * tw
        fs.rect(ax, x, ty, PAGE * tw, 3.6, fc=fs.tint(fs.GREEN, 0.45 + 0.1 * (s % 2)), ec=fs.INK,
                lw=0.7)
        fs.text(ax, x + PAGE * tw / 2, ty + 1.8, "keys %d–%d" % (s * PAGE, s * PAGE + PAGE - 1),
                size=6.6, ha="center")
        fs.text(ax, x + PAGE * tw / 2, ty - 1.8, "→ page %d" % p, size=6.8, ha="center",
                color=fs.VERMILLION)
    fs.rect(ax, 16.0, ty, TILE * tw, 3.6, ec=fs.INK, lw=1.3)
    fs.text(ax, 16.0, ty - 5.2, "%d table entries, %d base addresses per tile; within a page the "
            "rows run on as in a contiguous cache" % (TILE // PAGE, TILE // PAGE), size=7.2)
    run = PAGE * D * ELEM_BYTES
    fs.text(ax, 16.0, ty - 8.0, "key j, head h: page = block_table[b, j / %d], element "
            "((page · heads_kv + h) · %d + j %% %d) · D" % (PAGE, PAGE, PAGE), size=7.2)

    # ---- Inside one page: per head, 16 contiguous rows.
    zx, zy, zw, zh = 96.0, 9.0, 48.0, 16.0
    fs.text(ax, zx, zy + zh + 4.2, "inside one page (HND): heads_kv slabs", size=9, weight="bold")
    strip = zh / HEADS_DRAWN
    for h in range(HEADS_DRAWN):
        y = zy + zh - (h + 1) * strip
        fs.rect(ax, zx, y, zw, strip, fc=fs.tint(fs.GREEN, 0.2 + 0.15 * (h % 2)), ec=fs.INK,
                lw=0.6)
        name = "head %d" % h if h < HEADS_DRAWN - 1 else "head heads_kv − 1"
        fs.text(ax, zx + 1.0, y + strip / 2, "%s: %d rows × %d B = %d KiB, contiguous" % (
            name, PAGE, D * ELEM_BYTES, run // 1024), size=6.8)
    fs.text(ax, zx, zy - 2.4, "D %d, bf16: a row is %d B (two 128-byte lines), a head's page "
            "%d KiB" % (D, D * ELEM_BYTES, run // 1024), size=7.0, color="#333333")
    fs.text(ax, 4.0, 4.0, "Page 16 < tile 64: four pages per tile. Page 64 = tile: one. Page 256: "
            "one page serves four tiles.", size=7.4)
    fs.save(fig, out_dir, "fig_paged_kv")


if __name__ == "__main__":
    fs.run_alone(main)
