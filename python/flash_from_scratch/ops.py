"""The repository's kernels as PyTorch operators: attention() and the operators under it.

Every kernel has an operator registered with torch.library (namespace flash_from_scratch), so
that autograd, torch.compile and torch.export see each call as one node:

    torch.ops.flash_from_scratch.attention_fwd(q, k, v, causal, scale, window_left, window_right,
                                               kernel, kernel_bwd, deterministic) -> (O, L)
    torch.ops.flash_from_scratch.attention_bwd(dO, q, k, v, O, L, causal, scale, window_left,
                                               window_right, kernel, deterministic) -> (dQ, dK, dV)
    torch.ops.flash_from_scratch.varlen_fwd / varlen_bwd     the same on packed batches
    torch.ops.flash_from_scratch.paged_fwd, append_kv        the paged KV cache (no autograd)

Each has a fake implementation (register_fake: the output shapes, nothing computed), so a model
that calls attention() compiles with torch.compile(fullgraph=True); the forward operators have
their backward registered (register_autograd), so the compiled graph differentiates through them.
In eager mode attention() runs the operators' work through a torch.autograd.Function instead
(_EagerAttention: the same functions, so the same bits), because a Python custom op costs the
host time on every call that the GPU would otherwise spend waiting.

Which kernel runs: kernel="auto" (the default) is the dispatch's choice for the problem on this
GPU (common/dispatch.h, one table; fa.explain() says which row chose what and the log that
measured it), resolved when the operator runs, not when it is traced. A named kernel runs as
named. The forward saves exactly what FlashAttention saves, Q, K, V, O and L (the natural-log
logsumexp of each row of scale * Q K^T); the backward kernel recomputes the rest. Layouts and
semantics are notes/conventions.md's: [batch, heads, seq, head_dim], causal masks aligned
bottom-right, scale 1/sqrt(head_dim) by default, the sliding window FlashAttention's.

Grouped K/V heads (k, v with H_kv < H heads) and the window run on the kernels that take them
(on an H100/H200 the dispatch sends grouped heads to chapter 07's 07/v5_persistent forward and
07/bwd_v6_head_groups backward at head dim 128 (07/bwd_t48_dq_in_turns at 64),
07/bwd_v1_tma_wgmma when the backward must be deterministic
or at head dim 256, which read K/V head h / group and sum dK, dV over each group themselves; the
window to chapter 09's, on the batch packed as one of equal lengths; before sm_90 the forward to
09/v1_varlen at head dims 64 and 128 and 05/t16_grouped_heads at the other multiples of 8, the
backward up to head dim 128 to 06/t22_group_split (06/t20_grouped_heads with its group split),
and above 128 off the step of 8, or with a window, to 09/bwd_v8_grouped_d256 on the batch
packed; with a window up to 128 to 09/bwd_v7_window_grouped, 0.99-1.25x the window backwards on
repeated K/V end to end at about half their memory, H100, 2026-12-06). For a backward kernel that takes no grouped
heads (before sm_90: 136-256 on the step of 8 and up to 128 off it, where those measured faster
end to end; or one the caller names) the operator repeats K and V over the group and sums each
group's dK, dV in fp32.
"""
from typing import Tuple

import torch

from . import _launch, _lib
from ._common import (check_inputs, choose, dense, dtype_name, kind_of, scale_arg, scale_or_none,
                      takes_grouped_heads, window_arg)
from .names import AUTO

NAMESPACE = "flash_from_scratch"
Tensor = torch.Tensor

# The benchmarks' launch into given outputs (bench/compare_serving.py, the tests).
attention_fwd_into = _launch.attention_fwd_into


# ---- Fixed length ------------------------------------------------------------------------------

def _forward(q, k, v, causal, scale, window_left, window_right, kernel, shape=None):
    """The forward's work, shared by the operator and the eager path: (O, L). shape: what
    check_inputs(q, k, v) returned, when the caller has checked them already."""
    b, h, hkv, nq, nk, d = shape or check_inputs(q, k, v)
    window, has_window = window_arg((window_left, window_right), causal)
    name, kind = choose("fwd", kernel, dtype_name(q.dtype), d, nq, nk, causal, has_window,
                        hkv != h)
    return _launch.fixed_fwd(kind, name, dense(q), dense(k), dense(v), causal,
                             scale_or_none(scale), window)


def _backward(dout, q, k, v, o, lse, causal, scale, window_left, window_right, kernel,
              deterministic, shape=None):
    """The backward's work, shared by the operator and the eager path: (dQ, dK, dV). shape as
    _forward's."""
    if not kernel:
        raise RuntimeError("attention(..., kernel_bwd=None) has no backward kernel")
    b, h, hkv, nq, nk, d = shape or check_inputs(q, k, v)
    window, has_window = window_arg((window_left, window_right), causal)
    name, kind = choose("bwd", kernel, dtype_name(q.dtype), d, nq, nk, causal, has_window,
                        hkv != h, deterministic)
    return _launch.fixed_bwd(kind, name, dense(dout.to(q.dtype)), dense(q), dense(k), dense(v),
                             dense(o), dense(lse), causal, scale_or_none(scale), window)


@torch.library.custom_op(NAMESPACE + "::attention_fwd", mutates_args=())
def attention_fwd_op(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float,
                     window_left: int, window_right: int, kernel: str, kernel_bwd: str,
                     deterministic: bool) -> Tuple[Tensor, Tensor]:
    """(O, L) = attention of q [B, H, Nq, D] over k, v [B, H_kv, Nk, D]. kernel_bwd and
    deterministic are the backward's, carried for it (the forward does not read them)."""
    return _forward(q, k, v, causal, scale, window_left, window_right, kernel)


@attention_fwd_op.register_fake
def _(q, k, v, causal, scale, window_left, window_right, kernel, kernel_bwd, deterministic):
    b, h, nq, d = q.shape
    return q.new_empty((b, h, nq, d)), q.new_empty((b, h, nq), dtype=torch.float32)


@torch.library.custom_op(NAMESPACE + "::attention_bwd", mutates_args=())
def attention_bwd_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
                     causal: bool, scale: float, window_left: int, window_right: int, kernel: str,
                     deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """(dQ, dK, dV) from dO and what the forward saved; dK, dV with k's H_kv heads."""
    return _backward(dout, q, k, v, o, lse, causal, scale, window_left, window_right, kernel,
                     deterministic)


@attention_bwd_op.register_fake
def _(dout, q, k, v, o, lse, causal, scale, window_left, window_right, kernel, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale, window_left, window_right, _kernel, kernel_bwd, deterministic = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.args = (causal, scale, window_left, window_right, kernel_bwd, deterministic)
    ctx.mark_non_differentiable(lse)


def _attention_backward(ctx, dout, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    causal, scale, window_left, window_right, kernel_bwd, deterministic = ctx.args
    if not kernel_bwd:
        raise RuntimeError("attention(..., kernel_bwd=None) has no backward kernel")
    dq, dk, dv = attention_bwd_op(dout, q, k, v, o, lse, causal, scale, window_left,
                                  window_right, kernel_bwd, deterministic)
    return dq, dk, dv, None, None, None, None, None, None, None


attention_fwd_op.register_autograd(_attention_backward, setup_context=_attention_setup)


class _EagerAttention(torch.autograd.Function):
    """attention() outside torch.compile: the operators' work (_forward, _backward) without the
    operators. A Python custom op costs its caller host time on every call (the dispatcher, its
    autograd wrapper, the schema's checks), and at B 4, H 16, N 4096, D 128 that host time left
    the GPU waiting between kernels (bench/attention_e2e.py --profile; notes/measured/README.md
    gives the run). Under torch.compile attention() calls the operator, which the graph needs;
    both paths run _forward and _backward, so both compute the same bits."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, window_left, window_right, kernel, kernel_bwd,
                deterministic, shape):
        o, lse = _forward(q, k, v, causal, scale, window_left, window_right, kernel, shape)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (causal, scale, window_left, window_right, kernel_bwd, deterministic, shape)
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # no zeros made for L's gradient, never read
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if dout is None:  # O took no part in what is differentiated
            return (None,) * 11
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward(dout, q, k, v, o, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None, None


def attention(q, k, v, causal=False, scale=None, kernel=AUTO, kernel_bwd=AUTO, return_lse=False,
              window=(-1, -1), deterministic=False):
    """softmax(scale * q k^T [+ bottom-right causal mask] [+ sliding window]) v with the
    repository's kernels.

    q: [B, H, Nq, D], k and v: [B, H_kv, Nk, D] (H a multiple of H_kv: grouped-query attention),
    CUDA, one dtype (fp16, bf16 or fp32). window=(left, right): query i sees keys j with
    d - left <= j <= d + right, d = i + Nk - Nq its bottom-right diagonal, -1 unlimited
    (FlashAttention's meaning; causal is right = 0, so causal=True, window=(W - 1, 0) is a causal
    window of W keys).

    kernel="auto" and kernel_bwd="auto" (the defaults): the dispatch's choice for this problem on
    this GPU (fa.explain(q, k, v, ...) shows it and the measurement behind it). A named kernel
    runs as named: a fixed-length one (05/..., 07/..., 08/...) or a chapter 09 varlen one (the
    batch then runs packed as one of equal lengths: a copy in and out for B > 1).
    kernel_bwd=None: no backward (an error if the inputs require grad). deterministic=True asks
    the backward for the same bits in every run (the dispatch passes over the kernels that add
    with atomics; a named one that does is refused). Non-contiguous inputs are copied.

    Returns O [B, H, Nq, D], or (O, L) with return_lse=True, L fp32 [B, H, Nq] (-inf for a row
    that sees no key; not differentiable). Gradients flow to q, k and v.
    Refusals raise ValueError (bad arguments) or flash_from_scratch.UnsupportedError (no kernel
    for this dtype / head dim / GPU / grouped heads / window), in the harness's words; never a
    wrong answer.
    """
    b, h, hkv, nq, nk, d = check_inputs(q, k, v)
    scale = scale_arg(scale)
    causal = bool(causal)
    (left, right), has_window = window_arg(window, causal)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad and kernel_bwd is None:
        raise ValueError("inputs require grad but kernel_bwd is None")
    if not torch.compiler.is_compiling():
        # Refuse now what the launch would refuse, before anything runs (a compiled graph gets
        # the same refusal from the operator, when it runs).
        dt = dtype_name(q.dtype)
        choose("fwd", kernel, dt, d, nq, nk, causal, has_window, hkv != h)
        if needs_grad:
            choose("bwd", kernel_bwd, dt, d, nq, nk, causal, has_window, hkv != h,
                   bool(deterministic))
        shape = (b, h, hkv, nq, nk, d)  # checked above: not again below
        if needs_grad:
            o, lse = _EagerAttention.apply(q, k, v, causal, scale, left, right, kernel,
                                           kernel_bwd or "", bool(deterministic), shape)
        else:  # no graph to record: the forward's work alone
            o, lse = _forward(q, k, v, causal, scale, left, right, kernel, shape)
    else:
        o, lse = attention_fwd_op(q, k, v, causal, scale, left, right, kernel, kernel_bwd or "",
                                  bool(deterministic))
    return (o, lse) if return_lse else o


def explain(q, k, v, causal=False, window=(-1, -1), kernel=AUTO, kernel_bwd=AUTO,
            deterministic=False, backward=True, brief=False, sm=0):
    """Which kernels attention(q, k, v, ...) runs and why, as lines of text: for each direction
    the kernel, the dispatch row that chose it, what that row's measurement showed and its log,
    and the rows passed over (a kernel not in this build, one without this head dim...). Named
    kernels are reported as named. sm: explain the choice for another GPU (90 for an H100)
    instead of this machine's; q, k, v may then be meta or CPU tensors of the right shapes."""
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    causal = bool(causal)
    _, has_window = window_arg(window, causal)
    dt = dtype_name(q.dtype)
    lines = []
    grouped_bwd = False  # whether the backward takes grouped heads itself (the last line)
    for direction, name in (("fwd", kernel), ("bwd", kernel_bwd)):
        if direction == "bwd" and (not backward or name is None):
            continue
        label = "forward" if direction == "fwd" else "backward"
        if name != AUTO:
            lines.append("%s: %s (named)" % (label, name))
            if direction == "bwd" and hkv != h:
                grouped_bwd = takes_grouped_heads(kind_of(name, "bwd"), name, dt, d)
            continue
        p = _lib.pick(direction, dt, d, nq, nk, causal=causal, window=has_window,
                      gqa=hkv != h, deterministic=deterministic and direction == "bwd", sm=sm)
        if direction == "bwd" and hkv != h:  # a grouped row's kernel takes them (any GPU)
            grouped_bwd = ("grouped K/V heads" in p.conditions
                           or (sm == 0 and takes_grouped_heads(p.kind, p.kernel, dt, d)))
        if brief:
            lines.append("%s: %s" % (label, p.kernel))
            continue
        lines.append("%s: %s  [%s on sm_%d]" % (label, p.kernel, p.conditions, p.sm))
        lines.append("  why: %s" % p.why)
        lines.append("  measured: %s" % p.measured)
        lines.extend("  passed over: %s" % x for x in p.passed_over)
    if not brief and hkv != h and backward and kernel_bwd is not None:
        lines.append("grouped heads in the backward: the kernel sums dK, dV over each group "
                     "itself (K and V not repeated)" if grouped_bwd else
                     "grouped heads in the backward: K and V repeated over the group, the "
                     "group's dK, dV summed in fp32")
    return lines
