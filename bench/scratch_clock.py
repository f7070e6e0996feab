"""Scratch (removed before landing): the SM clock and power while ours and cuDNN run back to back."""
import os, subprocess, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import flash_from_scratch as fa

def run(label, fn, seconds=3.0):
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active",
                            "--format=csv,noheader,nounits", "-lms", "100"], stdout=subprocess.PIPE, text=True)
    torch.cuda.synchronize()
    t0 = time.time(); n = 0
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    while time.time() - t0 < seconds:
        for _ in range(50): fn()
        n += 50
        torch.cuda.synchronize()
    e.record(); torch.cuda.synchronize()
    smi.terminate(); out = smi.communicate()[0].strip().splitlines()[3:-1]
    clk = [float(l.split(",")[0]) for l in out]; pw = [float(l.split(",")[1]) for l in out]
    thr = sorted(set(l.split(",")[2].strip() for l in out))
    ms = s.elapsed_time(e) / n
    print(f"{label}: {ms*1000:.1f} us a call back to back, SM clock {min(clk):.0f}-{max(clk):.0f} "
          f"(median {sorted(clk)[len(clk)//2]:.0f}) MHz, power {min(pw):.0f}-{max(pw):.0f} W, throttle {thr}", flush=True)

for d, n in ((256, 512), (128, 512), (256, 8192)):
    b, h = 16384 // n, 2048 // d
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16).add_(0.5) for _ in range(3))
    flops = 4 * b * h * n * n * d
    print(f"D {d} N {n} full (B {b}, H {h}); ours picks {fa.pick('fwd', 'bf16', d, n, n, sm=90).kernel}")
    run(f"  ours  D{d} N{n}", lambda: fa.attention(q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        run(f"  cuDNN D{d} N{n}", lambda: F.scaled_dot_product_attention(q, k, v))
    run(f"  ours  D{d} N{n} again", lambda: fa.attention(q, k, v))
