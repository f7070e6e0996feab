#!/usr/bin/env python3
"""Attention in plain PyTorch ops, checked and timed with flash_from_scratch's tools.

    python3 python/examples/naive_attention.py [--dtype bf16] [--no-bench]

(with the package installed, README "From PyTorch"; from a checkout without installing it,
PYTHONPATH=python in front).

my_attention is the textbook computation: S = scale * Q K^T, the bottom-right causal mask, softmax,
O = P V. It materialises S (Nq x Nk per head), which FlashAttention never does. Replace its body
with your own (a Triton kernel, another library) and rerun: check_attention compares it with
float64 on the repository's ragged shapes, forward and gradients, with the tolerance rule of
notes/conventions.md; bench_attention times it next to our kernel and PyTorch's SDPA (and, with
FA_PYTHON_OUT set, writes the table to $FA_PYTHON_OUT/bench_attention.csv).
"""
import argparse
import math
import os
import sys

try:
    import torch
except ImportError:
    sys.exit("naive_attention.py needs PyTorch, which is not installed. Install it (with CUDA for "
             "the checks to run), e.g.\n  python3 -m pip install torch pytest\n"
             "then rerun: python3 python/examples/naive_attention.py")

try:
    import flash_from_scratch as fa
except ImportError:
    sys.exit("flash_from_scratch not found: install it (python3 -m pip install --no-build-isolation "
             ". in the repository), or run from the repository root with PYTHONPATH=python, e.g.\n"
             "  PYTHONPATH=python python3 python/examples/naive_attention.py")
from flash_from_scratch.bench import write_csv  # noqa: E402  (after the checks above)


def my_attention(q, k, v, causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:  # bottom-right: query i sees keys j <= i + (Nk - Nq)
        nq, nk = q.shape[-2], k.shape[-2]
        i = torch.arange(nq, device=q.device).unsqueeze(1)
        j = torch.arange(nk, device=q.device).unsqueeze(0)
        s = s.masked_fill(j > i + (nk - nq), float("-inf"))
    p = torch.softmax(s.float(), dim=-1).to(q.dtype)
    # A row that sees no key (causal, Nq > Nk) is all -inf: softmax gives NaN, the convention is 0.
    p = torch.nan_to_num(p, nan=0.0)
    return torch.matmul(p, v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--no-bench", action="store_true", help="check only")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to check")
        return 0
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    print("GPU:", fa.describe_gpu())
    fa.check_attention(my_attention, dtypes=(dtype,))
    print("my_attention: every check passed")
    if not args.no_bench:
        rows = fa.bench_attention(my_attention, dtype=dtype, name="my_attention",
                                  shapes=[(4, 16, 1024, 1024, 64), (1, 16, 4096, 4096, 128)])
        out = os.environ.get("FA_PYTHON_OUT")  # bench/device_run.sh keeps the table
        if out:
            os.makedirs(out, exist_ok=True)
            labels = [key for key in rows[0] if key not in ("shape", "causal", "dtype", "errors")]
            write_csv(rows, labels, os.path.join(out, "bench_attention.csv"))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except fa.LibraryNotFound as e:  # the kernels' library is not built (or FA_LIBRARY is wrong)
        sys.exit(str(e))
