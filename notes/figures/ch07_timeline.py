#!/usr/bin/env python3
"""ch07_timeline.svg: what each warpgroup of chapter 07's forward rungs v1-v4 did, and when,
measured on the GPU (not drawn by hand).

The program ch07_timeline (chapters/07_flash_hopper/timeline/, built with -DFA_CH07_TIMELINE=ON;
bash bench/device_run.sh timeline07) records, for the first few thread blocks of one launch of
each rung at bf16 D 128 N 8192 (B 2, H 16), the start and end of every phase of every warpgroup
(its leader thread read the SM's clock; chapters/07_flash_hopper/ch07_timeline.h). Its CSV,
committed under notes/measured/<run>/ch07_timeline.csv, is what this script draws: one panel per
rung, one row per warpgroup of block 0 and of the blocks that shared its SM (v1 fits three on an
SM at D 64, one at D 128; where block 0 was alone, block 1 is drawn beside it), over the same few
microseconds of the steady state (from the start of K/V tile FIRST_TILE of block 0's first
consumer). Each row has two lanes:

  upper  the tensor cores: a wgmma group of this warpgroup from its issue to the return of the
         wait for it (QK^T above, PV below: v4 has both in flight at once; v3's one group of
         both is drawn above);
  lower  what the warpgroup's threads do meanwhile: softmax, waiting for K/V (mbarrier), for the
         ping-pong turn (named barrier), at v1's __syncthreads, the producer's wait for a free slot.

A gap in the lower lane under a bar in the upper lane is a warpgroup blocked in wgmma.wait. The
panel's title gives the share of the window in which some warpgroup on block 0's SM (of the blocks
drawn) had a wgmma group in flight: an upper bound of the tensor pipe's busy time there (a group
may finish before its wait is reached).

Until the GPU run has committed the CSV, the script says so and draws nothing. A CSV of the
program's D 64 run (ch07_timeline_d64.csv beside it) is drawn as ch07_timeline_d64.svg.

    python3 notes/figures/ch07_timeline.py                       # the committed CSV(s) -> here
    python3 notes/figures/ch07_timeline.py --csv F.csv --out DIR # any CSV of the program
"""
import argparse
import csv
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import figstyle as fs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
MEASURED = os.path.join(ROOT, "notes", "measured")
# (CSV name under notes/measured/<run>/, SVG name here): the newest run that has the CSV is drawn.
FIGURES = [("ch07_timeline.csv", "ch07_timeline"), ("ch07_timeline_d64.csv", "ch07_timeline_d64")]

RUNGS = ["07/v1_tma_wgmma", "07/v2_warp_specialized", "07/v3_pingpong", "07/v4_intra_overlap"]
SHOW_BLOCKS = 3  # at most: block 0 and those beside it on its SM (else blocks 0 and 1)
FIRST_TILE = 8  # the window starts where block 0's first consumer starts this K/V tile
WINDOW_US = 8.0  # and is this long

TENSOR = {"qk": fs.BLUE, "pv": fs.SKY, "qk_pv": fs.PURPLE}
WARPS = {
    "softmax": fs.ORANGE,
    "wait_kv": fs.GREY,
    "wait_q": "#666666",
    "wait_turn": fs.VERMILLION,
    "sync": fs.YELLOW,
    "producer_wait": fs.tint(fs.GREY, 0.45),
    "epilogue": fs.GREEN,
}
LABELS = {
    "qk": "S = Q Kᵀ (wgmma issued → waited for)",
    "pv": "O += P V (wgmma issued → waited for)",
    "qk_pv": "S and P V in one group (v3)",
    "softmax": "softmax (mask, max, exp2, sums, rescale, pack P)",
    "wait_kv": "waiting for K/V (mbarrier)",
    "wait_q": "waiting for Q",
    "wait_turn": "waiting for the turn (named barrier)",
    "sync": "__syncthreads (v1)",
    "producer_wait": "producer: waiting for a free slot",
    "epilogue": "epilogue (O, L stored)",
}


def newest(csv_name):
    """notes/measured/<run>/csv_name of the newest run (run folders sort by date), or None."""
    found = sorted(glob.glob(os.path.join(MEASURED, "*", csv_name)))
    return found[-1] if found else None


def read(path):
    """(comment lines, rows): rows as dicts with numbers converted."""
    comments, lines = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            (comments if line.startswith("#") else lines).append(line)
    rows = []
    for r in csv.DictReader(lines):
        rows.append({
            "kernel": r["kernel"], "block": int(r["block"]), "warpgroup": int(r["warpgroup"]),
            "phase": r["phase"], "t0": float(r["t_start_ns"]) / 1000.0,
            "t1": float(r["t_end_ns"]) / 1000.0, "tile": int(r["tile"]), "sm": int(r["sm"]),
        })
    return [c[1:].strip() for c in comments], rows


def window_start(rows):
    """Where the window opens: block 0's first consumer (the lowest warpgroup that computes)
    starting K/V tile FIRST_TILE, or its first event if it has fewer tiles."""
    b0 = [r for r in rows if r["block"] == 0 and r["phase"] != "producer_wait"]
    if not b0:
        return min(r["t0"] for r in rows)
    wg = min(r["warpgroup"] for r in b0 if r["phase"] in TENSOR)
    mine = [r for r in b0 if r["warpgroup"] == wg]
    starts = ("wait_kv", "qk", "qk_pv")
    at = [r["t0"] for r in mine if r["tile"] == FIRST_TILE and r["phase"] in starts]
    return min(at) if at else min(r["t0"] for r in mine)


def busy_share(rows, t0, t1, blocks):
    """Share of [t0, t1] covered by the union of the tensor-lane intervals of these blocks."""
    spans = sorted((max(r["t0"], t0), min(r["t1"], t1)) for r in rows if r["block"] in blocks
                   and r["phase"] in TENSOR and r["t1"] > t0 and r["t0"] < t1)
    covered, end = 0.0, t0
    for a, b in spans:
        if b <= end:
            continue
        covered += b - max(a, end)
        end = b
    return covered / (t1 - t0)


def shown_blocks(rows):
    """Block 0 and the blocks that ran on its SM at the same time (v1 at D 64 fits three); when it
    had its SM to itself, blocks 0 and 1 (on two SMs)."""
    span = {}
    for r in rows:
        t0, t1, sm = span.get(r["block"], (r["t0"], r["t1"], r["sm"]))
        span[r["block"]] = (min(t0, r["t0"]), max(t1, r["t1"]), sm)
    if 0 not in span:
        return sorted(span)[:2]
    a0, a1, sm0 = span[0]
    beside = [b for b, (b0, b1, sm) in sorted(span.items())
              if b != 0 and sm == sm0 and b0 < a1 and a0 < b1]
    return [0] + beside[:SHOW_BLOCKS - 1] if beside else [b for b in sorted(span) if b <= 1]


def role(kernel, wg):
    if kernel == RUNGS[0]:
        return "warpgroup %d" % wg
    return "producer" if wg == 0 else "consumer %d" % (wg - 1)


def draw(path, out_dir, name):
    import matplotlib.pyplot as plt

    comments, rows = read(path)
    kernels = [k for k in RUNGS if any(r["kernel"] == k for r in rows)]
    title = comments[0].split(":", 1)[-1].strip() if comments else os.path.basename(path)
    timing = {c.split(":", 1)[0]: c.split(":", 1)[1].split(",")[0].strip() for c in comments[1:]
              if ":" in c}

    # Rows per panel: (block, warpgroup) of the blocks shown.
    slots, sm_of = {}, {}
    for k in kernels:
        mine = [r for r in rows if r["kernel"] == k]
        shown = shown_blocks(mine)
        slots[k] = sorted({(r["block"], r["warpgroup"]) for r in mine if r["block"] in shown})
        sm_of.update({(k, r["block"]): r["sm"] for r in mine})
    row_h, gap, top, bottom, legend_h = 0.34, 0.55, 0.45, 0.55, 1.25
    height = top + bottom + legend_h + sum(len(s) * row_h + gap for s in slots.values())
    width = 11.0
    fig = plt.figure(figsize=(width, height))
    heading = "Chapter 07 forward, measured: %s" % title.replace(", blocks", ",\nblocks", 1)
    fig.text(0.01, 1 - 0.18 / height, heading, fontsize=10, va="top")
    y = height - top
    for k in kernels:
        mine = [r for r in rows if r["kernel"] == k]
        t0 = window_start(mine)
        t1 = t0 + WINDOW_US
        h = len(slots[k]) * row_h
        y -= h + gap
        ax = fig.add_axes([1.85 / width, y / height, (width - 2.15) / width, h / height])
        ax.set_xlim(0, WINDOW_US)
        ax.set_ylim(len(slots[k]), 0)
        ax.set_yticks([i + 0.5 for i in range(len(slots[k]))])
        ax.set_yticklabels(["block %d (SM %d) %s" % (b, sm_of[(k, b)], role(k, w))
                            for b, w in slots[k]], fontsize=7)
        ax.tick_params(axis="y", length=0)
        ax.tick_params(axis="x", labelsize=7)
        for i in range(1, len(slots[k])):
            ax.axhline(i, color="#DDDDDD", lw=0.5)
        for r in mine:
            key = (r["block"], r["warpgroup"])
            if key not in slots[k] or r["t1"] < t0 or r["t0"] > t1:
                continue
            i = slots[k].index(key)
            x, w = r["t0"] - t0, max(r["t1"] - r["t0"], 0.004)
            if r["phase"] in TENSOR:  # P V below Q K^T: in v4 the two groups are in flight together
                lane = 0.27 if r["phase"] == "pv" else 0.06
                ax.add_patch(plt.Rectangle((x, i + lane), w, 0.19, color=TENSOR[r["phase"]], lw=0))
            else:
                ax.add_patch(plt.Rectangle((x, i + 0.52), w, 0.40,
                                           color=WARPS.get(r["phase"], "black"), lw=0))
        on_sm0 = {b for b, _ in slots[k] if sm_of[(k, b)] == sm_of[(k, 0)]}
        share = busy_share(mine, t0, t1, on_sm0)
        ax.set_title("%s   (%s; on block 0's SM a wgmma group is in flight %.0f%% of this window)"
                     % (k, timing.get(k, "").replace(" recording", " for the launch"), 100 * share),
                     fontsize=8.5, loc="left", pad=3)
        if k == kernels[-1]:
            ax.set_xlabel("µs from block 0's first consumer starting K/V tile %d" % FIRST_TILE,
                          fontsize=8)
    # Legend: tensor lane, then the threads' lane.
    lx, ly = 0.01, (legend_h - 0.25) / height
    entries = [(c, LABELS[p]) for p, c in list(TENSOR.items()) + list(WARPS.items())]
    for n, (colour, label) in enumerate(entries):
        col, line = n % 3, n // 3
        x = lx + col * 0.33
        yy = ly - line * 0.22 / height
        fig.patches.append(plt.Rectangle((x, yy), 0.012, 0.12 / height, color=colour,
                                         transform=fig.transFigure, figure=fig))
        fig.text(x + 0.017, yy + 0.06 / height, label, fontsize=7, va="center")
    fs.save(fig, out_dir, name)
    return os.path.join(out_dir, name + ".svg")


def main(out_dir, csv_path=None):
    """Draw every figure whose CSV exists (or the one CSV given) into out_dir."""
    if csv_path:
        jobs = [(os.path.basename(csv_path), csv_path,
                 os.path.splitext(os.path.basename(csv_path))[0])]
    else:
        jobs = [(c, newest(c), svg) for c, svg in FIGURES]
    for csv_name, path, svg in jobs:
        if path is None or not os.path.exists(path):
            print("ch07_timeline.py: no notes/measured/*/%s yet (the GPU run writes it: bash "
                  "bench/device_run.sh timeline07); %s.svg not drawn" % (csv_name, svg))
            continue
        drawn = draw(path, out_dir, svg)
        print("ch07_timeline.py: %s -> %s" % (os.path.relpath(path, ROOT),
                                               os.path.relpath(drawn, ROOT)))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", help="a CSV of ch07_timeline (default: the newest committed ones)")
    ap.add_argument("--out", default=HERE, help="folder of the SVG (default: notes/figures)")
    args = ap.parse_args()
    fs.apply()
    main(args.out, args.csv)
