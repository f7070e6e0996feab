#!/usr/bin/env python3
"""Executed instructions per SASS opcode, from Nsight Compute's source page.

The CSVs here were written on the GPU machine by
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > FILE.csv
(report taken with --section SourceCounters). Usage: python3 sass_mix.py FILE.csv[.gz] ...
Prints, per kernel, the opcodes by executed warp-level instructions, with their share of the
total and of the warp-stall samples.
"""
import collections
import csv
import gzip
import sys


def rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = list(csv.reader(f))
    hdr = data[1]
    ix = {h: i for i, h in enumerate(hdr)}
    for r in data[2:]:
        if len(r) >= len(hdr):
            yield (r[ix["Source"]].strip(), int(r[ix["Instructions Executed"]] or 0),
                   int(r[ix["Warp Stall Sampling (All Samples)"]] or 0))


for path in sys.argv[1:]:
    count, stall = collections.Counter(), collections.Counter()
    for src, executed, samples in rows(path):
        words = src.split()
        op = words[1] if words[0].startswith("@") else words[0]
        base = op.split(".")[0]
        key = op if base in ("HMMA", "LDSM") else base
        count[key] += executed
        stall[key] += samples
    total, samples = sum(count.values()), sum(stall.values())
    print(f"{path}: {total / 1e6:.1f} M instructions executed")
    for op, n in count.most_common(24):
        print(f"  {op:24s} {n / 1e6:8.1f} M  {100 * n / total:5.1f}%   stall samples "
              f"{100 * stall[op] / samples:5.1f}%")
    print()
