#!/usr/bin/env python3
"""Compare this repository's decoding kernels with PyTorch's SDPA backends on the same GPU.

Reads the Google Benchmark JSON written by fa_bench, e.g.

    build/bin/fa_bench --benchmark_filter='attn_decode|ceiling' --benchmark_out=decode.json \
        --benchmark_out_format=json

(names look like "attn_decode/08/v1_split_kv/bf16/D128/B8_H32_Hkv8/Nq1/Nk32768", counters "GBps"
and "pct_of_copy"; "ceiling/copy_bandwidth" gives the copy ceiling measured in that run), then times
torch.nn.functional.scaled_dot_product_attention with the FlashAttention and cuDNN backends on the
same decode shapes, in this run, and prints one markdown table with GB/s (a CSV goes to --out).

Bytes are counted as fa_bench counts them (common/harness.h, attention_fwd_min_bytes): Q, K, V read
once, O written once in the dtype, L in fp32, K and V with H_kv heads. Grouped shapes (H_kv < H) go
to SDPA with enable_gqa=True where this PyTorch has it; otherwise K and V are repeated to H heads
before timing (the table says so), and SDPA then reads H / H_kv times the bytes it is credited with.
Shapes are not causal: with one query row PyTorch's top-left is_causal would hide all keys but one.
A backend that errors is skipped (its cell reads "-"), never fatal.
"""
import argparse
import csv
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_sdpa import Timer  # noqa: E402  (median of CUDA-event timings, L2 flushed)
from compare_sdpa import import_torch_or_exit, no_rows_message, read_bench_json_or_exit  # noqa: E402

NAME_RE = re.compile(
    r"^attn_decode/(?P<kernel>.+)/(?P<dtype>fp32|bf16|fp16)/D(?P<d>\d+)/"
    r"B(?P<b>\d+)_H(?P<h>\d+)_Hkv(?P<hkv>\d+)/Nq(?P<nq>\d+)/Nk(?P<nk>\d+)(?:/.*)?$")

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def decode_bytes(b, h, hkv, nq, nk, d, dtype):
    el = DTYPE_BYTES[dtype]
    return (2 * b * h * nq * d + 2 * b * hkv * nk * d) * el + b * h * nq * 4


def parse_ours(path):
    """({shape: [(GB/s, ms, kernel)], best first}, copy ceiling GB/s or None) from fa_bench JSON."""
    with open(path) as f:
        data = json.load(f)
    rows, ceiling = {}, None
    for bm in data.get("benchmarks", []):
        name = bm.get("name", "")
        if name.startswith("ceiling/copy_bandwidth") and not bm.get("error_occurred"):
            ceiling = bm.get("GBps")
        m = NAME_RE.match(name)
        if not m or bm.get("error_occurred") or bm.get("GBps") is None:
            continue
        shape = (m["dtype"], int(m["d"]), int(m["b"]), int(m["h"]), int(m["hkv"]), int(m["nq"]),
                 int(m["nk"]))
        ms = float(bm.get("real_time", 0.0))  # fa_bench reports milliseconds
        rows.setdefault(shape, []).append((float(bm["GBps"]), ms, m["kernel"]))
    for v in rows.values():
        v.sort(reverse=True)
    return rows, ceiling


def time_sdpa(torch, timer, backend, shape, has_enable_gqa):
    """(ms, how GQA was passed) of one SDPA backend, or (None, why) when it errors."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    dtype_name, d, b, h, hkv, nq, nk = shape
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    try:
        g = torch.Generator(device="cuda").manual_seed(nk * 7 + h)
        q = torch.randn((b, h, nq, d), device="cuda", dtype=dtype, generator=g).add_(0.5)
        k, v = (torch.randn((b, hkv, nk, d), device="cuda", dtype=dtype, generator=g).add_(0.5)
                for _ in range(2))
        how, kwargs = "", {}
        if hkv != h:
            if has_enable_gqa:
                how, kwargs = "enable_gqa", {"enable_gqa": True}
            else:
                how = "K/V repeated to H heads"
                k = k.repeat_interleave(h // hkv, dim=1)
                v = v.repeat_interleave(h // hkv, dim=1)
        with sdpa_kernel(backend):
            def fn():
                F.scaled_dot_product_attention(q, k, v, **kwargs)
            fn()  # raises here if the backend refuses the shape
            torch.cuda.synchronize()
            return timer(fn), how
    except Exception as e:  # a backend that is missing or refuses: skip it, say why
        print(f"  [skip] {backend} {shape}: {type(e).__name__}: {str(e)[:160]}", file=sys.stderr)
        return None, ""
    finally:
        torch.cuda.empty_cache()


def sdpa_has_enable_gqa(torch):
    import torch.nn.functional as F
    try:
        q = torch.zeros((1, 2, 1, 64), device="cuda", dtype=torch.float16)
        k = torch.zeros((1, 1, 4, 64), device="cuda", dtype=torch.float16)
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
        return True
    except Exception:  # TypeError before PyTorch 2.5
        return False


def gbps(nbytes, ms):
    return None if ms is None or ms <= 0 else nbytes / (ms * 1e-3) / 1e9


def fmt(x, prec=1):
    return "-" if x is None else f"{x:.{prec}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="Google Benchmark JSON written by fa_bench (attn_decode rows)")
    ap.add_argument("--out", default="decode_compare", help="directory for the CSV")
    ap.add_argument("--reps", type=int, default=30, help="timed runs without Triton's do_bench")
    args = ap.parse_args()

    example = ("./build/bin/fa_bench --benchmark_filter='attn_decode|ceiling' "
               f"--benchmark_out={args.json} --benchmark_out_format=json")
    benchmarks = read_bench_json_or_exit(args.json, example)
    ours, ceiling = parse_ours(args.json)
    if not ours:
        sys.exit(no_rows_message(args.json, benchmarks, "attn_decode", example))

    torch = import_torch_or_exit()
    from torch.nn.attention import SDPBackend

    if not torch.cuda.is_available():
        sys.exit("PyTorch sees no GPU: the comparison must run on the GPU that produced the JSON")
    timer = Timer(torch, args.reps)
    has_gqa = sdpa_has_enable_gqa(torch)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}

    rows = []
    for shape in sorted(ours):
        dtype, d, b, h, hkv, nq, nk = shape
        nbytes = decode_bytes(b, h, hkv, nq, nk, d, dtype)
        best_gbps, best_ms, best_kernel = ours[shape][0]
        row = {"dtype": dtype, "D": d, "B": b, "H": h, "H_kv": hkv, "Nq": nq, "Nk": nk,
               "ours_kernel": best_kernel, "ours_ms": best_ms, "ours_gbps": best_gbps, "gqa_via": ""}
        for name, backend in backends.items():
            ms, how = time_sdpa(torch, timer, backend, shape, has_gqa)
            row[f"{name}_ms"], row[f"{name}_gbps"] = ms, gbps(nbytes, ms)
            row["gqa_via"] = row["gqa_via"] or how
        row["others"] = "; ".join(f"{k} {g:.0f}" for g, _, k in ours[shape][1:])
        rows.append(row)
        print(f"  measured {shape}", file=sys.stderr)

    gpu = torch.cuda.get_device_name()
    print(f"\nDecoding on {gpu} (PyTorch {torch.__version__}): GB/s of Q, K, V, O, L "
          f"(K, V with H_kv heads)" + (f"; copy ceiling {ceiling:.0f} GB/s" if ceiling else "") + "\n")
    pct = (lambda g: "-" if g is None or not ceiling else f"{100.0 * g / ceiling:.1f}%")
    print("| shape | ours (best kernel) | ours ms | ours GB/s | % copy | flash ms | flash GB/s "
          "| % copy | cudnn ms | cudnn GB/s | % copy | GQA in SDPA |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| B{r['B']} H{r['H']} Hkv{r['H_kv']} Nq{r['Nq']} Nk{r['Nk']} D{r['D']} {r['dtype']} "
              f"| {r['ours_kernel']} | {fmt(r['ours_ms'], 4)} | {fmt(r['ours_gbps'], 0)} "
              f"| {pct(r['ours_gbps'])} | {fmt(r['flash_ms'], 4)} | {fmt(r['flash_gbps'], 0)} "
              f"| {pct(r['flash_gbps'])} | {fmt(r['cudnn_ms'], 4)} | {fmt(r['cudnn_gbps'], 0)} "
              f"| {pct(r['cudnn_gbps'])} | {r['gqa_via'] or '-'} |")
    for r in rows:
        if r["others"]:
            print(f"\nother kernels at B{r['B']} H{r['H']} Hkv{r['H_kv']} Nk{r['Nk']} (GB/s): "
                  f"{r['others']}")
    if any(r["gqa_via"].startswith("K/V repeated") for r in rows):
        print("\nThis PyTorch has no enable_gqa: SDPA ran on K/V repeated to H heads (the repeat "
              "is not timed); its GB/s still counts H_kv heads, the bytes the problem needs.")

    os.makedirs(args.out, exist_ok=True)
    fields = ["dtype", "D", "B", "H", "H_kv", "Nq", "Nk", "ours_kernel", "ours_ms", "ours_gbps",
              "flash_ms", "flash_gbps", "cudnn_ms", "cudnn_gbps", "gqa_via"]
    path = os.path.join(args.out, "decode_compare.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    print(f"\nwrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
