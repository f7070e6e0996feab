#!/usr/bin/env python3
"""fig_window_tiles.svg: chapter 09's sliding window seen by tiles. N = 1024 queries and keys in
tiles of Br = Bc = 64 (16 x 16 tiles of S), causal, left: a window of W = 256 keys, the row's own
included (FlashAttention's window_left = W - 1 = 255: query i sees keys i - 255 .. i,
common/shapes.h visible_key_range); right: causal alone, for comparison.

Per tile, as chapters/09_serving/ch09_band.h classifies them:
  full     every row of the Q tile sees every key of the K tile: no mask;
  masked   the band's edge (the diagonal, or the window's far edge) crosses it: element-wise mask;
  skipped  no row sees any key of it: never loaded, never computed.
The window's tiles of one query block are one interval (key_tiles), W/Bc + 1 of them once the
window is full: W/Bc - 1 full and 2 masked. Counts and visible pairs are computed, not typed.
"""
import figstyle as fs

N = 1024
B = 64  # Br = Bc
W = 256  # keys a row sees, its own included
LEFT = W - 1  # window_left
SCALE = 0.052  # drawing units per row or key

FULL = fs.tint(fs.GREEN, 0.55)
MASKED = fs.tint(fs.ORANGE, 0.75)
SKIPPED = "#F0F0F0"


def key_interval(i, left):
    """The keys row i sees, first..last (visible_key_range with causal set)."""
    return (0 if left is None else max(0, i - left)), i


def tile_class(qi, kj, left):
    k0, k1 = kj * B, (kj + 1) * B - 1
    spans = [key_interval(i, left) for i in range(qi * B, (qi + 1) * B)]
    if all(lo <= k0 and hi >= k1 for lo, hi in spans):
        return "full"
    if all(hi < k0 or lo > k1 for lo, hi in spans):
        return "skipped"
    return "masked"


def visible_pairs(left):
    return sum(hi - lo + 1 for lo, hi in (key_interval(i, left) for i in range(N)))


def draw_grid(ax, x0, top, left, title, subtitle):
    fills = {"full": FULL, "masked": MASKED, "skipped": SKIPPED}
    counts = {"full": 0, "masked": 0, "skipped": 0}
    n = N // B
    fs.text(ax, x0, top + 8.4, title, size=9.5, weight="bold")
    fs.text(ax, x0, top + 5.8, subtitle, size=7.6)
    per_block = []
    for qi in range(n):
        visited = 0
        for kj in range(n):
            cls = tile_class(qi, kj, left)
            counts[cls] += 1
            visited += cls != "skipped"
            x, y = x0 + kj * B * SCALE, top - (qi + 1) * B * SCALE
            fs.rect(ax, x, y, B * SCALE, B * SCALE, fc=fills[cls], ec="#555555", lw=0.5,
                    hatch="xx" if cls == "skipped" else None)
        per_block.append(visited)
    # The band's edges: the diagonal j = i and, with a window, j = i - left.
    ax.plot([x0, x0 + N * SCALE], [top, top - N * SCALE], color=fs.VERMILLION, lw=1.3, zorder=5)
    if left is not None:
        ax.plot([x0, x0 + (N - left) * SCALE], [top - left * SCALE, top - N * SCALE],
                color=fs.BLUE, lw=1.3, zorder=5)
    fs.text(ax, x0 + N * SCALE / 2, top + 2.2, "keys j (K tiles of Bc = %d) →" % B, size=7,
            ha="center")
    for kj in range(0, n, 4):
        fs.text(ax, x0 + (kj + 0.5) * B * SCALE, top + 0.8, str(kj * B), size=5.8, ha="center",
                color="#555555")
    for qi in range(0, n, 4):
        fs.text(ax, x0 - 0.5, top - (qi + 0.5) * B * SCALE, str(qi * B), size=5.8, ha="right",
                color="#555555")
    # Tiles visited per query block, to the right of each row of tiles.
    for qi, v in enumerate(per_block):
        fs.text(ax, x0 + N * SCALE + 0.8, top - (qi + 0.5) * B * SCALE, str(v), size=5.8,
                color="#555555")
    fs.text(ax, x0 + N * SCALE + 0.2, top + 1.6, "tiles\nvisited", size=6.2, va="bottom")
    vis = visible_pairs(left)
    yb = top - N * SCALE - 2.6
    visited = counts["full"] + counts["masked"]
    fs.text(ax, x0, yb, "tiles: %d full, %d masked, %d skipped of %d (%d visited)" % (
        counts["full"], counts["masked"], counts["skipped"], n * n, visited), size=7.4)
    fs.text(ax, x0, yb - 2.4, "visible (i, j) pairs: %d of %d = %.1f%%" % (
        vis, N * N, 100.0 * vis / (N * N)), size=7.4)
    return counts


def main(out_dir):
    fig, ax = fs.canvas(150, 88)
    fs.text(ax, 75, 85.0, "A sliding window by tile class: N = %d, tiles of %d × %d, causal"
            % (N, B, B), size=12, ha="center", weight="bold")
    top = 70.0
    win = draw_grid(ax, 10.0, top, LEFT, "Causal, a window of W = %d keys (row i sees i − %d … i)"
                    % (W, LEFT), "per query block, once the window is full: W/Bc − 1 = %d full "
                    "tiles and 2 masked" % (W // B - 1))
    causal = draw_grid(ax, 84.0, top, None, "Causal alone (query i sees keys 0 … i)",
                       "query block q visits q + 1 tiles: N²/2 work")
    ly = 5.0
    fs.swatch(ax, 10.0, ly, FULL, "full: no mask")
    fs.swatch(ax, 32.0, ly, MASKED, "masked: a band edge crosses it (s = −∞ per element)")
    fs.rect(ax, 84.0, ly, 2.0, 1.4, fc=SKIPPED, ec=fs.INK, lw=0.5, hatch="xx")
    fs.text(ax, 86.8, ly + 0.7, "skipped: outside the loop's tile range", size=8)
    ax.plot([10.0, 12.0], [ly - 2.6, ly - 2.6], color=fs.VERMILLION, lw=1.3)
    fs.text(ax, 12.8, ly - 2.6, "j = i (the diagonal)", size=8)
    ax.plot([32.0, 34.0], [ly - 2.6, ly - 2.6], color=fs.BLUE, lw=1.3)
    fs.text(ax, 34.8, ly - 2.6, "j = i − (W − 1) (the window's far edge)", size=8)
    fs.text(ax, 84.0, ly - 2.6, "Tiles visited: %d with the window, %d causal: cost ∝ N·W, not N²"
            % (win["full"] + win["masked"], causal["full"] + causal["masked"]), size=8)
    fs.save(fig, out_dir, "fig_window_tiles")


if __name__ == "__main__":
    fs.run_alone(main)
