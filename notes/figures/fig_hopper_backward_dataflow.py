#!/usr/bin/env python3
"""fig_hopper_backward_dataflow.svg: the backward of fig_backward_dataflow.svg as chapter 07 runs it
on Hopper (chapters/07_flash_hopper/sm90a/bwd_v1_tma_wgmma.cu, bwd_v2_dq_reduce.cu,
common/device/hopper_attention_bwd.cuh), for D <= 128: which operands TMA brings into shared
memory, which products wgmma computes and where it reads A and B from, what stays in registers,
and where dQ goes.

The dK/dV kernel: one block per 128 keys, two warpgroups of 64 keys each, thread 0 issuing every
TMA copy. K and V stay in shared memory; the 64-query tiles of Q and dO stream through a 2-stage
ring (one mbarrier per stage); L and D of the tile are plain loads of warpgroup 0 stored beside
them. Per tile and warpgroup:
  S^T = K Q^T, dP^T = V dO^T          wgmma_ss (A and B from shared memory)
  P^T = exp2(S^T s log2e - L log2e)   registers; dS^T = P^T o (dP^T - D)
  dV += P^T dO, dK += dS^T Q          wgmma_rs (A from registers, B = dO or Q, MN-major)
dQ: 07/bwd_v1 computes it in a second kernel (one block per 128 queries, S and dP again, dQ kept
in registers: deterministic); 07/bwd_v2 stores dS^T to shared memory, computes dQ_tile = dS K
there (wgmma_ss, A = dS read transposed) and adds it into an fp32 workspace with TMA's reduce-add
(cp.reduce.async.bulk .add.f32), then converts (not deterministic; bwd_v3 fixes the order).
The colours of the products are those of fig_backward_dataflow.py.
"""
import figstyle as fs

RECOMPUTE = fs.tint(fs.ORANGE, 0.4)  # as fig_backward_dataflow.py
GRADIENT = fs.tint(fs.SKY, 0.45)
DQ = fs.tint(fs.PURPLE, 0.45)
INPUT = fs.GLOBAL_FILL
OUTPUT = fs.tint(fs.VERMILLION, 0.3)
SMEM = fs.SHARED_FILL
REG = fs.REG_FILL
MONO = "DejaVu Sans Mono"


def tensor(ax, x, y, name, fill, w=18.0, h=3.4):
    fs.rect(ax, x, y, w, h, fc=fill, ec="#666666", lw=0.6)
    fs.text(ax, x + w / 2, y + h / 2, name, size=7.0, ha="center")
    return (x + w, y + h / 2)


def cell(ax, x, y, w, h, fill, s, size=6.6, **kw):
    fs.rect(ax, x, y, w, h, fc=fill, ec="#777777", lw=0.5)
    fs.text(ax, x + 0.8, y + h / 2, s, size=size, **kw)


def smem_tile(ax, x, y, w, h, label, dashed=False):
    fs.rect(ax, x, y, w, h, fc=SMEM, ec=fs.BLUE if not dashed else fs.PURPLE, lw=0.8,
            ls="--" if dashed else "-")
    fs.text(ax, x + w / 2, y + h / 2, label, size=6.6, ha="center", linespacing=1.2)


def main(out_dir):
    fig, ax = fs.canvas(172, 104)
    fs.text(ax, 86, 101.0, "The backward on Hopper: what TMA brings, what wgmma multiplies, "
            "where each tile lives (07/bwd_v1, bwd_v2; D ≤ 128)", size=11.5, ha="center",
            weight="bold")

    # ---- Global memory, left.
    fs.text(ax, 2.0, 95.0, "global memory", size=8.5, weight="bold")
    g = {}
    for key, label, fill, y in (("K", "K [N_k × d]", INPUT, 89.0), ("V", "V [N_k × d]", INPUT, 85.0),
                                ("Q", "Q [N_q × d]", INPUT, 78.0), ("dO", "dO [N_q × d]", INPUT, 74.0),
                                ("L", "L, D [N_q] (fp32)", INPUT, 67.0),
                                ("dK", "dK [N_k × d]", OUTPUT, 14.0),
                                ("dV", "dV [N_k × d]", OUTPUT, 10.0)):
        g[key] = tensor(ax, 2.0, y, label, fill)
    fs.text(ax, 2.0, 19.4, "outputs", size=8, weight="bold")
    fs.text(ax, 2.0, 62.0, "D from chapter 06's\npreprocess (rowsum(dO∘O)),\n"
            "L from the forward", size=6.4, va="top", linespacing=1.25)

    # ---- The dK/dV kernel.
    kx, kw = 24.0, 110.0
    fs.rounded(ax, kx, 5.0, kw, 91.0, fc="#FCFCFC", ec="#777777")
    fs.text(ax, kx + 2.0, 93.2, "dK/dV kernel: one block per 128 keys (K/V tile j), two "
            "warpgroups of 64 keys; thread 0 issues every TMA copy", size=8.6, weight="bold")

    # Shared memory: resident K, V; the ring; bwd_v2's extra tiles.
    fs.rounded(ax, kx + 2.0, 66.0, kw - 4.0, 24.8, fc=fs.tint(fs.SKY, 0.08), ec=fs.BLUE, lw=0.7)
    fs.text(ax, kx + 3.5, 88.6, "shared memory (16-bit tiles, 128-byte swizzle): 130 KiB at D 128, 182 KiB with bwd_v2's tiles",
            size=7.6, weight="bold", color=fs.BLUE)
    smem_tile(ax, 29.0, 80.2, 17.0, 6.4, "K_j\n128 × d")
    smem_tile(ax, 47.5, 80.2, 17.0, 6.4, "V_j\n128 × d")
    fs.text(ax, 66.0, 83.4, "loaded once per block\n(one mbarrier)", size=6.2, va="center")
    for s in range(2):
        x0 = 29.0 + 19.0 * s
        fs.rect(ax, x0 - 0.8, 67.2, 17.6, 11.8, fc="none", ec="#8AA9C2", lw=0.5, ls=":")
        fs.text(ax, x0 + 8.0, 77.9, "stage %d (mbarrier)" % s, size=6.0, ha="center",
                color="#44617A")
        smem_tile(ax, x0, 71.6, 7.5, 5.2, "Q_i\n64 × d")
        smem_tile(ax, x0 + 8.5, 71.6, 7.5, 5.2, "dO_i\n64 × d")
        smem_tile(ax, x0, 67.8, 16.0, 3.0, "L_i, D_i (64 floats)")
    fs.text(ax, 67.5, 73.0, "2-stage ring of 64-query tiles: tile i+1 lands\nwhile tile i is "
            "multiplied; thread 0 refills a stage\nafter the block's barrier at the end of "
            "its tile", size=6.2, va="center", linespacing=1.25)
    smem_tile(ax, 116.5, 79.6, 15.0, 7.0, "dSᵀ 128 × 64\n(bwd_v2)", dashed=True)
    smem_tile(ax, 116.5, 68.2, 15.0, 9.0, "dQ staging, fp32\n2 × 64 rows × 72\n(+32 B: no "
              "bank\nconflicts; bwd_v2)", dashed=True)

    # TMA arrows (global -> shared), plain loads for L and D.
    fs.arrow(ax, g["K"], (29.0, 84.5), color=fs.BLUE, lw=1.2, rad=-0.1)
    fs.arrow(ax, g["V"], (55.0, 86.6), color=fs.BLUE, lw=1.2, rad=-0.3)
    fs.arrow(ax, g["Q"], (28.2, 75.5), color=fs.BLUE, lw=1.2, rad=-0.1)
    fs.arrow(ax, g["dO"], (28.2, 73.5), color=fs.BLUE, lw=1.2, rad=0.05)
    fs.arrow(ax, g["L"], (29.0, 69.3), color=fs.GREY, lw=0.9, ls="--")
    fs.text(ax, 21.2, 91.6, "TMA", size=7, color=fs.BLUE, weight="bold")
    fs.text(ax, 21.2, 80.6, "TMA", size=7, color=fs.BLUE, weight="bold")
    fs.text(ax, 20.8, 66.6, "ld (wg 0)", size=6.2, color="#666666")

    # The products, one row each: formula, unit, A, B, result.
    cols = ((27.0, 31.0, "per tile i (64 queries), per warpgroup"), (58.5, 13.0, "instruction"),
            (72.0, 19.5, "A from"), (92.0, 19.5, "B from"), (112.0, 20.0, "result in"))
    hy = 62.2
    for x, w, head in cols:
        fs.text(ax, x + 0.4, hy, head, size=7.0, weight="bold")
    rows = (
        (RECOMPUTE, "Sᵀ = K_j Q_iᵀ", "wgmma_ss", (SMEM, "K_j (K-major)"),
         (SMEM, "Q_i (K-major)"), (REG, "Sᵀ 64×64 fp32: 32")),
        (GRADIENT, "dPᵀ = V_j dO_iᵀ", "wgmma_ss", (SMEM, "V_j (K-major)"),
         (SMEM, "dO_i (K-major)"), (REG, "dPᵀ 64×64 fp32: 32")),
        (RECOMPUTE, "Pᵀ = exp2(Sᵀ·s·log₂e − L_i·log₂e)", "CUDA cores", (REG, "Sᵀ"),
         (SMEM, "L_i (per column)"), (REG, "Pᵀ as 16-bit A frags")),
        (GRADIENT, "dV_j += Pᵀ dO_i", "wgmma_rs", (REG, "Pᵀ (registers)"),
         (SMEM, "dO_i (MN-major)"), (REG, "dV 64×d fp32, all loop")),
        (GRADIENT, "dSᵀ = Pᵀ ∘ (dPᵀ − D_i)", "CUDA cores", (REG, "Pᵀ, dPᵀ"),
         (SMEM, "D_i (per column)"), (REG, "dSᵀ as 16-bit A frags")),
        (GRADIENT, "dK_j += dSᵀ Q_i", "wgmma_rs", (REG, "dSᵀ (registers)"),
         (SMEM, "Q_i (MN-major)"), (REG, "dK 64×d fp32, all loop")),
        (DQ, "bwd_v2: dQ_t = dS K_j", "wgmma_ss", (SMEM, "dS: the dSᵀ tile\nread transposed"),
         (SMEM, "K_j (MN-major)"), (REG, "dQ_t 64×64 fp32 → staging\n→ reduce-add (right)")),
    )
    rh, gap = 5.0, 1.05
    for k, (fill, formula, unit, a, b, res) in enumerate(rows):
        y = hy - 2.4 - (k + 1) * (rh + gap) + gap
        cell(ax, 27.0, y, 31.0, rh, fill, formula, size=7.0, family=MONO)
        cell(ax, 58.5, y, 13.0, rh, "#FFFFFF" if unit == "CUDA cores" else fs.tint(fs.GREEN, 0.25),
             unit, size=6.8, family=MONO if unit != "CUDA cores" else None)
        cell(ax, 72.0, y, 19.5, rh, a[0], a[1], size=6.4, linespacing=1.1)
        cell(ax, 92.0, y, 19.5, rh, b[0], b[1], size=6.4, linespacing=1.1)
        cell(ax, 112.0, y, 20.0, rh, res[0], res[1], size=6.2, linespacing=1.1)
        if k == 6:
            fs.rect(ax, 26.4, y - 0.6, 106.2, rh + 1.2, fc="none", ec=fs.PURPLE, lw=0.9, ls="--")
    # The loop back, left of the rows.
    top = hy - 2.4 - (rh + gap) + gap + rh / 2
    bottom = hy - 2.4 - 6 * (rh + gap) + gap + rh / 2
    fs.arrow(ax, (25.6, bottom), (25.6, top), lw=0.9, ls="--", color="#666666")
    fs.arrow(ax, (25.6, top), (27.0, top), lw=0.9, color="#666666")
    fs.text(ax, 27.0, 12.4, "wgmma_ss: A and B from shared memory through descriptors (no "
            "ldmatrix); wgmma_rs: A from registers. Sᵀ, not S, so that the accumulator of Sᵀ\n"
            "(rows = keys) is already the A layout of dV += Pᵀ dO: Pᵀ and dSᵀ go from the "
            "accumulator to A fragments without shared memory (mma.sync did the same, 06/v2).",
            size=6.4, va="center", linespacing=1.3)
    fs.text(ax, 27.0, 7.4, "After the loop: dK·s and dV stored by predicated stores, each element "
            "by one thread: deterministic.", size=6.6)
    fs.arrow(ax, (kx, 8.0), g["dK"], color=fs.VERMILLION, lw=1.0, rad=0.15)
    fs.arrow(ax, (kx, 7.2), g["dV"], color=fs.VERMILLION, lw=1.0, rad=-0.1)

    # ---- dQ, right: two ways.
    rx, rw = 137.0, 33.0
    fs.rounded(ax, rx, 61.0, rw, 35.0, fc=fs.tint(fs.PURPLE, 0.1), ec="#777777")
    fs.text(ax, rx + 1.5, 93.2, "07/bwd_v1: a dQ kernel", size=8.4, weight="bold")
    fs.text(ax, rx + 1.5, 90.4, "One block per 128 queries (Q tile i).\nQ_i, dO_i by TMA once; "
            "K, V\nstream in 64-key tiles, 2-stage ring.\nPer tile, per warpgroup:\n"
            "  S = Q Kᵀ, dP = dO Vᵀ   wgmma_ss\n  P, dS in registers\n"
            "  dQ += dS K   wgmma_rs, B = K\n               (MN-major)\n"
            "dQ·s stored once per element:\ndeterministic. 7 products per\n"
            "(query tile, key tile) pair:\nS and dP twice.", size=6.5, va="top",
            linespacing=1.3)
    fs.rounded(ax, rx, 27.0, rw, 31.0, fc=fs.tint(fs.PURPLE, 0.1), ec=fs.PURPLE, ls="--")
    fs.text(ax, rx + 1.5, 55.4, "07/bwd_v2: in the dK/dV kernel", size=8.4, weight="bold")
    fs.text(ax, rx + 1.5, 52.6, "dSᵀ → shared memory, named barrier;\ndQ_t = dS K_j (dashed row);"
            "\ndQ_t → fp32 staging rows;\ncp.reduce.async.bulk .add.f32:\nthe TMA engine adds each "
            "row\ninto the fp32 workspace (in L2).\nThen a convert kernel: dQ = s · acc.\n"
            "5 products per pair; the order of\nthe adds varies: not deterministic\n"
            "(bwd_v3 fixes the order).", size=6.5, va="top", linespacing=1.3)
    dq = tensor(ax, rx + 7.5, 14.0, "dQ [N_q × d]", OUTPUT)
    tensor(ax, rx + 7.5, 21.0, "fp32 workspace", fs.tint(fs.PURPLE, 0.3))
    fs.arrow(ax, (rx + 16.5, 27.0), (rx + 16.5, 24.4), color=fs.PURPLE, lw=1.1)
    fs.arrow(ax, (rx + 16.5, 21.0), (rx + 16.5, 17.4), color=fs.VERMILLION, lw=1.0)
    fs.text(ax, rx + 17.5, 19.2, "convert", size=6.0)
    fs.arrow(ax, (rx + 31.5, 61.0), (rx + 31.5, dq[1]), color=fs.VERMILLION, lw=1.0)
    fs.arrow(ax, (rx + 31.5, dq[1]), dq, color=fs.VERMILLION, lw=1.0)
    fs.arrow(ax, (132.6, 24.8), (rx, 40.0), color=fs.PURPLE, lw=1.2, rad=-0.2)

    # ---- Legend.
    fs.swatch(ax, 2.0, 45.0, INPUT, "global memory", size=6.6)
    fs.swatch(ax, 2.0, 42.0, SMEM, "shared memory", size=6.6)
    fs.swatch(ax, 2.0, 39.0, REG, "registers", size=6.6)
    fs.swatch(ax, 2.0, 34.0, RECOMPUTE, "recomputed (S, P)", size=6.6)
    fs.swatch(ax, 2.0, 31.0, GRADIENT, "gradient products", size=6.6)
    fs.swatch(ax, 2.0, 28.0, DQ, "dQ", size=6.6)
    fs.swatch(ax, 2.0, 25.0, fs.tint(fs.GREEN, 0.25), "tensor cores (wgmma)", size=6.6)
    fs.save(fig, out_dir, "fig_hopper_backward_dataflow")


if __name__ == "__main__":
    fs.run_alone(main)
