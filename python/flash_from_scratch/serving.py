"""Chapter 09 from PyTorch: variable-length batches, the sliding window, a paged KV cache.

varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
    FlashAttention's varlen interface and layout: q [total_q, H, D], k and v [total_k, H_kv, D]
    (token-major), cu_seqlens int32 [batch + 1]. Differentiable.
paged_attention(q, k_pages, v_pages, block_table, seqlens_k, ...)
    q [B, H, seq_q, D] against a paged cache [num_pages, H_kv, page_size, D]. Forward only.
append_kv(k_new, v_new, k_pages, v_pages, block_table, seqlens_k)
    The new tokens' keys and values into the pages, in place.

Layouts. Chapter 09's varlen kernels take head-major packed tensors, [H, total, D]
(common/shapes.h, VarlenShape: one head's rows of one sequence are then contiguous rows, as in
chapter 05). varlen_attention transposes q, k, v to that layout and O back with a copy each; the
kernel times of chapter 09's README and of bench/compare_serving.py exclude those copies (they
call varlen_fwd_into on tensors already packed head-major). Callers that keep head-major tensors
use varlen_attention_packed, which copies nothing.

Lengths live on the host too. The launchers size their grids from the lengths (VarlenShape holds
them on the host), so the cumulative offsets are needed on both sides: given as a CUDA tensor,
they are copied to the host (a synchronisation, like FlashAttention's own .item() calls for some
paths); given on the host (a list or a CPU tensor), they are copied to the device. VarlenBatch
does both once for a batch that is attended to repeatedly.

Grouped-query attention in the backward. The varlen backward kernels take heads_kv == heads
only, as chapter 06's do. The backward here repeats K and V over each group of H / H_kv query
heads (repeat_interleave: query head h reads K/V head h // group), runs the kernel with H heads,
and sums each group's H / H_kv gradients of dK and dV in fp32 in Python, rounding once. That
costs the expanded copies and a reduction; a kernel that accumulated the group itself would not.

Every function checks dtypes, devices and shapes and raises ValueError with what is wrong; a
kernel that cannot run the problem raises flash_from_scratch.UnsupportedError in the harness's
words, and a kernel missing from this build raises ValueError listing those registered.
"""
import torch

from . import _lib, ops
from .names import (APPEND_KV, AUTO, DECODE_SEQ_Q, PAGED_DECODE, PAGED_PREFILL, VARLEN_BWD,
                    VARLEN_FWD, VARLEN_WINDOW_BWD, VARLEN_WINDOW_FWD)
from .ops import (_dense, _index, _require, _scale_arg, _stream, dtype_name, group_expand, group_sum,
                  serving_kernel_names, window_arg)

INT32_MAX = 2 ** 31 - 1


# ---- Arguments ---------------------------------------------------------------------------------

def _is_int_dtype(dtype):
    return dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _host_ints(x, name):
    """A list of Python ints from a 1-D integer tensor (copied to the host) or a sequence."""
    if isinstance(x, torch.Tensor):
        if x.dim() != 1:
            raise ValueError("%s must be 1-D; its shape is %s" % (name, tuple(x.shape)))
        if not _is_int_dtype(x.dtype):
            raise ValueError("%s must hold integers (int32, as FlashAttention's); it is %s"
                             % (name, x.dtype))
        return [int(e) for e in x.detach().to("cpu").tolist()]
    try:
        return [int(e) for e in x]
    except (TypeError, ValueError):
        raise ValueError("%s must be a 1-D integer tensor or a sequence of ints, not %s"
                         % (name, type(x).__name__)) from None


def _device_int32(x, device, name):
    """x as a contiguous int32 tensor on `device` (x itself when it already is one)."""
    if isinstance(x, torch.Tensor):
        if x.is_cuda and x.device != device:
            raise ValueError("%s is on %s, the tensors on %s" % (name, x.device, device))
        if x.device == device and x.dtype == torch.int32 and x.is_contiguous():
            return x
        return x.to(device=device, dtype=torch.int32).contiguous()
    return torch.tensor(list(x), dtype=torch.int32, device=device)


def _check_offsets(cu, name, total):
    if len(cu) < 2:
        raise ValueError("%s needs batch + 1 >= 2 entries; it has %d" % (name, len(cu)))
    if cu[0] != 0:
        raise ValueError("%s[0] must be 0; it is %d" % (name, cu[0]))
    for b in range(len(cu) - 1):
        if cu[b + 1] < cu[b]:
            raise ValueError("%s must not decrease: entry %d is %d after %d"
                             % (name, b + 1, cu[b + 1], cu[b]))
    if total is not None and cu[-1] != total:
        raise ValueError("%s ends at %d, but the tensor has %d tokens (they must agree)"
                         % (name, cu[-1], total))
    if cu[-1] > INT32_MAX:
        raise ValueError("%s: %d tokens in all; the kernels' offsets are int32" % (name, cu[-1]))


def _check_tensor(t, name, dims, layout):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))
    if t.dim() != dims:
        raise ValueError("%s must be %s (%d dimensions); its shape is %s"
                         % (name, layout, dims, tuple(t.shape)))
    if t.device.type not in ops.KERNEL_DEVICES:
        raise ValueError("%s is on %s: the kernels take CUDA tensors" % (name, t.device))


def _check_same(tensors):
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


def _check_heads(h, hkv, what):
    if hkv < 1 or hkv > h or h % hkv:
        raise ValueError("%s: the query heads (%d) must be a multiple of the K/V heads (%d)"
                         % (what, h, hkv))


def _needs_grad(*ts):
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


# ---- Variable-length batches -------------------------------------------------------------------

class VarlenBatch:
    """The lengths of a variable-length batch, prepared once for the launchers: the cumulative
    offsets on the host (int64, read by the launcher) and on the device (int32, read by the
    kernel). Make it from offsets or from lengths:

        VarlenBatch(cu_seqlens_q, cu_seqlens_k, device)        # tensors or lists of batch + 1
        VarlenBatch.from_lengths([5, 0, 17], [5, 3, 17], device)
    """

    def __init__(self, cu_seqlens_q, cu_seqlens_k=None, device="cuda", total_q=None,
                 total_k=None):
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if cu_seqlens_k is None:
            cu_seqlens_k = cu_seqlens_q
        cu_q = _host_ints(cu_seqlens_q, "cu_seqlens_q")
        cu_k = _host_ints(cu_seqlens_k, "cu_seqlens_k")
        _check_offsets(cu_q, "cu_seqlens_q", total_q)
        _check_offsets(cu_k, "cu_seqlens_k", total_k)
        if len(cu_q) != len(cu_k):
            raise ValueError("cu_seqlens_q and cu_seqlens_k must have one length (batch + 1); "
                             "they have %d and %d" % (len(cu_q), len(cu_k)))
        self.device = device
        self.cu_q, self.cu_k = cu_q, cu_k
        self.host_q, self.host_k = _lib.HostInt64(cu_q), _lib.HostInt64(cu_k)
        self.dev_q = _device_int32(cu_seqlens_q, device, "cu_seqlens_q")
        self.dev_k = (self.dev_q if cu_seqlens_k is cu_seqlens_q
                      else _device_int32(cu_seqlens_k, device, "cu_seqlens_k"))

    @classmethod
    def from_lengths(cls, seqlens_q, seqlens_k=None, device="cuda"):
        seqlens_k = seqlens_q if seqlens_k is None else seqlens_k

        def offsets(lengths, name):
            lengths = _host_ints(lengths, name)
            if any(n < 0 for n in lengths):
                raise ValueError("%s must be >= 0: %s" % (name, lengths))
            cu = [0]
            for n in lengths:
                cu.append(cu[-1] + n)
            return cu

        return cls(offsets(seqlens_q, "seqlens_q"), offsets(seqlens_k, "seqlens_k"), device)

    @property
    def batch(self):
        return len(self.cu_q) - 1

    @property
    def seqlens_q(self):
        return [b - a for a, b in zip(self.cu_q, self.cu_q[1:])]

    @property
    def seqlens_k(self):
        return [b - a for a, b in zip(self.cu_k, self.cu_k[1:])]

    @property
    def total_q(self):
        return self.cu_q[-1]

    @property
    def total_k(self):
        return self.cu_k[-1]

    @property
    def max_seqlen_q(self):
        return max(self.seqlens_q)

    @property
    def max_seqlen_k(self):
        return max(self.seqlens_k)


def _check_packed(plan, q, k, v):
    """Head-major packed q [H, total_q, D], k, v [H_kv, total_k, D] against the batch."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(t, name, 3, "[heads, total, head_dim] (head-major packed)")
    dt = _check_same((("q", q), ("k", k), ("v", v)))
    h, tq, d = q.shape
    hkv, tk = k.shape[0], k.shape[1]
    if k.shape != (hkv, tk, d) or v.shape != k.shape:
        raise ValueError("shapes must be q [H, total_q, D], k and v [H_kv, total_k, D]; they "
                         "are %s, %s and %s" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    _check_heads(h, hkv, "q, k")
    if tq != plan.total_q or tk != plan.total_k:
        raise ValueError("q has %d tokens and k %d; the offsets say %d and %d"
                         % (tq, tk, plan.total_q, plan.total_k))
    if q.device != plan.device:
        raise ValueError("the tensors are on %s, the offsets on %s" % (q.device, plan.device))
    return dt, h, hkv, d


def varlen_fwd_into(plan, q, k, v, o, lse, causal=False, scale=None, window=(-1, -1),
                    kernel=VARLEN_FWD):
    """Launches varlen forward `kernel` on head-major packed tensors, writing o (like q) and
    lse (fp32 [H, total_q]); allocates and copies nothing (what the benchmarks time). q, k, v,
    o, lse contiguous and 16-byte aligned on plan.device."""
    dt, h, hkv, d = _check_packed(plan, q, k, v)
    (left, right), _ = window_arg(window, causal)
    _lib.varlen_fwd(kernel, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                    lse.data_ptr(), plan.dev_q.data_ptr(), plan.dev_k.data_ptr(), plan.host_q,
                    plan.host_k, h, hkv, d, dt, _scale_arg(scale, d), bool(causal), left, right,
                    _index(q.device), _stream(q.device))


def varlen_bwd_into(plan, q, k, v, o, do, lse, dq, dk, dv, delta, workspace, causal=False,
                    scale=None, window=(-1, -1), kernel=VARLEN_BWD):
    """Launches varlen backward `kernel` on head-major packed tensors (K and V with H heads: no
    backward takes grouped heads). workspace is fp32 of q.numel() floats and must be zero before
    every call (workspace.zero_())."""
    dt, h, hkv, d = _check_packed(plan, q, k, v)
    (left, right), _ = window_arg(window, causal)
    _lib.varlen_bwd(kernel, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                    do.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                    delta.data_ptr(), workspace.data_ptr(), plan.dev_q.data_ptr(),
                    plan.dev_k.data_ptr(), plan.host_q, plan.host_k, h, hkv, d, dt,
                    _scale_arg(scale, d), bool(causal), left, right, _index(q.device),
                    _stream(q.device))


class VarlenFunction(torch.autograd.Function):
    """(q, k, v [head-major packed], plan, causal, scale, window, kernel, kernel_bwd) -> (O, L);
    L is not differentiable. Grouped K/V heads in the backward: see the module's docstring."""

    @staticmethod
    def forward(ctx, q, k, v, plan, causal, scale, window, kernel, kernel_bwd):
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty((q.shape[0], q.shape[1]), dtype=torch.float32, device=q.device)
        varlen_fwd_into(plan, q, k, v, o, lse, causal, scale, window, kernel)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.plan, ctx.causal, ctx.scale, ctx.window = plan, causal, scale, window
        ctx.kernel_bwd = kernel_bwd
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if ctx.kernel_bwd is None:
            raise RuntimeError("varlen attention with kernel_bwd=None has no backward kernel")
        h, hkv = q.shape[0], k.shape[0]
        ke, ve = group_expand(k, h, 0), group_expand(v, h, 0)  # no backward takes grouped heads
        do = _dense(do.to(q.dtype))
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        dk = torch.empty_like(ke, memory_format=torch.contiguous_format)
        dv = torch.empty_like(ve, memory_format=torch.contiguous_format)
        delta = torch.empty_like(lse)
        workspace = torch.zeros(q.numel(), dtype=torch.float32, device=q.device)  # zeroed: required
        varlen_bwd_into(ctx.plan, q, ke, ve, o, do, lse, dq, dk, dv, delta, workspace, ctx.causal,
                        ctx.scale, ctx.window, ctx.kernel_bwd)
        dk, dv = group_sum(dk, hkv, 0, q.dtype), group_sum(dv, hkv, 0, q.dtype)
        return dq, dk, dv, None, None, None, None, None, None


def require_varlen_bwd(kernel, kernel_bwd, dtype, head_dim, has_window):
    """Refuses, before any forward runs, a backward that cannot follow varlen forward `kernel`."""
    if not ops._is_varlen(kernel_bwd, "bwd"):
        raise ValueError("the forward is varlen kernel %s: kernel_bwd must be a chapter 09 varlen "
                         "backward (%s), not %s" % (
                             kernel, ", ".join(sorted(serving_kernel_names("varlen_bwd")))
                             or "none is registered in this build", kernel_bwd))
    _require("varlen_bwd", kernel_bwd, dtype, head_dim, window=has_window)


def _pick_varlen(kernel, kernel_bwd, has_window):
    if kernel == AUTO:
        kernel = VARLEN_WINDOW_FWD if has_window else VARLEN_FWD
    if kernel_bwd == AUTO:
        kernel_bwd = VARLEN_WINDOW_BWD if has_window else VARLEN_BWD
    return kernel, kernel_bwd


def _varlen_common(plan, q, k, v, causal, scale, window, kernel, kernel_bwd):
    """Checks and kernel choice shared by the varlen entry points; returns what the Function
    takes after the tensors."""
    dt, h, hkv, d = _check_packed(plan, q, k, v)
    scale = _scale_arg(scale, d)
    causal = bool(causal)
    window, has_window = window_arg(window, causal)
    kernel, kernel_bwd = _pick_varlen(kernel, kernel_bwd, has_window)
    _require("varlen_fwd", kernel, dt, d, gqa=hkv != h, window=has_window)
    if _needs_grad(q, k, v):
        if kernel_bwd is None:
            raise ValueError("inputs require grad but kernel_bwd is None")
        require_varlen_bwd(kernel, kernel_bwd, dt, d, has_window)
    return plan, causal, scale or None, window, kernel, kernel_bwd


def varlen_attention_packed(q, k, v, plan, causal=False, window=(-1, -1), scale=None,
                            kernel=AUTO, kernel_bwd=AUTO, return_lse=False):
    """varlen_attention on head-major packed tensors, q [H, total_q, D], k, v [H_kv, total_k, D],
    with a VarlenBatch: no layout copies. Returns O [H, total_q, D] (and L fp32 [H, total_q])."""
    if not isinstance(plan, VarlenBatch):
        raise TypeError("plan must be a VarlenBatch, not %s" % type(plan).__name__)
    args = _varlen_common(plan, q, k, v, causal, scale, window, kernel, kernel_bwd)
    o, lse = VarlenFunction.apply(_dense(q), _dense(k), _dense(v), *args)
    return (o, lse) if return_lse else o


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     causal=False, window=(-1, -1), scale=None, kernel=AUTO, kernel_bwd=AUTO,
                     return_lse=False):
    """Attention over a batch of sequences of different lengths, packed without padding, with
    FlashAttention's varlen interface (flash_attn_varlen_func):

    q [total_q, H, D], k and v [total_k, H_kv, D] (token-major; H a multiple of H_kv), CUDA, fp16
    or bf16; cu_seqlens_q, cu_seqlens_k [batch + 1] cumulative offsets starting at 0 (int32 CUDA
    tensors as FlashAttention takes them, or CPU tensors or lists), ending at total_q and
    total_k; sequence b is q rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 against its own keys,
    and may be empty. max_seqlen_q / _k: FlashAttention's grid hints; here the lengths are read
    on the host anyway (the module's docstring), so they are only checked (None: not given).
    causal: bottom-right aligned per sequence; window=(left, right) FlashAttention's sliding
    window (-1 unlimited; causal=True, window=(W - 1, 0) is a causal window of W keys).

    kernel="auto": 09/v2_window with a window, else 09/v1_varlen; kernel_bwd="auto":
    09/bwd_v2_window or 09/bwd_v1_varlen (None: no backward). The kernels take head-major
    [H, total, D]: q, k, v are transposed with a copy and O back (varlen_attention_packed and
    varlen_fwd_into skip that). Returns O [total_q, H, D], and with return_lse=True also L, fp32
    [H, total_q] (FlashAttention's varlen layout; -inf for a row that sees no key). Gradients
    flow to q, k and v (grouped heads: see the module's docstring).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(t, name, 3, "[total, heads, head_dim] (token-major, FlashAttention's)")
    _check_same((("q", q), ("k", k), ("v", v)))
    tq, h, d = q.shape
    tk, hkv = k.shape[0], k.shape[1]
    if k.shape != (tk, hkv, d) or v.shape != k.shape:
        raise ValueError("shapes must be q [total_q, H, D], k and v [total_k, H_kv, D]; they are "
                         "%s, %s and %s" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    _check_heads(h, hkv, "q, k")
    plan = VarlenBatch(cu_seqlens_q, cu_seqlens_k, q.device, total_q=tq, total_k=tk)
    for name, given, actual in (("max_seqlen_q", max_seqlen_q, plan.max_seqlen_q),
                                ("max_seqlen_k", max_seqlen_k, plan.max_seqlen_k)):
        if given is not None and int(given) < actual:
            raise ValueError("%s is %d, but a sequence has %d tokens" % (name, given, actual))
    # The head-major layout of the kernels: one copy each way (differentiable).
    qh, kh, vh = (_dense(t.transpose(0, 1)) for t in (q, k, v))
    args = _varlen_common(plan, qh, kh, vh, causal, scale, window, kernel, kernel_bwd)
    o, lse = VarlenFunction.apply(qh, kh, vh, *args)
    o = o.transpose(0, 1).contiguous()
    return (o, lse) if return_lse else o


def attention_as_varlen(q, k, v, causal, scale, window, kernel, kernel_bwd):
    """attention() on a varlen kernel: [B, H, N, D] as a packed batch of B equal lengths,
    [H, B * N, D] (a view for B = 1, a copy in and out otherwise). Returns (O, L) shaped as
    attention() returns them. Checked by the caller (ops.attention)."""
    b, h, nq, d = q.shape
    nk = k.shape[2]
    if b * max(nq, nk) > INT32_MAX:
        raise ValueError("batch * seq = %d tokens: the varlen kernels' offsets are int32"
                         % (b * max(nq, nk)))
    plan = VarlenBatch([i * nq for i in range(b + 1)], [i * nk for i in range(b + 1)], q.device)

    def pack(t):
        if b == 1:
            return t[0]
        return t.transpose(0, 1).reshape(t.shape[1], b * t.shape[2], d)

    qp, kp, vp = (_dense(pack(t)) for t in (q, k, v))
    o, lse = VarlenFunction.apply(qp, kp, vp, plan, causal, scale or None, window, kernel,
                                  kernel_bwd)
    if b == 1:
        return o.unsqueeze(0), lse.unsqueeze(0)
    return (o.reshape(h, b, nq, d).transpose(0, 1).contiguous(),
            lse.reshape(h, b, nq).transpose(0, 1).contiguous())


# ---- The paged KV cache ------------------------------------------------------------------------

class PagedLengths:
    """seqlens_k of a paged batch, on the host (int64, for the launcher) and on the device
    (int32, for the kernel), prepared once."""

    def __init__(self, seqlens_k, device):
        self.values = _host_ints(seqlens_k, "seqlens_k")
        self.host = _lib.HostInt64(self.values)
        self.dev = _device_int32(seqlens_k, torch.device(device), "seqlens_k")


def _check_pages(k_pages, v_pages, block_table, seqlens_k, batch, what):
    """Checks the cache and the table; returns (lengths PagedLengths, block_table int32 on the
    device, page_size, num_pages, max_pages, H_kv, D)."""
    for name, t in (("k_pages", k_pages), ("v_pages", v_pages)):
        _check_tensor(t, name, 4, "[num_pages, heads_kv, page_size, head_dim]")
    if k_pages.shape != v_pages.shape:
        raise ValueError("k_pages and v_pages must have one shape; they are %s and %s"
                         % (tuple(k_pages.shape), tuple(v_pages.shape)))
    num_pages, hkv, page_size, d = k_pages.shape
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2:
        raise ValueError("block_table must be a 2-D tensor [batch, max_pages] of page indices")
    if not _is_int_dtype(block_table.dtype):
        raise ValueError("block_table must hold integers (int32); it is %s" % block_table.dtype)
    if block_table.shape[0] != batch:
        raise ValueError("block_table has %d rows for a batch of %d (%s)"
                         % (block_table.shape[0], batch, what))
    max_pages = block_table.shape[1]
    device = k_pages.device
    table = _device_int32(block_table, device, "block_table")
    lengths = PagedLengths(seqlens_k, device)
    if len(lengths.values) != batch:
        raise ValueError("seqlens_k has %d entries for a batch of %d" % (len(lengths.values), batch))
    for b, n in enumerate(lengths.values):
        if n < 0 or n > max_pages * page_size:
            raise ValueError("seqlens_k[%d] = %d does not fit a block table row of %d pages of %d "
                             "keys" % (b, n, max_pages, page_size))
    # The pages each sequence uses must exist (entries past a sequence's last page are not read:
    # -1 there is the convention).
    used = torch.tensor([-(-n // page_size) for n in lengths.values], device=device)
    in_use = torch.arange(max_pages, device=device).unsqueeze(0) < used.unsqueeze(1)
    bad = in_use & ((table < 0) | (table >= num_pages))
    if bool(bad.any()):
        b, j = (int(x) for x in bad.nonzero()[0])
        raise ValueError("block_table[%d, %d] = %d: sequence %d uses that entry and the cache has "
                         "pages 0 .. %d" % (b, j, int(table[b, j]), b, num_pages - 1))
    return lengths, table, page_size, num_pages, max_pages, hkv, d


def paged_fwd_into(q, k_pages, v_pages, o, lse, block_table, lengths, causal=False, scale=None,
                   kernel=PAGED_DECODE):
    """Launches paged forward `kernel` (block_table int32 on the device, lengths a PagedLengths),
    writing o and lse; allocates and copies nothing (what the benchmarks time)."""
    b, h, seq_q, d = q.shape
    num_pages, hkv, page_size, _ = k_pages.shape
    _lib.paged_fwd(kernel, q.data_ptr(), k_pages.data_ptr(), v_pages.data_ptr(), o.data_ptr(),
                   lse.data_ptr(), block_table.data_ptr(), lengths.dev.data_ptr(), lengths.host,
                   h, hkv, seq_q, d, page_size, num_pages, block_table.shape[1],
                   dtype_name(q.dtype), _scale_arg(scale, d), bool(causal), _index(q.device),
                   _stream(q.device))


def paged_attention(q, k_pages, v_pages, block_table, seqlens_k, causal=False, scale=None,
                    kernel=AUTO, return_lse=False):
    """Attention of q [B, H, seq_q, D] against a paged KV cache (common/shapes.h, PagedShape).

    k_pages, v_pages [num_pages, H_kv, page_size, D] (one head's keys of one page contiguous;
    H a multiple of H_kv); block_table [B, max_pages] integers (int32 on the device; other
    integer tensors are converted): key j of sequence b is row j % page_size of page
    block_table[b, j // page_size]; seqlens_k [B] keys per sequence (a tensor or a list; copied
    to the host, the launcher needs them), its seq_q queries being its last seq_q tokens (causal
    masks bottom-right). Entries past a sequence's last page are not read (-1 by convention).
    kernel="auto": 09/paged_v1_decode for seq_q <= 16, else 09/paged_v2_prefill.
    Forward only: returns O [B, H, seq_q, D] (and L fp32 [B, H, seq_q] with return_lse=True).
    """
    _check_tensor(q, "q", 4, "[batch, heads, seq_q, head_dim]")
    if isinstance(k_pages, torch.Tensor) and isinstance(v_pages, torch.Tensor):
        dt = _check_same((("q", q), ("k_pages", k_pages), ("v_pages", v_pages)))
    else:
        raise TypeError("k_pages and v_pages must be torch.Tensors")
    b, h, seq_q, d = q.shape
    if min(b, h, seq_q, d) < 1:
        raise ValueError("q's batch, heads, seq_q and head_dim must be at least 1; its shape is "
                         "%s" % (tuple(q.shape),))
    lengths, table, page_size, num_pages, max_pages, hkv, dk = _check_pages(
        k_pages, v_pages, block_table, seqlens_k, b, "paged_attention")
    if dk != d:
        raise ValueError("q has head_dim %d, the pages %d" % (d, dk))
    _check_heads(h, hkv, "q, k_pages")
    if _needs_grad(q, k_pages, v_pages):
        raise ValueError("paged_attention is forward only (serving): call it under "
                         "torch.no_grad() or on tensors that do not require grad")
    if kernel == AUTO:
        kernel = PAGED_DECODE if seq_q <= DECODE_SEQ_Q else PAGED_PREFILL
    _require("paged_fwd", kernel, dt, d, gqa=hkv != h, page_size=page_size)
    q = _dense(q)
    k_pages, v_pages = _dense(k_pages), _dense(v_pages)
    o = torch.empty_like(q)
    lse = torch.empty((b, h, seq_q), dtype=torch.float32, device=q.device)
    paged_fwd_into(q, k_pages, v_pages, o, lse, table, lengths, causal, scale, kernel)
    return (o, lse) if return_lse else o


def append_kv(k_new, v_new, k_pages, v_pages, block_table, seqlens_k, kernel=APPEND_KV):
    """Writes the new tokens' keys and values into the pages, in place.

    k_new, v_new [B, H_kv, seq_q, D]; the pages, block_table and seqlens_k as paged_attention
    takes them, seqlens_k counting the new tokens already: they become keys seqlens_k[b] - seq_q
    .. seqlens_k[b] - 1 of sequence b (so every seqlens_k[b] >= seq_q). Nothing else in the pages
    changes. The pages must be contiguous (written in place).
    """
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        _check_tensor(t, name, 4, "[batch, heads_kv, seq_q, head_dim]")
    if not (isinstance(k_pages, torch.Tensor) and isinstance(v_pages, torch.Tensor)):
        raise TypeError("k_pages and v_pages must be torch.Tensors")
    dt = _check_same((("k_new", k_new), ("v_new", v_new), ("k_pages", k_pages),
                      ("v_pages", v_pages)))
    if k_new.shape != v_new.shape:
        raise ValueError("k_new and v_new must have one shape; they are %s and %s"
                         % (tuple(k_new.shape), tuple(v_new.shape)))
    b, hkv_new, seq_q, d = k_new.shape
    if min(b, hkv_new, seq_q, d) < 1:
        raise ValueError("k_new's batch, heads_kv, seq_q and head_dim must be at least 1; its "
                         "shape is %s" % (tuple(k_new.shape),))
    lengths, table, page_size, num_pages, max_pages, hkv, dp = _check_pages(
        k_pages, v_pages, block_table, seqlens_k, b, "append_kv")
    if (hkv_new, d) != (hkv, dp):
        raise ValueError("k_new has %d heads of %d; the pages %d heads of %d"
                         % (hkv_new, d, hkv, dp))
    for i, n in enumerate(lengths.values):
        if n < seq_q:
            raise ValueError("seqlens_k[%d] = %d is less than the %d new tokens (seqlens_k counts "
                             "them already)" % (i, n, seq_q))
    for name, t in (("k_pages", k_pages), ("v_pages", v_pages)):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError("%s must be contiguous and 16-byte aligned: append_kv writes it in "
                             "place" % name)
    if _needs_grad(k_pages, v_pages):
        raise ValueError("append_kv writes the pages in place: they must not require grad")
    _require("append", kernel, dt, d)
    k_new, v_new = _dense(k_new), _dense(v_new)
    _lib.paged_append(kernel, k_new.data_ptr(), v_new.data_ptr(), k_pages.data_ptr(),
                      v_pages.data_ptr(), table.data_ptr(), lengths.dev.data_ptr(),
                      lengths.host, hkv, seq_q, d, page_size, num_pages, max_pages, dt,
                      _index(k_pages.device), _stream(k_pages.device))
    # Autograd's record of in-place writes, so that a graph that saved the pages notices.
    bump = getattr(getattr(torch.autograd, "graph", None), "increment_version", None)
    if bump is not None:
        for t in (k_pages, v_pages):
            try:
                bump(t)
            except Exception:  # an older signature: the check is a courtesy, not the result
                pass
