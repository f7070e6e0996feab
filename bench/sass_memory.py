#!/usr/bin/env python3
"""Memory traffic per SASS opcode, from Nsight Compute's source page, against its ideal.

The CSVs are written on the GPU machine by
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > FILE.csv
(report taken with --section SourceCounters; bench/device_run.sh's ncu_decode and ncu_bwd stages
do it). Usage: python3 bench/sass_memory.py FILE.csv[.gz] ...

Per kernel and memory opcode (LDGSTS = cp.async, LDSM = ldmatrix, LDS/STS, LDG/STG): warp-level
instructions executed; shared-memory wavefronts, with the ideal count for the same bytes and
threads (more than ideal: bank conflicts, or accesses split across 128-byte lines); L2 sectors
asked for by the global side, with the ideal count (more than ideal: the same 32-byte sector
asked for by more than one piece of one instruction). notes/08_decoding.md reads 08/t06 and
08/v5 with it.
"""
import collections
import csv
import gzip
import sys

COLUMNS = ("Instructions Executed", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal",
           "L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Ideal")


def number(text):
    text = text.replace(",", "")
    return int(text) if text.isdigit() else 0


def table(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = list(csv.reader(f))
    at = next(i for i, r in enumerate(data) if r and r[0] == "Address")
    ix = {h: i for i, h in enumerate(data[at])}
    sums = collections.defaultdict(lambda: [0] * len(COLUMNS))
    for r in data[at + 1:]:
        if len(r) < len(data[at]):
            continue
        words = r[ix["Source"]].split()
        if not words:
            continue
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        for k, col in enumerate(COLUMNS):
            sums[op][k] += number(r[ix[col]])
    name = data[at - 1][1] if at > 0 and len(data[at - 1]) > 1 else ""  # "Kernel Name", name
    return name, sums


def main():
    for path in sys.argv[1:]:
        kernel, sums = table(path)
        print(f"{path}: {kernel}")
        print(f"  {'opcode':8s} {'executed':>10s} {'smem wavefronts':>16s} {'ideal':>10s} "
              f"{'L2 sectors':>12s} {'ideal':>12s}")
        for op in ("LDGSTS", "LDSM", "LDS", "STS", "LDG", "STG", "RED", "ATOM"):
            if op not in sums:
                continue
            e, w, wi, s, si = sums[op]
            print(f"  {op:8s} {e / 1e6:9.2f}M {w / 1e6:15.2f}M {wi / 1e6:9.2f}M "
                  f"{s / 1e6:11.2f}M {si / 1e6:11.2f}M")
        print()


if __name__ == "__main__":
    main()
