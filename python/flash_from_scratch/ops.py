"""attention(): the repository's kernels as a differentiable PyTorch function.

The forward kernel computes O and L (the natural-log logsumexp of each row of scale * Q K^T); the
autograd Function saves exactly what FlashAttention saves, Q, K, V, O and L, and its backward
calls the backward kernel on them (dO in, dQ, dK, dV out; D = rowsum(dO * O) and an fp32 dQ
accumulator are scratch). Layouts and semantics are notes/conventions.md's: [batch, heads, seq,
head_dim], causal masks aligned bottom-right, scale 1/sqrt(head_dim) by default.

Grouped-query attention (k, v with H_kv < H heads, H a multiple of H_kv; query head h reads K/V
head h // (H / H_kv)) and the sliding window (window=(left, right), FlashAttention's meaning)
are chapter 09's. The forward runs on a kernel that takes them: chapter 08's fixed-length
kernels take grouped heads; otherwise the problem goes to chapter 09's variable-length kernels as
a batch of equal lengths (serving.py; for batch > 1 Q, K, V are copied into the packed
[heads, batch * seq, D] layout and O back). No backward kernel takes grouped heads: the backward
repeats K and V over the group (repeat_interleave, H heads), runs the kernel, and sums each
group's dK, dV in fp32 here, in Python (serving.py's varlen backward does the same).
"""
import math

import torch

from . import _lib
from .names import (AUTO, DEFAULT_BWD, DEFAULT_FWD, FP32_BWD, FP32_FWD, VARLEN_BWD,  # noqa: F401
                    VARLEN_FWD, VARLEN_WINDOW_BWD, VARLEN_WINDOW_FWD)

DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# Where the kernels' tensors live. A test of the Python layer alone widens it to "cpu" and puts
# an emulation of the library in its place (tests/test_serving.py); nothing else changes it.
KERNEL_DEVICES = ("cuda",)

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
    """Raises TypeError / ValueError unless q [B, H, Nq, D] and k, v [B, H_kv, Nk, D] (H a
    multiple of H_kv) are CUDA tensors of one dtype (fp32, fp16, bf16) on one device. Returns
    (B, H, H_kv, Nq, Nk, D)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))
        if t.dim() != 4:
            raise ValueError("%s must be [batch, heads, seq, head_dim] (4 dimensions); its shape "
                             "is %s" % (name, tuple(t.shape)))
        if t.device.type not in KERNEL_DEVICES:
            raise ValueError("%s is on %s: the kernels take CUDA tensors" % (name, t.device))
    if not (q.device == k.device == v.device):
        raise ValueError("q, k and v must be on one device; they are on %s, %s and %s"
                         % (q.device, k.device, v.device))
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError("q, k and v must have one dtype; they are %s, %s and %s"
                         % (q.dtype, k.dtype, v.dtype))
    dtype_name(q.dtype)
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    if (k.shape != (b, hkv, nk, d) or v.shape != k.shape or hkv < 1 or hkv > h
            or h % hkv != 0):
        raise ValueError("shapes must be q [B, H, Nq, D], k and v [B, H_kv, Nk, D] with H a "
                         "multiple of H_kv; they are %s, %s and %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    return b, h, hkv, nq, nk, d


def window_arg(window, causal):
    """(left, right) as ints >= -1, and whether it narrows attention (AttentionShape::
    has_window: a left edge, or a right edge without causal masking)."""
    try:
        left, right = (int(x) for x in window)
    except (TypeError, ValueError):
        raise ValueError("window must be a pair (left, right) of ints, -1 for unlimited; got %r"
                         % (window,)) from None
    if left < -1 or right < -1:
        raise ValueError("window (left, right) must be >= 0, or -1 for unlimited; got %r"
                         % (window,))
    return (left, right), left >= 0 or (not causal and right >= 0)


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


def _index(device):
    """The CUDA device ordinal the library makes current for the call (0 where torch gives
    none: a CPU tensor under the emulation of tests/test_serving.py)."""
    return device.index if device.index is not None else 0


def _stream(device):
    if device.type != "cuda":  # only reached with KERNEL_DEVICES widened (tests/test_serving.py)
        return None
    return torch.cuda.current_stream(device).cuda_stream


def group_expand(t, heads, dim):
    """K or V with H_kv heads at `dim`, repeated to `heads` (query head h reads K/V head
    h // group): t itself when there is no group, else a contiguous copy."""
    hkv = t.shape[dim]
    return t if hkv == heads else t.repeat_interleave(heads // hkv, dim=dim)


def group_sum(dt, hkv, dim, dtype):
    """The gradient of an expanded K or V (H heads at `dim`) summed over each group back to
    H_kv heads: accumulated in fp32, rounded once to dtype."""
    h = dt.shape[dim]
    if h == hkv:
        return dt
    shape = dt.shape[:dim] + (hkv, h // hkv) + dt.shape[dim + 1:]
    return dt.float().reshape(shape).sum(dim=dim + 1).to(dtype)


def attention_fwd_into(q, k, v, o, lse, causal=False, scale=None, kernel=DEFAULT_FWD):
    """Launches fixed-length forward `kernel` on q [B, H, Nq, D], k, v [B, H_kv, Nk, D], writing
    o (like q) and lse (fp32 [B, H, Nq]); allocates and copies nothing (what the benchmarks
    time). All contiguous and 16-byte aligned on one CUDA device."""
    b, h, hkv, nq, nk, d = check_inputs(q, k, v)
    args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
    if hkv == h:
        _lib.attention_fwd(kernel, *args, b, h, nq, nk, d, dtype_name(q.dtype),
                           _scale_arg(scale, d), bool(causal), _index(q.device),
                           _stream(q.device))
    else:
        _lib.attention_fwd_gqa(kernel, *args, b, h, hkv, nq, nk, d, dtype_name(q.dtype),
                               _scale_arg(scale, d), bool(causal), _index(q.device),
                               _stream(q.device))


class FlashAttentionFunction(torch.autograd.Function):
    """(q, k, v, causal, scale, kernel, kernel_bwd) -> (O, L); L is not differentiable. k and v
    may have fewer heads than q (the forward kernel must take grouped heads)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, kernel, kernel_bwd):
        b, h, hkv, nq, nk, d = check_inputs(q, k, v)
        o = torch.empty((b, h, nq, d), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
        if hkv == h:
            _lib.attention_fwd(kernel, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                               lse.data_ptr(), b, h, nq, nk, d, dtype_name(q.dtype), scale,
                               causal, _index(q.device), _stream(q.device))
        else:
            _lib.attention_fwd_gqa(kernel, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                   o.data_ptr(), lse.data_ptr(), b, h, hkv, nq, nk, d,
                                   dtype_name(q.dtype), scale, causal, _index(q.device),
                                   _stream(q.device))
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.kernel_bwd = causal, scale, kernel_bwd
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        b, h, hkv, nq, nk, d = check_inputs(q, k, v)
        if ctx.kernel_bwd is None:
            raise RuntimeError("attention(..., kernel_bwd=None) has no backward kernel")
        # No backward kernel takes grouped heads: run it on K, V repeated over the group.
        k, v = group_expand(k, h, 1), group_expand(v, h, 1)
        do = _dense(do.to(q.dtype))
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        dk = torch.empty_like(k, memory_format=torch.contiguous_format)
        dv = torch.empty_like(v, memory_format=torch.contiguous_format)
        delta = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
        workspace = torch.zeros(q.numel(), dtype=torch.float32, device=q.device)  # zeroed: required
        _lib.attention_bwd(ctx.kernel_bwd, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                           do.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                           dv.data_ptr(), delta.data_ptr(), workspace.data_ptr(), b, h, nq, nk, d,
                           dtype_name(q.dtype), ctx.scale, ctx.causal, _index(q.device),
                           _stream(q.device))
        dk, dv = group_sum(dk, hkv, 1, q.dtype), group_sum(dv, hkv, 1, q.dtype)
        return dq, dk, dv, None, None, None, None


def _require(kind, kernel, dtype, head_dim, **asks):
    err = _lib.supported(kind, kernel, dtype, head_dim, **asks)
    if err is not None:
        raise err


_SERVING_NAMES = None


def serving_kernel_names(kind):
    """The registered names of a kind ('fwd', 'bwd' of chapters 05-08; 'varlen_fwd',
    'varlen_bwd', 'paged_fwd', 'append' of chapter 09), read from the library once."""
    global _SERVING_NAMES
    if _SERVING_NAMES is None:
        names = {}
        for k in list(_lib.list_kernels()) + list(_lib.list_serving_kernels()):
            names.setdefault(k.kind, set()).add(k.name)
        _SERVING_NAMES = names
    return _SERVING_NAMES.get(kind, set())


def _is_varlen(kernel, kind="fwd"):
    """Whether `kernel` names a varlen kernel of `kind` ('fwd', 'bwd'): registered as one; or
    not registered as a fixed-length one and named like chapter 09's (so that a missing 09/...
    kernel is reported among the varlen kernels, not the fixed-length ones)."""
    if kernel in serving_kernel_names("varlen_" + kind):
        return True
    return kernel not in serving_kernel_names(kind) and kernel.startswith("09/")


def attention(q, k, v, causal=False, scale=None, kernel=AUTO, kernel_bwd=AUTO,
              return_lse=False, window=(-1, -1)):
    """softmax(scale * q k^T [+ bottom-right causal mask] [+ sliding window]) v with the
    repository's kernels.

    q: [B, H, Nq, D], k and v: [B, H_kv, Nk, D] (H a multiple of H_kv: grouped-query attention),
    CUDA, one dtype. window=(left, right): query i sees keys j with d - left <= j <= d + right,
    d = i + Nk - Nq its bottom-right diagonal, -1 unlimited (FlashAttention's meaning; causal is
    right = 0, so causal=True, window=(W - 1, 0) is a causal window of W keys).

    kernel="auto" (the default) picks fa.DEFAULT_FWD for plain attention (fp16, bf16; for fp32
    pass kernel=fa.FP32_FWD, kernel_bwd=fa.FP32_BWD), chapter 09's 09/v2_window with a window and
    09/v1_varlen with grouped heads. A named kernel is used as named: a fixed-length one (05/...,
    08/... for grouped heads) or a chapter 09 varlen one (then Q, K, V run as a packed batch of
    equal lengths; for B > 1 that is a copy in and out). kernel_bwd="auto" pairs the backward:
    fa.DEFAULT_BWD, or 09/bwd_v2_window / 09/bwd_v1_varlen after a varlen forward; None means no
    backward. Grouped heads in the backward: K and V repeated over the group, the group's dK, dV
    summed in Python (the module's docstring). Non-contiguous inputs are copied.

    Returns O [B, H, Nq, D], or (O, L) with return_lse=True, L fp32 [B, H, Nq] (-inf for a row
    that sees no key). Gradients flow to q, k and v.
    Refusals raise ValueError (bad arguments) or flash_from_scratch.UnsupportedError (no version
    of the kernel for this dtype / head dim / GPU / grouped heads / window), in the harness's
    words; never a wrong answer.
    """
    b, h, hkv, nq, nk, d = check_inputs(q, k, v)
    scale = _scale_arg(scale, d)
    causal = bool(causal)
    window, has_window = window_arg(window, causal)
    gqa = hkv != h
    dt = dtype_name(q.dtype)
    if kernel == AUTO:
        kernel = VARLEN_WINDOW_FWD if has_window else VARLEN_FWD if gqa else DEFAULT_FWD
    varlen = _is_varlen(kernel)
    if kernel_bwd == AUTO:
        kernel_bwd = ((VARLEN_WINDOW_BWD if has_window else VARLEN_BWD) if varlen
                      else DEFAULT_BWD)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad and kernel_bwd is None:
        raise ValueError("inputs require grad but kernel_bwd is None")
    if varlen:
        from . import serving
        if min(b, h, nq, nk, d) < 1:  # the fixed-length path's words for the same refusal
            raise ValueError("batch, heads, seq_q, seq_k and head_dim must be at least 1 (got "
                             "%d, %d, %d, %d, %d)" % (b, h, nq, nk, d))
        _require("varlen_fwd", kernel, dt, d, gqa=gqa, window=has_window)
        if needs_grad:
            serving.require_varlen_bwd(kernel, kernel_bwd, dt, d, has_window)
        o, lse = serving.attention_as_varlen(q, k, v, causal, scale, window, kernel, kernel_bwd)
        return (o, lse) if return_lse else o
    _require("fwd", kernel, dt, d, gqa=gqa, window=has_window)
    if needs_grad:
        if _is_varlen(kernel_bwd, "bwd"):
            raise ValueError("kernel %s is a fixed-length forward: kernel_bwd must be a "
                             "fixed-length backward (06/...), not %s" % (kernel, kernel_bwd))
        _require("bwd", kernel_bwd, dt, d)  # refuse now rather than in backward()
    o, lse = FlashAttentionFunction.apply(_dense(q), _dense(k), _dense(v), causal, scale, kernel,
                                          kernel_bwd)
    return (o, lse) if return_lse else o
