#!/usr/bin/env python3
"""Plot the "matmul mystery" sweep written by `ch03_tiled_matmul --sweep=a:b:s --csv=FILE`.

    python3 chapters/03_tiled_matmul/plot_mystery.py ch03_mystery.csv [out.png] [--title "H100, date"]

Top panel: TFLOP/s of cuBLAS bf16 and of our tensor-core kernel against the square size n, with
points coloured by the largest power of two (up to 128) dividing n (tile alignment). Bottom panel:
the wave arithmetic of our kernel's tile: fractional waves and the occupancy of the last wave.
Vertical lines mark the sizes where one more wave is launched (wave quantization).
Without timings (a CSV written on a machine without a GPU) only the bottom panel is drawn.
"""
import argparse
import csv
import sys


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    return rows


def num(s):
    return float(s) if s not in ("", None) else None


def alignment(n):
    a = 1
    while n % (a * 2) == 0 and a < 128:
        a *= 2
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("png", nargs="?", default=None)
    ap.add_argument("--title", default="", help="e.g. 'H100 SXM, 2026-11-21'")
    args = ap.parse_args()
    png = args.png or args.csv.rsplit(".", 1)[0] + ".png"

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(args.csv)
    n = [int(r["n"]) for r in rows]
    cub = [num(r["cublas_tflops"]) for r in rows]
    ours = [num(r["ours_tflops"]) for r in rows]
    waves = [float(r["waves"]) for r in rows]
    launched = [int(r["waves_launched"]) for r in rows]
    last_occ = [float(r["last_wave_occupancy"]) for r in rows]
    timed = any(v is not None for v in cub)
    r0 = rows[0]
    tile = f'{r0["tile_m"]}x{r0["tile_n"]} tiles, {r0["sms"]} SMs x {r0["blocks_per_sm"]} blocks'

    fig, axes = plt.subplots(2 if timed else 1, 1, figsize=(11, 8 if timed else 4), sharex=True,
                             squeeze=False)
    axes = [a[0] for a in axes]
    steps = [n[i] for i in range(1, len(n)) if launched[i] != launched[i - 1]]

    if timed:
        ax = axes[0]
        colors = {1: "tab:gray", 2: "tab:gray", 4: "tab:gray", 8: "tab:olive", 16: "tab:orange",
                  32: "tab:red", 64: "tab:purple", 128: "tab:blue"}
        pts = [(x, y, alignment(x)) for x, y in zip(n, cub) if y is not None]
        for a in sorted(set(p[2] for p in pts)):
            sel = [p for p in pts if p[2] == a]
            ax.scatter([p[0] for p in sel], [p[1] for p in sel], s=10, color=colors[a],
                       label=f"cuBLAS bf16, n divisible by {a}")
        # Older CSVs have no kernel column; those sweeps timed 03/v5_tensor_core.
        names = sorted({r.get("kernel") or "03/v5_tensor_core" for r in rows})
        ax.plot([x for x, y in zip(n, ours) if y is not None], [y for y in ours if y is not None],
                color="black", lw=1, label=" / ".join(names) + " (ours)")
        for s in steps:
            ax.axvline(s, color="tab:red", ls=":", lw=0.8)
        ax.set_ylabel("TFLOP/s")
        ax.legend(fontsize=7, ncol=2)
        ax.set_title("The matmul mystery: square GEMM throughput vs size" +
                     (f" ({args.title})" if args.title else ""))

    ax = axes[-1]
    ax.plot(n, waves, label="waves = tiles / slots", color="tab:green")
    ax.plot(n, last_occ, label="last-wave occupancy", color="tab:brown", lw=0.8)
    for s in steps:
        ax.axvline(s, color="tab:red", ls=":", lw=0.8)
    ax.set_xlabel("n (M = N = K)")
    ax.set_ylabel("waves / occupancy")
    ax.set_title(f"Wave arithmetic of our kernel: {tile} (red: one more wave launched)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=130)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
