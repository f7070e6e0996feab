#!/usr/bin/env python3
"""Compare this repository's attention kernels with PyTorch's SDPA backends on the same GPU.

Reads the Google Benchmark JSON written by fa_bench, e.g.

    build/bin/fa_bench --benchmark_filter='attn_' --benchmark_out=bench.json \
        --benchmark_out_format=json

(benchmark names look like "attn_fwd/05/v3_.../bf16/D128/full/N8192", counter "TFLOPs"), then
times torch.nn.functional.scaled_dot_product_attention with the FlashAttention and cuDNN backends
on the same shapes (the FlashAttention protocol: B = 16384/N, H = 2048/D, bf16), forward and
backward, and prints one markdown table; a CSV and a PNG plot go to --out (the plot needs
matplotlib; without it the table and the CSV are still written and the script says it skipped the
plot).

"ours" at a shape is what a user of the library gets there: fa_bench's attn_fwd/auto and
attn_bwd/auto rows, the dispatch's choice (common/dispatch.h; the row's label names the kernel).
"best" is the fastest registered kernel at that shape in the same run, so that a dispatch row
that picks a slower kernel shows (best/ours above 1). A JSON without auto rows reports the
fastest kernel as "ours", as before the dispatch existed. The table names the kernel in every
row and gives ours' ratio to both backends. The CSV and the plot also keep each chapter's best
(05, 06, 07, ...): the plot draws one line per chapter, its legend naming the kernels behind it.

Only square shapes (seq_q == seq_k) are compared: PyTorch's is_causal is aligned top-left, ours
bottom-right, and the two agree only when seq_q == seq_k.

FLOPs follow bench/bench_main.cpp: forward 4*B*H*D per visible (query, key) pair (N*N, or
N*(N+1)/2 when causal), backward 2.5x that.
Times are medians over CUDA-event-timed runs with L2 flushed before each exactly as fa_bench flushes
it (common/timing.h, Flush::Clean): a buffer larger than L2 is read, not overwritten, so that no
dirty lines are left for the timed call to write back (triton.testing.do_bench zeroes its buffer
instead, which cost a 0.05 ms kernel 13% on an H100; it is not used here, so that both sides are
timed the same way). A backend that errors is skipped (its cell
reads "-"), never fatal.

--ours-same-timer also times ours the peers' way: fa.attention (the dispatch, through the Python
package, libfa_python) with the same Timer, on the same inputs, once before and once after the
peers at each shape, and prints a second table with fa_bench's figure beside it. fa_bench and this
script time the same kernels in different processes and harnesses; where the two figures of ours
differ, the ratio to the peers is to be read from the same-timer table. --no-flush times every
side without the L2 flush (the inputs may then be found in L2).
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
    """{(family, dtype, D, causal, N): {chapter: (best TFLOP/s, kernel name)}} from a fa_bench
    JSON; the chapter is the kernel name's prefix ("05" for "05/v3_...")."""
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
        if kernel == "auto":  # the dispatch's row: its label names the kernel it ran
            kernel = "auto:" + b.get("label", "?")
        tf = b.get("TFLOPs")
        if tf is None:
            continue
        key = (m["family"], m["dtype"], int(m["d"]), m["mask"] == "causal", int(m["n"]))
        chapter = "auto" if kernel.startswith("auto:") else kernel.split("/")[0]
        per_chapter = best.setdefault(key, {})
        if chapter not in per_chapter or tf > per_chapter[chapter][0]:
            per_chapter[chapter] = (float(tf), kernel)
    return best


def read_bench_json_or_exit(path, example):
    """The benchmark rows of a fa_bench JSON; exits with what is wrong when there is no file, or
    when it holds error rows instead of times (fa_bench ran without a GPU)."""
    if not os.path.exists(path):
        sys.exit(f"{path}: no such file. fa_bench writes it on the GPU to compare with (on a "
                 f"machine without a GPU it times nothing and writes no file):\n  {example}")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: not a fa_bench JSON file ({e}). fa_bench writes one with\n  {example}")
    return data.get("benchmarks", [])


def no_rows_message(path, benchmarks, what, example):
    """Why a fa_bench JSON gave no usable rows: fa_bench's own errors, or a filter that matched none."""
    errors = [b.get("error_message", "") for b in benchmarks if b.get("error_occurred")]
    if errors and len(errors) == len(benchmarks):
        reason = max(set(errors), key=errors.count) or "an error"
        rows = f"{len(errors)} row" + ("s" if len(errors) != 1 else "")
        return (f"{path}: fa_bench measured nothing ({rows}, each '{reason}'), which is "
                f"what it writes on a machine without a usable GPU. Run it on the GPU to compare "
                f"with:\n  {example}")
    return f"no {what} rows in {path}: run fa_bench with a filter that includes them:\n  {example}"


def import_torch_or_exit():
    """torch, or an exit that says how to install it (the comparison times PyTorch's SDPA)."""
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed: the comparison times its SDPA backends. Install it "
                 "with CUDA, e.g.\n  python3 -m pip install torch   (see pytorch.org for your CUDA)")
    return torch


def best_of(per_chapter):
    """(TFLOP/s, kernel) of the fastest chapter's best, or None."""
    return max(per_chapter.values()) if per_chapter else None


def attention_flops(b, h, n, d, causal, backward):
    pairs = n * (n + 1) // 2 if causal else n * n  # common/shapes.cpp: visible_pairs(), square
    f = 4.0 * b * h * d * pairs
    return 2.5 * f if backward else f


class Timer:
    """Median milliseconds of fn(), L2 flushed before every run, paced as fa_bench paces its own
    kernels (common/timing.h, time_gpu): the runs are queued one after another, each behind its
    flush, and the host waits once, after the last. sync_each=True waits after every run instead
    (this Timer's pacing before 2026-12-07), which leaves the GPU idle between runs. On an H100
    the two pacings timed cuDNN's and FlashAttention-2's forward alike: queued over waiting
    0.93-1.09x at the 36 protocol shapes, median 1.007, no direction
    (notes/measured/h100-2026-12-07c/peers_pacing_*.log)."""

    def __init__(self, torch, reps, sync_each=False, flush=True):
        self.torch = torch
        self.reps = reps
        self.sync_each = sync_each
        self.flush_each = flush  # False: no flush, the timed run may find its inputs in L2
        # A buffer twice the L2 (64 MiB at least), read (summed) before each run, as timing.h.
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 0) or 0
        self.flush = torch.zeros(max(2 * l2, 64 * 1024 * 1024) // 4, dtype=torch.float32,
                                 device="cuda")

    def __call__(self, fn):
        torch = self.torch
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        events = []
        for _ in range(self.reps):
            if self.flush_each:
                self.flush.sum()  # reads every line: L2 ends full of clean lines
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            events.append((start, stop))
            if self.sync_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        times = sorted(start.elapsed_time(stop) for start, stop in events)
        n = len(times)
        return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])


def make_inputs(torch, b, h, n, d, dtype, backward):
    """q, k, v (offset by 0.5, requiring grad for the backward) and dO, drawn from a seed of the
    shape: every side timed at a shape gets the same values."""
    g = torch.Generator(device="cuda").manual_seed(n * 131 + d)
    shape = (b, h, n, d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, generator=g).add_(0.5)
               .requires_grad_(backward) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=dtype, generator=g)
    return q, k, v, dout


def time_ours(torch, timer, fa, b, h, n, d, causal, dtype, backward):
    """TFLOP/s of fa.attention (the dispatch's kernels, through the Python package) timed by the
    same Timer as the peers, on the peers' inputs; None when it refuses the shape."""
    try:
        q, k, v, dout = make_inputs(torch, b, h, n, d, dtype, backward)
        if not backward:
            def fn():
                fa.attention(q, k, v, causal=causal)
        else:
            out = fa.attention(q, k, v, causal=causal)

            def fn():
                q.grad = k.grad = v.grad = None
                out.backward(dout, retain_graph=True)
        fn()
        torch.cuda.synchronize()
        ms = timer(fn)
        return attention_flops(b, h, n, d, causal, backward) / (ms * 1e-3) / 1e12
    except Exception as e:
        print(f"  [skip] ours {'bwd' if backward else 'fwd'} B{b} H{h} N{n} D{d} "
              f"{'causal' if causal else 'full'}: {type(e).__name__}: {str(e)[:120]}",
              file=sys.stderr)
        return None
    finally:
        torch.cuda.empty_cache()


def time_sdpa(torch, timer, backend, b, h, n, d, causal, dtype, backward):
    """TFLOP/s of one SDPA backend, or None when it is unavailable or errors."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    try:
        q, k, v, dout = make_inputs(torch, b, h, n, d, dtype, backward)
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
    ap.add_argument("--reps", type=int, default=30, help="timed runs per backend and shape")
    ap.add_argument("--sync-each-run", action="store_true",
                    help="wait for every timed run before queueing the next (this script's "
                         "pacing before 2026-12-07; see Timer)")
    ap.add_argument("--no-flush", action="store_true",
                    help="time without flushing L2 before each run (every side timed alike)")
    ap.add_argument("--ours-same-timer", action="store_true",
                    help="also time ours through the Python package (fa.attention, the "
                         "dispatch) with the peers' Timer on the peers' inputs, before and after "
                         "the peers at each shape, and print that table too: fa_bench's figure "
                         "beside it shows what the two harnesses' timing alone changes "
                         "(needs libfa_python: FA_LIBRARY, or a checkout's build/lib)")
    ap.add_argument("--include-baseline", action="store_true",
                    help="let 05/v0_materialized count as 'ours' (off: fused kernels only)")
    args = ap.parse_args()

    example = (f"./build/bin/fa_bench --benchmark_filter=attn_ --benchmark_out={args.json} "
               "--benchmark_out_format=json")
    benchmarks = read_bench_json_or_exit(args.json, example)
    ours = parse_ours(args.json, args.include_baseline)
    shapes = sorted({(d, causal, n) for (fam, t, d, causal, n) in ours
                     if t == args.dtype and fam == "attn_fwd"} |
                    {(d, causal, n) for (fam, t, d, causal, n) in ours
                     if t == args.dtype and fam == "attn_bwd"})
    if not shapes:
        sys.exit(no_rows_message(args.json, benchmarks, f"attn_fwd/attn_bwd {args.dtype}", example))
    has_bwd = any(fam == "attn_bwd" for (fam, *_rest) in ours)

    torch = import_torch_or_exit()
    from torch.nn.attention import SDPBackend

    if not torch.cuda.is_available():
        sys.exit("PyTorch sees no GPU: the comparison must run on the GPU that produced the JSON")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    timer = Timer(torch, args.reps, sync_each=args.sync_each_run, flush=not args.no_flush)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    fa = None
    if args.ours_same_timer:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "python"))  # a checkout, not installed
        import flash_from_scratch as fa

    rows = []
    for d, causal, n in shapes:
        b, h = 16384 // n, 2048 // d
        row = {"D": d, "causal": causal, "N": n, "B": b, "H": h}
        for direction, fam in (("fwd", "attn_fwd"), ("bwd", "attn_bwd")):
            if direction == "bwd" and not has_bwd:
                continue
            per_chapter = dict(ours.get((fam, args.dtype, d, causal, n), {}))
            auto = per_chapter.pop("auto", None)
            best = best_of(per_chapter)
            mine = auto or best
            row[f"ours_{direction}"] = mine[0] if mine else None
            row[f"ours_{direction}_kernel"] = mine[1] if mine else ""
            row[f"best_{direction}"] = best[0] if best else None
            row[f"best_{direction}_kernel"] = best[1] if best else ""
            row[f"chapters_{direction}"] = per_chapter  # {chapter: (TFLOP/s, kernel)}
            timed = lambda: time_ours(torch, timer, fa, b, h, n, d, causal, dtype,
                                      direction == "bwd")
            if fa is not None:  # ours, the peers, ours again: drift shows as before != after
                row[f"same_before_{direction}"] = timed()
            for name, backend in backends.items():
                row[f"{name}_{direction}"] = time_sdpa(torch, timer, backend, b, h, n, d, causal,
                                                       dtype, direction == "bwd")
            if fa is not None:
                row[f"same_after_{direction}"] = timed()
        rows.append(row)
        print(f"  measured D{d} N{n} {'causal' if causal else 'full'}", file=sys.stderr)

    gpu = torch.cuda.get_device_name()
    print(f"\nTFLOP/s on {gpu}, {args.dtype}, B = 16384/N, H = 2048/D (PyTorch {torch.__version__})\n")
    print_table(rows, has_bwd)
    if fa is not None:
        print_same_timer_table(rows, has_bwd)
    write_csv(rows, has_bwd, args.out)
    plot(rows, has_bwd, args.out, f"attention {args.dtype} on {gpu}")


def print_table(rows, has_bwd):
    """The markdown table: per direction, our best with its kernel, the two backends, and our
    ratio to each."""
    directions = ["fwd", "bwd"] if has_bwd else ["fwd"]
    head, sep = "| shape |", "| --- |"
    for t in directions:
        head += (f" ours {t} | kernel {t} | best/ours {t} | flash {t} | cudnn {t} |"
                 f" ours/flash {t} | ours/cudnn {t} |")
        sep += " ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    print(head)
    print(sep)
    for r in rows:
        line = f"| D{r['D']} N{r['N']} {'causal' if r['causal'] else 'full'} |"
        for t in directions:
            o, fl, cu = r.get(f"ours_{t}"), r.get(f"flash_{t}"), r.get(f"cudnn_{t}")
            kernel = r.get(f"ours_{t}_kernel") or "-"
            line += (f" {fmt(o)} | `{kernel}` | {ratio(r.get(f'best_{t}'), o)} | {fmt(fl)} |"
                     f" {fmt(cu)} | {ratio(o, fl)} | {ratio(o, cu)} |")
        print(line)


def same_timer(row, direction):
    """The mean of ours timed before and after the peers with their Timer, or None."""
    t = [row.get(f"same_{w}_{direction}") for w in ("before", "after")]
    t = [x for x in t if x is not None]
    return sum(t) / len(t) if t else None


def print_same_timer_table(rows, has_bwd):
    """Ours through fa.attention with the peers' Timer, next to fa_bench's figure for the same
    dispatch: where "same/fa_bench" is far from 1 the harnesses time differently, and the
    ratios to the peers are to be read from this table."""
    print("\nOurs timed as the peers are (fa.attention, the same Timer and inputs; before and "
          "after the peers at each shape)\n")
    directions = ["fwd", "bwd"] if has_bwd else ["fwd"]
    head, sep = "| shape |", "| --- |"
    for t in directions:
        head += (f" fa_bench {t} | same before {t} | same after {t} | same/fa_bench {t} |"
                 f" same/flash {t} | same/cudnn {t} |")
        sep += " ---: | ---: | ---: | ---: | ---: | ---: |"
    print(head)
    print(sep)
    for r in rows:
        line = f"| D{r['D']} N{r['N']} {'causal' if r['causal'] else 'full'} |"
        for t in directions:
            s = same_timer(r, t)
            line += (f" {fmt(r.get(f'ours_{t}'))} | {fmt(r.get(f'same_before_{t}'))} |"
                     f" {fmt(r.get(f'same_after_{t}'))} | {ratio(s, r.get(f'ours_{t}'))} |"
                     f" {ratio(s, r.get(f'flash_{t}'))} | {ratio(s, r.get(f'cudnn_{t}'))} |")
        print(line)


def chapters_of(rows, direction):
    """The chapters with a kernel in `direction`, in order ("05", "07")."""
    return sorted({c for r in rows for c in r.get(f"chapters_{direction}", {})})


def write_csv(rows, has_bwd, out):
    directions = ["fwd", "bwd"] if has_bwd else ["fwd"]
    fields = ["D", "causal", "N", "B", "H"]
    for t in directions:
        fields += [f"ours_{t}", f"ours_{t}_kernel", f"best_{t}", f"best_{t}_kernel",
                   f"flash_{t}", f"cudnn_{t}", f"ours_over_flash_{t}", f"ours_over_cudnn_{t}"]
        if any(f"same_before_{t}" in r for r in rows):
            fields += [f"same_before_{t}", f"same_after_{t}"]
        for c in chapters_of(rows, t):  # each chapter's best, e.g. ch05_fwd, ch05_fwd_kernel
            fields += [f"ch{c}_{t}", f"ch{c}_{t}_kernel"]
    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, "sdpa_compare.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            flat = dict(r)
            for t in directions:
                o = r.get(f"ours_{t}")
                flat[f"ours_over_flash_{t}"] = ratio(o, r.get(f"flash_{t}"))
                flat[f"ours_over_cudnn_{t}"] = ratio(o, r.get(f"cudnn_{t}"))
                for c, (tf, kernel) in r.get(f"chapters_{t}", {}).items():
                    flat[f"ch{c}_{t}"], flat[f"ch{c}_{t}_kernel"] = tf, kernel
            w.writerow({k: ("" if flat.get(k) is None or flat.get(k) == "-" else flat.get(k))
                        for k in fields})
    print(f"\nwrote {csv_path}", file=sys.stderr)


def plot(rows, has_bwd, out, title):
    """One panel per (direction, D, mask): a line per chapter's best kernel (the legend names the
    kernels behind it) and one per SDPA backend, TFLOP/s against N."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"matplotlib unavailable ({e}): skipped the plot (the table and the CSV are "
              f"complete)", file=sys.stderr)
        return
    panels = sorted({(r["D"], r["causal"]) for r in rows})
    directions = ["fwd", "bwd"] if has_bwd else ["fwd"]
    fig, axes = plt.subplots(len(directions), len(panels), squeeze=False,
                             figsize=(5.0 * len(panels), 3.9 * len(directions)))
    markers = "oDvP*X"
    for col, (d, causal) in enumerate(panels):
        sel = sorted((r for r in rows if r["D"] == d and r["causal"] == causal),
                     key=lambda r: r["N"])
        for row_i, t in enumerate(directions):
            ax = axes[row_i][col]
            for i, c in enumerate(chapters_of(sel, t)):
                pts = [(r["N"],) + r[f"chapters_{t}"][c] for r in sel
                       if c in r.get(f"chapters_{t}", {})]
                if not pts:
                    continue
                kernels = []
                for _, _, k in pts:  # the kernels behind the line, in the order of N
                    if k not in kernels:
                        kernels.append(k)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], markers[i % len(markers)] + "-",
                        label=f"ours {c}: " + ", ".join(kernels))
            for who, style in (("flash", "s--"), ("cudnn", "^:")):
                pts = [(r["N"], r.get(f"{who}_{t}")) for r in sel
                       if r.get(f"{who}_{t}") is not None]
                if pts:
                    label = "PyTorch FlashAttention-2" if who == "flash" else "PyTorch cuDNN"
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{t} D{d} {'causal' if causal else 'full'}")
            ax.set_xlabel("N")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    png = os.path.join(out, "sdpa_compare.png")
    fig.savefig(png, dpi=120)
    print(f"wrote {png}", file=sys.stderr)

if __name__ == "__main__":
    main()
