#!/usr/bin/env python3
"""Two kernels of one family against each other over rounds of fa_bench (no peers).

    python3 bench/pair_rounds.py NEW BASE round1 round2 round3

A round is one fa_bench JSON (--benchmark_out) that timed both kernels, or several joined by
commas (r1_new.json,r1_base.json): one file per kernel, as bench/fair_rounds.sh writes them.
Prints one markdown table: per shape (the rest of the benchmark's name), each kernel's median
time over the rounds, the speedup NEW over BASE (BASE's median / NEW's), and the smallest and
largest per-round speedup beside it (how far one round could mislead).

Time each kernel in a process of its own (bench/fair_rounds.sh), not both in one process: one
fa_bench process times its kernels one after the other in the registry's order, and the first
runs more of its rows before the GPU's power cap lowers the clocks. On an H100 the same machine
code timed first and second in one process read 1.01-1.18x apart
(notes/measured/h100-2026-12-07e/in_process_rounds.md).
"""
import json
import statistics
import sys


def times(path, kernel):
    """{shape: ms} of `kernel`'s rows in one fa_bench JSON (shape: the name after the kernel)."""
    out = {}
    benchmarks = [b for p in path.split(",") for b in json.load(open(p))["benchmarks"]]
    for b in benchmarks:
        name = b["name"]
        marker = "/" + kernel + "/"
        if marker in name:
            shape = name.split(marker, 1)[1].split("/iterations")[0]
            unit = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[b.get("time_unit", "ms")]
            out[shape] = float(b["real_time"]) * unit
    return out


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    new, base, files = argv[0], argv[1], argv[2:]
    rounds = [(times(f, new), times(f, base)) for f in files]
    shapes = [s for s in rounds[0][0] if all(s in n and s in b for n, b in rounds)]
    if not shapes:  # a comparison of nothing is not a comparison
        print("nothing to compare: no shape has rows of both %s and %s in every round"
              % (new, base))
        return 1
    print("| shape | %s ms | %s ms | speedup | per round |" % (new, base))
    print("| --- | ---: | ---: | ---: | --- |")
    for s in shapes:
        n = statistics.median(r[0][s] for r in rounds)
        b = statistics.median(r[1][s] for r in rounds)
        per = [r[1][s] / r[0][s] for r in rounds]
        print("| %s | %.3f | %.3f | %.3fx | %.3f-%.3f |" % (s, n, b, b / n, min(per), max(per)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
