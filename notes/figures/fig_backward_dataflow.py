#!/usr/bin/env python3
"""fig_backward_dataflow.svg: the FlashAttention-2 backward as this repository runs it
(notes/06_flash_backward.md): the preprocess D_i = rowsum(dO_i * O_i); the dK/dV kernel, one block
per K/V tile looping over the Q tiles, recomputing S and P from L; and dQ, either added by atomics
from that same loop or computed by a second kernel that loops over the K/V tiles per Q tile.

With scale s, S = s Q K^T, P_ij = exp(S_ij - L_i), and
  dV_j = sum_i P_ij dO_i,  dP = dO V^T,  dS = P * (dP - D),  dK_j = s sum_i dS_ij q_i,
  dQ_i = s sum_j dS_ij k_j.
"""
import figstyle as fs

RECOMPUTE = fs.tint(fs.ORANGE, 0.4)
GRADIENT = fs.tint(fs.SKY, 0.45)
DQ = fs.tint(fs.PURPLE, 0.45)
INPUT = fs.GLOBAL_FILL
OUTPUT = fs.tint(fs.VERMILLION, 0.3)


def tensor(ax, x, y, name, fill, w=17.0, h=3.6):
    fs.rect(ax, x, y, w, h, fc=fill, ec="#666666", lw=0.6)
    fs.text(ax, x + w / 2, y + h / 2, name, size=7.4, ha="center")
    return (x + w, y + h / 2)


def step(ax, x, y, w, h, fill, formula, why):
    fs.rect(ax, x, y, w, h, fc=fill, ec=fs.INK, lw=0.8)
    fs.text(ax, x + 1.2, y + h / 2, formula, size=8.2, family="DejaVu Sans Mono")
    fs.text(ax, x + 31.0, y + h / 2, why, size=6.8, color="#333333")


def grid(ax, x0, y0, n, cell):
    """Q tiles (rows) x K tiles (columns), causal: tiles above the diagonal are skipped."""
    for i in range(n):
        for j in range(n):
            skipped = j > i
            fs.rect(ax, x0 + j * cell, y0 + (n - 1 - i) * cell, cell, cell,
                    fc="#F0F0F0" if skipped else "#FFFFFF", ec="#888888", lw=0.4,
                    hatch="xx" if skipped else None)
    jcol, irow = 2, 4
    for i in range(jcol, n):  # the dK/dV block of K tile jcol walks down its column
        fs.rect(ax, x0 + jcol * cell, y0 + (n - 1 - i) * cell, cell, cell, fc=GRADIENT,
                ec=fs.INK, lw=0.6)
    for j in range(0, irow + 1):  # the dQ block of Q tile irow walks along its row
        fs.rect(ax, x0 + j * cell, y0 + (n - 1 - irow) * cell, cell, cell,
                fc=DQ if j != jcol else fs.tint(fs.BLUE, 0.45), ec=fs.INK, lw=0.6)
    cx = x0 + (jcol + 0.5) * cell
    fs.arrow(ax, (cx, y0 + (n - jcol) * cell - 0.6), (cx, y0 + 0.6), color=fs.BLUE, lw=1.4)
    cy = y0 + (n - 1 - irow + 0.5) * cell
    fs.arrow(ax, (x0 + 0.6, cy), (x0 + (irow + 1) * cell - 0.6, cy), color=fs.PURPLE, lw=1.4)
    fs.text(ax, x0 + n * cell / 2, y0 + n * cell + 1.2, "K tiles j →", size=7, ha="center")
    fs.text(ax, x0 - 1.0, y0 + n * cell / 2, "Q tiles i\n↓", size=7, ha="right")


def main(out_dir):
    fig, ax = fs.canvas(150, 96)
    fs.text(ax, 75, 93.0, "The backward: D from O and dO, then dK and dV per key tile, "
            "dQ by atomics or by a second pass", size=12, ha="center", weight="bold")

    # ---- Global memory, left: what the preprocess reads, D, what the loop reads, the outputs.
    fs.text(ax, 4.0, 88.0, "global memory", size=8.5, weight="bold")
    t = {}
    rows = (("O", "O [N_q × d]", INPUT, 83.0), ("dO", "dO [N_q × d]", INPUT, 78.0),
            ("D", "D [N_q]", fs.tint(fs.GREEN, 0.35), 68.0),
            ("Q", "Q [N_q × d]", INPUT, 62.0), ("dO2", "dO [N_q × d]", INPUT, 57.0),
            ("L", "L [N_q] (forward)", INPUT, 52.0),
            ("K", "K [N_k × d]", INPUT, 44.0), ("V", "V [N_k × d]", INPUT, 39.0),
            ("dK", "dK [N_k × d]", OUTPUT, 12.0), ("dV", "dV [N_k × d]", OUTPUT, 7.0))
    for key, label, fill, y in rows:
        t[key] = tensor(ax, 4.0, y, label, fill)
    fs.text(ax, 4.0, 17.6, "outputs", size=8, weight="bold")

    # ---- 1. Preprocess.
    fs.rounded(ax, 30.0, 76.0, 116.0, 12.0, fc=fs.tint(fs.GREEN, 0.12), ec="#777777")
    fs.text(ax, 32.0, 85.6, "1. Preprocess (one memory-bound kernel, one pass over O and dO)",
            size=9, weight="bold")
    fs.text(ax, 34.0, 81.0, "D_i = rowsum(dO_i ∘ O_i)", size=9.5, family="DejaVu Sans Mono",
            weight="bold")
    fs.text(ax, 80.0, 81.0, "= Σ_j P_ij dP_ij, because dP = dO Vᵀ and O = P V: the reduction\n"
            "over all keys that dS needs, from two vectors of length d per row.", size=7.2)
    for key in ("O", "dO"):
        fs.arrow(ax, t[key], (30.0, t[key][1]), color=fs.GREY, lw=0.9)
    fs.arrow(ax, (31.5, 76.0), (t["D"][0] + 0.3, t["D"][1]), color=fs.GREEN, lw=1.2,
             rad=-0.3)

    # ---- 2. The dK/dV loop.
    fs.rounded(ax, 30.0, 4.0, 66.0, 69.0, fc="#FCFCFC", ec="#777777")
    fs.text(ax, 33.0, 70.4, "2. dK/dV kernel: one block per K/V tile j (Bc keys)", size=9,
            weight="bold")
    fs.text(ax, 33.0, 66.6, "K_j, V_j loaded once; dK_j, dV_j accumulate in registers.\n"
            "Loop over the Q tiles i that see a key of tile j (causal: from the diagonal down):",
            size=7.4, va="center")
    for key in ("D", "Q", "dO2", "L", "K", "V"):
        fs.arrow(ax, t[key], (30.0, t[key][1]), color=fs.GREEN if key == "D" else fs.GREY,
                 lw=0.9)
    steps = [
        (INPUT, "load Q_i, dO_i, L_i, D_i", "the Q-side tiles stream through"),
        (RECOMPUTE, "S  = s · Q_i K_jᵀ", "recomputed, never stored"),
        (RECOMPUTE, "P  = exp(S − L_i)", "L normalises: no max, no sum"),
        (GRADIENT, "dV_j += Pᵀ dO_i", ""),
        (GRADIENT, "dP = dO_i V_jᵀ", ""),
        (GRADIENT, "dS = P ∘ (dP − D_i)", "the softmax's Jacobian, with D"),
        (GRADIENT, "dK_j += s · dSᵀ Q_i", ""),
        (DQ, "dQ_i += s · dS K_j", "a piece of every row's dQ: 3a"),
    ]
    sy = 57.0
    for k, (fill, formula, why) in enumerate(steps):
        y = sy - 6.2 * k
        step(ax, 34.0, y, 59.0, 4.4, fill, formula, why)
        if k:
            fs.arrow(ax, (46.0, y + 6.2), (46.0, y + 4.4), lw=0.8)
    # The loop back, left of the steps.
    fs.arrow(ax, (32.0, sy - 6.2 * 7 + 2.2), (32.0, sy + 2.2), lw=0.9, ls="--", color="#666666")
    fs.arrow(ax, (32.0, sy + 2.2), (34.0, sy + 2.2), lw=0.9, color="#666666")
    fs.text(ax, 33.0, 8.4, "After the loop: dK_j, dV_j written once (no other block\n"
            "touches them): deterministic.", size=7.2)
    fs.arrow(ax, (30.0, 9.0), t["dK"], color=fs.VERMILLION, lw=1.0, rad=0.15)
    fs.arrow(ax, (30.0, 8.0), t["dV"], color=fs.VERMILLION, lw=1.0, rad=-0.1)

    # ---- 3. dQ: two ways, and the output on the right.
    fs.rounded(ax, 100.0, 55.0, 42.0, 18.0, fc=fs.tint(fs.PURPLE, 0.1), ec="#777777")
    fs.text(ax, 102.0, 70.4, "3a. dQ by atomics (the same loop)", size=8.6, weight="bold")
    fs.text(ax, 102.0, 67.6, "Each block adds its piece s · dS K_j\ninto an fp32 dQ with "
            "atomicAdd;\na last small pass converts it.\n+ S, P, dP computed once per pair\n"
            "− the order of the additions varies:\n   not bitwise deterministic", size=7.2,
            va="top", linespacing=1.3)
    fs.arrow(ax, (93.0, sy - 6.2 * 7 + 2.2), (100.0, 58.0), color=fs.PURPLE, lw=1.3, rad=0.3)
    fs.rounded(ax, 100.0, 27.0, 42.0, 25.0, fc=fs.tint(fs.PURPLE, 0.1), ec="#777777")
    fs.text(ax, 102.0, 49.4, "3b. or a second kernel: dQ per Q tile", size=8.6, weight="bold")
    fs.text(ax, 102.0, 46.6, "The dQ step leaves the loop. One block\nper Q tile i loops "
            "over the K/V tiles j,\nrecomputes S, P, dP, dS and keeps\ndQ_i += s · dS K_j "
            "in registers.\n+ each dQ element summed by one thread,\n   in a fixed order: "
            "deterministic\n− S and dP computed twice", size=7.2, va="top", linespacing=1.3)
    dq = tensor(ax, 128.0, 19.0, "dQ [N_q × d]", OUTPUT)
    # 3a's dQ goes around 3b, on the right; 3b's straight down.
    ax.plot([142.0, 147.5, 147.5], [64.0, 64.0, dq[1]], color=fs.VERMILLION, lw=1.0)
    fs.arrow(ax, (147.5, dq[1]), dq, color=fs.VERMILLION, lw=1.0)
    fs.arrow(ax, (136.5, 27.0), (136.5, 22.6), color=fs.VERMILLION, lw=1.0)

    # ---- Traversal of the (Q tile, K tile) grid, causal.
    fs.text(ax, 100.0, 21.6, "Who walks where (causal):", size=7.6, weight="bold",
            va="center")
    grid(ax, 104.0, 2.5, 6, 2.4)
    fs.text(ax, 121.0, 10.0, "blue: the dK/dV block of\nK tile j walks down its\ncolumn\n\n"
            "purple: the dQ block of\nQ tile i walks along\nits row (3b)", size=6.6,
            va="center")
    fs.save(fig, out_dir, "fig_backward_dataflow")


if __name__ == "__main__":
    fs.run_alone(main)
