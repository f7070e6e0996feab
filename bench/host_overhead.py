#!/usr/bin/env python3
"""The host's time per call: how long the CPU takes to issue one attention forward (+ backward).

    python3 bench/host_overhead.py               # B 1, H 1, N 128, D 128, bf16
    python3 bench/host_overhead.py --profile     # then cProfile of fa.attention's forward + backward
    python3 bench/host_overhead.py --stages      # then the layers of one call, each timed alone

bench/attention_e2e.py times what a user waits for; when the host takes longer to issue a call's
kernels than the GPU takes to run them, the GPU waits and the difference is in that time
(attention_e2e.py --profile shows it as the gap between the kernels' sum and the total). This
script measures the host's side alone: on a problem so small that the GPU finishes each kernel
before the next is issued, `--calls` calls back to back, one synchronize at the end, the wall
time per call (median of --rounds rounds). Columns:
  fa.attention          the package's default: eager calls run ops._EagerAttention
  operator              torch.ops.flash_from_scratch.attention_fwd with its registered backward
                        (what torch.compile records; the custom op's dispatch on every call)
  sdpa-flash, sdpa-cudnn   scaled_dot_product_attention with one backend forced
--stages then times the layers a call goes through, each alone and the same way, so that their
differences say where the host's time goes: the C library's launch on tensors allocated beforehand
(the ctypes call and what the library does before the kernels), the package's forward and backward
work (ops._forward, ops._backward: allocations, the dispatch, the launch), the forward with and
without a graph recorded, and autograd.grad through a Python autograd.Function that launches nothing
(the engine's own cost for a Python backward).
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # a checkout, not installed


def per_call_us(torch, step, calls, rounds):
    """Median over `rounds` of the wall time of `calls` back-to-back calls, per call, in us."""
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def stages(torch, fa, q, k, v, do, args):
    """Per-call host time of each layer under fa.attention (full mask), as per_call_us times it."""
    from flash_from_scratch import _launch, ops
    from flash_from_scratch._common import choose, dtype_name

    b, h, n, d = q.shape
    dt = dtype_name(q.dtype)
    fwd_name, _ = choose("fwd", "auto", dt, d, n, n, False, False, False)
    bwd_name, _ = choose("bwd", "auto", dt, d, n, n, False, False, False)
    o, lse = ops._forward(q, k, v, False, 0.0, -1, -1, "auto")
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    delta = torch.empty((b, h, n), dtype=torch.float32, device=q.device)
    workspace = torch.empty(q.numel(), dtype=torch.float32, device=q.device)

    class Nothing(torch.autograd.Function):
        """A Python Function whose forward and backward launch nothing."""
        @staticmethod
        def forward(ctx, q, k, v):
            return q.view_as(q)

        @staticmethod
        def backward(ctx, g):
            return g, g, g

    def graph_only():
        fa.attention(q, k, v)

    def no_grad():
        with torch.no_grad():
            fa.attention(q, k, v)

    rows = [
        ("C launch, forward (%s)" % fwd_name,
         lambda: _launch.attention_fwd_into(q, k, v, o, lse, False, None, fwd_name)),
        ("C launch, backward (%s)" % bwd_name,
         lambda: _launch.attention_bwd_into(q, k, v, o, do, lse, dq, dk, dv, delta, workspace,
                                            False, None, bwd_name)),
        ("ops._forward (allocations, dispatch, launch)",
         lambda: ops._forward(q, k, v, False, 0.0, -1, -1, "auto")),
        ("ops._backward (allocations, dispatch, launch)",
         lambda: ops._backward(do, q, k, v, o, lse, False, 0.0, -1, -1, "auto", False)),
        ("fa.attention, no grad", no_grad),
        ("fa.attention, graph recorded, no backward", graph_only),
        ("autograd.grad through a Function that launches nothing",
         lambda: torch.autograd.grad(Nothing.apply(q, k, v), (q, k, v), do)),
        ("fa.attention + autograd.grad", lambda: torch.autograd.grad(fa.attention(q, k, v),
                                                                     (q, k, v), do)),
    ]
    print("host time per call of each layer (B %d, H %d, N %d, D %d, full; %d calls, median of "
          "%d):" % (b, h, n, d, args.calls, args.rounds))
    print("| layer | us per call |")
    print("| --- | ---: |")
    for label, step in rows:
        print("| %s | %.1f |" % (label, per_call_us(torch, step, args.calls, args.rounds)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="1,1,128,128", help="B,H,N,D (default 1,1,128,128)")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--stages", action="store_true",
                   help="then time the layers of one fa.attention call, each alone (the docstring)")
    p.add_argument("--profile", action="store_true",
                   help="then cProfile fa.attention's forward + backward (the 20 costliest)")
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flash_from_scratch as fa

    if not torch.cuda.is_available():
        print("host_overhead: no CUDA GPU visible to torch")
        return 1
    b, h, n, d = (int(x) for x in args.shape.split(","))
    g = torch.Generator(device="cuda").manual_seed(20261201)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) + 0.5
               for _ in range(3))
    do = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    for t in (q, k, v):
        t.requires_grad_(True)
    op = torch.ops.flash_from_scratch.attention_fwd

    def sdpa(backend):
        def f(causal):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return f

    columns = [("fa.attention", lambda causal: fa.attention(q, k, v, causal=causal)),
               ("operator", lambda causal: op(q, k, v, causal, 0.0, -1, -1, "auto", "auto",
                                              False)[0]),
               ("sdpa-flash", sdpa(SDPBackend.FLASH_ATTENTION)),
               ("sdpa-cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))]
    print("host_overhead on %s, torch %s; B %d, H %d, N %d, D %d, bf16; %d calls, median of %d"
          % (torch.cuda.get_device_name(), torch.__version__, b, h, n, d, args.calls,
             args.rounds))
    print("| column | causal | forward us | forward + backward us |")
    print("| --- | --- | ---: | ---: |")
    for causal in (False, True):
        for label, f in columns:
            def fwd(f=f):
                with torch.no_grad():
                    f(causal)

            def fwd_bwd(f=f):
                torch.autograd.grad(f(causal), (q, k, v), do)
            try:
                row = (per_call_us(torch, fwd, args.calls, args.rounds),
                       per_call_us(torch, fwd_bwd, args.calls, args.rounds))
                print("| %s | %s | %.1f | %.1f |" % (label, causal, *row))
            except Exception as e:  # a column that cannot run here reads "-", never fatal
                print("| %s | %s | - | - |  (%s)" % (label, causal, str(e).splitlines()[0]))
    if args.stages:
        stages(torch, fa, q, k, v, do, args)
    if args.profile:
        import cProfile
        import pstats

        def many():
            for _ in range(args.calls):
                torch.autograd.grad(fa.attention(q, k, v), (q, k, v), do)
            torch.cuda.synchronize()
        many()
        prof = cProfile.Profile()
        prof.runcall(many)
        print("cProfile of %d calls of fa.attention forward + backward (tottime order):"
              % args.calls)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
