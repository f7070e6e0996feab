#!/usr/bin/env python3
"""Run one PyTorch SDPA case (FlashAttention-2 backend, bf16) a few times, for Nsight Compute.
With `backend=cudnn` among the arguments, SDPA's cuDNN backend instead (device_run.sh ncu_cudnn).

The notes' profiles of FlashAttention-2 were taken with it, e.g. (on the GPU machine):

    ncu --section SpeedOfLight -k regex:flash_fwd -s 1 -c 1 python3 bench/profile_sdpa.py fwd 128
    ncu -k regex:flash_bwd_dq_dk -s 1 -c 1 python3 bench/profile_sdpa.py bwd 128
    ncu -k regex:flash -s 2 -c 2 python3 bench/profile_sdpa.py decode 8 32 8 32768

fwd/bwd D [causal] [n=N]: the protocol shape at N = 8192, or N (B = 16384 / N, H = 2048 / D).
decode B H H_kv seq_k: one query row per head against a K/V cache of seq_k keys, D = 128.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    what = sys.argv[1]
    dt = torch.bfloat16
    backend = (SDPBackend.CUDNN_ATTENTION if "backend=cudnn" in sys.argv[2:]
               else SDPBackend.FLASH_ATTENTION)
    with sdpa_kernel(backend):
        if what in ("fwd", "bwd"):
            d = int(sys.argv[2])
            rest = sys.argv[3:]
            n = next((int(a[2:]) for a in rest if a.startswith("n=")), 8192)
            b, h = 16384 // n, 2048 // d
            causal = "causal" in rest
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dt).add_(0.5).requires_grad_()
                       for _ in range(3))
            for _ in range(3):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                if what == "bwd":
                    o.backward(torch.ones_like(o))
        elif what == "decode":
            b, h, hkv, nk = map(int, sys.argv[2:6])
            q = torch.randn(b, h, 1, 128, device="cuda", dtype=dt).add_(0.5)
            k, v = (torch.randn(b, hkv, nk, 128, device="cuda", dtype=dt).add_(0.5) for _ in range(2))
            kw = {"enable_gqa": True} if h != hkv else {}
            for _ in range(3):
                F.scaled_dot_product_attention(q, k, v, **kw)
        else:
            sys.exit(__doc__)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
