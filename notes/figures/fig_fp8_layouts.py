#!/usr/bin/env python3
"""fig_fp8_layouts.svg: the two layouts the FP8 (e4m3) forwards of chapter 07 (07/fp8_v1 to v4)
need that the 16-bit rungs do not. A schematic of the code, not a measurement.

Top left: which way the contraction index k runs in the two products. In S = Q Kᵀ it is d, along
the rows of Q and of K as they are stored (K-major for both operands). In O += P V it is the key,
along the rows of P but down the columns of V: V as stored is MN-major. The 16-bit wgmma reads it
so (imm-trans-b = 1, 07/v1-v5); the e4m3 wgmma has no transpose immediates (PTX ISA,
wgmma.mma_async), so V must come transposed.
Top right: V^T as the harness lays it out per head (common/fp8.h, fp8_transpose_v;
registry.h's AttentionFwdFp8Args): D rows of fp8_vt_stride(seq_k) bytes (seq_k rounded up to 16
bytes, for TMA's strides), the padding keys zero; a TMA box of D rows x 128 keys is V^T tile j, one
128-byte swizzle row per d (ch07_fp8_common.cuh, make_tmap_u8).
Bottom: P. The S accumulators of a warp's 16 rows (hopper.cuh's fragment: lane 4g + q holds rows
g and g + 8, columns 8i + 2q and 8i + 2q + 1) become e4m3(256 P~) and are stored as byte pairs
into the 128-byte swizzled K-major tile the P V wgmma reads (store_p_e4m3: 16-byte chunk c of row
r at chunk c ^ (r % 8)). The 8-bit A fragment a register operand would need (as mma.m16n8k32's:
lane 4g + q holds columns 4q .. 4q + 3 and 16 + 4q .. 16 + 4q + 3) is another set of bytes per
lane, which is why the kernels go through shared memory rather than permute bytes across lanes.
"""
import figstyle as fs

Q_COLOURS = fs.QUAD_COLOURS
HIGHLIGHT_LANE = 5  # g = 1, q = 1
K_ARROW = fs.VERMILLION


def k_arrow(ax, start, end, label, ha="center", dy=0.0, dx=0.0):
    fs.arrow(ax, start, end, color=K_ARROW, lw=1.1)
    fs.text(ax, (start[0] + end[0]) / 2 + dx, (start[1] + end[1]) / 2 + dy, label, size=6.4,
            ha=ha, color=K_ARROW)


def which_way(ax):
    fs.text(ax, 3.0, 88.0, "(a) Which way k, the contraction index, runs", size=8.4,
            weight="bold")
    def operand(x, y, w, h, fill, label):
        fs.rect(ax, x, y, w, h, fc=fill)
        fs.text(ax, x + w / 2, y + h / 2, label, size=6.2, ha="center")

    # S = Q K^T: k = d along the rows of both operands
    fs.text(ax, 3.0, 83.8, "S = Q Kᵀ: k = d", size=7.4, weight="bold")
    operand(4.0, 73.0, 14.0, 7.0, fs.SHARED_FILL, "Q tile\n64 × D")
    k_arrow(ax, (4.5, 71.6), (17.5, 71.6), "k = d", dy=-1.4)
    operand(24.0, 70.0, 14.0, 10.0, fs.SHARED_FILL, "K tile\nBc keys × D")
    k_arrow(ax, (24.5, 68.6), (37.5, 68.6), "k = d", dy=-1.4)
    fs.text(ax, 41.0, 77.0, "both K-major as stored:\nk runs along each 128-byte\nrow, any "
            "type", size=6.2, va="center")
    # O += P V: k = key along P's rows, down V's columns
    fs.text(ax, 3.0, 61.4, "O += P V: k = key", size=7.4, weight="bold")
    operand(4.0, 49.0, 14.0, 9.0, fs.REG_FILL, "P\n64 × Bc keys")
    k_arrow(ax, (4.5, 47.6), (17.5, 47.6), "k = key", dy=-1.4)
    operand(24.0, 46.0, 9.0, 12.0, fs.SHARED_FILL, "V tile\nBc keys\n× D")
    k_arrow(ax, (22.6, 57.5), (22.6, 46.5), "k = key", ha="right", dx=-0.8)
    fs.text(ax, 35.0, 55.2, "V as stored: k runs down the columns (MN-major)", size=6.2)
    fs.text(ax, 35.0, 51.6, "bf16 / fp16: the wgmma reads it so (imm-trans-b = 1)", size=6.2,
            color=fs.GREEN)
    fs.text(ax, 35.0, 48.6, "e4m3: no transpose immediates (PTX ISA): B must be K-major,",
            size=6.2, color=fs.VERMILLION)
    fs.text(ax, 35.0, 46.2, "so V comes as Vᵀ, its rows along the keys →", size=6.2,
            color=fs.VERMILLION)


def vt_layout(ax):
    x0, y0 = 84.0, 52.0
    fs.text(ax, 80.0, 88.0, "(b) Vᵀ per head in global memory, and the tile TMA brings in",
            size=8.4, weight="bold")
    # V [seq_k x D]
    fs.rect(ax, x0 - 2.0, 66.0, 7.0, 16.0, fc=fs.GLOBAL_FILL)
    fs.text(ax, x0 + 1.5, 74.0, "V\nseq_k\n× D", size=6.0, ha="center")
    fs.arrow(ax, (x0 + 6.0, 74.0), (x0 + 12.0, 74.0), lw=0.9)
    fs.text(ax, x0 + 9.0, 79.5, "fp8_transpose_v\n(the harness,\nonce per head)", size=5.6,
            ha="center")
    # V^T [D x stride]
    vx, vw, vh = x0 + 13.0, 46.0, 10.0
    tiles = 3
    tile_w = 14.0
    pad_w = vw - tiles * tile_w
    for j in range(tiles):
        fc = fs.tint(fs.PURPLE, 0.45) if j == 1 else fs.GLOBAL_FILL
        fs.rect(ax, vx + j * tile_w, 69.0, tile_w, vh, fc=fc, ec=fs.INK, lw=0.5)
        fs.text(ax, vx + (j + 0.5) * tile_w, 74.0, "keys %d–%d" % (128 * j, 128 * j + 127)
                if j < 2 else "keys 256 …", size=5.6, ha="center")
    fs.rect(ax, vx + tiles * tile_w, 69.0, pad_w, vh, fc="white", ec=fs.INK, lw=0.5, hatch="///")
    fs.text(ax, vx + vw + 0.8, 74.0, "zeros past\nseq_k", size=5.6)
    ax.plot([vx, vx + vw], [80.2, 80.2], color=fs.INK, lw=0.5)
    fs.text(ax, vx + vw / 2, 81.4, "fp8_vt_stride(seq_k) bytes a row: seq_k rounded up to 16 "
            "(TMA strides)", size=5.8, ha="center")
    fs.text(ax, vx + vw / 2, 66.8, "Vᵀ: D rows (d = 0 on top), the keys innermost, one byte each", size=6.0,
            ha="center")
    # the tile in shared memory
    tx, ty = vx + 6.0, 52.0
    fs.arrow(ax, (vx + 1.5 * tile_w, 68.8), (tx + 7.0, ty + 9.4), color=fs.PURPLE, lw=0.9)
    fs.text(ax, vx + 1.5 * tile_w + 1.0, 64.6, "TMA box: D rows × 128 keys, 128-byte swizzle",
            size=5.8, color=fs.PURPLE)
    for r in range(4):
        fs.rect(ax, tx, ty + 6.6 - r * 2.2, 28.0, 2.2, fc=fs.tint(fs.PURPLE, 0.3), ec=fs.INK,
                lw=0.4)
        fs.text(ax, tx + 14.0, ty + 7.7 - r * 2.2, "row d = %s: keys 128 … 255 of dim d"
                % ("0", "1", "2", "…")[r], size=5.4, ha="center")
    fs.text(ax, tx + 30.0, ty + 5.0, "Vᵀ tile 1 in shared\nmemory: B of P V,\nK-major "
            "(n = d, k = key)", size=6.0)


def lane_grid(ax, x0, y0, cw, rh, lane_of, title, note):
    """Rows 0..7 (g) and columns 0..31 (one k32 step) of a warp's 16 x 32 byte tile."""
    fs.text(ax, x0, y0 + 8 * rh + 4.4, title, size=7.0, weight="bold")
    for c in range(0, 32, 4):
        fs.text(ax, x0 + (c + 0.5) * cw, y0 + 8 * rh + 1.0, "%d" % c, size=4.8, ha="center",
                color="#666666")
    for r in range(8):
        fs.text(ax, x0 - 0.6, y0 + (7.5 - r) * rh, "%d" % r, size=4.8, ha="right",
                color="#666666")
        for c in range(32):
            lane = lane_of(r, c)
            q = lane % 4
            fc = Q_COLOURS[q]
            hl = lane == HIGHLIGHT_LANE
            fs.rect(ax, x0 + c * cw, y0 + (7 - r) * rh, cw, rh, fc=fc,
                    ec=fs.INK if hl else "#FFFFFF", lw=1.0 if hl else 0.3)
            fs.text(ax, x0 + (c + 0.5) * cw, y0 + (7.5 - r) * rh, "%d" % lane, size=3.9,
                    ha="center", weight="bold" if hl else "normal")
    fs.text(ax, x0, y0 - 1.2, note, size=5.6, va="top", color="#333333")


def p_layouts(ax):
    fs.text(ax, 3.0, 40.0, "(c) P: the lanes of the S accumulators, where store_p_e4m3 puts "
            "their bytes, and what a register A operand would want (rows 0–7 of a warp; rows "
            "8–15 repeat with g + 8)", size=8.4, weight="bold")
    cw, rh = 1.26, 2.4
    # the accumulator fragment: lane 4g + q holds columns 8i + 2q, 8i + 2q + 1 of row g
    lane_grid(ax, 4.0, 9.0, cw, rh, lambda r, c: 4 * r + (c % 8) // 2,
              "S accumulators (fp32) → P, per lane",
              "lane 4g + q: columns 8i + 2q, 8i + 2q + 1 of rows g, g + 8\n(hopper.cuh): e4m3(256 "
              "P~) pairs, stored two bytes at a time")
    # shared memory: the swizzled K-major tile, 16-byte chunks
    sx, sy, chw = 57.0, 9.0, 4.2
    fs.text(ax, sx, sy + 8 * rh + 4.4, "P tile in shared memory: 128-byte rows", size=7.0,
            weight="bold")
    for slot in range(8):
        fs.text(ax, sx + (slot + 0.5) * chw, sy + 8 * rh + 1.0, "slot %d" % slot, size=4.6,
                ha="center", color="#666666")
    for r in range(8):
        fs.text(ax, sx - 0.6, sy + (7.5 - r) * rh, "row %d" % r, size=4.8, ha="right",
                color="#666666")
        for slot in range(8):
            chunk = slot ^ (r % 8)
            mine = r == 1 and chunk in (0, 1)
            fc = fs.tint(fs.YELLOW, 0.8) if mine else ("#F3F3F3" if chunk > 1 else "#DDEEFF")
            fs.rect(ax, sx + slot * chw, sy + (7 - r) * rh, chw, rh, fc=fc,
                    ec=fs.INK if mine else "#999999", lw=0.9 if mine else 0.3)
            fs.text(ax, sx + (slot + 0.5) * chw, sy + (7.5 - r) * rh, "c%d" % chunk, size=4.8,
                    ha="center")
    fs.text(ax, sx, sy - 1.2, "chunk c (columns 16c … 16c + 15) of row r sits in slot\n"
            "c ^ (r % 8): the 128-byte swizzle the K-major descriptor\nreads (as TMA writes Q). "
            "Lane 5's pairs: row 1, columns 2–3\nand 10–11 (c0, slot 1), 18–19 and 26–27 (c1, "
            "slot 0).", size=5.6, va="top", color="#333333")
    fs.arrow(ax, (46.0, 22.0), (sx - 5.0, 22.0), lw=0.9)
    fs.text(ax, (46.0 + sx - 5.0) / 2, 24.6, "st.shared\n2 bytes", size=5.4, ha="center")
    # the 8-bit register A fragment (as mma.m16n8k32): lane 4g + q holds 4q..4q+3, 16+4q..+3
    lane_grid(ax, 106.0, 9.0, cw, rh, lambda r, c: 4 * r + (c % 16) // 4,
              "a register A operand (8-bit) would want",
              "lane 4g + q: columns 4q … 4q + 3 and 16 + 4q … 16 + 4q + 3\n(as mma.m16n8k32): "
              "other bytes than the accumulators give it")
    fs.text(ax, 3.0, 2.2, "P~ = exp(S − m) ≤ 1 is stored as e4m3(256 P~), kFp8PScale = 256 "
            "(common/fp8.h): exact both ways, and values down to 2⁻¹⁷ survive; the 1/256 rides "
            "in O's fold with the V scale. A fence.proxy.async and a barrier of the warpgroup, "
            "then the wgmma reads P like Q.", size=6.0, color="#333333")


def main(out_dir):
    fig, ax = fs.canvas(150, 96)
    fs.text(ax, 75, 93.6, "FP8 (e4m3) in chapter 07: V transposed for the K-major B of P V, "
            "and P stored from the S accumulators", size=11, ha="center", weight="bold")
    which_way(ax)
    vt_layout(ax)
    p_layouts(ax)
    fs.save(fig, out_dir, "fig_fp8_layouts")


if __name__ == "__main__":
    fs.run_alone(main)
