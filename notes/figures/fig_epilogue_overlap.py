#!/usr/bin/env python3
"""fig_epilogue_overlap.svg: one consumer warpgroup of chapter 03's persistent GEMM at a tile
boundary, before (t17_conflict_free_staging) and after (t19_epilogue_under_mainloop) the next
tile's first k-steps are issued under the epilogue (chapters/03_tiled_matmul/tuning/).

Two lanes a kernel: what the warpgroup's threads do (wgmma issue, waits, C's stores into the
staging buffers) and what the SM's tensor cores do. The durations are drawn to scale from the
time split measured on an H100 (tuning/README.md, "t18, t19"): a k-step of both halves ~0.66 us,
the epilogue ~2.5 us of shared-memory writes and waits, half of it for each half of C; they are
an illustration of the schedule, not a trace.
"""
import figstyle as fs

K_STEP = 0.66  # us, both halves of C (m64n256 or two m64n128)
HALF_STEP = K_STEP / 2
STORE_HALF = 1.25  # us, one half of C into the staging buffers, with the drain waits
PRE_STEPS = 4

MMA = fs.tint(fs.BLUE, 0.55)
MMA_LO = fs.tint(fs.SKY, 0.6)
MMA_HI = fs.tint(fs.BLUE, 0.35)
STORE = fs.tint(fs.ORANGE, 0.6)
IDLE = "#F3F3F3"


def bar(ax, x0, scale, y, t0, t1, fill, label="", h=3.2):
    fs.rect(ax, x0 + t0 * scale, y, (t1 - t0) * scale, h, fc=fill, ec="#FFFFFF", lw=0.6)
    if label:
        fs.text(ax, x0 + (t0 + t1) / 2 * scale, y + h / 2, label, size=6.8, ha="center")


def t17(ax, x0, y, scale):
    """Last two k-steps of tile n, the epilogue, the first k-steps of tile n + 1."""
    t = 0.0
    for _ in range(2):
        bar(ax, x0, scale, y, t, t + K_STEP, MMA, "k-step")
        t += K_STEP
    end = t
    bar(ax, x0, scale, y, end, end + 2 * STORE_HALF, IDLE, "idle")
    bar(ax, x0, scale, y + 4.2, end, end + STORE_HALF, STORE, "store C[:, 0:128]")
    bar(ax, x0, scale, y + 4.2, end + STORE_HALF, end + 2 * STORE_HALF, STORE,
        "store C[:, 128:256]")
    t = end + 2 * STORE_HALF
    for i in range(4):
        bar(ax, x0, scale, y, t, t + K_STEP, MMA, "k%d" % i)
        t += K_STEP
    return t


def t19(ax, x0, y, scale):
    t = 0.0
    for _ in range(2):
        bar(ax, x0, scale, y, t, t + K_STEP, MMA, "k-step")
        t += K_STEP
    end = t
    bar(ax, x0, scale, y, end, end + STORE_HALF, IDLE, "idle")
    bar(ax, x0, scale, y + 4.2, end, end + STORE_HALF, STORE, "store C[:, 0:128]")
    t = end + STORE_HALF
    for i in range(PRE_STEPS):
        bar(ax, x0, scale, y, t, t + HALF_STEP, MMA_LO, "k%d lo" % i)
        t += HALF_STEP
    bar(ax, x0, scale, y + 4.2, end + STORE_HALF, end + 2 * STORE_HALF, STORE,
        "store C[:, 128:256]")
    t = max(t, end + 2 * STORE_HALF)
    for i in range(PRE_STEPS):
        bar(ax, x0, scale, y, t, t + HALF_STEP, MMA_HI, "k%d hi" % i)
        t += HALF_STEP
    return t


def main(out_dir):
    fig, ax = fs.canvas(150, 50)
    fs.text(ax, 75, 47.5, "A tile boundary of chapter 03's persistent GEMM: the next tile's first "
            "k-steps under the epilogue", size=10.5, ha="center", weight="bold")
    x0, scale = 30.0, 13.0
    rows = [("t17: store all of C, then multiply", t17, 29.0),
            ("t19: store one half, issue the next tile's\nk-steps 0-3 on it, store the other half",
             t19, 11.0)]
    ends = []
    for title, draw, y in rows:
        fs.text(ax, x0 - 1.0, y + 1.6, "tensor cores", size=7.5, ha="right")
        fs.text(ax, x0 - 1.0, y + 5.8, "threads", size=7.5, ha="right")
        fs.text(ax, x0, y + 10.3, title, size=8.5, weight="bold", va="bottom")
        ends.append(draw(ax, x0, y, scale))
    # Where the two schedules stand after the same work (k0-k3 of the next tile done).
    t17_done = 2 * K_STEP + 2 * STORE_HALF + PRE_STEPS * K_STEP
    t19_done = ends[1]
    for y, t in ((29.0, t17_done), (11.0, t19_done)):
        x = x0 + t * scale
        ax.plot([x, x], [y - 1.2, y + 8.6], color=fs.INK, lw=0.8, ls=":")
    fs.text(ax, x0 + t19_done * scale + 1.0, 9.2, "%.1f us earlier" % (t17_done - t19_done),
            size=7.5)
    for tick in range(0, int(t17_done) + 2):
        fs.text(ax, x0 + tick * scale, 6.3, "%d us" % tick, size=6.5, ha="center")
    fs.swatch(ax, x0, 1.5, MMA, "k-step, both halves", size=7)
    fs.swatch(ax, x0 + 28, 1.5, MMA_LO, "next tile, lo half", size=7)
    fs.swatch(ax, x0 + 54, 1.5, MMA_HI, "next tile, hi half", size=7)
    fs.swatch(ax, x0 + 80, 1.5, STORE, "C into staging (+ drain waits)", size=7)
    fs.save(fig, out_dir, "fig_epilogue_overlap")


if __name__ == "__main__":
    fs.run_alone(main)
