#!/usr/bin/env python3
"""Chapter 09's serving shapes: our kernels next to PyTorch's, timed in one run on one GPU.

    FA_LIBRARY=build/lib/libfa_python.so PYTHONPATH=python python3 bench/compare_serving.py \
        --out OUT   [--parts varlen,window,paged,prefill] [--reps 30] [--reverse] [--rounds 1]

Run it on the GPU machine after fa_bench (whose attn_varlen / attn_window / attn_paged rows time
the same kernels through the harness). It times, with CUDA events around each call only, 3
warm-up calls, the L2 cache flushed before every timed call exactly as bench/compare_sdpa.py
flushes it (its Timer: a buffer of twice the L2 read, leaving clean lines; the timed calls
queued one after another as fa_bench queues its runs), the median of --reps calls:

(a) varlen: a batch of seeded lengths 1..5000 summing to 32768 tokens, H 16, D 128, bf16, causal
    and not. Ours: every registered varlen forward kernel (chapter 09's) on tensors already packed
    head-major (flash_from_scratch.serving.varlen_fwd_into: kernel time only, no layout copy).
    Peers: FlexAttention (torch.compile'd flex_attention, a document block mask built once,
    untimed), SDPA on the batch padded to its longest sequence (positions past a sequence's end
    computed and thrown away, no padding mask: what padding costs), PyTorch's own varlen
    attention (torch.nn.attention.varlen.varlen_attn) where this PyTorch has it, and
    FlashAttention's flash_attn_varlen_func where the flash_attn package is installed.
(b) sliding window: B 1, H 16, N 32768, D 128, bf16, causal, W 4096 keys per query
    (FlashAttention's window (4095, 0): the diagonal and 4095 keys before it). Ours: the window
    kernels (09/v2_window, ...) and the full causal kernel (09/v1_varlen) on the same shape,
    forward, and the backward kernels (09/bwd_v2_window; 09/bwd_v1_varlen full causal). Peers:
    FlexAttention with a sliding-window block mask (and full causal), varlen_attn's window_size
    where this PyTorch has it, SDPA's full causal for scale; forward and backward (backward
    alone, on a retained graph, as compare_sdpa.py times it).
(c) paged decoding: B 8, H 32, H_kv 8, seq_k 32768, seq_q 1, D 128, bf16, pages of 16, 64 and
    256 keys in a shuffled order. Ours: the paged kernels against 08/v5_swizzled_ring on the same
    keys in a contiguous cache ([B, H, 1, D] against [B, H_kv, N, D]); GB/s of the bytes the
    problem must move (PagedShape::min_bytes: Q and O once, each sequence's K and V once, L).
    Peers where this PyTorch or flash_attn has a paged path (varlen_attn's block_table,
    flash_attn_with_kvcache), and SDPA on the contiguous cache (enable_gqa).
(d) paged chunked prefill: the same cache (D 128, and D 80, a head dim between the instances),
    each sequence's last 512 tokens as queries, causal bottom-right (query i sees keys up to
    i + 32768 - 512). Ours: the paged kernels that take chunks (not the decoding ones), pages of
    16, 64 and 256 keys; TFLOP/s on the visible pairs. Peers on the contiguous cache: SDPA with
    torch.nn.attention.bias.causal_lower_right, each backend forced (FlashAttention-2, cuDNN),
    K and V repeated to the query heads outside the timing (SDPA's bottom-right mask takes no
    enable_gqa); flash_attn_with_kvcache on the pages where flash_attn is installed.

FLOPs count 4 * H * D per visible (query, key) pair (shapes.h), summed over sequences; the
backward 2.5x that. TFLOP/s of every row of a table count the pairs of the problem that table
states (so the full causal kernel of (b) is credited with the full causal pairs, and its time is
what the window saves). A peer that is missing or fails prints why and reads "-": never fatal.
Writes serving_compare.csv and serving_compare.md to --out. Without torch, a GPU or the library
it says so and exits 1, as compare_sdpa.py does: nothing was compared, and a script that runs it
(bench/device_run.sh) must not read that as a comparison made. It exits 1 as well when not one
of our kernels was timed (every row "-"), after writing the tables that say why.

The order matters: one timing per row, each kernel timed once after the other in one process, puts
the first Hopper kernel of a shape 2-15% ahead of one timed later (chapter 09's README: the
paragraph on the order, beside hopper_v6's tables). --rounds R runs the chosen parts R times, our
kernels in the registry's order and its reverse by turns (--reverse starts with the reverse), and
gives each row the median of its R rounds, the rounds in its note.
"""
import argparse
import csv
import inspect
import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

ROWS = []  # dicts: part, shape, impl, direction, ms, tflops, gbps, note


def ours(fa, args):
    """Our serving kernels in the order they are timed: the registry's, or with --reverse its
    reverse (a kernel timed first may find the GPU cooler than the ones after it: two runs, one
    each way, tell whether the order moves a comparison)."""
    kernels = fa.list_serving_kernels()
    return kernels[::-1] if args.reverse else kernels


def say(msg):
    print(msg, file=sys.stderr, flush=True)


def skip(part, impl, why):
    say("  [skip] %s %s: %s" % (part, impl, str(why).splitlines()[0][:200] if str(why) else why))


def record(part, shape, impl, direction, ms, flops=None, nbytes=None, note=""):
    row = {"part": part, "shape": shape, "impl": impl, "direction": direction,
           "ms": ms, "tflops": None, "gbps": None, "note": note, "flops": flops,
           "nbytes": nbytes}
    rates(row)
    ROWS.append(row)
    return row


def rates(row):
    """TFLOP/s and GB/s of a row from its ms and the work it states."""
    ms = row["ms"]
    row["tflops"] = row["gbps"] = None
    if ms is not None and ms > 0:
        if row["flops"]:
            row["tflops"] = row["flops"] / (ms * 1e-3) / 1e12
        if row["nbytes"]:
            row["gbps"] = row["nbytes"] / (ms * 1e-3) / 1e9


def merge_rounds(rounds):
    """One row per (part, shape, impl, direction) from the rows of several rounds (lists of
    record()'s rows), in the order the first round met them: its ms the median of the rounds
    that timed it (None if none did), its rates recomputed, the first round's note followed by
    each round's ms. A single round comes back as it is."""
    if len(rounds) == 1:
        return list(rounds[0])
    merged, samples = [], {}
    for rows in rounds:
        for r in rows:
            key = (r["part"], r["shape"], r["impl"], r["direction"])
            if key not in samples:
                samples[key] = []
                merged.append(dict(r))
            samples[key].append(r["ms"])
    for m in merged:
        got = samples[(m["part"], m["shape"], m["impl"], m["direction"])]
        timed_ms = [x for x in got if x is not None]
        m["ms"] = statistics.median(timed_ms) if timed_ms else None
        rates(m)
        each = "rounds: " + ", ".join("-" if x is None else "%.4f" % x for x in got)
        m["note"] = "%s; %s" % (m["note"], each) if m["note"] else each
    return merged


def timed(timer, part, shape, impl, direction, fn, flops=None, nbytes=None, note=""):
    """Times fn (one untimed call first: a peer that refuses raises there); records a row, or
    a '-' row with the reason."""
    torch = timer.torch
    try:
        fn()
        torch.cuda.synchronize()
        ms = timer(fn)
    except Exception as e:  # a peer or kernel that cannot run this: say why, go on
        skip(part, impl, "%s: %s" % (type(e).__name__, e))
        return record(part, shape, impl, direction, None, note="failed: %s" % (
            str(e).splitlines()[0][:120] if str(e) else type(e).__name__))
    return record(part, shape, impl, direction, ms, flops, nbytes, note)


def no_grad(torch, fn):
    """fn under torch.no_grad(): a forward timed without building a graph (inputs that require
    grad are there for the backward's timing)."""
    def run():
        with torch.no_grad():
            return fn()
    return run


def backward_of(out, dout, inputs):
    """The backward alone on a retained graph, the gradients cleared first (compare_sdpa.py's
    way: no accumulation kernel is timed)."""
    def fn():
        for t in inputs:
            t.grad = None
        out.backward(dout, retain_graph=True)
    return fn


def visible_pairs(seq_q, seq_k, causal, window=(-1, -1)):
    """AttentionShape::visible_pairs, in closed form per row range (Python ints)."""
    from flash_from_scratch.reference import window_pairs
    if window == (-1, -1) and causal and seq_q == seq_k:
        return seq_q * (seq_q + 1) // 2
    if window == (-1, -1) and not causal:
        return seq_q * seq_k
    return window_pairs(seq_q, seq_k, causal, window)


def seeded_lengths(total, lo, hi, seed):
    rng = random.Random(seed)
    lens = []
    while sum(lens) < total:
        lens.append(rng.randint(lo, hi))
    lens[-1] -= sum(lens) - total  # exactly `total` tokens
    if lens[-1] < lo:
        lens.pop(-1)
        lens[-1] += total - sum(lens)
    return lens


def varlen_attn_fn(torch):
    """(varlen_attn, parameter names) of torch.nn.attention.varlen, or (None, why)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except Exception as e:
        return None, "not available in torch %s (%s)" % (torch.__version__, type(e).__name__)
    try:
        params = set(inspect.signature(varlen_attn).parameters)
    except (TypeError, ValueError):
        params = set()
    return (varlen_attn, params), ""


def varlen_attn_call(va, q, k, v, cu_q, cu_k, max_q, max_k, causal, window=(-1, -1), **extra):
    """varlen_attn with causal/window spelled as this version takes them."""
    fn, params = va
    kwargs = dict(extra)
    if window != (-1, -1):
        if "window_size" not in params:
            raise RuntimeError("this varlen_attn has no window_size")
        kwargs["window_size"] = tuple(window)
    elif causal:
        if "is_causal" in params:
            kwargs["is_causal"] = True
        elif "window_size" in params:
            kwargs["window_size"] = (-1, 0)
        else:
            raise RuntimeError("this varlen_attn takes no causal mask")
    return fn(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs)


def flex_fns(torch):
    """(compiled flex_attention, create_block_mask), or raises with why."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    return torch.compile(flex_attention, dynamic=False), create_block_mask


def flash_attn_module():
    try:
        import flash_attn
        return flash_attn, ""
    except Exception as e:
        return None, "the flash_attn package is not installed (%s)" % type(e).__name__


# ---- (a) varlen ----------------------------------------------------------------------------

def part_varlen(torch, fa, serving, timer, args):
    import torch.nn.functional as F
    H, D, dtype = 16, 128, torch.bfloat16
    lens = seeded_lengths(32768, 1, 5000, args.seed)
    T, B, maxlen = sum(lens), len(lens), max(lens)
    say("(a) varlen: %d sequences, %d tokens, longest %d: %s" % (B, T, maxlen, lens))
    plan = serving.VarlenBatch.from_lengths(lens, lens, "cuda")
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    q, k, v = (torch.randn(H, T, D, device="cuda", dtype=dtype, generator=g) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(H, T, device="cuda", dtype=torch.float32)
    va, va_why = varlen_attn_fn(torch)
    fl, fl_why = flash_attn_module()
    try:
        flex, create_block_mask = flex_fns(torch)
    except Exception as e:
        flex, flex_why = None, "%s: %s" % (type(e).__name__, e)
    doc = torch.repeat_interleave(torch.arange(B, device="cuda", dtype=torch.int32),
                                  torch.tensor(lens, device="cuda"))
    qt, kt, vt = (x.transpose(0, 1).contiguous() for x in (q, k, v))  # token-major peers
    cu = plan.dev_q
    for causal in (False, True):
        shape = "varlen %d seqs T%d (max %d) H%d D%d bf16 %s" % (
            B, T, maxlen, H, D, "causal" if causal else "full")
        flops = 4.0 * H * D * sum(visible_pairs(n, n, causal) for n in lens)
        for kern in ours(fa, args):
            if kern.kind != "varlen_fwd":
                continue
            err = fa.supported("varlen_fwd", kern.name, "bf16", D)
            if err is not None:
                skip("varlen", kern.name, err)
                continue
            timed(timer, "varlen", shape, "ours " + kern.name, "fwd",
                  lambda kern=kern: serving.varlen_fwd_into(plan, q, k, v, o, lse, causal,
                                                            kernel=kern.name), flops)
        if flex is not None:
            def doc_mask(b, h, qi, ki):
                same = doc[qi] == doc[ki]
                return (same & (qi >= ki)) if causal else same
            try:
                bm = create_block_mask(doc_mask, None, None, T, T, device="cuda")
                q4, k4, v4 = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
                timed(timer, "varlen", shape, "FlexAttention (document mask)", "fwd",
                      lambda: flex(q4, k4, v4, block_mask=bm), flops)
            except Exception as e:
                skip("varlen", "FlexAttention", e)
                record("varlen", shape, "FlexAttention (document mask)", "fwd", None,
                       note="failed: %s" % str(e).splitlines()[0][:120])
        else:
            skip("varlen", "FlexAttention", flex_why)
        # SDPA on the padded batch: [B, H, maxlen, D], every position computed.
        try:
            qp, kp, vp = (torch.randn(B, H, maxlen, D, device="cuda", dtype=dtype, generator=g)
                          for _ in range(3))
            timed(timer, "varlen", shape, "SDPA padded to %d" % maxlen, "fwd",
                  lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal), flops,
                  note="B x longest computed; TFLOP/s on the varlen pairs")
            qp = kp = vp = None  # freed before the next mask
        except Exception as e:
            skip("varlen", "SDPA padded", e)
        if va is not None:
            timed(timer, "varlen", shape, "torch varlen_attn", "fwd",
                  lambda: varlen_attn_call(va, qt, kt, vt, cu, cu, maxlen, maxlen, causal),
                  flops)
        else:
            skip("varlen", "torch varlen_attn", va_why)
            record("varlen", shape, "torch varlen_attn", "fwd", None, note=va_why)
        if fl is not None:
            timed(timer, "varlen", shape, "flash_attn varlen", "fwd",
                  lambda: fl.flash_attn_varlen_func(qt, kt, vt, cu, cu, maxlen, maxlen,
                                                    causal=causal), flops)
        else:
            skip("varlen", "flash_attn", fl_why)
        torch.cuda.empty_cache()


# ---- (b) sliding window ----------------------------------------------------------------------

def part_window(torch, fa, serving, timer, args):
    import torch.nn.functional as F
    H, N, D, W, dtype = 16, 32768, 128, 4096, torch.bfloat16
    window = (W - 1, 0)
    plan = serving.VarlenBatch.from_lengths([N], [N], "cuda")
    g = torch.Generator(device="cuda").manual_seed(args.seed + 1)
    q, k, v, do = (torch.randn(H, N, D, device="cuda", dtype=dtype, generator=g)
                   for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(H, N, device="cuda", dtype=torch.float32)
    shape = "B1 H%d N%d D%d bf16 causal W%d" % (H, N, D, W)
    win_flops = 4.0 * H * D * visible_pairs(N, N, True, window)
    full_flops = 4.0 * H * D * visible_pairs(N, N, True)
    say("(b) window: %s (%.1f%% of the causal pairs)" % (shape, 100.0 * win_flops / full_flops))
    kernels = ours(fa, args)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty_like(lse)
    ws = torch.zeros(q.numel(), device="cuda", dtype=torch.float32)

    for kern in kernels:
        if kern.kind != "varlen_fwd" or fa.supported("varlen_fwd", kern.name, "bf16", D):
            continue
        runs = [("causal W%d" % W, window, win_flops)] if kern.window else []
        runs.append(("full causal", (-1, -1), full_flops))
        for what, w, flops in runs:
            timed(timer, "window", shape, "ours %s (%s)" % (kern.name, what), "fwd",
                  lambda kern=kern, w=w: serving.varlen_fwd_into(plan, q, k, v, o, lse, True,
                                                                 window=w, kernel=kern.name),
                  flops)
    for kern in kernels:
        if kern.kind != "varlen_bwd" or fa.supported("varlen_bwd", kern.name, "bf16", D):
            continue
        runs = [("causal W%d" % W, window, win_flops)] if kern.window else []
        runs.append(("full causal", (-1, -1), full_flops))
        for what, w, flops in runs:
            fwd = kern.forward or ("09/v2_window" if w != (-1, -1) else "09/v1_varlen")
            try:  # O and L of this problem, from the paired forward (untimed)
                serving.varlen_fwd_into(plan, q, k, v, o, lse, True, window=w, kernel=fwd)
            except Exception as e:
                skip("window", kern.name, "its forward %s: %s" % (fwd, e))
                continue

            def bwd(kern=kern, w=w):
                ws.zero_()  # the kernel's contract (the harness times the memset too)
                serving.varlen_bwd_into(plan, q, k, v, o, do, lse, dq, dk, dv, delta, ws, True,
                                        window=w, kernel=kern.name)
            timed(timer, "window", shape, "ours %s (%s)" % (kern.name, what), "bwd", bwd,
                  2.5 * flops, note="workspace memset included")

    try:
        flex, create_block_mask = flex_fns(torch)

        def sliding(b, h, qi, ki):
            return (qi >= ki) & (qi - ki <= W - 1)

        def causal_mask(b, h, qi, ki):
            return qi >= ki

        for what, mm, flops in (("causal W%d" % W, sliding, win_flops),
                                ("full causal", causal_mask, full_flops)):
            bm = create_block_mask(mm, None, None, N, N, device="cuda")
            q4, k4, v4 = (x.unsqueeze(0).detach().clone().requires_grad_() for x in (q, k, v))
            timed(timer, "window", shape, "FlexAttention (%s)" % what, "fwd",
                  no_grad(torch, lambda: flex(q4, k4, v4, block_mask=bm)), flops)
            out = flex(q4, k4, v4, block_mask=bm)
            timed(timer, "window", shape, "FlexAttention (%s)" % what, "bwd",
                  backward_of(out, do.unsqueeze(0), (q4, k4, v4)), 2.5 * flops)
            del out, q4, k4, v4
            torch.cuda.empty_cache()
    except Exception as e:
        skip("window", "FlexAttention", "%s: %s" % (type(e).__name__, e))

    va, va_why = varlen_attn_fn(torch)
    if va is not None:
        qt, kt, vt = (x.transpose(0, 1).contiguous().requires_grad_() for x in (q, k, v))
        dot = do.transpose(0, 1).contiguous()
        for what, w, flops in (("causal W%d" % W, window, win_flops),
                               ("full causal", (-1, -1), full_flops)):
            name = "torch varlen_attn (%s)" % what
            row = timed(timer, "window", shape, name, "fwd",
                        no_grad(torch, lambda w=w: varlen_attn_call(
                            va, qt, kt, vt, plan.dev_q, plan.dev_k, N, N, True, w)), flops)
            if row["ms"] is None:
                continue
            out = varlen_attn_call(va, qt, kt, vt, plan.dev_q, plan.dev_k, N, N, True, w)
            timed(timer, "window", shape, name, "bwd", backward_of(out, dot, (qt, kt, vt)),
                  2.5 * flops)
            del out
    else:
        skip("window", "torch varlen_attn", va_why)
        record("window", shape, "torch varlen_attn", "fwd", None, note=va_why)

    fl, fl_why = flash_attn_module()
    if fl is not None:
        qt, kt, vt = (x.transpose(0, 1).unsqueeze(0).contiguous() for x in (q, k, v))
        timed(timer, "window", shape, "flash_attn (causal W%d)" % W, "fwd",
              lambda: fl.flash_attn_func(qt, kt, vt, causal=True, window_size=window), win_flops)
    else:
        skip("window", "flash_attn", fl_why)

    q4, k4, v4 = (x.unsqueeze(0) for x in (q, k, v))
    timed(timer, "window", shape, "SDPA (full causal)", "fwd",
          lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=True), full_flops)
    torch.cuda.empty_cache()


# ---- (c) paged decoding ----------------------------------------------------------------------

def scatter_pages(torch, kc, vc, page, seed):
    """The contiguous cache kc, vc [B, H_kv, N, D] as two pools of pages in a shuffled order,
    16 spare pages among them, and the block table [B, N / page] (int32 on the device)."""
    B, HKV, N, D = kc.shape
    per_seq = N // page
    num_pages = B * per_seq + 16
    order = list(range(num_pages))
    random.Random(seed).shuffle(order)
    table = torch.tensor(order[:B * per_seq], dtype=torch.int32).view(B, per_seq).cuda()
    pools = []
    for c in (kc, vc):
        pool = torch.empty(num_pages, HKV, page, D, device="cuda", dtype=c.dtype)
        # Sequence b's keys j*page .. into page table[b, j] (one scatter per pool).
        pool[table.flatten().long()] = c.view(B, HKV, per_seq, page, D).permute(0, 2, 1, 3, 4) \
            .reshape(B * per_seq, HKV, page, D)
        pools.append(pool)
    return pools[0], pools[1], table


def part_paged(torch, fa, serving, timer, args):
    import torch.nn.functional as F
    from flash_from_scratch import ops
    B, H, HKV, N, D, dtype = 8, 32, 8, 32768, 128, torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(args.seed + 2)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype, generator=g)
    kc, vc = (torch.randn(B, HKV, N, D, device="cuda", dtype=dtype, generator=g)
              for _ in range(2))
    nbytes = 2.0 * (2 * q.numel() + 2 * B * N * HKV * D) + 4.0 * B * H  # PagedShape::min_bytes
    flops = 4.0 * B * H * D * N
    shape = "B%d H%d Hkv%d Nq1 Nk%d D%d bf16" % (B, H, HKV, N, D)
    say("(c) paged decoding: %s, %.0f MB to move" % (shape, nbytes / 1e6))
    o_ref = torch.empty_like(q)
    lse = torch.empty(B, H, 1, device="cuda", dtype=torch.float32)
    contiguous = "08/v5_swizzled_ring"
    if fa.supported("fwd", contiguous, "bf16", D, gqa=True) is None:
        timed(timer, "paged", shape + " contiguous", "ours " + contiguous, "fwd",
              lambda: ops.attention_fwd_into(q, kc, vc, o_ref, lse, kernel=contiguous), flops,
              nbytes)
    else:
        skip("paged", contiguous, fa.supported("fwd", contiguous, "bf16", D, gqa=True))
        o_ref = None
    timed(timer, "paged", shape + " contiguous", "SDPA (enable_gqa)", "fwd",
          lambda: F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True), flops, nbytes)
    va, va_why = varlen_attn_fn(torch)
    fl, fl_why = flash_attn_module()
    for page in (16, 64, 256):
        kp, vp, table = scatter_pages(torch, kc, vc, page, args.seed + page)
        lengths = serving.PagedLengths([N] * B, "cuda")
        o = torch.empty_like(q)
        pshape = shape + " page %d" % page
        for kern in ours(fa, args):
            if kern.kind != "paged_fwd":
                continue
            err = fa.supported("paged_fwd", kern.name, "bf16", D, gqa=True, page_size=page)
            if err is not None:
                skip("paged", kern.name, err)
                continue
            row = timed(timer, "paged", pshape, "ours " + kern.name, "fwd",
                        lambda kern=kern: serving.paged_fwd_into(q, kp, vp, o, lse, table,
                                                                 lengths, kernel=kern.name),
                        flops, nbytes)
            if row["ms"] is not None and o_ref is not None:
                torch.cuda.synchronize()
                row["note"] = "max |O - O(%s)| = %.3g" % (
                    contiguous, float((o.float() - o_ref.float()).abs().max()))
        if va is not None:
            try:
                kn, vn = kp.transpose(1, 2).contiguous(), vp.transpose(1, 2).contiguous()  # NHD
                qt = q.view(B, H, D).contiguous()
                cu_q = torch.arange(B + 1, device="cuda", dtype=torch.int32)
                cu_k = torch.arange(B + 1, device="cuda", dtype=torch.int32) * N
                seqused = torch.full((B,), N, device="cuda", dtype=torch.int32)
                timed(timer, "paged", pshape, "torch varlen_attn (block_table)", "fwd",
                      lambda: varlen_attn_call(va, qt, kn, vn, cu_q, cu_k, 1, N, False,
                                               block_table=table, seqused_k=seqused,
                                               enable_gqa=True), flops, nbytes)
                del kn, vn
            except Exception as e:
                skip("paged", "torch varlen_attn", e)
        else:
            skip("paged", "torch varlen_attn", va_why)
        if fl is not None:
            try:
                kn, vn = kp.transpose(1, 2).contiguous(), vp.transpose(1, 2).contiguous()
                qf = q.transpose(1, 2).contiguous()  # [B, 1, H, D]
                seqlens = torch.full((B,), N, device="cuda", dtype=torch.int32)
                timed(timer, "paged", pshape, "flash_attn_with_kvcache", "fwd",
                      lambda: fl.flash_attn_with_kvcache(qf, kn, vn, cache_seqlens=seqlens,
                                                         block_table=table), flops, nbytes)
                del kn, vn
            except Exception as e:
                skip("paged", "flash_attn_with_kvcache", e)
        else:
            skip("paged", "flash_attn", fl_why)
        kp = vp = None  # freed before the next page size
        torch.cuda.empty_cache()


def part_prefill(torch, fa, serving, timer, args):
    import torch.nn.functional as F
    B, H, HKV, N, NQ, dtype = 8, 32, 8, 32768, 512, torch.bfloat16
    fl, fl_why = flash_attn_module()
    for D in (128, 80):
        g = torch.Generator(device="cuda").manual_seed(args.seed + 3 + D)
        q = torch.randn(B, H, NQ, D, device="cuda", dtype=dtype, generator=g)
        kc, vc = (torch.randn(B, HKV, N, D, device="cuda", dtype=dtype, generator=g)
                  for _ in range(2))
        flops = 4.0 * B * H * D * visible_pairs(NQ, N, True)
        shape = "B%d H%d Hkv%d Nq%d Nk%d D%d bf16 causal" % (B, H, HKV, NQ, N, D)
        say("(d) paged chunked prefill: %s" % shape)
        o_ref = None
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            from torch.nn.attention.bias import causal_lower_right
            ke = kc.repeat_interleave(H // HKV, dim=1)
            ve = vc.repeat_interleave(H // HKV, dim=1)
            bias = causal_lower_right(NQ, N)
            for impl, backend in (("SDPA FlashAttention-2 (contiguous)",
                                   SDPBackend.FLASH_ATTENTION),
                                  ("SDPA cuDNN (contiguous)", SDPBackend.CUDNN_ATTENTION)):
                def run(backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, ke, ve, attn_mask=bias)
                row = timed(timer, "prefill", shape + " contiguous", impl, "fwd", run, flops)
                if row["ms"] is not None and o_ref is None:
                    o_ref = run()
            del ke, ve
        except Exception as e:
            skip("prefill", "SDPA causal_lower_right", "%s: %s" % (type(e).__name__, e))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, NQ, device="cuda", dtype=torch.float32)
        lengths = serving.PagedLengths([N] * B, "cuda")
        for page in (16, 64, 256):
            kp, vp, table = scatter_pages(torch, kc, vc, page, args.seed + page)
            pshape = shape + " page %d" % page
            for kern in ours(fa, args):
                if kern.kind != "paged_fwd" or kern.decoding:
                    continue
                err = fa.supported("paged_fwd", kern.name, "bf16", D, gqa=True, page_size=page)
                if err is not None:
                    skip("prefill", kern.name, err)
                    continue
                row = timed(timer, "prefill", pshape, "ours " + kern.name, "fwd",
                            lambda kern=kern: serving.paged_fwd_into(
                                q, kp, vp, o, lse, table, lengths, causal=True,
                                kernel=kern.name), flops)
                if row["ms"] is not None and o_ref is not None:
                    torch.cuda.synchronize()
                    row["note"] = "max |O - O(SDPA)| = %.3g" % float(
                        (o.float() - o_ref.float()).abs().max())
            if fl is not None:
                try:
                    kn, vn = kp.transpose(1, 2).contiguous(), vp.transpose(1, 2).contiguous()
                    qf = q.transpose(1, 2).contiguous()  # [B, NQ, H, D]
                    seqlens = torch.full((B,), N, device="cuda", dtype=torch.int32)
                    timed(timer, "prefill", pshape, "flash_attn_with_kvcache", "fwd",
                          lambda: fl.flash_attn_with_kvcache(qf, kn, vn, cache_seqlens=seqlens,
                                                             block_table=table, causal=True),
                          flops)
                    del kn, vn
                except Exception as e:
                    skip("prefill", "flash_attn_with_kvcache", e)
            kp = vp = None
            torch.cuda.empty_cache()
        del q, kc, vc, o_ref
        torch.cuda.empty_cache()


# ---- Output ------------------------------------------------------------------------------------

def fmt(x, prec):
    return "-" if x is None else ("%." + str(prec) + "f") % x


def markdown(gpu, torch_version):
    lines = ["# Chapter 09 against PyTorch on %s (PyTorch %s)" % (gpu, torch_version), ""]
    for part, title in (("varlen", "(a) variable-length batch, forward"),
                        ("window", "(b) sliding window, forward and backward"),
                        ("paged", "(c) paged decoding"),
                        ("prefill", "(d) paged chunked prefill")):
        rows = [r for r in ROWS if r["part"] == part]
        if not rows:
            continue
        lines += ["## " + title, "", "| shape | implementation | dir | ms | TFLOP/s | GB/s | note |",
                  "| --- | --- | --- | ---: | ---: | ---: | --- |"]
        for r in rows:
            lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                r["shape"], r["impl"], r["direction"], fmt(r["ms"], 4), fmt(r["tflops"], 1),
                fmt(r["gbps"], 0), r["note"]))
        lines.append("")
    return "\n".join(lines)


def write_outputs(out, gpu, torch_version):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "serving_compare.csv")
    fields = ["part", "shape", "impl", "direction", "ms", "tflops", "gbps", "note"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in ROWS:
            w.writerow({k: ("" if r.get(k) is None else r[k]) for k in fields})
    md = markdown(gpu, torch_version)
    with open(os.path.join(out, "serving_compare.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    say("wrote %s and serving_compare.md" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="serving_compare", help="directory for the CSV and table")
    ap.add_argument("--parts", default="varlen,window,paged,prefill",
                    help="comma list of varlen, window, paged, prefill")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per row (the median)")
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--reverse", action="store_true",
                    help="time our kernels in the reverse of the registry's order")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the parts this many times, our kernels' order reversed every "
                         "other round; each row the median of its rounds")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - {"varlen", "window", "paged", "prefill"}
    if unknown:
        ap.error("unknown parts: %s" % ", ".join(sorted(unknown)))

    try:
        import torch
    except ImportError:
        sys.exit("compare_serving: PyTorch is not installed, so there is nothing to compare "
                 "(install a CUDA build of torch on the GPU machine: python3 -m pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("compare_serving: no CUDA GPU visible to PyTorch, so there is nothing to compare: "
                 "run it on the GPU machine, after fa_bench")
    import flash_from_scratch as fa
    try:
        fa.find_library()
    except fa.LibraryNotFound as e:
        sys.exit("compare_serving: %s" % e)
    from flash_from_scratch import serving
    from compare_sdpa import Timer  # noqa: E402  (median of CUDA-event timings, L2 flushed)

    gpu = torch.cuda.get_device_name()
    say("GPU %s, PyTorch %s, library %s" % (gpu, torch.__version__, fa.find_library()))
    timer = Timer(torch, args.reps)
    rounds = []
    for r in range(args.rounds):
        # Every other round in the other order: a row's median then comes from both places.
        args_r = argparse.Namespace(**vars(args))
        args_r.reverse = args.reverse != (r % 2 == 1)
        if args.rounds > 1:
            say("round %d of %d (our kernels in %s order)" % (
                r + 1, args.rounds, "reverse" if args_r.reverse else "the registry's"))
        del ROWS[:]
        for part, fn in (("varlen", part_varlen), ("window", part_window),
                         ("paged", part_paged), ("prefill", part_prefill)):
            if part not in parts:
                continue
            try:
                fn(torch, fa, serving, timer, args_r)
            except Exception as e:  # a part that breaks leaves the others' rows
                skip(part, "the whole part", "%s: %s" % (type(e).__name__, e))
            torch.cuda.empty_cache()
        rounds.append(list(ROWS))
    ROWS[:] = merge_rounds(rounds)
    write_outputs(args.out, gpu, torch.__version__)
    if not any(r["ms"] is not None and r["impl"].startswith("ours ") for r in ROWS):
        sys.exit("compare_serving: not one of our kernels was timed (the [skip] lines above say "
                 "why), so nothing was compared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
