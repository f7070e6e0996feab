#!/usr/bin/env python3
"""fig_one_buffer.svg: chapter 06's D 256 backward with two Q/dO buffers (06/t14_d256_tiles) and
with one (06/t18_d256_one_buffer), as the code orders a block's work over three Q tiles: a
schematic from a small model, not a measurement.

Per Q tile the eight warps run S = Q Kᵀ and dP = dO Vᵀ, write P and dS (a barrier), dV += Pᵀ dO
and dK += dSᵀ Q, then dQ = dS K and its atomics; the top of the next tile waits for the copy of
its Q and dO (cp.async) and meets at a barrier. With two buffers the copy of tile i + 1 is issued
at the top of tile i and runs under all of its products. With one it may start only when every
warp is done reading tile i's Q and dO (after dK, behind one more barrier), and has dQ's time to
land; what it needs beyond that the next tile waits for. The units are the model's (COPY is an
assumption: the copy's latency has not been measured on its own).
"""
import figstyle as fs

TILES = 3
SDP, PDS, DVDK, DQ = 3.0, 1.0, 3.0, 3.0  # units of each phase of a Q tile
COPY = 4.0                               # a Q tile's and a dO tile's copy, issue to landing
PHASES = [("S, dP", SDP, fs.tint(fs.BLUE, 0.35)), ("P, dS", PDS, fs.tint(fs.SKY, 0.45)),
          ("dV, dK", DVDK, fs.tint(fs.GREEN, 0.45)), ("dQ + atomics", DQ, fs.tint(fs.ORANGE, 0.5))]
COPY_FILL = fs.tint(fs.PURPLE, 0.45)
WAIT_FILL = fs.tint(fs.VERMILLION, 0.35)


def schedule(one_buffer):
    """The start of each tile, each copy's (issue, landed), and the waits: (tiles, copies, waits)."""
    tiles, copies, waits = [], [], []
    t, landed = 0.0, 0.0  # tile 0's copy is the prologue's, landed at 0 here
    for i in range(TILES):
        if landed > t:
            waits.append((t, landed))
            t = landed
        tiles.append(t)
        if i + 1 < TILES:
            issue = t + (SDP + PDS + DVDK if one_buffer else 0.0)
            copies.append((issue, issue + COPY))
            landed = issue + COPY
        t += SDP + PDS + DVDK + DQ
    return tiles, copies, waits, t


def lane(ax, y, label, x0, scale, span):
    fs.text(ax, x0 - 1.0, y + 2.0, label, size=7.0, ha="right")
    fs.rect(ax, x0, y + 0.3, span * scale, 3.4, fc="#FAFAFA", ec="#DDDDDD", lw=0.3)


def seg(ax, x0, scale, y, t0, t1, fc, label, size=6.0):
    fs.rect(ax, x0 + t0 * scale, y + 0.6, (t1 - t0) * scale, 2.8, fc=fc, ec=fs.INK, lw=0.4)
    if label:
        fs.text(ax, x0 + (t0 + t1) / 2 * scale, y + 2.0, label, size=size, ha="center")


def panel(ax, y, one_buffer, title, x0=30.0, scale=2.6):
    tiles, copies, waits, end = schedule(one_buffer)
    span = 33.0
    fs.text(ax, 3.0, y + 11.5, title, size=8.6, weight="bold")
    lane(ax, y + 4.0, "eight warps", x0, scale, span)
    lane(ax, y, "copies (cp.async)", x0, scale, span)
    for i, t in enumerate(tiles):
        for name, w, fc in PHASES:
            seg(ax, x0, scale, y + 4.0, t, t + w, fc, name if i == 0 else "", size=5.4)
            t += w
        fs.text(ax, x0 + (tiles[i] + 0.2) * scale, y + 8.6, "Q tile %d" % i, size=6.2)
    for i, (a, b) in enumerate(copies):
        seg(ax, x0, scale, y, a, b, COPY_FILL, "Q, dO of tile %d" % (i + 1), size=5.6)
    for a, b in waits:
        seg(ax, x0, scale, y + 4.0, a, b, WAIT_FILL, "wait", size=5.6)
    total = sum(w for _, w, _ in PHASES) * TILES
    fs.text(ax, x0 + span * scale + 1.0, y + 4.0,
            "%.0f units\n(%.2f× the products)" % (end, end / total), size=6.6, va="center")


def main(out_dir):
    fig, ax = fs.canvas(150, 50)
    fs.text(ax, 75, 47.0, "Chapter 06 at D 256: two Q/dO buffers (t14, 211 KiB) or one (t18, "
            "147 KiB, which an A100's block can have)", size=10.5, ha="center", weight="bold")
    fs.text(ax, 75, 43.6, "A schematic from a model of one block's three Q tiles (phase lengths "
            "and the copy's %g units are the model's, not measured)" % COPY, size=7.2,
            ha="center", color="#444444")
    panel(ax, 26.0, False, "t14: the copy of tile i + 1 issued at the top of tile i")
    panel(ax, 8.0, True, "t18: issued after dK += dSᵀ Q of tile i (the last read of Q and dO)")
    fs.text(ax, 3.0, 3.4, "With one buffer the copy has only dQ's time to land: when it needs "
            "more, each next tile waits the difference. Where a block may have 211 KiB t14 "
            "stays the choice; t18 is meant for the GPUs where t14 does not fit.", size=6.6,
            color="#333333")
    fs.save(fig, out_dir, "fig_one_buffer")


if __name__ == "__main__":
    fs.run_alone(main)
