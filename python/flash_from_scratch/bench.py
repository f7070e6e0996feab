"""bench_attention(fn): your attention's time next to this repository's kernel and PyTorch SDPA.

Timed like common/timing.h: CUDA events around the call only, 3 warm-up calls, the L2 cache
flushed (a buffer of twice its size read, which leaves no dirty lines behind) before every timed
call, the median of `repeats` calls. TFLOP/s count 4 * B * H * D per visible (query, key) pair for the forward (shapes.h);
with backward=True each timed call is forward + backward, counted as 1 + 2.5 = 3.5 times that.
"""
import math

import torch

from .reference import attention_flops

DEFAULT_SHAPES = [(4, 16, 1024, 1024, 64), (2, 16, 4096, 4096, 128)]


class Timer:
    def __init__(self, device="cuda", repeats=20, warmup=3):
        self.repeats, self.warmup = repeats, warmup
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or 64 * 1024 * 1024
        self.flush_buf = torch.zeros(2 * l2 // 4, dtype=torch.float32, device=device)

    def __call__(self, fn):
        """Median milliseconds of fn()."""
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.repeats):
            self.flush_buf.sum()  # evicts fn's inputs from L2, leaves clean lines (timing.h)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        times.sort()
        n = len(times)
        return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])


def _sdpa(q, k, v, causal, scale):
    import torch.nn.functional as F
    nq, nk = q.shape[-2], k.shape[-2]
    if causal and nq != nk:  # SDPA's is_causal is top-left: give the bottom-right mask itself
        from .reference import causal_mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~causal_mask(nq, nk, q.device),
                                              scale=scale)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def bench_attention(fn, shapes=None, dtype=torch.bfloat16, causal=(False, True), backward=False,
                    kernel=None, kernel_bwd=None, name="yours", repeats=20, device="cuda",
                    verbose=True):
    """Times fn(q, k, v, causal=bool, scale=None) on each (B, H, Nq, Nk, D) in `shapes`, next to
    attention(kernel=...) of this repository and torch's scaled_dot_product_attention. Returns
    the rows (dicts, ms and TFLOP/s per column; None where a column could not run) and prints
    the table."""
    from . import ops
    from .names import AUTO

    shapes = DEFAULT_SHAPES if shapes is None else shapes
    kernel = AUTO if kernel is None else kernel  # the dispatch's choice, as attention() makes it
    kernel_bwd = AUTO if kernel_bwd is None else kernel_bwd
    timer = Timer(device, repeats)
    columns = [(name, fn),
               ("ours " + kernel, lambda q, k, v, causal, scale: ops.attention(
                   q, k, v, causal=causal, scale=scale, kernel=kernel, kernel_bwd=kernel_bwd)),
               ("SDPA", _sdpa)]
    rows = []
    for (b, h, nq, nk, d) in shapes:
        for c in causal:
            g = torch.Generator(device=device).manual_seed(1)
            q, k, v = (torch.randn(b, h, n, d, device=device, dtype=dtype, generator=g)
                       .requires_grad_(backward) for n in (nq, nk, nk))
            do = torch.randn(b, h, nq, d, device=device, dtype=dtype, generator=g)
            flops = attention_flops(b, h, nq, nk, d, c, backward=False) * (3.5 if backward else 1)
            row = {"shape": "B=%d H=%d Nq=%d Nk=%d D=%d" % (b, h, nq, nk, d), "causal": c,
                   "dtype": str(dtype)[6:]}
            for label, f in columns:
                def call(f=f):
                    out = f(q, k, v, causal=c, scale=None)
                    out = out[0] if isinstance(out, (tuple, list)) else out
                    if backward:
                        torch.autograd.grad(out, (q, k, v), do)
                try:
                    ms = timer(call)
                    row[label] = (ms, flops / (ms * 1e-3) / 1e12)
                except Exception as e:  # a column that cannot run this shape reads "-"
                    row[label] = None
                    row.setdefault("errors", []).append("%s: %s" % (label, str(e).splitlines()[0]))
            rows.append(row)
    if verbose:
        print(format_table(rows, [c[0] for c in columns], backward))
    return rows


def format_table(rows, labels, backward=False):
    what = "forward + backward" if backward else "forward"
    head = "%-34s %-6s" % ("shape (%s, %s)" % (what, rows[0]["dtype"] if rows else ""), "causal")
    for label in labels:
        head += " | %30s" % ("%s ms  TFLOP/s" % label[:18])
    lines = [head]
    for r in rows:
        line = "%-34s %-6s" % (r["shape"], r["causal"])
        for label in labels:
            cell = r.get(label)
            line += " | %30s" % ("-" if cell is None else "%9.3f  %7.1f" % cell)
        lines.append(line)
        for e in r.get("errors", []):
            lines.append("    " + e)
    return "\n".join(lines)


def write_csv(rows, labels, path):
    """The table as CSV: shape, causal, then ms and TFLOP/s per column."""
    import csv
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["shape", "causal"] + [x for l in labels for x in (l + " ms", l + " TFLOP/s")])
        for r in rows:
            cells = []
            for l in labels:
                cells += ["", ""] if r.get(l) is None else ["%.4f" % r[l][0], "%.2f" % r[l][1]]
            w.writerow([r["shape"], r["causal"]] + cells)
