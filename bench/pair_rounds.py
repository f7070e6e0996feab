#!/usr/bin/env python3
"""Two kernels of one family against each other over rounds of fa_bench (no peers).

    python3 bench/pair_rounds.py NEW BASE round1.json round2.json round3.json

Each JSON is one fa_bench run (--benchmark_out) that timed both kernels, e.g. with
--benchmark_filter='attn_bwd/07/(bwd_v5_producer|bwd_t46_head_groups)/bf16/D(64|128)/'; the
runs alternate, so that the GPU's clocks and the machine's state fall on both alike. Prints one
markdown table: per shape (the rest of the benchmark's name), each kernel's median time over the
rounds, the speedup NEW over BASE (BASE's median / NEW's), and the smallest and largest per-round
speedup beside it (how far one round could mislead).
"""
import json
import statistics
import sys


def times(path, kernel):
    """{shape: ms} of `kernel`'s rows in one fa_bench JSON (shape: the name after the kernel)."""
    out = {}
    for b in json.load(open(path))["benchmarks"]:
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
