"""Chapter 09 from PyTorch: variable-length batches, the sliding window, a paged KV cache.

varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
    FlashAttention's varlen interface and layout: q [total_q, H, D], k and v [total_k, H_kv, D]
    (token-major), cu_seqlens int32 [batch + 1]. Differentiable.
paged_attention(q, k_pages, v_pages, block_table, seqlens_k, ...)
    q [B, H, seq_q, D] against a paged cache [num_pages, H_kv, page_size, D]. Forward only.
append_kv(k_new, v_new, k_pages, v_pages, block_table, seqlens_k)
    The new tokens' keys and values into the pages, in place.

Each kernel call is an operator registered with torch.library (flash_from_scratch::varlen_fwd,
varlen_bwd, paged_fwd, append_kv; see ops.py), so these functions compile with torch.compile.

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
does both once for a batch that is attended to repeatedly, and the operators take both copies
(the host one as a CPU tensor, so that a compiled graph needs no synchronisation either).

Which kernel: kernel="auto" is the dispatch's choice (common/dispatch.h), as for attention().

Grouped-query attention in the backward. Chapter 09's Hopper backwards (09/hopper_bwd_v1_varlen,
09/hopper_bwd_v2_window) and its grouped mma.sync backwards (09/bwd_v6_varlen_grouped,
09/bwd_v7_window_grouped, 09/bwd_v8_grouped_d256, which the dispatch picks for grouped heads
before sm_90 and off the step of 8) take grouped K/V heads: they read K/V head h / group and sum
dK, dV over each group themselves, so they get K and V as they are. The other mma.sync ones
(bwd_v1 to bwd_v5) take heads_kv == heads only, as chapter 06's main rungs do: for them (a kernel
named by the caller) the backward here repeats K and V over each group of H / H_kv query heads
(repeat_interleave: query head h reads K/V head h // group), runs the kernel with H heads, and
sums each group's H / H_kv gradients of dK and dV in fp32 in Python, rounding once, which costs
the expanded copies and a reduction.

Every function checks dtypes, devices and shapes and raises ValueError with what is wrong; a
kernel that cannot run the problem raises flash_from_scratch.UnsupportedError in the harness's
words, and a kernel missing from this build raises ValueError listing those registered.
"""
from typing import Tuple

import torch

from . import _launch, _lib
from ._common import (check_heads, check_same, check_tensor, dense, dtype_name, group_expand,
                      group_sum, require, scale_arg, scale_or_none, takes_grouped_heads,
                      window_arg)
from ._launch import (PagedLengths, VarlenBatch, check_packed, device_int32, host_ints,  # noqa: F401
                      is_int_dtype, paged_fwd_into, varlen_bwd_into, varlen_fwd_into)
from .names import APPEND_KV, AUTO
from .ops import NAMESPACE

Tensor = torch.Tensor


def _needs_grad(*ts):
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


class _Plan(VarlenBatch):
    """A VarlenBatch made from the operators' two copies of the offsets, without copying either."""

    def __init__(self, cu_q, cu_k, host_q, host_k):  # pylint: disable=super-init-not-called
        self.device = cu_q.device
        self.cu_q, self.cu_k = host_q.tolist(), host_k.tolist()
        self.host_q, self.host_k = _lib.HostInt64(self.cu_q), _lib.HostInt64(self.cu_k)
        self.dev_q, self.dev_k = cu_q, cu_k
        self.cpu_q, self.cpu_k = host_q, host_k


def _pick_varlen(direction, kernel, dtype, d, plan, causal, has_window, gqa, deterministic=False):
    """(name) of the varlen kernel for `direction` ('fwd', 'bwd'): the dispatch's for "auto"."""
    kind = "varlen_" + direction
    if kernel == AUTO:
        return _lib.pick(kind, dtype, d, plan.max_seqlen_q if plan.batch else 0,
                         plan.max_seqlen_k if plan.batch else 0, causal=causal,
                         window=has_window, gqa=gqa, deterministic=deterministic).kernel
    require(kind, kernel, dtype, d, gqa=gqa and direction == "fwd", window=has_window)
    return kernel


# ---- The operators -----------------------------------------------------------------------------

@torch.library.custom_op(NAMESPACE + "::varlen_fwd", mutates_args=())
def varlen_fwd_op(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                  host_cu_seqlens_q: Tensor, host_cu_seqlens_k: Tensor, causal: bool,
                  scale: float, window_left: int, window_right: int, kernel: str,
                  kernel_bwd: str, deterministic: bool) -> Tuple[Tensor, Tensor]:
    """(O [H, total_q, D], L fp32 [H, total_q]) of a head-major packed batch; the offsets twice,
    int32 on q's device and int64 on the CPU."""
    plan = _Plan(cu_seqlens_q, cu_seqlens_k, host_cu_seqlens_q, host_cu_seqlens_k)
    q, k, v = dense(q), dense(k), dense(v)
    dt, h, hkv, d = check_packed(plan, q, k, v)
    window, has_window = window_arg((window_left, window_right), causal)
    name = _pick_varlen("fwd", kernel, dt, d, plan, causal, has_window, hkv != h)
    o = torch.empty_like(q)
    lse = torch.empty((h, q.shape[1]), dtype=torch.float32, device=q.device)
    varlen_fwd_into(plan, q, k, v, o, lse, causal, scale_or_none(scale), window, name)
    return o, lse


@varlen_fwd_op.register_fake
def _(q, k, v, cu_q, cu_k, host_q, host_k, causal, scale, wl, wr, kernel, kernel_bwd, det):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op(NAMESPACE + "::varlen_bwd", mutates_args=())
def varlen_bwd_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
                  cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, host_cu_seqlens_q: Tensor,
                  host_cu_seqlens_k: Tensor, causal: bool, scale: float, window_left: int,
                  window_right: int, kernel: str,
                  deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """(dQ, dK, dV) of a packed batch; dK, dV with k's H_kv heads (a kernel that takes grouped
    heads sums them itself; for any other K and V are repeated over the group and the group's
    gradients summed in fp32)."""
    plan = _Plan(cu_seqlens_q, cu_seqlens_k, host_cu_seqlens_q, host_cu_seqlens_k)
    dt, h, hkv, d = check_packed(plan, q, k, v)
    window, has_window = window_arg((window_left, window_right), causal)
    name = _pick_varlen("bwd", kernel, dt, d, plan, causal, has_window, hkv != h, deterministic)
    q, o, lse = dense(q), dense(o), dense(lse)
    in_kernel = hkv != h and takes_grouped_heads("varlen_bwd", name, dt, d)
    ke, ve = (dense(k), dense(v)) if in_kernel else (dense(group_expand(k, h, 0)),
                                                     dense(group_expand(v, h, 0)))
    do = dense(dout.to(q.dtype))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(ke), torch.empty_like(ve)
    delta = torch.empty_like(lse)
    workspace = torch.zeros(q.numel(), dtype=torch.float32, device=q.device)  # zeroed: required
    varlen_bwd_into(plan, q, ke, ve, o, do, lse, dq, dk, dv, delta, workspace, causal,
                    scale_or_none(scale), window, name)
    return dq, group_sum(dk, hkv, 0, q.dtype), group_sum(dv, hkv, 0, q.dtype)


@varlen_bwd_op.register_fake
def _(dout, q, k, v, o, lse, cu_q, cu_k, host_q, host_k, causal, scale, wl, wr, kernel, det):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _varlen_setup(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, host_q, host_k, causal, scale, wl, wr, _kernel, kernel_bwd,
     det) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, host_q, host_k)
    ctx.args = (causal, scale, wl, wr, kernel_bwd, det)
    ctx.mark_non_differentiable(lse)


def _varlen_backward(ctx, dout, _dlse):
    q, k, v, o, lse, cu_q, cu_k, host_q, host_k = ctx.saved_tensors
    causal, scale, wl, wr, kernel_bwd, det = ctx.args
    if not kernel_bwd:
        raise RuntimeError("varlen attention with kernel_bwd=None has no backward kernel")
    dq, dk, dv = varlen_bwd_op(dout, q, k, v, o, lse, cu_q, cu_k, host_q, host_k, causal, scale,
                               wl, wr, kernel_bwd, det)
    return (dq, dk, dv) + (None,) * 11


varlen_fwd_op.register_autograd(_varlen_backward, setup_context=_varlen_setup)


@torch.library.custom_op(NAMESPACE + "::paged_fwd", mutates_args=())
def paged_fwd_op(q: Tensor, k_pages: Tensor, v_pages: Tensor, block_table: Tensor,
                 seqlens_k: Tensor, host_seqlens_k: Tensor, causal: bool, scale: float,
                 kernel: str) -> Tuple[Tensor, Tensor]:
    """(O like q, L fp32 [B, H, seq_q]) of q [B, H, seq_q, D] over a paged cache; block_table
    and seqlens_k int32 on the device, host_seqlens_k the same lengths as int64 on the CPU."""
    b, h, seq_q, d = q.shape
    num_pages, hkv, page_size, _ = k_pages.shape
    dt = dtype_name(q.dtype)
    if kernel == AUTO:
        kernel = _lib.pick("paged_fwd", dt, d, seq_q, int(host_seqlens_k.max()) if b else 0,
                           causal=causal, gqa=hkv != h, page_size=page_size).kernel
    else:
        require("paged_fwd", kernel, dt, d, gqa=hkv != h, page_size=page_size)
    lengths = PagedLengths.from_copies(seqlens_k, host_seqlens_k)
    q = dense(q)
    o = torch.empty_like(q)
    lse = torch.empty((b, h, seq_q), dtype=torch.float32, device=q.device)
    paged_fwd_into(q, dense(k_pages), dense(v_pages), o, lse, block_table, lengths, causal,
                   scale_or_none(scale), kernel)
    return o, lse


@paged_fwd_op.register_fake
def _(q, k_pages, v_pages, block_table, seqlens_k, host_seqlens_k, causal, scale, kernel):
    b, h, seq_q, d = q.shape
    return q.new_empty(q.shape), q.new_empty((b, h, seq_q), dtype=torch.float32)


@torch.library.custom_op(NAMESPACE + "::append_kv", mutates_args=("k_pages", "v_pages"))
def append_kv_op(k_new: Tensor, v_new: Tensor, k_pages: Tensor, v_pages: Tensor,
                 block_table: Tensor, seqlens_k: Tensor, host_seqlens_k: Tensor,
                 kernel: str) -> None:
    """k_new, v_new [B, H_kv, seq_q, D] into the pages, in place (seqlens_k counts them)."""
    lengths = PagedLengths.from_copies(seqlens_k, host_seqlens_k)
    _launch.paged_append_into(dense(k_new), dense(v_new), k_pages, v_pages, block_table, lengths,
                              kernel)


@append_kv_op.register_fake
def _(k_new, v_new, k_pages, v_pages, block_table, seqlens_k, host_seqlens_k, kernel):
    return None


# ---- Variable-length batches -------------------------------------------------------------------

def _varlen_call(plan, q, k, v, causal, scale, window, kernel, kernel_bwd, deterministic):
    """Checks, then the varlen operator on head-major packed q, k, v; returns (O, L)."""
    dt, h, hkv, d = check_packed(plan, q, k, v)
    scale = scale_arg(scale)
    causal = bool(causal)
    (left, right), has_window = window_arg(window, causal)
    needs_grad = _needs_grad(q, k, v)
    if needs_grad and kernel_bwd is None:
        raise ValueError("inputs require grad but kernel_bwd is None")
    if not torch.compiler.is_compiling():
        _pick_varlen("fwd", kernel, dt, d, plan, causal, has_window, hkv != h)
        if needs_grad:
            _pick_varlen("bwd", kernel_bwd, dt, d, plan, causal, has_window, hkv != h,
                         bool(deterministic))
    return varlen_fwd_op(q, k, v, plan.dev_q, plan.dev_k, plan.cpu_q, plan.cpu_k, causal, scale,
                         left, right, kernel, kernel_bwd or "", bool(deterministic))


def varlen_attention_packed(q, k, v, plan, causal=False, window=(-1, -1), scale=None,
                            kernel=AUTO, kernel_bwd=AUTO, return_lse=False, deterministic=False):
    """varlen_attention on head-major packed tensors, q [H, total_q, D], k, v [H_kv, total_k, D],
    with a VarlenBatch: no layout copies. Returns O [H, total_q, D] (and L fp32 [H, total_q])."""
    if not isinstance(plan, VarlenBatch):
        raise TypeError("plan must be a VarlenBatch, not %s" % type(plan).__name__)
    o, lse = _varlen_call(plan, q, k, v, causal, scale, window, kernel, kernel_bwd,
                          deterministic)
    return (o, lse) if return_lse else o


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     causal=False, window=(-1, -1), scale=None, kernel=AUTO, kernel_bwd=AUTO,
                     return_lse=False, deterministic=False):
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

    kernel="auto" and kernel_bwd="auto": the dispatch's choice (chapter 09's Hopper kernels on an
    H100/H200, its mma.sync ones before); None for kernel_bwd: no backward. The kernels take
    head-major [H, total, D]: q, k, v are transposed with a copy and O back
    (varlen_attention_packed and varlen_fwd_into skip that). Returns O [total_q, H, D], and with
    return_lse=True also L, fp32 [H, total_q] (FlashAttention's varlen layout; -inf for a row
    that sees no key). Gradients flow to q, k and v (grouped heads: see the module's docstring).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, 3, "[total, heads, head_dim] (token-major, FlashAttention's)")
    check_same((("q", q), ("k", k), ("v", v)))
    tq, h, d = q.shape
    tk, hkv = k.shape[0], k.shape[1]
    if k.shape != (tk, hkv, d) or v.shape != k.shape:
        raise ValueError("shapes must be q [total_q, H, D], k and v [total_k, H_kv, D]; they are "
                         "%s, %s and %s" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    check_heads(h, hkv, "q, k")
    plan = VarlenBatch(cu_seqlens_q, cu_seqlens_k, q.device, total_q=tq, total_k=tk)
    for name, given, actual in (("max_seqlen_q", max_seqlen_q, plan.max_seqlen_q),
                                ("max_seqlen_k", max_seqlen_k, plan.max_seqlen_k)):
        if given is not None and int(given) < actual:
            raise ValueError("%s is %d, but a sequence has %d tokens" % (name, given, actual))
    # The head-major layout of the kernels: a transposed view each way (the operator copies it).
    o, lse = _varlen_call(plan, q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), causal,
                          scale, window, kernel, kernel_bwd, deterministic)
    o = o.transpose(0, 1).contiguous()
    return (o, lse) if return_lse else o


# ---- The paged KV cache ------------------------------------------------------------------------

def _check_pages(k_pages, v_pages, block_table, seqlens_k, batch, what):
    """Checks the cache and the table; returns (lengths PagedLengths, block_table int32 on the
    device, page_size, num_pages, max_pages, H_kv, D)."""
    for name, t in (("k_pages", k_pages), ("v_pages", v_pages)):
        check_tensor(t, name, 4, "[num_pages, heads_kv, page_size, head_dim]")
    if k_pages.shape != v_pages.shape:
        raise ValueError("k_pages and v_pages must have one shape; they are %s and %s"
                         % (tuple(k_pages.shape), tuple(v_pages.shape)))
    num_pages, hkv, page_size, d = k_pages.shape
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2:
        raise ValueError("block_table must be a 2-D tensor [batch, max_pages] of page indices")
    if not is_int_dtype(block_table.dtype):
        raise ValueError("block_table must hold integers (int32); it is %s" % block_table.dtype)
    if block_table.shape[0] != batch:
        raise ValueError("block_table has %d rows for a batch of %d (%s)"
                         % (block_table.shape[0], batch, what))
    max_pages = block_table.shape[1]
    device = k_pages.device
    table = device_int32(block_table, device, "block_table")
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


def _host_tensor(lengths):
    return torch.tensor(lengths.values, dtype=torch.int64)


def paged_attention(q, k_pages, v_pages, block_table, seqlens_k, causal=False, scale=None,
                    kernel=AUTO, return_lse=False):
    """Attention of q [B, H, seq_q, D] against a paged KV cache (common/shapes.h, PagedShape).

    k_pages, v_pages [num_pages, H_kv, page_size, D] (one head's keys of one page contiguous;
    H a multiple of H_kv); block_table [B, max_pages] integers (int32 on the device; other
    integer tensors are converted): key j of sequence b is row j % page_size of page
    block_table[b, j // page_size]; seqlens_k [B] keys per sequence (a tensor or a list; copied
    to the host, the launcher needs them), its seq_q queries being its last seq_q tokens (causal
    masks bottom-right). Entries past a sequence's last page are not read (-1 by convention).
    kernel="auto": the dispatch's choice (09/paged_v1_decode for seq_q <= 16 at head dims up
    to 128, multiples of 8, and 09/paged_v5_decode_d256 above 128; longer chunks on
    Hopper 09/hopper_paged_prefill_persistent, every multiple of 8 up to 256 (D 256 with
    pages of 256: 09/hopper_paged_pack_gqa), and before sm_90
    09/paged_v2_prefill at D 64 and 128, 09/paged_v1_decode at the other head dims up to 128). Forward only: returns O [B, H, seq_q, D] (and L fp32 [B, H, seq_q]
    with return_lse=True).
    """
    check_tensor(q, "q", 4, "[batch, heads, seq_q, head_dim]")
    if isinstance(k_pages, torch.Tensor) and isinstance(v_pages, torch.Tensor):
        dt = check_same((("q", q), ("k_pages", k_pages), ("v_pages", v_pages)))
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
    check_heads(h, hkv, "q, k_pages")
    if _needs_grad(q, k_pages, v_pages):
        raise ValueError("paged_attention is forward only (serving): call it under "
                         "torch.no_grad() or on tensors that do not require grad")
    if kernel != AUTO:
        require("paged_fwd", kernel, dt, d, gqa=hkv != h, page_size=page_size)
    else:  # the dispatch decides when the operator runs; refuse now what it would refuse
        _lib.pick("paged_fwd", dt, d, seq_q, max(lengths.values), causal=bool(causal),
                  gqa=hkv != h, page_size=page_size)
    o, lse = paged_fwd_op(q, k_pages, v_pages, table, lengths.dev, _host_tensor(lengths),
                          bool(causal), scale_arg(scale), kernel)
    return (o, lse) if return_lse else o


def append_kv(k_new, v_new, k_pages, v_pages, block_table, seqlens_k, kernel=APPEND_KV):
    """Writes the new tokens' keys and values into the pages, in place.

    k_new, v_new [B, H_kv, seq_q, D]; the pages, block_table and seqlens_k as paged_attention
    takes them, seqlens_k counting the new tokens already: they become keys seqlens_k[b] - seq_q
    .. seqlens_k[b] - 1 of sequence b (so every seqlens_k[b] >= seq_q). Nothing else in the pages
    changes. The pages must be contiguous (written in place).
    """
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        check_tensor(t, name, 4, "[batch, heads_kv, seq_q, head_dim]")
    if not (isinstance(k_pages, torch.Tensor) and isinstance(v_pages, torch.Tensor)):
        raise TypeError("k_pages and v_pages must be torch.Tensors")
    dt = check_same((("k_new", k_new), ("v_new", v_new), ("k_pages", k_pages),
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
    require("append", kernel, dt, d)
    append_kv_op(k_new, v_new, k_pages, v_pages, table, lengths.dev, _host_tensor(lengths),
                 kernel)
