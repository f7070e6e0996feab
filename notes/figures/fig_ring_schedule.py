#!/usr/bin/env python3
"""fig_ring_schedule.svg: chapter 07's producer/consumer ring (07/v2_warp_specialized and the rungs
after it) with its mbarrier phases, as the code writes it: a schematic, not a measurement.

Top left: the roles. One producer thread fills a ring of kStages stages (drawn with 4, D 64's
count; D 128 and 256 have 2), each holding one K tile and one V tile, guarded by two mbarriers:
full[s] (initialised with count 1: the producer's arrive.expect_tx, then completed by the bytes
the TMA writes) and empty[s] (count 256: every thread of both consumer warpgroups arrives once
when its wgmmas are done with the stage).
Top right: tile j uses stage j % kStages for the (j / kStages)-th time; the parity a consumer
waits for on full[s] is (j / kStages) & 1, the producer's on empty[s] before refilling is
(j / kStages - 1) & 1 (no wait on the first use). Parities alternate once per wrap of the ring.
Bottom: stage 0 over three uses (tiles 0, 4, 8): each barrier's phase, who completes it, and
whose wait it releases. An mbarrier starts in phase 0; when a phase completes the phase bit flips,
and a wait for parity P returns once the phase of parity P has completed.
"""
import figstyle as fs

STAGES = 4
TILES = 12
PAR_FILL = {0: fs.tint(fs.SKY, 0.45), 1: fs.tint(fs.ORANGE, 0.5)}
FULL_C = fs.BLUE
EMPTY_C = fs.VERMILLION
TILE_K = fs.tint(fs.GREEN, 0.45)
TILE_V = fs.tint(fs.PURPLE, 0.45)


def roles(ax):
    """The producer, the ring and the two consumers; the numbered arrows are the steps below."""
    x0, y_stage, sw, sh, gap = 6.0, 64.0, 13.0, 13.0, 3.0
    fs.rounded(ax, 14.0, 83.0, 48.0, 6.0, fc=fs.tint(fs.GREY, 0.3))
    fs.text(ax, 38.0, 86.0, "producer warpgroup (one thread issues; setmaxnreg 24)", size=7.2,
            ha="center", weight="bold")
    for s in range(STAGES):
        x = x0 + s * (sw + gap)
        fs.rect(ax, x, y_stage, sw, sh, fc=fs.SHARED_FILL, ec=fs.INK, lw=0.7)
        fs.rect(ax, x + 1.0, y_stage + 7.0, sw - 2.0, 4.6, fc=TILE_K, ec=fs.INK, lw=0.4)
        fs.text(ax, x + sw / 2, y_stage + 9.3, "K tile", size=6.4, ha="center")
        fs.rect(ax, x + 1.0, y_stage + 1.6, sw - 2.0, 4.6, fc=TILE_V, ec=fs.INK, lw=0.4)
        fs.text(ax, x + sw / 2, y_stage + 3.9, "V tile", size=6.4, ha="center")
        fs.rounded(ax, x + 0.2, y_stage - 5.2, 6.0, 3.6, fc="white", ec=FULL_C, lw=0.9, pad=0.8)
        fs.text(ax, x + 3.2, y_stage - 3.4, "full[%d]" % s, size=5.8, ha="center", color=FULL_C)
        fs.rounded(ax, x + 6.8, y_stage - 5.2, 6.0, 3.6, fc="white", ec=EMPTY_C, lw=0.9, pad=0.8)
        fs.text(ax, x + 9.8, y_stage - 3.4, "empty[%d]" % s, size=5.8, ha="center",
                color=EMPTY_C)
        fs.text(ax, x + sw / 2, y_stage - 7.2, "stage %d" % s, size=6.8, ha="center")
    for c in range(2):
        fs.rounded(ax, x0 + 2 + c * 34, 46.0, 28, 5.4, fc=fs.tint(fs.BLUE, 0.18))
        fs.text(ax, x0 + 16 + c * 34, 48.7, "consumer %d (64 rows, 240 regs)" % c, size=7,
                ha="center", weight="bold")

    def step(n, x, y, colour):
        fs.text(ax, x, y, n, size=7.6, ha="center", weight="bold", color=colour,
                bbox=dict(boxstyle="circle,pad=0.15", fc="white", ec=colour, lw=0.7))

    s1 = x0 + sw + gap + sw / 2
    fs.arrow(ax, (s1, 83.0), (s1, y_stage + sh + 0.3), color=FULL_C, lw=0.9)
    step("1", s1 + 2.6, 80.2, FULL_C)
    fs.arrow(ax, (x0 + 3.2, y_stage - 5.4), (x0 + 8.0, 51.6), color=FULL_C, lw=0.9)
    step("2", x0 + 3.0, 55.2, FULL_C)
    s3 = x0 + 3 * (sw + gap)
    fs.arrow(ax, (x0 + 50.0, 51.6), (s3 + 9.8, y_stage - 5.4), color=EMPTY_C, lw=0.9)
    step("3", x0 + 57.6, 55.0, EMPTY_C)
    fs.arrow(ax, (s3 + 12.9, y_stage - 3.4), (62.0, 86.0), color=EMPTY_C, lw=0.9, rad=0.45)
    step("4", 71.5, 72.0, EMPTY_C)
    lines = [
        (FULL_C, "1", "producer: arrive.expect_tx(full[s], bytes of K + V), then TMA copies K_j, "
         "V_j into stage s = j % kStages; count 1 + the bytes: their landing completes the phase"),
        (FULL_C, "2", "consumers: wait(full[s], (j / kStages) & 1) returns once that phase has "
         "completed; both read the same stage"),
        (EMPTY_C, "3", "consumers: S = Q K_jᵀ, softmax, O += P V_j; then each of their 256 "
         "threads arrives on empty[s] (count 256)"),
        (EMPTY_C, "4", "producer: wait(empty[s], (j / kStages − 1) & 1) before it refills stage "
         "s with tile j (none on a stage's first use)"),
    ]
    y = 41.0
    for colour, n, line in lines:
        step(n, 3.4, y, colour)
        fs.text(ax, 5.6, y, line, size=6.2)
        y -= 3.4


def parity_table(ax):
    x0, y0, cw, rh = 90.0, 64.0, 4.6, 4.2
    rows = [
        ("tile j", lambda j: "%d" % j, None),
        ("stage s = j % 4", lambda j: "%d" % (j % STAGES), None),
        ("use u = j / 4", lambda j: "%d" % (j // STAGES), None),
        ("consumers wait full[s]\nfor parity u & 1", lambda j: "%d" % ((j // STAGES) & 1),
         lambda j: (j // STAGES) & 1),
        ("producer waits empty[s]\nfor parity (u − 1) & 1",
         lambda j: "—" if j < STAGES else "%d" % ((j // STAGES - 1) & 1),
         lambda j: None if j < STAGES else (j // STAGES - 1) & 1),
    ]
    fs.text(ax, x0 - 12, y0 + len(rows) * rh + 3.0, "Which phase each wait is for (kStages = 4)",
            size=8.2, weight="bold")
    for r, (label, val, par) in enumerate(rows):
        y = y0 + (len(rows) - 1 - r) * rh
        fs.text(ax, x0 - 1.0, y + rh / 2, label, size=6.0, ha="right")
        for j in range(TILES):
            p = par(j) if par else None
            fc = PAR_FILL[p] if p is not None else ("#F3F3F3" if r == 0 else "white")
            fs.rect(ax, x0 + j * cw, y, cw, rh, fc=fc, ec="#999999", lw=0.4)
            fs.text(ax, x0 + (j + 0.5) * cw, y + rh / 2, val(j), size=6.4, ha="center",
                    weight="bold" if r == 0 else "normal")
    fs.swatch(ax, x0, y0 - 4.4, PAR_FILL[0], "parity 0", size=6.4)
    fs.swatch(ax, x0 + 16, y0 - 4.4, PAR_FILL[1], "parity 1", size=6.4)
    fs.text(ax, x0 - 12, y0 - 6.6, "The parity flips once per wrap of the ring, not per tile. "
            "A wait for parity P returns\nwhen the barrier's phase of parity P has completed: "
            "a parity one wrap off returns\non a stale tile or waits forever (the exercise's "
            "TODO kv-ring-parity). v3–v5 give\neach stage a K pair and a V pair of barriers, "
            "with the same rule.", size=6.0, va="top", color="#333333")


def stage_timeline(ax):
    """Stage 0 over tiles 0, 4, 8, from a small model: the producer issues a tile's loads as soon
    as its stage is free, the bytes land LAND units later, a consumer pair takes COMPUTE units a
    tile (one stage after the other): the steady state is compute-bound, as measured."""
    land, compute = 6.0, 10.0
    issue, landed, start, end = {}, {}, {}, {}
    for j in range(TILES):
        free = end[j - STAGES] if j >= STAGES else 0.0
        issue[j] = max(issue.get(j - 1, 0.0), free)
        landed[j] = issue[j] + land
        start[j] = max(end.get(j - 1, 0.0), landed[j])
        end[j] = start[j] + compute
    x0, scale, ytop, lh = 26.0, 1.18, 24.0, 4.4
    fs.text(ax, 3.0, ytop + 2.8, "Stage 0 over its first three uses (tiles 0, 4, 8): each "
            "barrier's phase, who completes it, whose wait it releases (a model: loads land "
            "%g units after issue, a tile takes %g)" % (land, compute), size=7.8, weight="bold")
    lanes = ["producer thread", "full[0]'s phase", "consumers 0 and 1", "empty[0]'s phase"]
    t_end = end[8] + 4.0

    def lane_y(i):
        return ytop - (i + 1) * lh

    for i, name in enumerate(lanes):
        colour = FULL_C if "full" in name else (EMPTY_C if "empty" in name else fs.INK)
        fs.text(ax, x0 - 1.0, lane_y(i) + lh / 2, name, size=6.6, ha="right", color=colour)
        fs.rect(ax, x0, lane_y(i) + 0.5, t_end * scale, lh - 1.0, fc="#FAFAFA", ec="#DDDDDD",
                lw=0.3)

    def seg(i, t0, t1, fc, label, ec=fs.INK):
        y = lane_y(i) + 0.7
        fs.rect(ax, x0 + t0 * scale, y, (t1 - t0) * scale, lh - 1.4, fc=fc, ec=ec, lw=0.4)
        if label:
            fs.text(ax, x0 + (t0 + t1) / 2 * scale, y + (lh - 1.4) / 2, label, size=5.4,
                    ha="center")

    def release(t, i_from, i_to, colour, dashed=False):
        ax.plot([x0 + t * scale] * 2, [lane_y(i_from) + lh - 0.6, lane_y(i_to) + 0.6],
                color=colour, lw=0.9, ls=(0, (2, 1.5)) if dashed else "-")

    uses = (0, 4, 8)
    # full[0]: its phase u completes when the bytes of tile 4u land
    t = 0.0
    for u, j in enumerate(uses):
        seg(1, t, landed[j], PAR_FILL[u & 1], "phase %d" % (u & 1), ec=FULL_C)
        t = landed[j]
    seg(1, t, t_end, PAR_FILL[len(uses) & 1], "phase %d" % (len(uses) & 1), ec=FULL_C)
    # empty[0]: its phase u completes at the 256th arrival, when tile 4u is done
    t = 0.0
    for u, j in enumerate(uses):
        seg(3, t, end[j], PAR_FILL[u & 1], "phase %d" % (u & 1), ec=EMPTY_C)
        t = end[j]
    seg(3, t, t_end, PAR_FILL[len(uses) & 1], "", ec=EMPTY_C)
    for u, j in enumerate(uses):
        par = u & 1
        if u > 0:
            prev = uses[u - 1]
            wait_from = issue[j - 1] + 3.0  # after issuing the tile before, into stage 3
            seg(0, wait_from, end[prev], fs.tint(fs.GREY, 0.45), "wait(empty[0], %d)" % (1 - par))
            release(end[prev], 3, 0, EMPTY_C, dashed=True)
        seg(0, issue[j], issue[j] + 3.0, fs.tint(fs.GREY, 0.15), "K%d V%d" % (j, j))
        seg(2, start[j], end[j], fs.tint(fs.BLUE, 0.3), "tile %d" % j)
        release(landed[j], 1, 2, FULL_C)
        fs.text(ax, x0 + landed[j] * scale + 0.4, lane_y(1) + lh - 0.2,
                "bytes of tile %d landed" % j, size=5.0, va="bottom", color=FULL_C)
        last = u + 1 == len(uses)
        fs.text(ax, x0 + end[j] * scale + (-0.4 if last else 0.4), lane_y(3) - 0.1,
                "256 arrivals: done with tile %d" % j, size=5.0, va="top", color=EMPTY_C,
                ha="right" if last else "left")
        if u + 1 < len(uses):
            seg(2, end[j], start[j + STAGES], "#EFEFEF",
                "tiles %d–%d (stages 1–3)" % (j + 1, j + STAGES - 1))
    fs.text(ax, x0, 1.2, "Consumers wait(full[0], 0) until tile 0 lands; later their waits "
            "return at once (tile 4 landed long before): the producer runs up to kStages tiles "
            "ahead and waits on empty[] instead. Nothing else orders the roles.", size=6.0,
            color="#333333")


def main(out_dir):
    fig, ax = fs.canvas(150, 100)
    fs.text(ax, 75, 97.2, "The producer/consumer ring of 07/v2–v5: K/V stages, full and empty "
            "mbarriers, and the phase each wait is for", size=11, ha="center", weight="bold")
    fs.text(ax, 75, 93.8, "A schematic of the code (07/v2_warp_specialized.cu), not a "
            "measurement",
            size=7.4, ha="center", color="#444444")
    roles(ax)
    parity_table(ax)
    stage_timeline(ax)
    fs.save(fig, out_dir, "fig_ring_schedule")


if __name__ == "__main__":
    fs.run_alone(main)
