#!/usr/bin/env python3
"""What a PyTorch user gets: fa.attention() forward + backward, end to end, beside SDPA.

    python3 bench/attention_e2e.py                       # B 4, H 16, N 4096, D 128, bf16
    python3 bench/attention_e2e.py --shape 2,16,8192,128 --pair 07/v5_persistent:07/bwd_v1_tma_wgmma
    python3 bench/attention_e2e.py --csv out/e2e.csv
    python3 bench/attention_e2e.py --trace out/traces     # + one call's timeline, host and GPU
    python3 bench/attention_e2e.py --host                 # + the host's time inside one call
    python3 bench/attention_e2e.py --window 1024 --pair 09/v2_window:09/bwd_v7_window_grouped

Each column is one way to compute softmax(Q K^T / sqrt(D)) V and its gradients from PyTorch:
  auto                 fa.attention(q, k, v) with its defaults (the dispatch's choice, fa.explain)
  FWD:BWD              fa.attention(..., kernel=FWD, kernel_bwd=BWD): a named kernel pair
  sdpa-flash, sdpa-cudnn   torch's scaled_dot_product_attention with one backend forced
Every column is timed on the same tensors in the same process: CUDA events around one
forward + backward (torch.autograd.grad of O with a fixed dO), 3 warm-up calls, the L2 flushed
before each timed call (flash_from_scratch.bench.Timer, as common/timing.h), the median of
--repeats; with --rounds R the columns are timed R times in turn and each reports the median of
its R medians (and their spread). So the times include what a user pays besides the kernels: the
allocations, the backward's preprocess and scratch, the Python layer. TFLOP/s count 4 * B * H * D
per visible (query, key) pair for the forward and 2.5 times that for the backward (3.5 in all).
With --window W every column attends through a sliding window of W keys: causal rows see keys
d - W + 1 .. d (window (W - 1, 0)), full rows d - W + 1 .. d + W - 1 (window (W - 1, W - 1)), d
the row's diagonal; SDPA has no such kernel, so its columns read "-" and the ratios go against
the first named pair instead, and the FLOPs count the visible pairs of the window.
"peak MiB" is what one forward + backward allocated at its peak beyond the inputs
(torch.cuda.max_memory_allocated): with grouped K/V heads it shows whether a backward repeats K
and V over the group or reads them in place.
"""
import argparse
import csv
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # a checkout, not installed


def profile_kernels(torch, step, label, timed_ms, iterations=5):
    """Lists the GPU kernels of `step` (torch.profiler, `iterations` calls after one warm-up):
    time per call of each, their sum, and the timed total it is read against."""
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            step()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(e.name, [0, 0.0])
            k[0] += 1
            k[1] += e.time_range.elapsed_us()
    print("profile %s: the GPU's work per forward + backward" % label)
    total = 0.0
    for name, (count, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1]):
        total += us / iterations
        print("  %9.1f us  %5.2f per call  %s" % (us / iterations, count / iterations, name[:110]))
    print("  %9.1f us  in all, against %.1f us timed (the rest: the GPU waiting)" % (
        total, timed_ms * 1e3))


def trace_call(torch, step, flush, label, path):
    """One timed call of `step` as the Timer times it (L2 flushed, CUDA events around it) under
    torch.profiler: writes the Chrome trace to `path` and prints the timeline, the host's CUDA
    calls and autograd's nodes beside the GPU's kernels, in microseconds from the start event, so
    that a gap on the GPU can be read against what the host was doing then."""
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        flush()
        start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        step()
        stop.record()
        stop.synchronize()
    prof.export_chrome_trace(path)
    rows = []
    for e in prof.events():
        on_gpu = e.device_type == torch.autograd.DeviceType.CUDA
        if on_gpu or e.name.startswith(("cuda", "cu", "autograd::engine")):
            rows.append((e.time_range.start, e.time_range.elapsed_us(), on_gpu, e.name))
    rows.sort()
    t0 = next((t for t, _, gpu, name in rows if not gpu and name == "cudaEventRecord"), rows[0][0])
    print("timeline %s: us from the start event; GPU rows indented (%s)" % (label, path))
    for t, us, gpu, name in rows:
        print("  %s%8.1f %8.1f  %s" % ("          " if gpu else "", t - t0, us, name[:90]))
    print("  timed: %.1f us" % (start.elapsed_time(stop) * 1e3))


def host_split(torch, fwd, bwd, calls=20):
    """The host's side of one forward + backward at this shape, the GPU idle at its start (as the
    Timer leaves it): medians over `calls` of the wall time until the forward call returns, then
    until autograd.grad returns, then until the GPU is done. A host path that waits on the GPU
    somewhere (a synchronous copy, an allocation that frees) shows as a backward return close to
    the GPU's time; one that only issues work returns within tens of microseconds."""
    import time
    marks = []
    for _ in range(calls + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        o = fwd()
        t1 = time.perf_counter()
        bwd(o)
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        marks.append(((t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t0) * 1e6))
    marks = marks[3:]  # the warm-up calls
    return tuple(statistics.median(m[i] for m in marks) for i in range(3))


def peak_bytes(torch, step):
    """The bytes one call of `step` allocated at its peak beyond what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="4,16,4096,128", help="B,H,N,D (default 4,16,4096,128)")
    p.add_argument("--heads_kv", type=int, default=0, help="K/V heads (0: as many as H)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--pair", action="append", default=[],
                   help="FWD:BWD kernel pair to time beside the defaults (repeatable)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1,
                   help="time every column this many times, the columns alternating, and report "
                        "each column's median over the rounds (the host's share of a call varies "
                        "by about 0.1 ms from one timing to the next on an H200's host)")
    p.add_argument("--window", type=int, default=0,
                   help="a sliding window of this many keys (0: none; see above)")
    p.add_argument("--csv", help="write the table as CSV here")
    p.add_argument("--profile", action="store_true",
                   help="then, for auto and sdpa-cudnn, list the GPU kernels of one forward + "
                        "backward (torch.profiler): their time beside the timed total shows the "
                        "time the GPU waits on the host")
    p.add_argument("--trace", metavar="DIR",
                   help="then, for auto and sdpa-cudnn, one call's timeline (trace_call): printed, "
                        "and as Chrome traces in DIR")
    p.add_argument("--host", action="store_true",
                   help="then, for every column, the host's time to return from the forward and "
                        "from autograd.grad, and the wall time of the call (host_split)")
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flash_from_scratch as fa
    from flash_from_scratch.bench import Timer
    from flash_from_scratch.reference import window_pairs

    if not torch.cuda.is_available():
        print("attention_e2e: no CUDA GPU visible to torch")
        return 1
    b, h, n, d = (int(x) for x in args.shape.split(","))
    hkv = args.heads_kv or h
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    timer = Timer("cuda", args.repeats)
    print("attention_e2e on %s, torch %s; B %d, H %d, H_kv %d, N %d, D %d, %s%s" % (
        torch.cuda.get_device_name(), torch.__version__, b, h, hkv, n, d, args.dtype,
        ", window %d" % args.window if args.window else ""))

    def window(causal):
        if not args.window:
            return (-1, -1)
        return (args.window - 1, 0 if causal else args.window - 1)

    def ours(fwd=None, bwd=None):
        def f(q, k, v, causal):
            if fwd is None:
                return fa.attention(q, k, v, causal=causal, window=window(causal))
            return fa.attention(q, k, v, causal=causal, kernel=fwd, kernel_bwd=bwd,
                                window=window(causal))
        return f

    def sdpa(backend):
        def f(q, k, v, causal):
            if args.window:
                raise RuntimeError("SDPA has no sliding-window kernel")
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                      enable_gqa=hkv != h)
        return f

    columns = [("auto", ours())]
    for pair in args.pair:
        fwd, _, bwd = pair.partition(":")
        columns.append((pair, ours(fwd, bwd or None)))
    columns += [("sdpa-flash", sdpa(SDPBackend.FLASH_ATTENTION)),
                ("sdpa-cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))]

    rows, host_rows = [], []
    for causal in (False, True):
        g = torch.Generator(device="cuda").manual_seed(20261201)
        q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g) + 0.5
        k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=dtype, generator=g) + 0.5
                for _ in range(2))
        do = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
        for t in (q, k, v):
            t.requires_grad_(True)
        flops = 4.0 * b * h * d * window_pairs(n, n, causal, window(causal))
        samples = {label: {"fwd_ms": [], "fwd_bwd_ms": []} for label, _ in columns}
        peaks = {}
        errors = {}
        for r in range(args.rounds):
            for label, f in columns:
                if label in errors:
                    continue

                def fwd_only(f=f):
                    with torch.no_grad():
                        f(q, k, v, causal)

                def fwd_bwd(f=f):
                    o = f(q, k, v, causal)
                    torch.autograd.grad(o, (q, k, v), do)
                try:
                    samples[label]["fwd_ms"].append(timer(fwd_only))
                    samples[label]["fwd_bwd_ms"].append(timer(fwd_bwd))
                except Exception as e:  # a column that cannot run here reads "-", never fatal
                    errors[label] = str(e).splitlines()[0]
                    continue
                if r == 0:
                    peaks[label] = peak_bytes(torch, fwd_bwd)
                if r == 0 and args.trace and label in ("auto", "sdpa-cudnn"):
                    os.makedirs(args.trace, exist_ok=True)
                    tag = "%s_%s" % (label, "causal" if causal else "full")
                    trace_call(torch, fwd_bwd, timer.flush_buf.sum, tag,
                               os.path.join(args.trace, "trace_%s.json" % tag))
                if r == 0 and args.host:
                    hs = host_split(torch, lambda f=f: f(q, k, v, causal),
                                    lambda o: torch.autograd.grad(o, (q, k, v), do))
                    host_rows.append((label, "causal" if causal else "full") + hs)
                if (r == 0 and args.profile and label in ("auto", "sdpa-cudnn")):
                    profile_kernels(torch, fwd_bwd, "%s, %s" % (label, "causal" if causal else
                                                                "full"),
                                    samples[label]["fwd_bwd_ms"][0])
        for label, _ in columns:
            row = {"mask": "causal" if causal else "full", "column": label}
            if label in errors:
                row["error"] = errors[label]
            else:
                row["fwd_ms"] = statistics.median(samples[label]["fwd_ms"])
                row["fwd_bwd_ms"] = statistics.median(samples[label]["fwd_bwd_ms"])
                row["fwd_tflops"] = flops / (row["fwd_ms"] * 1e-3) / 1e12
                row["fwd_bwd_tflops"] = 3.5 * flops / (row["fwd_bwd_ms"] * 1e-3) / 1e12
                row["peak_mib"] = peaks[label] / 2**20
                if args.rounds > 1:
                    row["spread"] = "%.3f-%.3f" % (min(samples[label]["fwd_bwd_ms"]),
                                                   max(samples[label]["fwd_bwd_ms"]))
            if label == "auto" and hasattr(fa, "explain"):
                row["kernels"] = "; ".join(fa.explain(q, k, v, causal=causal, window=window(causal),
                                                       brief=True))
            rows.append(row)

    peers = ("sdpa-flash", "sdpa-cudnn")
    if args.window and args.pair:  # no SDPA window: the ratios go against the first named pair
        peers = (args.pair[0],)
    print("| mask | column | forward ms | fwd+bwd ms | fwd+bwd TFLOP/s | peak MiB | %s |" %
          " | ".join("vs " + peer for peer in peers))
    print("| --- | --- | ---: | ---: | ---: | ---: |%s" % (" ---: |" * len(peers)))
    for r in rows:
        ref = {x["column"]: x for x in rows if x["mask"] == r["mask"]}
        if "error" in r:
            print("| %s | %s | - | - | - | - |%s  (%s)" % (r["mask"], r["column"],
                                                        " - |" * len(peers), r["error"]))
            continue
        ratios = []
        for peer in peers:
            pr = ref.get(peer, {})
            ratios.append("%.2fx" % (pr["fwd_bwd_ms"] / r["fwd_bwd_ms"]) if "fwd_bwd_ms" in pr
                          else "-")
        print("| %s | %s | %.3f | %.3f | %.1f | %.0f | %s |" % (
            r["mask"], r["column"], r["fwd_ms"], r["fwd_bwd_ms"], r["fwd_bwd_tflops"],
            r["peak_mib"], " | ".join(ratios)))
    for r in rows:
        if r.get("kernels"):
            print("auto, %s: %s" % (r["mask"], r["kernels"]))
    if args.rounds > 1:
        print("fwd+bwd ms over %d rounds (min-max of the rounds' medians):" % args.rounds)
        for r in rows:
            if r.get("spread"):
                print("  %s, %s: %s" % (r["mask"], r["column"], r["spread"]))
    if host_rows:
        print("host_split: us, medians of 20 calls, each from an idle GPU")
        print("| mask | column | forward returns | autograd.grad returns | GPU done |")
        print("| --- | --- | ---: | ---: | ---: |")
        for label, mask, f_us, b_us, all_us in host_rows:
            print("| %s | %s | %.1f | %.1f | %.1f |" % (mask, label, f_us, b_us, all_us))
    if args.csv:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        fields = ["mask", "column", "fwd_ms", "fwd_bwd_ms", "fwd_tflops", "fwd_bwd_tflops",
                  "peak_mib", "spread", "kernels", "error"]
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for r in rows:
                w.writerow({k: ("%.4f" % r[k] if isinstance(r.get(k), float) else r.get(k, ""))
                            for k in fields})
    return 0


if __name__ == "__main__":
    sys.exit(main())
