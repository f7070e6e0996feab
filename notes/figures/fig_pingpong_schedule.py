#!/usr/bin/env python3
"""fig_pingpong_schedule.svg: chapter 07's forward schedules as they were designed, drawn the way
the FlashAttention-3 paper draws its ping-pong and intra-warpgroup pipelining (GEMM0 = S = Q Kᵀ,
softmax, GEMM1 = O += P V, lanes over time): a model, not a trace. ch07_timeline.svg is the
measured counterpart.

Three panels, each with the SM's tensor cores above and the consumer warpgroups' threads below:
  (a) 07/v1: one warpgroup does S_j, its softmax and P_j V_j in sequence;
  (b) 07/v3, ping-pong: a consumer's turn is S_j and P_{j-1} V_{j-1} issued together; the turns
      alternate between the two consumers (named barriers), so one consumer's softmax runs under
      the other's turn;
  (c) 07/v4, ping-pong and intra-warpgroup overlap: the turn is committed as two groups, the
      softmax of S_j starts as soon as S_j is back while P_{j-1} V_{j-1} still runs; only the
      rescale of O and the packing of P_j wait for it.
Lengths are in clocks of one SM at D 128 for a 64 x 128 tile: S and P V 512 each at the full
wgmma rate (4 * 64 * 128 * 128 FLOPs at ~4096 FLOPs a clock), a softmax of SOFTMAX clocks, about
what v1's measured softmax took (453 ns on an H100, 2026-11-26, at 1.83 GHz; notes/07, §10), the
last PACK of it (rescale O, pack P) after the P V wait in v4. The brackets mark how long a
softmax may grow before the tensor cores idle: one turn in v3, a turn and a half in v4.
"""
import figstyle as fs

S_CLK = 512
PV_CLK = 512
SOFTMAX = 830
PACK = 100
WINDOW = 5200  # clocks drawn

S_FILL = fs.BLUE
PV_FILL = fs.SKY
SOFT_FILL = fs.ORANGE
PACK_FILL = fs.tint(fs.GREEN, 0.7)
WAIT_FILL = fs.tint(fs.GREY, 0.35)
INFLIGHT = "#FFFFFF"


def v1_schedule(n=4):
    """(lane, t0, t1, kind, label) bars of one warpgroup running everything in sequence."""
    bars, t = [], 0.0
    for j in range(n):
        bars.append(("tc", t, t + S_CLK, "s", "S%d" % j))
        bars.append(("c0", t, t + S_CLK, "inflight", ""))
        t += S_CLK
        bars.append(("c0", t, t + SOFTMAX, "soft", "softmax %d" % j))
        t += SOFTMAX
        bars.append(("tc", t, t + PV_CLK, "pv", "P%dV%d" % (j, j)))
        bars.append(("c0", t, t + PV_CLK, "inflight", ""))
        t += PV_CLK
    return bars


def pingpong_schedule(intra, n_turns=8):
    """Two consumers alternating turns. A turn (S_j, then P_{j-1} V_{j-1}) may be issued once its
    consumer is ready and the other has committed its own turn (the hand-over at the commit); the
    tensor cores run the groups in issue order. v3 (intra False): the softmax follows the whole
    turn. v4 (intra True): it follows S_j; the P V wait, then PACK clocks of rescale and packing."""
    bars = []
    ready = [0.0, 0.0]
    tc_free = 0.0
    last_issue = -1.0
    tile = [1, 1]  # the turns drawn are of the steady state: S_j with P_{j-1} V_{j-1}
    for k in range(n_turns):
        c = k % 2
        lane = "c%d" % c
        issue = max(ready[c], last_issue)
        start = max(issue, tc_free)
        j = tile[c]
        if start > ready[c]:
            bars.append((lane, ready[c], start, "wait", ""))
        bars.append(("tc", start, start + S_CLK, "s", "S%d c%d" % (j, c)))
        bars.append(("tc", start + S_CLK, start + S_CLK + PV_CLK, "pv", "P%dV%d c%d" % (j - 1,
                                                                                      j - 1, c)))
        tc_free = start + S_CLK + PV_CLK
        last_issue = issue
        if intra:
            s_done = start + S_CLK
            bars.append((lane, start, s_done, "inflight", ""))
            soft_end = s_done + SOFTMAX - PACK
            bars.append((lane, s_done, soft_end, "soft", "softmax %d" % j))
            pv_done = max(tc_free, soft_end)
            if pv_done > soft_end:
                bars.append((lane, soft_end, pv_done, "inflight", ""))
            bars.append((lane, pv_done, pv_done + PACK, "pack", ""))
            ready[c] = pv_done + PACK
        else:
            bars.append((lane, start, tc_free, "inflight", ""))
            bars.append((lane, tc_free, tc_free + SOFTMAX, "soft", "softmax %d" % j))
            ready[c] = tc_free + SOFTMAX
        tile[c] += 1
    return bars


FILL = {"s": S_FILL, "pv": PV_FILL, "soft": SOFT_FILL, "pack": PACK_FILL, "wait": WAIT_FILL,
        "inflight": INFLIGHT}


def panel(ax, y_top, title, lanes, bars, scale, x0, t_shift=0.0, slack=None):
    lh = 4.4
    fs.text(ax, x0 - 30.0, y_top + 2.6, title, size=8.4, weight="bold")
    ys = {}
    for i, (key, name) in enumerate(lanes):
        y = y_top - (i + 1) * lh
        ys[key] = y
        fs.text(ax, x0 - 1.0, y + lh / 2, name, size=6.8, ha="right")
        fs.rect(ax, x0, y + 0.4, WINDOW * scale, lh - 0.8, fc="#F6F6F6", ec="#DDDDDD", lw=0.3)
    for lane, t0, t1, kind, label in bars:
        t0, t1 = t0 - t_shift, t1 - t_shift
        if t1 <= 0 or t0 >= WINDOW:
            continue
        t0, t1 = max(t0, 0.0), min(t1, WINDOW)
        y = ys[lane] + 0.6
        h = lh - 1.2
        if kind == "inflight":
            fs.rect(ax, x0 + t0 * scale, y + h * 0.3, (t1 - t0) * scale, h * 0.4, fc="white",
                    ec=fs.GREY, lw=0.5, hatch="////")
            continue
        fs.rect(ax, x0 + t0 * scale, y, (t1 - t0) * scale, h, fc=FILL[kind], ec="white", lw=0.6)
        if label and (t1 - t0) * scale > 4.5:
            colour = "white" if kind == "s" else fs.INK
            fs.text(ax, x0 + (t0 + t1) / 2 * scale, y + h / 2, label, size=5.6, ha="center",
                    color=colour)
    if slack:
        lane, t0, t1, label = slack
        t0, t1 = t0 - t_shift, t1 - t_shift
        y = y_top - (len(lanes) + 0.5) * lh  # a row of its own, under the lanes
        fs.text(ax, x0 - 1.0, y, "slack of %s" % lane.replace("c", "consumer "), size=6.2,
                ha="right", color=fs.VERMILLION)
        ax.plot([x0 + t0 * scale, x0 + t1 * scale], [y, y], color=fs.VERMILLION, lw=0.9)
        for t in (t0, t1):
            ax.plot([x0 + t * scale] * 2, [y - 0.5, y + 0.5], color=fs.VERMILLION, lw=0.9)
        fs.text(ax, x0 + t1 * scale + 0.8, y, label, size=6.0, color=fs.VERMILLION)
    return ys


def busy_share(bars, t_from, t_to):
    busy = 0.0
    for lane, t0, t1, kind, _ in bars:
        if lane == "tc":
            busy += max(0.0, min(t1, t_to) - max(t0, t_from))
    return busy / (t_to - t_from)


def main(out_dir):
    fig, ax = fs.canvas(150, 90)
    fs.text(ax, 75, 87.6, "Chapter 07's forward as intended: what the tensor cores and the "
            "warpgroups were meant to do (a model, not a trace)", size=11, ha="center",
            weight="bold")
    fs.text(ax, 75, 84.2, "D 128, one 64 × 128 tile per warpgroup and step: S = Q Kᵀ and O += "
            "P V %d clocks each at the full wgmma rate, a softmax %d (about v1's, measured)"
            % (S_CLK, SOFTMAX), size=7.4, ha="center", color="#444444")
    x0, scale = 32.0, 112.0 / WINDOW

    bars1 = v1_schedule(4)
    share1 = busy_share(bars1, 0, 3 * (S_CLK + SOFTMAX + PV_CLK))
    panel(ax, 78.0, "(a) 07/v1: one warpgroup, everything in sequence — tensor cores busy "
          "%d%% (S + P V of every %d clocks)" % (round(100 * share1), S_CLK + SOFTMAX + PV_CLK),
          [("tc", "tensor cores"), ("c0", "warpgroup")], bars1, scale, x0)

    shift = 1400.0
    two = [("tc", "tensor cores"), ("c0", "consumer 0"), ("c1", "consumer 1")]
    panels = [
        (False, 57.0, "(b) 07/v3, ping-pong: a turn is S(j) and P(j−1) V(j−1) issued together; "
         "the two consumers alternate", 2048 + 1024,
         "its softmax may grow to one turn (%d clocks) before the tensor cores idle"
         % (S_CLK + PV_CLK)),
        (True, 35.0, "(c) 07/v4, ping-pong + intra-warpgroup overlap: the softmax of S(j) runs "
         "under the warpgroup's own P(j−1) V(j−1)", 2048 + S_CLK,
         "to a turn and a half (%d clocks)" % (S_CLK + PV_CLK + S_CLK)),
    ]
    for intra, y_top, title, slack_from, slack_label in panels:
        bars = pingpong_schedule(intra=intra, n_turns=10)
        share = busy_share(bars, shift, shift + WINDOW)
        panel(ax, y_top, "%s — tensor cores busy %d%%" % (title, round(100 * share)), two, bars,
              scale, x0, t_shift=shift, slack=("c0", slack_from, 2048 + 2048, slack_label))

    # time axis and legend
    y_axis = 10.0
    ax.plot([x0, x0 + WINDOW * scale], [y_axis, y_axis], color=fs.INK, lw=0.5)
    for t in range(0, WINDOW + 1, 1000):
        ax.plot([x0 + t * scale] * 2, [y_axis, y_axis - 0.6], color=fs.INK, lw=0.5)
        fs.text(ax, x0 + t * scale, y_axis - 1.6, "%d" % t, size=6.2, ha="center")
    fs.text(ax, x0 + WINDOW * scale / 2, y_axis - 3.6, "clocks of one SM (panels (b), (c): the "
            "steady state, from clock %d of the model)" % int(shift), size=6.6, ha="center")
    items = [(S_FILL, "S = Q Kᵀ (GEMM0)"), (PV_FILL, "O += P V (GEMM1)"),
             (SOFT_FILL, "softmax (max, exp2, sums; v1, v3: rescale and pack too)"),
             (PACK_FILL, "v4: rescale O, pack P (after the P V wait)"),
             (WAIT_FILL, "waiting for the turn or the tensor cores")]
    x = 4.0
    for fc, label in items:
        fs.swatch(ax, x, 0.6, fc, label, size=6.2)
        x += 7.0 + len(label) * 0.42
    fs.rect(ax, x, 0.6 + 0.45, 2.0, 0.5, fc="white", ec=fs.GREY, lw=0.5, hatch="////")
    fs.text(ax, x + 2.8, 1.3, "own wgmma in flight", size=6.2)
    fs.save(fig, out_dir, "fig_pingpong_schedule")


if __name__ == "__main__":
    fs.run_alone(main)
