"""attention(): the repository's kernels as a differentiable PyTorch function.

The forward kernel computes O and L (the natural-log logsumexp of each row of scale * Q K^T); the
autograd Function saves exactly what FlashAttention saves, Q, K, V, O and L, and its backward
calls the backward kernel on them (dO in, dQ, dK, dV out; D = rowsum(dO * O) and an fp32 dQ
accumulator are scratch). Layouts and semantics are notes/conventions.md's: [batch, heads, seq,
head_dim], causal masks aligned bottom-right, scale 1/sqrt(head_dim) by default.
"""
import math

import torch

from . import _lib

DEFAULT_FWD = "05/v5_fewer_instructions"
DEFAULT_BWD = "06/v2_mma"
FP32_FWD = "05/v1_scalar_fp32"
FP32_BWD = "06/v1_fp32"

DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# The kernels load 16-byte vectors (cp.async, float4): each tensor's base must be 16-byte aligned.
_ALIGN = 16


def dtype_name(dtype):
    """'fp32', 'fp16' or 'bf16' for torch.float32, torch.float16, torch.bfloat16."""
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise ValueError("%s is not a dtype the kernels take (fp32, fp16 or bf16: torch.float32, "
                         "torch.float16, torch.bfloat16)" % dtype) from None


def _dense(t):
    """t itself when contiguous and 16-byte aligned, else a contiguous aligned copy (autograd
    carries the gradient back to the original)."""
    if not t.is_contiguous():
        t = t.contiguous()
    if t.data_ptr() % _ALIGN != 0:
        t = t.clone()
    return t


def check_inputs(q, k, v):
    """Raises TypeError / ValueError unless q [B, H, Nq, D] and k, v [B, H, Nk, D] are CUDA
    tensors of one dtype (fp32, fp16, bf16) on one device. Returns (B, H, Nq, Nk, D)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))
        if t.dim() != 4:
            raise ValueError("%s must be [batch, heads, seq, head_dim] (4 dimensions); its shape "
                             "is %s" % (name, tuple(t.shape)))
        if t.device.type != "cuda":
            raise ValueError("%s is on %s: the kernels take CUDA tensors" % (name, t.device))
    if not (q.device == k.device == v.device):
        raise ValueError("q, k and v must be on one device; they are on %s, %s and %s"
                         % (q.device, k.device, v.device))
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError("q, k and v must have one dtype; they are %s, %s and %s"
                         % (q.dtype, k.dtype, v.dtype))
    dtype_name(q.dtype)
    b, h, nq, d = q.shape
    nk = k.shape[2]
    if k.shape != (b, h, nk, d) or v.shape != k.shape:
        raise ValueError("shapes must be q [B, H, Nq, D], k and v [B, H, Nk, D]; they are %s, %s "
                         "and %s" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    return b, h, nq, nk, d


def _scale_arg(scale, head_dim):
    """The scale passed to the kernels: 0 means 1/sqrt(head_dim) there (AttentionShape.scale)."""
    if scale is None:
        return 0.0
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0.0:
        # The C library's words for the same refusal (a kernel may take the row max on raw
        # scores, which is only right for a positive scale).
        raise ValueError("scale must be a finite number > 0 (0 means 1/sqrt(head_dim))")
    return scale


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


class FlashAttentionFunction(torch.autograd.Function):
    """(q, k, v, causal, scale, kernel, kernel_bwd) -> (O, L); L is not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, kernel, kernel_bwd):
        b, h, nq, nk, d = check_inputs(q, k, v)
        o = torch.empty((b, h, nq, d), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
        _lib.attention_fwd(kernel, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                           lse.data_ptr(), b, h, nq, nk, d, dtype_name(q.dtype), scale, causal,
                           q.device.index, _stream(q.device))
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.kernel_bwd = causal, scale, kernel_bwd
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        b, h, nq, nk, d = check_inputs(q, k, v)
        if ctx.kernel_bwd is None:
            raise RuntimeError("attention(..., kernel_bwd=None) has no backward kernel")
        do = _dense(do.to(q.dtype))
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        dk = torch.empty_like(k, memory_format=torch.contiguous_format)
        dv = torch.empty_like(v, memory_format=torch.contiguous_format)
        delta = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
        workspace = torch.zeros(q.numel(), dtype=torch.float32, device=q.device)  # zeroed: required
        _lib.attention_bwd(ctx.kernel_bwd, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                           do.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                           dv.data_ptr(), delta.data_ptr(), workspace.data_ptr(), b, h, nq, nk, d,
                           dtype_name(q.dtype), ctx.scale, ctx.causal, q.device.index,
                           _stream(q.device))
        return dq, dk, dv, None, None, None, None


def _require(kind, kernel, dtype, head_dim):
    err = _lib.supported(kind, kernel, dtype, head_dim)
    if err is not None:
        raise err


def attention(q, k, v, causal=False, scale=None, kernel=DEFAULT_FWD, kernel_bwd=DEFAULT_BWD,
              return_lse=False):
    """softmax(scale * q k^T [+ bottom-right causal mask]) v with the repository's kernels.

    q: [B, H, Nq, D], k and v: [B, H, Nk, D], CUDA, one dtype; the defaults take fp16 and bf16
    (for fp32 use kernel="05/v1_scalar_fp32", kernel_bwd="06/v1_fp32"). Non-contiguous inputs are
    copied. Returns O [B, H, Nq, D], or (O, L) with return_lse=True, L fp32 [B, H, Nq] (-inf for
    a row that sees no key). Gradients flow to q, k and v through kernel_bwd.
    Refusals raise ValueError (bad arguments) or flash_from_scratch.UnsupportedError (no version
    of the kernel for this dtype / head dim / GPU), in the harness's words; never a wrong answer.
    """
    _, _, _, _, d = check_inputs(q, k, v)
    scale = _scale_arg(scale, d)
    causal = bool(causal)
    dt = dtype_name(q.dtype)
    _require("fwd", kernel, dt, d)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad:
        if kernel_bwd is None:
            raise ValueError("inputs require grad but kernel_bwd is None")
        _require("bwd", kernel_bwd, dt, d)  # refuse now rather than in backward()
    o, lse = FlashAttentionFunction.apply(_dense(q), _dense(k), _dense(v), causal, scale, kernel,
                                          kernel_bwd)
    return (o, lse) if return_lse else o
