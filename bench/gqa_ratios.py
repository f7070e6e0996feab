#!/usr/bin/env python3
"""Grouped K/V heads against multi-head attention: the time per query head, from fa_bench rows.

fa_bench's attn_gqa rows (bench/bench_main.cpp, add_grouped_heads) time one kernel at B 2, H 32,
D 128 or 64, bf16, with H_kv 32 (MHA), 8, 4 and 1 (MQA) K/V heads: the FLOPs are the same at every
H_kv, so a row's time over its Hkv32 row (same D) is the time per query head against MHA (<= 1.05:
within 5%).

Measure each row alone, in rounds that alternate the rows, and compare medians. Timed one after
the other in one process, the rows were not comparable on an H200 (2026-12-02): the forward's
causal N 8192 rows ran 1.77, 1.88, 1.95 and 2.09 ms in the order they were timed (Hkv 32, 8, 4,
1), where each alone ran 1.68-1.69 ms, MQA included (notes/measured/h200-2026-12-02/
gqa_after_split_estimate.log, gqa_rows_alone.log).

Input: lines "round R <benchmark name> <time> <ms|us>" (bench/device_run.sh, stage gqa), or a
fa_bench JSON file (one process, one sample per row); several files pool their samples. Prints
the table; exits 1 without rows.
"""
import collections
import json
import re
import statistics
import sys

ROW = re.compile(r"attn_gqa/(fwd|bwd)/(.+)/bf16/D(\d+)/(causal|full)/N(\d+)/Hkv(\d+)")


def samples(path, rows):
    if path.endswith(".json"):
        for b in json.load(open(path))["benchmarks"]:
            m = ROW.match(b["name"])
            if m and not b.get("error_occurred"):
                rows[m.groups()].append(b["real_time"])
        return rows
    for line in open(path):
        words = line.split()
        if len(words) == 5 and words[0] == "round" and ROW.match(words[2]):
            scale = {"ms": 1.0, "us": 1e-3}[words[4]]
            rows[ROW.match(words[2]).groups()].append(float(words[3]) * scale)
    return rows


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: gqa_ratios.py ROUNDS.log|fa_bench.json ...")
    rows = collections.defaultdict(list)
    for path in sys.argv[1:]:
        samples(path, rows)
    if not rows:
        print("no attn_gqa rows in " + " ".join(sys.argv[1:]))
        return 1
    print("time over MHA (Hkv 32) at the same query heads, medians of each row's samples: "
          "<= 1.05 is within 5%")
    worst = 0.0
    for key in sorted(rows, key=lambda k: (k[0], k[1], -int(k[2]), k[3], int(k[4]), -int(k[5]))):
        direction, kernel, d, mask, n, hkv = key
        mha = rows.get((direction, kernel, d, mask, n, "32"))
        if hkv == "32" or not mha:
            continue
        t, base = statistics.median(rows[key]), statistics.median(mha)
        worst = max(worst, t / base)
        print("%s %-22s D%-3s %-6s N%-5s Hkv %2s  %8.3f ms  MHA %8.3f ms  ratio %.3f  %s  "
              "(%d samples)" % (direction, kernel, d, mask, n, hkv, t, base, t / base,
                                "ok" if t / base <= 1.05 else "OVER", len(rows[key])))
    print("worst ratio %.3f" % worst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
