"""What every PyTorch-facing module of the package shares: argument checks, the dtype names of
the C ABI, the kernel choice (the dispatch, or a named kernel checked against the registry) and
the grouped-head helpers. Imports torch; imported by _launch, ops, serving and
flash_attn_interface, and imports none of them (the package's modules form a chain, no cycle).
"""
import math

import torch

from . import _lib
from .names import AUTO

DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# Where the kernels' tensors live. A test of the Python layer alone widens it to "cpu" and puts
# an emulation of the library in its place (python/tests/emulated.py); nothing else changes it.
KERNEL_DEVICES = ("cuda",)

# The kernels load 16-byte vectors (cp.async, TMA): each tensor's base must be 16-byte aligned.
ALIGN = 16


def dtype_name(dtype):
    """'fp32', 'fp16' or 'bf16' for torch.float32, torch.float16, torch.bfloat16."""
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise ValueError("%s is not a dtype the kernels take (fp32, fp16 or bf16: torch.float32, "
                         "torch.float16, torch.bfloat16)" % dtype) from None


def dense(t):
    """t itself when contiguous and 16-byte aligned, else a contiguous aligned copy (autograd
    carries the gradient back to the original)."""
    if not t.is_contiguous():
        t = t.contiguous()
    if t.data_ptr() % ALIGN != 0:
        t = t.clone()
    return t


def check_tensor(t, name, dims, layout):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))
    if t.dim() != dims:
        raise ValueError("%s must be %s (%d dimensions); its shape is %s"
                         % (name, layout, dims, tuple(t.shape)))
    if t.device.type not in KERNEL_DEVICES:
        raise ValueError("%s is on %s: the kernels take CUDA tensors" % (name, t.device))


def check_same(tensors):
    """One device and one dtype for the (name, tensor) pairs; returns the dtype's name."""
    names = ", ".join(n for n, _ in tensors)
    devices = [t.device for _, t in tensors]
    if any(d != devices[0] for d in devices):
        raise ValueError("%s must be on one device; they are on %s"
                         % (names, ", ".join(str(d) for d in devices)))
    dtypes = [t.dtype for _, t in tensors]
    if any(d != dtypes[0] for d in dtypes):
        raise ValueError("%s must have one dtype; they are %s"
                         % (names, ", ".join(str(d) for d in dtypes)))
    return dtype_name(dtypes[0])


def check_heads(h, hkv, what):
    if hkv < 1 or hkv > h or h % hkv:
        raise ValueError("%s: the query heads (%d) must be a multiple of the K/V heads (%d)"
                         % (what, h, hkv))


def check_inputs(q, k, v):
    """Raises TypeError / ValueError unless q [B, H, Nq, D] and k, v [B, H_kv, Nk, D] (H a
    multiple of H_kv) are CUDA tensors of one dtype (fp32, fp16, bf16) on one device. Returns
    (B, H, H_kv, Nq, Nk, D)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, 4, "[batch, heads, seq, head_dim]")
    check_same((("q", q), ("k", k), ("v", v)))
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    if (k.shape != (b, hkv, nk, d) or v.shape != k.shape or hkv < 1 or hkv > h
            or h % hkv != 0):
        raise ValueError("shapes must be q [B, H, Nq, D], k and v [B, H_kv, Nk, D] with H a "
                         "multiple of H_kv; they are %s, %s and %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    if min(b, h, nq, nk, d) < 1:
        raise ValueError("batch, heads, seq_q, seq_k and head_dim must be at least 1 (got "
                         "%d, %d, %d, %d, %d)" % (b, h, nq, nk, d))
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


def scale_arg(scale):
    """The scale passed to the kernels: 0 means 1/sqrt(head_dim) there (AttentionShape.scale)."""
    if scale is None:
        return 0.0
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0.0:
        # The C library's words for the same refusal (a kernel may take the row max on raw
        # scores, which is only right for a positive scale).
        raise ValueError("scale must be a finite number > 0 (0 means 1/sqrt(head_dim))")
    return scale


def softmax_scale(head_dim, scale=None):
    """The softmax scale: `scale` when one is given, else 1/sqrt(head_dim), the default of
    common/shapes.h's softmax_scale (which the kernels take in fp32; the float64 references here
    keep it in float64). The one place the package computes it."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def scale_or_none(scale):
    """The scale an operator carries (0.0 for "1/sqrt(head_dim)") as the launchers take it."""
    return scale if scale > 0.0 else None


def device_index(device):
    """The CUDA device ordinal the library makes current for the call (0 where torch gives
    none: a CPU tensor under the emulation of the Python-layer tests)."""
    return device.index if device.index is not None else 0


def stream(device):
    """The current CUDA stream of `device` as an address, for the launch. torch's private
    _cuda_getCurrentRawStream is used where it exists: torch.cuda.current_stream() builds a
    Stream object, about 25 us of host time per call on an H200's host (bench/
    host_overhead.py), twice per forward + backward."""
    if device.type != "cuda":  # only reached with KERNEL_DEVICES widened (the emulation)
        return None
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device_index(device))
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


# ---- Which kernel ------------------------------------------------------------------------------

_NAMES = None


def kernel_names(kind):
    """The registered names of a kind ('fwd', 'bwd' of chapters 05-08; 'varlen_fwd',
    'varlen_bwd', 'paged_fwd', 'append' of chapter 09), read from the library once."""
    global _NAMES
    if _NAMES is None:
        names = {}
        for k in list(_lib.list_kernels()) + list(_lib.list_serving_kernels()):
            names.setdefault(k.kind, set()).add(k.name)
        _NAMES = names
    return _NAMES.get(kind, set())


def kind_of(kernel, direction):
    """The registry kind of a named kernel for `direction` ('fwd' or 'bwd'): the fixed-length
    kind when it is registered as one, else the varlen kind (a name registered as neither is
    reported among the varlen kernels when it looks like chapter 09's, else the fixed ones)."""
    if kernel in kernel_names(direction):
        return direction
    if kernel in kernel_names("varlen_" + direction) or kernel.startswith("09/"):
        return "varlen_" + direction
    return direction


_CHECKED = {}


def require(kind, kernel, dtype, head_dim, gqa=False, window=False, page_size=0):
    """Raises what a launch of `kernel` would raise on this problem (unknown kernel, no version
    for the dtype / head dim / GPU, no grouped heads, no window); remembered once it passes. The
    backward kinds are asked without gqa: a backward that takes no grouped heads runs on K and V
    repeated over the group (takes_grouped_heads)."""
    key = (kind, kernel, dtype, int(head_dim), bool(gqa), bool(window), int(page_size))
    if key in _CHECKED:
        return
    err = _lib.supported(kind, kernel, dtype, head_dim, gqa=gqa, window=window,
                         page_size=page_size)
    if err is not None:
        raise err
    _CHECKED[key] = True


_GROUPED = {}


def takes_grouped_heads(kind, kernel, dtype, head_dim):
    """Whether backward `kernel` of registry `kind` ('bwd' or 'varlen_bwd') takes grouped K/V
    heads itself (it sums dK, dV over each group: no repeated K, V, no sum in Python);
    remembered."""
    key = (kind, kernel, dtype, int(head_dim))
    if key not in _GROUPED:
        _GROUPED[key] = (kind in ("bwd", "varlen_bwd")
                         and _lib.supported(kind, kernel, dtype, head_dim, gqa=True) is None)
    return _GROUPED[key]


_PICKS = {}


def choose(direction, kernel, dtype, head_dim, seq_q, seq_k, causal, has_window, gqa,
           deterministic=False):
    """(name, kind) of the kernel that runs a fixed-length problem: the dispatch's choice for
    kernel == "auto" (common/dispatch.h, on this machine's GPU), else `kernel` itself, checked.
    direction 'fwd' or 'bwd'. Raises UnsupportedError (or NoGpuError) when nothing runs it."""
    if kernel == AUTO:
        key = (direction, dtype, head_dim, seq_q, seq_k, causal, has_window, gqa, deterministic)
        if key not in _PICKS:
            p = _lib.pick(direction, dtype, head_dim, seq_q, seq_k, causal=causal,
                          window=has_window, gqa=gqa, deterministic=deterministic)
            _PICKS[key] = (p.kernel, p.kind)
        return _PICKS[key]
    kind = kind_of(kernel, direction)
    require(kind, kernel, dtype, head_dim, gqa=gqa and direction == "fwd", window=has_window)
    if deterministic and direction == "bwd":
        det = {k.name: k.deterministic for k in _lib.list_kernels() + _lib.list_serving_kernels()
               if k.kind == kind}
        if not det.get(kernel, True):
            raise _lib.UnsupportedError("%s: deterministic=True, but this backward adds with "
                                        "atomics (not deterministic)" % kernel)
    return kernel, kind


def forget_choices():
    """Clears what choose() and require() remember (tests that swap the library)."""
    global _NAMES
    _NAMES = None
    _PICKS.clear()
    _CHECKED.clear()
    _GROUPED.clear()
