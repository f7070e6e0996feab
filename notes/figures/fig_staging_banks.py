#!/usr/bin/env python3
"""fig_staging_banks.svg: the shared-memory banks one epilogue store of chapter 03's GEMMs touches,
half-warp by half-warp (tuning steps t10_tma_store to t16 against t17_conflict_free_staging,
chapters/03_tiled_matmul/tuning/).

A consumer warp stages C in boxes of 16 rows x 32 fp32 (128 bytes a row, 32 banks of 4 bytes)
laid out with the 128-byte swizzle: the 16-byte chunk c of row r lies at chunk c ^ (r % 8). Lane
(g, q) (g = lane / 4, q = lane % 4) holds columns 8jj + 2q, +1 of rows g and g + 8 for the box's
column groups jj = 0..3 and writes each pair with one 8-byte st.shared.v2. An 8-byte store is
served a half-warp at a time (lanes 0-15, then 16-31), and a half-warp takes one wavefront only
if its 16 stores touch each of the 32 banks once.

Top: t10 to t16, every lane writes group jj in its jj-th store. Drawn for the first store
(jj = 0): in each half-warp two lanes land on each bank of half the row and none on the other
half, 2 wavefronts a half where 1 would do. Bottom: t17, lanes with odd g write group jj ^ 2 in
their jj-th store: every bank once a half. The banks are computed from the kernels' formulas,
not typed.
"""
import figstyle as fs

NONE = "#F3F3F3"
ONCE = fs.tint(fs.GREEN, 0.45)
TWICE = fs.tint(fs.VERMILLION, 0.5)


def chunk_t10(jj, g, q):
    return ((2 * jj + (q >> 1)) ^ g)


def chunk_t17(jj, g, q):
    return (2 * jj) ^ ((q >> 1) ^ g ^ (4 * (g & 1)))


def lanes_per_bank(chunk, jj, half):
    """For one store and one half-warp: bank -> lanes that write a 4-byte word in it."""
    banks = {b: [] for b in range(32)}
    for lane in range(16 * half, 16 * half + 16):
        g, q = lane // 4, lane % 4
        first = (chunk(jj, g, q) * 16 + (q & 1) * 8) // 4
        for b in (first, first + 1):
            banks[b % 32].append(lane)
    return banks


def draw(ax, x0, y_top, chunk, title, cell_w, cell_h):
    fs.text(ax, x0, y_top + 2.6, title, size=9, weight="bold")
    for b in range(32):
        fs.text(ax, x0 + (b + 0.5) * cell_w, y_top + 0.9, "%d" % b, size=5.8, ha="center")
    for half in range(2):
        y = y_top - (half + 1) * cell_h
        banks = lanes_per_bank(chunk, 0, half)
        wavefronts = max(len(v) for v in banks.values())
        fs.text(ax, x0 - 1.0, y + cell_h / 2, "lanes %d-%d" % (16 * half, 16 * half + 15),
                size=6.8, ha="right")
        for b, lanes in banks.items():
            fill = [NONE, ONCE, TWICE][min(len(lanes), 2)]
            fs.rect(ax, x0 + b * cell_w, y, cell_w, cell_h, fc=fill, ec="#FFFFFF", lw=0.5)
            if lanes:
                fs.text(ax, x0 + (b + 0.5) * cell_w, y + cell_h / 2,
                        "\n".join("%d" % lane for lane in lanes), size=5.2, ha="center")
        fs.text(ax, x0 + 32 * cell_w + 1.0, y + cell_h / 2,
                "%d wavefront%s" % (wavefronts, "" if wavefronts == 1 else "s"), size=7,
                color=fs.VERMILLION if wavefronts > 1 else fs.GREEN)
    return y_top - 2 * cell_h


def main(out_dir):
    fig, ax = fs.canvas(150, 62)
    fs.text(ax, 75, 59.0, "One 8-byte st.shared of the epilogue (column group 0): the banks each "
            "half-warp touches, and by which lanes", size=11, ha="center", weight="bold")
    x0, cell_w, cell_h = 16.0, 3.6, 7.0
    bottom = draw(ax, x0, 50.0, chunk_t10, "t10 to t16: every lane writes its groups 0, 1, 2, 3 "
                  "in order", cell_w, cell_h)
    bottom = draw(ax, x0, bottom - 7.0, chunk_t17, "t17: lanes with odd g = lane / 4 write "
                  "2, 3, 0, 1", cell_w, cell_h)
    ly = bottom - 4.0
    fs.swatch(ax, x0, ly, ONCE, "one lane: part of a single wavefront")
    fs.swatch(ax, x0 + 45, ly, TWICE, "two lanes: a second wavefront")
    fs.swatch(ax, x0 + 90, ly, NONE, "no lane", ec="#BBBBBB")
    fs.save(fig, out_dir, "fig_staging_banks")


if __name__ == "__main__":
    fs.run_alone(main)
