#!/usr/bin/env python3
"""Compare this repository's attention kernels with PyTorch's SDPA backends on the same GPU.

Reads the Google Benchmark JSON written by fa_bench, e.g.

    build/bin/fa_bench --benchmark_filter='attn_' --benchmark_out=bench.json \
        --benchmark_out_format=json

(benchmark names look like "attn_fwd/05/v3_.../bf16/D128/full/N8192", counter "TFLOPs"), then
times torch.nn.functional.scaled_dot_product_attention with the FlashAttention and cuDNN backends
on the same shapes (the FlashAttention protocol: B = 16384/N, H = 2048/D, bf16), forward and
backward, and prints one markdown table; a CSV and a PNG plot go to --out.

Only square shapes (seq_q == seq_k) are compared: PyTorch's is_causal is aligned top-left, ours
bottom-right, and the two agree only when seq_q == seq_k.

FLOPs follow bench/bench_main.cpp: forward 4*B*H*D per visible (query, key) pair (N*N, or
N*(N+1)/2 when causal), backward 2.5x that.
Times are medians over CUDA-event-timed runs, with L2 flushed before each (triton.testing.do_bench
when Triton is installed, our own loop otherwise). A backend that errors is skipped (its cell
reads "-"), never fatal.
"""
import argparse
import csv
import json
import math
import os
import re
import sys

NAME_RE = re.compile(
    r"^(?P<family>attn_fwd|attn_bwd)/(?P<kernel>.+)/(?P<dtype>fp32|bf16|fp16)/D(?P<d>\d+)/"
    r"(?P<mask>full|causal)/N(?P<n>\d+)(?:/.*)?$")


def parse_ours(path, include_baseline=False):
    """{(family, dtype, D, causal, N): (best TFLOP/s, kernel name)} from a fa_bench JSON."""
    with open(path) as f:
        data = json.load(f)
    best = {}
    for b in data.get("benchmarks", []):
        m = NAME_RE.match(b.get("name", ""))
        if not m or b.get("error_occurred"):
            continue
        kernel = m["kernel"]
        if kernel.startswith("ref/") or ("materialized" in kernel and not include_baseline):
            continue
        tf = b.get("TFLOPs")
        if tf is None:
            continue
        key = (m["family"], m["dtype"], int(m["d"]), m["mask"] == "causal", int(m["n"]))
        if key not in best or tf > best[key][0]:
            best[key] = (float(tf), kernel)
    return best


def attention_flops(b, h, n, d, causal, backward):
    pairs = n * (n + 1) // 2 if causal else n * n  # common/shapes.cpp: visible_pairs(), square
    f = 4.0 * b * h * d * pairs
    return 2.5 * f if backward else f


class Timer:
    """Median milliseconds of fn(), L2 flushed before every run."""

    def __init__(self, torch, reps):
        self.torch = torch
        self.reps = reps
        try:
            import triton.testing  # noqa: F401
            self.do_bench = triton.testing.do_bench
        except Exception:
            self.do_bench = None
        self.flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")

    def __call__(self, fn):
        if self.do_bench is not None:
            try:
                return float(self.do_bench(fn, warmup=25, rep=100, return_mode="median"))
            except TypeError:  # older Triton without return_mode
                return float(self.do_bench(fn, warmup=25, rep=100, quantiles=[0.5])[0])
        torch = self.torch
        for _ in range(3):
            fn()
        times = []
        for _ in range(self.reps):
            self.flush.zero_()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop))
        times.sort()
        return times[len(times) // 2]


def time_sdpa(torch, timer, backend, b, h, n, d, causal, dtype, backward):
    """TFLOP/s of one SDPA backend, or None when it is unavailable or errors."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    try:
        g = torch.Generator(device="cuda").manual_seed(n * 131 + d)
        shape = (b, h, n, d)
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=g).add_(0.5)
                   .requires_grad_(backward) for _ in range(3))
        dout = torch.randn(shape, device="cuda", dtype=dtype, generator=g)
        with sdpa_kernel(backend):
            if not backward:
                def fn():
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            else:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def fn():
                    q.grad = k.grad = v.grad = None
                    out.backward(dout, retain_graph=True)
            fn()  # raises here if the backend refuses the shape
            torch.cuda.synchronize()
            ms = timer(fn)
        return attention_flops(b, h, n, d, causal, backward) / (ms * 1e-3) / 1e12
    except Exception as e:  # a backend that is missing or refuses: skip it, say why once
        print(f"  [skip] {backend} {'bwd' if backward else 'fwd'} B{b} H{h} N{n} D{d} "
              f"{'causal' if causal else 'full'}: {type(e).__name__}: {str(e)[:120]}",
              file=sys.stderr)
        return None
    finally:
        torch.cuda.empty_cache()


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="Google Benchmark JSON written by fa_bench")
    ap.add_argument("--out", default="sdpa_compare", help="directory for the CSV and the PNG")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--reps", type=int, default=30, help="timed runs without Triton's do_bench")
    ap.add_argument("--include-baseline", action="store_true",
                    help="let 05/v0_materialized count as 'ours' (off: fused kernels only)")
    args = ap.parse_args()

    ours = parse_ours(args.json, args.include_baseline)
    shapes = sorted({(d, causal, n) for (fam, t, d, causal, n) in ours
                     if t == args.dtype and fam == "attn_fwd"} |
                    {(d, causal, n) for (fam, t, d, causal, n) in ours
                     if t == args.dtype and fam == "attn_bwd"})
    if not shapes:
        sys.exit(f"no attn_fwd/attn_bwd rows in {args.dtype} in {args.json}")
    has_bwd = any(fam == "attn_bwd" for (fam, *_rest) in ours)

    import torch
    from torch.nn.attention import SDPBackend

    if not torch.cuda.is_available():
        sys.exit("PyTorch sees no GPU: the comparison must run on the GPU that produced the JSON")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    timer = Timer(torch, args.reps)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}

    rows = []
    for d, causal, n in shapes:
        b, h = 16384 // n, 2048 // d
        row = {"D": d, "causal": causal, "N": n, "B": b, "H": h}
        for direction, fam in (("fwd", "attn_fwd"), ("bwd", "attn_bwd")):
            if direction == "bwd" and not has_bwd:
                continue
            mine = ours.get((fam, args.dtype, d, causal, n))
            row[f"ours_{direction}"] = mine[0] if mine else None
            row[f"ours_{direction}_kernel"] = mine[1] if mine else ""
            for name, backend in backends.items():
                row[f"{name}_{direction}"] = time_sdpa(torch, timer, backend, b, h, n, d, causal,
                                                       dtype, direction == "bwd")
        rows.append(row)
        print(f"  measured D{d} N{n} {'causal' if causal else 'full'}", file=sys.stderr)

    gpu = torch.cuda.get_device_name()
    head = "| shape | ours fwd | flash fwd | cudnn fwd | ours/flash fwd |"
    sep = "| --- | ---: | ---: | ---: | ---: |"
    if has_bwd:
        head += " ours bwd | flash bwd | cudnn bwd | ours/flash bwd |"
        sep += " ---: | ---: | ---: | ---: |"
    print(f"\nTFLOP/s on {gpu}, {args.dtype}, B = 16384/N, H = 2048/D (PyTorch {torch.__version__})\n")
    print(head)
    print(sep)
    for r in rows:
        line = (f"| D{r['D']} N{r['N']} {'causal' if r['causal'] else 'full'} | {fmt(r['ours_fwd'])} | "
                f"{fmt(r['flash_fwd'])} | {fmt(r['cudnn_fwd'])} | {ratio(r['ours_fwd'], r['flash_fwd'])} |")
        if has_bwd:
            line += (f" {fmt(r.get('ours_bwd'))} | {fmt(r.get('flash_bwd'))} | {fmt(r.get('cudnn_bwd'))} | "
                     f"{ratio(r.get('ours_bwd'), r.get('flash_bwd'))} |")
        print(line)

    os.makedirs(args.out, exist_ok=True)
    fields = ["D", "causal", "N", "B", "H", "ours_fwd", "ours_fwd_kernel", "flash_fwd", "cudnn_fwd"]
    if has_bwd:
        fields += ["ours_bwd", "ours_bwd_kernel", "flash_bwd", "cudnn_bwd"]
    csv_path = os.path.join(args.out, "sdpa_compare.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    print(f"\nwrote {csv_path}", file=sys.stderr)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"matplotlib unavailable ({e}): no plot", file=sys.stderr)
        return
    panels = sorted({(r["D"], r["causal"]) for r in rows})
    directions = ["fwd", "bwd"] if has_bwd else ["fwd"]
    fig, axes = plt.subplots(len(directions), len(panels), squeeze=False,
                             figsize=(4.5 * len(panels), 3.6 * len(directions)))
    for col, (d, causal) in enumerate(panels):
        sel = [r for r in rows if r["D"] == d and r["causal"] == causal]
        for row_i, direction in enumerate(directions):
            ax = axes[row_i][col]
            for who, style in (("ours", "o-"), ("flash", "s--"), ("cudnn", "^:")):
                pts = [(r["N"], r.get(f"{who}_{direction}")) for r in sel
                       if r.get(f"{who}_{direction}") is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=who)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{direction} D{d} {'causal' if causal else 'full'}")
            ax.set_xlabel("N")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend()
    fig.suptitle(f"attention {args.dtype} on {gpu}")
    fig.tight_layout()
    png = os.path.join(args.out, "sdpa_compare.png")
    fig.savefig(png, dpi=120)
    print(f"wrote {png}", file=sys.stderr)


if __name__ == "__main__":
    main()
