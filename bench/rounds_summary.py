#!/usr/bin/env python3
"""Medians over rounds of fa_bench + compare_sdpa.py (bench/device_run.sh, stage `rounds`).

    python3 bench/rounds_summary.py [--bwd] out/round1/ out/round2/ out/round3/

Each directory holds one round: bench.json (fa_bench, our kernels) and sdpa_compare.csv
(compare_sdpa.py, PyTorch SDPA's FlashAttention-2 and cuDNN backends on the same shapes, timed
right after). Prints one markdown table: per shape, each kernel's median TFLOP/s over the rounds,
FlashAttention-2's and cuDNN's, and the ratio of the best kernel's median to FlashAttention-2's,
with the smallest and largest per-round ratio beside it (how far one round could mislead).
--bwd: the same for the backward rows (attn_bwd, and the peers' backward columns).
"""
import csv
import json
import re
import statistics
import sys
from pathlib import Path

NAME = re.compile(r"attn_(?P<op>fwd|bwd)/(?P<kernel>.+?)/(?P<dtype>bf16|fp16)/D(?P<d>\d+)/(?P<mask>full|causal)/N(?P<n>\d+)/")


def read_round(folder, op):
    ours = {}  # (d, causal, n) -> {kernel: TFLOP/s}
    for b in json.load(open(folder / "bench.json"))["benchmarks"]:
        m = NAME.match(b["name"])
        if m and m["op"] == op and "TFLOPs" in b:
            key = (int(m["d"]), m["mask"] == "causal", int(m["n"]))
            ours.setdefault(key, {})[m["kernel"]] = float(b["TFLOPs"])
    peers = {}  # (d, causal, n) -> (flash, cudnn)
    for row in csv.DictReader(open(folder / "sdpa_compare.csv")):
        key = (int(row["D"]), row["causal"] == "True", int(row["N"]))
        # A peer that refused the shape (cuDNN at a head dim off the step of 8) has no time: nan.
        peers[key] = tuple(float(row[f"{who}_{op}"] or "nan") for who in ("flash", "cudnn"))
    return ours, peers


def main():
    args = sys.argv[1:]
    op = "bwd" if "--bwd" in args else "fwd"
    folders = [Path(a) for a in args if a != "--bwd"]
    if not folders:
        sys.exit(__doc__)
    rounds = [read_round(f, op) for f in folders]
    shapes = sorted(set.intersection(*(set(o) & set(p) for o, p in rounds)))
    kernels = sorted({k for o, _ in rounds for s in shapes for k in o[s]})
    print(f"{len(rounds)} rounds of the {'backward' if op == 'bwd' else 'forward'}; TFLOP/s medians; ratio = best kernel's median / FlashAttention-2's median")
    print()
    print("| shape | " + " | ".join(f"`{k}`" for k in kernels) + " | FA2 | cuDNN | best/FA2 | per-round range |")
    print("| --- |" + " ---: |" * (len(kernels) + 3) + " --- |")
    for d, causal, n in shapes:
        s = (d, causal, n)
        # A kernel without a row at this shape (one that does not take its head dim) shows "-".
        med = {k: statistics.median(o[s][k] for o, _ in rounds if k in o[s]) for k in kernels
               if any(k in o[s] for o, _ in rounds)}
        fa2 = statistics.median(p[s][0] for _, p in rounds)
        cudnn = statistics.median(p[s][1] for _, p in rounds)
        best = max(med.values())
        per_round = [max(o[s].values()) / p[s][0] for o, p in rounds]
        cells = " | ".join(f"{med[k]:.1f}" if k in med else "-" for k in kernels)
        print(f"| D{d} N{n} {'causal' if causal else 'full'} | {cells} | {fa2:.1f} | {cudnn:.1f} | "
              f"{best / fa2:.3f} | {min(per_round):.3f}-{max(per_round):.3f} |")


if __name__ == "__main__":
    main()
