#!/usr/bin/env python3
"""fig_fp8_promotion.svg: why chapter 07's FP8 forward moves O out of the tensor cores every 8 key
tiles (07/fp8_v4), and what that does to the error of a long row.

Left: what the FP8 tensor cores add each tile's P V into, as a fraction of the row's final |O|,
for a row whose 32 key tiles weigh equally (an illustration, computed below, not measured).
fp8_v3 adds each tile into zeros (a fresh accumulator, folded in fp32); a chain over the row adds
every tile into the whole running sum; fp8_v4 chains 8 tiles, then keeps O's large part as 8-bit
codes in shared memory and puts only the residual (at most 1/126 of the row's largest |O|) back
into the accumulator. An FP8 wgmma keeps about 14 bits below the largest term of its sum, so what
a tile loses grows with what it is added into.

Right: O's largest error against the float64 reference, one head, 256 query rows, N keys, D 256,
measured on an H100 (2026-11-26; notes/measured/h100-2026-11-26f/, calls 1, 2 and 5), with the
naive FP8 forward's error and the bound of common/fp8.h's rule (2 x naive + the floor).
"""
import math

import figstyle as fs

KEYS = [2048, 16384, 32768, 65536, 131072]
# O's max abs error, from the LongRowsWithinTheRule test and its 64K / 128K scratch copies.
MEASURED = [
    ("naive FP8 forward", fs.GREY, "--", [0.00614, 0.00379, 0.00326, 0.00295, 0.00283]),
    ("07/fp8_v3: a fresh accumulator a tile", fs.BLUE, "-", [0.00643, 0.00359, 0.00325, 0.00299,
                                                             0.00290]),
    ("chained over the row (not kept)", fs.VERMILLION, "-", [0.0135, 0.0695, 0.115, None, None]),
    ("promoted to e4m3 codes (not kept)", fs.ORANGE, "-", [0.00896, 0.00651, 0.00762, 0.00917,
                                                          0.0143]),
    ("07/fp8_v4: promoted to 8-bit integers", fs.GREEN, "-", [0.00896, 0.00624, 0.00575, 0.00543,
                                                             0.00549]),
]
BOUND = [0.0543, 0.0488, 0.0468, 0.0460, 0.0464]
TILES, PERIOD, RESIDUAL = 32, 8, 1.0 / 126


def accumulator_sizes():
    """|what tile j is added into| / |O| for the three kernels, tiles of equal weight."""
    fresh, chained, promoted = [], [], []
    residual = 0.0
    for j in range(TILES):
        fresh.append(0.0)
        chained.append(j / TILES)
        if j > 0 and j % PERIOD == 0:
            residual = RESIDUAL * (j / TILES)
        promoted.append(residual + (j % PERIOD) / TILES)
    return fresh, chained, promoted


def left_panel(ax, x0, y0, w, h):
    fs.text(ax, x0 + w / 2, y0 + h + 5.0, "What each tile's P V is added into (|O| = 1, 32 equal "
            "tiles)", size=9.5, ha="center", weight="bold")
    fs.rect(ax, x0, y0, w, h, lw=0.6)
    tile_w = w / TILES
    for frac in (0.25, 0.5, 0.75, 1.0):
        y = y0 + frac * h
        ax.plot([x0, x0 + w], [y, y], color="#DDDDDD", lw=0.5, zorder=0)
        fs.text(ax, x0 - 0.8, y, "%g" % frac, size=7, ha="right")
    fs.text(ax, x0 - 0.8, y0, "0", size=7, ha="right")
    for j in range(0, TILES + 1, PERIOD):
        fs.text(ax, x0 + j * tile_w, y0 - 1.8, "%d" % j, size=7, ha="center")
    fs.text(ax, x0 + w / 2, y0 - 4.2, "key tile j (128 keys each)", size=8, ha="center")
    fresh, chained, promoted = accumulator_sizes()
    for j in range(TILES):
        x = x0 + j * tile_w
        fs.rect(ax, x + 0.1 * tile_w, y0, 0.8 * tile_w, chained[j] * h, fc=fs.tint(fs.VERMILLION,
                0.35), ec="none")
        fs.rect(ax, x + 0.1 * tile_w, y0, 0.8 * tile_w, max(promoted[j], 0.004) * h,
                fc=fs.GREEN, ec="none")
    for j in range(PERIOD, TILES, PERIOD):
        x = x0 + j * tile_w
        ax.plot([x, x], [y0, y0 + h], color=fs.GREEN, lw=0.8, ls=":")
    fs.text(ax, x0 + PERIOD * tile_w + 0.5, y0 + 0.93 * h, "promotion: O' -> codes\n+ residual",
            size=7, color=fs.GREEN)
    fs.swatch(ax, x0, y0 - 9.5, fs.tint(fs.VERMILLION, 0.35), "chained over the row: the running "
              "sum", size=7.5)
    fs.swatch(ax, x0, y0 - 12.5, fs.GREEN, "fp8_v4: the residual + at most 8 tiles", size=7.5)
    fs.text(ax, x0, y0 - 15.5, "fp8_v3: zeros (a fresh accumulator, folded in fp32)", size=7.5)


def right_panel(ax, x0, y0, w, h):
    fs.text(ax, x0 + w / 2, y0 + h + 5.0, "O's largest error, one head, N keys (H100, measured)",
            size=9.5, ha="center", weight="bold")
    fs.rect(ax, x0, y0, w, h, lw=0.6)
    lo, hi = math.log10(0.002), math.log10(0.2)
    kx0, kx1 = math.log2(KEYS[0]), math.log2(KEYS[-1])

    def px(keys):
        return x0 + (math.log2(keys) - kx0) / (kx1 - kx0) * w

    def py(err):
        return y0 + (math.log10(err) - lo) / (hi - lo) * h

    for e in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2):
        ax.plot([x0, x0 + w], [py(e), py(e)], color="#DDDDDD", lw=0.5, zorder=0)
        fs.text(ax, x0 - 0.8, py(e), "%g" % e, size=7, ha="right")
    for k in KEYS:
        fs.text(ax, px(k), y0 - 1.8, "%dK" % (k // 1024), size=7, ha="center")
    fs.text(ax, x0 + w / 2, y0 - 4.2, "keys a row (log scale)", size=8, ha="center")
    xs = [px(k) for k in KEYS]
    ax.plot(xs, [py(b) for b in BOUND], color=fs.INK, lw=1.0, ls="-.")
    fs.text(ax, xs[-1] - 0.5, py(BOUND[-1]) + 1.4, "the rule's bound", size=7, ha="right")
    legend_y = y0 - 9.5
    for i, (label, colour, style, errs) in enumerate(MEASURED):
        pts = [(x, py(e)) for x, e in zip(xs, errs) if e is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour, lw=1.3, ls=style,
                marker="o", ms=2.6)
        ly = legend_y - 3.0 * (i % 3)
        lx = x0 + (0 if i < 3 else w / 2 + 2)
        ax.plot([lx, lx + 2.5], [ly, ly], color=colour, lw=1.3, ls=style)
        fs.text(ax, lx + 3.3, ly, label, size=7.5)
    fs.text(ax, px(32768) + 0.8, py(0.115), "fails at 16K", size=7, color=fs.VERMILLION)


def main(out_dir):
    fig, ax = fs.canvas(150, 66)
    left_panel(ax, 9.0, 22.0, 58.0, 34.0)
    right_panel(ax, 84.0, 22.0, 60.0, 34.0)
    fs.save(fig, out_dir, "fig_fp8_promotion")


if __name__ == "__main__":
    fs.run_alone(main)
