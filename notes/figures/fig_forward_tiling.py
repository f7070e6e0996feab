#!/usr/bin/env python3
"""fig_forward_tiling.svg: the FlashAttention-2 forward of one thread block. Its Q tile (Br rows)
stays on chip for the whole loop; K and V tiles of Bc keys stream through shared memory; per query
row the running max m and sum l are updated, and the accumulated O is rescaled by
alpha = exp(m_old - m_new) whenever the max moves. Sizes as the tensor-core forward at D = 128:
Br = 128 rows (split over the warps, 16 or 32 rows each), Bc = 64.

The inset follows one query row through eight K/V tiles with made-up scores (fixed below, no
random numbers): the running max only rises, and alpha < 1 exactly at the tiles where it does.
"""
import math

import figstyle as fs

SCALE = 0.12  # drawing units per element
BR, BC, D = 128, 64, 128
N_Q_TILES, N_K_TILES = 4, 8
Q_TILE, K_TILE = 1, 3  # the block drawn, and the K/V tile it is working on

# One row's largest score in each K/V tile (illustrative numbers).
ROW_TILE_MAX = [1.0, 2.2, 1.7, 3.1, 2.9, 3.4, 2.0, 3.3]


def matrix(ax, x, y_mid, rows, cols, fill, label, sub, bold=True):
    w, h = cols * SCALE, rows * SCALE
    fs.rect(ax, x, y_mid - h / 2, w, h, fc=fill, ec=fs.INK, lw=1.2 if bold else 0.7)
    fs.text(ax, x + w / 2, y_mid, label, size=9.5, ha="center", weight="bold")
    fs.text(ax, x + w / 2, y_mid - 7.6 - 0.2, sub, size=6.8, ha="center", va="top",
            linespacing=1.25)
    return x, y_mid - h / 2, w, h


def strip(ax, x, y, n, w, h, current, label, fills, styles=None):
    """A tensor in global memory as a strip of tiles; tile `current` outlined."""
    for k in range(n):
        fill, ls = fills(k), (styles(k) if styles else "-")
        bold = k == current
        fs.rect(ax, x + k * w, y, w, h, fc=fill, ec=fs.INK if bold else "#777777",
                lw=1.4 if bold else 0.5, ls=ls, zorder=3 if bold else 2)
        fs.text(ax, x + (k + 0.5) * w, y + h / 2, str(k), size=6.2, ha="center",
                weight="bold" if bold else "normal", zorder=4)
    fs.text(ax, x, y + h + 1.3, label, size=7.6)
    return x + (current + 0.5) * w


def inset(fig, ax_x, ax_y, ax_w, ax_h, canvas_w, canvas_h):
    ax = fig.add_axes([ax_x / canvas_w, ax_y / canvas_h, ax_w / canvas_w, ax_h / canvas_h])
    m, alphas = [], []
    m_old = -math.inf
    for s in ROW_TILE_MAX:
        m_new = max(m_old, s)
        alphas.append(0.0 if m_old == -math.inf else math.exp(m_old - m_new))
        m.append(m_new)
        m_old = m_new
    xs = list(range(len(ROW_TILE_MAX)))
    ax.bar(xs, ROW_TILE_MAX, width=0.6, color=fs.tint(fs.GREY, 0.5), edgecolor=fs.GREY,
           label="largest score of the row in tile j")
    ax.step(xs, m, where="mid", color=fs.BLUE, lw=2.0, label="running max m after tile j")
    for x, a, moved in zip(xs, alphas, [True] + [m[k] > m[k - 1] for k in xs[1:]]):
        ax.text(x, 4.05, "%.2f" % a, ha="center", va="bottom", fontsize=7,
                color=fs.VERMILLION if moved else fs.INK,
                weight="bold" if moved else "normal")
    ax.text(-0.75, 4.05, "α:", ha="right", va="bottom", fontsize=7.5, color=fs.VERMILLION,
            weight="bold")
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_ylim(0, 4.0)
    ax.set_xticks(xs)
    ax.set_xlabel("K/V tile j", fontsize=7.5)
    ax.set_ylabel("score (scaled)", fontsize=7.5)
    ax.tick_params(labelsize=7)
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.legend(loc="lower right", fontsize=6.8, frameon=False)
    ax.set_title("One query row: α = exp(m_old − m_new) < 1 only where the max moves "
                 "(tile 0: l = 0, O = 0)", fontsize=7.8, pad=13)


def main(out_dir):
    cw, ch = 150, 96
    fig, ax = fs.canvas(cw, ch)
    fs.text(ax, 75, 93.0, "The forward, one thread block: a Q tile held, K/V tiles streaming, "
            "the running (m, l) and the rescale of O", size=12, ha="center", weight="bold")

    # ---- Global memory: Q, K, V, O, L as strips of tiles.
    gy, gh = 80.0, 3.6
    fs.text(ax, 4.0, gy + gh / 2 + 0.8, "global\nmemory", size=8, weight="bold", va="center")
    done = fs.tint(fs.GREY, 0.45)
    q_x = strip(ax, 14.0, gy, N_Q_TILES, 4.6, gh, Q_TILE,
                "Q [N_q × D]: tiles of Br = %d rows" % BR,
                lambda k: fs.tint(fs.GREY, 0.2) if k != Q_TILE else fs.REG_FILL)
    kv_fill = (lambda k: done if k < K_TILE else (fs.SHARED_FILL if k <= K_TILE + 1 else
                                                   fs.GLOBAL_FILL))
    kv_style = lambda k: "--" if k == K_TILE + 1 else "-"  # noqa: E731
    k_x = strip(ax, 36.0, gy, N_K_TILES, 3.0, gh, K_TILE, "K [N_k × D]: tiles of Bc = %d keys"
                % BC, kv_fill, kv_style)
    v_x = strip(ax, 80.0, gy, N_K_TILES, 3.0, gh, K_TILE, "V [N_k × D]", kv_fill, kv_style)
    o_x = strip(ax, 110.0, gy, N_Q_TILES, 4.6, gh, Q_TILE, "O [N_q × D]",
                lambda k: fs.tint(fs.GREY, 0.2) if k != Q_TILE else fs.REG_FILL)
    fs.rect(ax, 133.0, gy, 9.0, gh, fc=fs.GLOBAL_FILL, ec="#777777", lw=0.5)
    fs.text(ax, 137.5, gy + gh / 2, "L [N_q]", size=6.5, ha="center")
    fs.text(ax, 36.0, gy + gh + 4.2, "grey: tiles 0 … j−1, done;  outlined: tile j;  dashed: "
            "tile j+1, in flight", size=6.6, color="#555555")

    # ---- The block.
    fs.rounded(ax, 4.0, 3.0, 142.0, 70.0, fc="#FCFCFC", ec="#888888", lw=0.9, pad=1.2)
    # (placed between the arrows that enter the block)
    fs.text(ax, 44.5, 70.0, "One thread block = Q tile i (Br = %d rows, split over its warps)," % BR,
            size=8.6, weight="bold")
    fs.text(ax, 44.5, 67.2, "looping over the K/V tiles j = 0, 1, …, N_k / Bc − 1", size=8.6,
            weight="bold")

    y_mid = 54.5
    qx = matrix(ax, 16.0, y_mid, BR, D, fs.REG_FILL, "Q_i", "Br × D, loaded once:\nshared memory, and\n"
                "registers where they fit")
    fs.text(ax, 34.4, y_mid, "·", size=16, ha="center")
    kx = matrix(ax, 37.2, y_mid, D, BC, fs.SHARED_FILL, "K_jᵀ", "D × Bc\nshared memory\n"
                "(2 buffers)")
    fs.text(ax, 47.3, y_mid, "=", size=13, ha="center")
    sx = matrix(ax, 49.8, y_mid, BR, BC, fs.REG_FILL, "S_j", "Br × Bc, fp32\nregisters\n"
                "(never stored)")
    px = matrix(ax, 74.0, y_mid, BR, BC, fs.REG_FILL, "P_j", "Br × Bc\nregisters\n(16-bit)")
    fs.arrow(ax, (sx[0] + sx[2] + 1.0, y_mid), (px[0] - 1.0, y_mid), lw=1.4)
    fs.text(ax, (sx[0] + sx[2] + px[0]) / 2, y_mid + 1.4, "online\nsoftmax", size=7.4,
            ha="center", va="bottom")
    fs.text(ax, 84.3, y_mid, "·", size=16, ha="center")
    vx = matrix(ax, 86.6, y_mid, BC, D, fs.SHARED_FILL, "V_j", "Bc × D\nshared memory\n"
                "(2 buffers)")
    ox = matrix(ax, 112.0, y_mid, BR, D, fs.REG_FILL, "O_i", "Br × D, fp32\nregisters:\n"
                "O ← α·O + P_j V_j")
    fs.arrow(ax, (vx[0] + vx[2] + 1.0, y_mid), (ox[0] - 1.0, y_mid), lw=1.4)
    fs.text(ax, (vx[0] + vx[2] + ox[0]) / 2, y_mid + 1.2, "accumulate", size=7.4, ha="center",
            va="bottom")
    # m and l: one number per row, next to O.
    for k, name in enumerate(("m", "l")):
        x = ox[0] + ox[2] + 2.0 + 3.6 * k
        fs.rect(ax, x, ox[1], 2.0, ox[3], fc=fs.REG_FILL, ec=fs.INK, lw=1.0)
        fs.text(ax, x + 1.0, ox[1] + ox[3] + 1.0, name, size=9, ha="center", weight="bold")
    fs.text(ax, ox[0] + ox[2] + 4.8, y_mid - 7.8, "one per row\n(Br × 1)", size=6.8,
            ha="center", va="top")

    # Arrows between global memory and the block.
    top = lambda box: (box[0] + box[2] / 2, box[1] + box[3])  # noqa: E731
    fs.arrow(ax, (q_x, gy), (top(qx)[0], top(qx)[1] + 0.3), color=fs.BLUE, lw=1.2)
    fs.arrow(ax, (k_x, gy), (top(kx)[0], top(kx)[1] + 0.3), color=fs.BLUE, lw=1.2)
    fs.arrow(ax, (v_x, gy), (top(vx)[0], top(vx)[1] + 0.3), color=fs.BLUE, lw=1.2)
    fs.arrow(ax, (top(ox)[0], top(ox)[1] + 0.3), (o_x, gy), color=fs.VERMILLION, lw=1.2)
    fs.arrow(ax, (ox[0] + ox[2] + 4.8, top(ox)[1] + 2.4), (137.5, gy), color=fs.VERMILLION,
             lw=1.2)
    fs.text(ax, 47.0, 73.8, "cp.async: tile j+1 is copied while tile j is used", size=6.8,
            color=fs.BLUE, ha="left")
    fs.text(ax, 115.8, 75.6, "written once, after the last tile", size=6.8,
            color=fs.VERMILLION, ha="right")

    # ---- Per-row equations.
    ex, ey = 8.0, 38.0
    fs.text(ax, ex, ey, "For each query row r of the tile, at each K/V tile j:", size=8.6,
            weight="bold")
    lines = [
        "m_new = max(m, max_k S_j[r, k])",
        "α = exp(m − m_new)                    (how much the old numbers shrink)",
        "P_j[r, k] = exp(S_j[r, k] − m_new)",
        "l = α·l + Σ_k P_j[r, k]",
        "O[r] = α·O[r] + Σ_k P_j[r, k]·V_j[k]   (the rescale, then the new tile)",
        "m = m_new",
    ]
    for k, s in enumerate(lines):
        fs.text(ax, ex + 2.0, ey - 3.6 - 2.9 * k, s, size=8, family="DejaVu Sans Mono")
    fs.text(ax, ex, ey - 23.4, "After the last tile (the epilogue):", size=8.6, weight="bold")
    fs.text(ax, ex + 2.0, ey - 27.0, "O[r] = O[r] / l,   L[r] = m + log l   "
            "(one division per row; L is all the backward needs)", size=8,
            family="DejaVu Sans Mono")
    fs.text(ax, ex, ey - 31.2, "Start: m = −∞, l = 0, O = 0.  Every exponent is ≤ 0 "
            "(safe softmax), and nothing of size N_q × N_k is ever stored.", size=7.4,
            color="#444444")

    # Memory legend.
    lx, ly = 98.0, 68.0
    fs.swatch(ax, lx, ly, fs.GLOBAL_FILL, "global memory", size=7.4)
    fs.swatch(ax, lx + 17.0, ly, fs.SHARED_FILL, "shared", size=7.4)
    fs.swatch(ax, lx + 29.0, ly, fs.REG_FILL, "registers", size=7.4)

    inset(fig, 96.0, 8.0, 46.0, 24.0, cw, ch)
    fs.save(fig, out_dir, "fig_forward_tiling")


if __name__ == "__main__":
    fs.run_alone(main)
