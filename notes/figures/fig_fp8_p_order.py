#!/usr/bin/env python3
"""fig_fp8_p_order.svg: how chapter 07's FP8 forward keeps P in registers (fp8_t36 and the tuning
steps after it) without moving a byte between lanes. A schematic of the code, not a measurement.

One row g of a warp's 16 and one group of 16 keys, for the four lanes 4g + q (q = 0..3) that hold
the row. Row 1: the S accumulator after the softmax: lane q holds keys 2q, 2q + 1, 2q + 8, 2q + 9
(hopper.cuh's fragment: columns 8i + 2q and 8i + 2q + 1). Row 2: the four e4m3 bytes lane q packs
from them, in that order (pack_p_fragments). Row 3: what the e4m3 wgmma with A in registers takes
those bytes as: lane q's bytes are k = 4q .. 4q + 3 of the 16 (the 8-bit A fragment, as
mma.m16n8k32's). So the product pairs P's key 2q + 8 with V^T's k = 4q + 2, and so on: row 4, V^T's
row d must hold at slot k the key lane q packed there, the order 0 1 8 9 2 3 10 11 4 5 12 13 6 7 14
15 (common/fp8.h, fp8_vt_key_at). In fp8_t36 to t44 the producer's warps 1-3 put every V^T tile
into that order in shared memory after it lands (four PRMTs per 16-byte chunk); from fp8_t45 the
host lays V^T out so (registry.h's vt_p_order, fp8_transpose_v).
"""
import figstyle as fs

LANE_COLOURS = fs.QUAD_COLOURS
KEYS = 16
CELL = 7.0


def key_at(slot):
    """fp8.h's fp8_vt_key_at: the key V^T's slot `slot` of every 16 holds in P order."""
    return 2 * ((slot // 4) % 4) + (slot // 2) % 2 * 8 + slot % 2


def lane_of_key(key):
    return (key % 8) // 2


def row(ax, x0, y, labels, lanes, title, note=None):
    fs.text(ax, x0 - 1.5, y + CELL * 0.36, title, size=7.6, ha="right")
    for i, (label, lane) in enumerate(zip(labels, lanes)):
        fs.rect(ax, x0 + i * CELL, y, CELL, CELL * 0.72, fc=LANE_COLOURS[lane], lw=0.5)
        fs.text(ax, x0 + (i + 0.5) * CELL, y + CELL * 0.36, label, size=7.2, ha="center")
    if note:
        fs.text(ax, x0 + KEYS * CELL + 1.5, y + CELL * 0.36, note, size=7.0)


def main(out_dir):
    fig, ax = fs.canvas(190, 62)
    x0, top = 52.0, 50.0
    fs.text(ax, 95.0, 58.5, "P in registers: one row, 16 keys, the four lanes that hold it",
            size=9.5, ha="center", weight="bold")
    keys = list(range(KEYS))
    row(ax, x0, top, ["key %d" % k for k in keys], [lane_of_key(k) for k in keys],
        "S accumulator (after the softmax)", "lane q: keys 2q, 2q+1, 2q+8, 2q+9")
    packed = [key_at(s) for s in range(KEYS)]
    row(ax, x0, top - 12.0, ["%d" % k for k in packed], [s // 4 for s in range(KEYS)],
        "lane q's 4 bytes (cvt to e4m3)", "bytes 0-3 of one register, no shuffle")
    row(ax, x0, top - 24.0, ["k %d" % s for s in range(KEYS)], [s // 4 for s in range(KEYS)],
        "what the wgmma takes them as (A)", "lane q: k = 4q .. 4q+3")
    row(ax, x0, top - 36.0, ["%d" % k for k in packed], [lane_of_key(k) for k in packed],
        "V^T row d, slot k holds key", "0 1 8 9 2 3 10 11 4 5 12 13 6 7 14 15")
    for s in (2, 3, 8):  # a few of the moves from the accumulator into the bytes
        k = key_at(s)
        fs.arrow(ax, (x0 + (k + 0.5) * CELL, top - 0.3), (x0 + (s + 0.5) * CELL,
                 top - 12.0 + CELL * 0.72 + 0.3), color=fs.VERMILLION, lw=0.8)
    for q in range(4):
        fs.swatch(ax, x0 + q * 22.0, 3.0, LANE_COLOURS[q], "lane 4g + %d" % q, size=7.2)
    fs.text(ax, x0 + 92.0, 3.7, "P's key k' meets V's key k' only if V^T's slots are in the "
            "bytes' order", size=7.2)
    fs.save(fig, out_dir, "fig_fp8_p_order")


if __name__ == "__main__":
    fs.run_alone(main)
