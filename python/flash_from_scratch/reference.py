"""References for checking attention in PyTorch, after common/reference.cpp.

reference_attention: float64, the exact answer (the "math path": plain matmul / exp / sum, no
fused kernel), differentiable. naive_attention_lowp: the same computation done the
straightforward way in the inputs' low precision, whose error against float64 sets the
FlashAttention tolerance (notes/conventions.md); it mirrors attention_forward_lowp_head and
attention_backward_lowp_head step for step. Both follow the conventions: bottom-right causal
masks; a row that sees no key has O = 0 and L = -inf and contributes no gradient.

Chapter 09's problems: both take window=(left, right), FlashAttention's sliding window measured
from the bottom-right diagonal (common/shapes.h, visible_key_range; -1 leaves a side unlimited,
causal is right = 0), and grouped K/V heads (k, v with fewer heads than q, query head h reading
K/V head h // (H / H_kv)). The float64 reference expands K and V over the group (autograd sums
the group's gradients); the naive one computes each query head's dK, dV in the dtype and sums the
group in fp32, rounded once, which is what a GQA backward through an expanded K, V does. Empty
problems (seq_q or seq_k of 0, a varlen batch's empty sequences) give empty or zero outputs.
"""
import contextlib

import torch

from ._common import softmax_scale


def causal_mask(seq_q, seq_k, device):
    """True where query i may NOT see key j: j > i + (seq_k - seq_q) (bottom-right aligned)."""
    i = torch.arange(seq_q, device=device).unsqueeze(1)
    j = torch.arange(seq_k, device=device).unsqueeze(0)
    return j > i + (seq_k - seq_q)


def visible_mask(seq_q, seq_k, causal, window, device):
    """True where query i sees key j: visible_key_range of common/shapes.h (bottom-right
    diagonal d(i) = i + seq_k - seq_q; d - left <= j <= d + right, right = 0 under causal)."""
    left, right = window
    i = torch.arange(seq_q, device=device).unsqueeze(1)
    j = torch.arange(seq_k, device=device).unsqueeze(0)
    diagonal = i + (seq_k - seq_q)
    ok = torch.ones(seq_q, seq_k, dtype=torch.bool, device=device)
    right = 0 if causal else right
    if right >= 0:
        ok &= j <= diagonal + right
    if left >= 0:
        ok &= j >= diagonal - left
    return ok


def _masked(causal, window):
    return causal or window[0] >= 0 or window[1] >= 0


def expand_kv(k, heads):
    """K or V of H_kv heads (dimension -3) repeated to `heads`: query head h reads K/V head
    h // (heads / H_kv), so each K/V head is repeated group times in place (repeat_interleave)."""
    hkv = k.shape[-3]
    if hkv == heads:
        return k
    if hkv < 1 or heads % hkv:
        raise ValueError("heads (%d) must be a multiple of K/V heads (%d)" % (heads, hkv))
    return k.repeat_interleave(heads // hkv, dim=-3)


def sum_over_group(dk, hkv):
    """[..., H, N, D] gradients of expanded K/V heads back to [..., H_kv, N, D], summed in fp32
    (float64 stays float64)."""
    h = dk.shape[-3]
    if h == hkv:
        return dk
    shape = dk.shape[:-3] + (hkv, h // hkv) + dk.shape[-2:]
    acc = dk.double() if dk.dtype == torch.float64 else dk.float()
    return acc.reshape(shape).sum(dim=-3)  # [..., H_kv, group, N, D]: the group


def window_pairs(seq_q, seq_k, causal, window=(-1, -1)):
    """(query, key) pairs visible per head with a window (AttentionShape::visible_pairs)."""
    if seq_q <= 0 or seq_k <= 0:
        return 0
    if not _masked(causal, window):
        return seq_q * seq_k
    left, right = window
    right = 0 if causal else right
    total = 0
    for i in range(seq_q):
        d = i + seq_k - seq_q
        first = max(0, d - left) if left >= 0 else 0
        last = min(seq_k - 1, d + right) if right >= 0 else seq_k - 1
        total += max(0, last - first + 1)
    return total


def visible_pairs(seq_q, seq_k, causal):
    """(query, key) pairs not masked, per head (AttentionShape::visible_pairs)."""
    if not causal:
        return seq_q * seq_k
    off = seq_k - seq_q
    return sum(min(max(i + off + 1, 0), seq_k) for i in range(seq_q))


def attention_flops(b, h, seq_q, seq_k, d, causal, backward=False):
    """4 * B * H * D per visible pair forward; 2.5x that for the backward (shapes.h)."""
    f = 4.0 * b * h * d * visible_pairs(seq_q, seq_k, causal)
    return 2.5 * f if backward else f


def reference_attention(q, k, v, causal=False, scale=None, window=(-1, -1)):
    """(O, L) in float64 from q [B, H, Nq, D], k, v [B, H_kv, Nk, D] (any float dtype, any device;
    H a multiple of H_kv). Differentiable with respect to q, k, v, without NaN for rows that see
    no key."""
    q, k, v = q.double(), k.double(), v.double()
    k, v = expand_kv(k, q.shape[-3]), expand_kv(v, q.shape[-3])
    scale = softmax_scale(q.shape[-1], scale)
    if q.shape[-2] == 0 or k.shape[-2] == 0:  # no row, or rows that see nothing: O 0, L -inf
        o = q * 0.0  # keeps q in the graph (its gradient is 0)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=torch.float64, device=q.device)
        return o, lse
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if _masked(causal, window):
        s = s.masked_fill(~visible_mask(q.shape[-2], k.shape[-2], causal, window, q.device),
                          float("-inf"))
    # The row max only shifts the exponent (softmax does not depend on it): detached, and 0 for a
    # row that sees nothing, so exp(-inf - m) is 0 and never NaN.
    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    l = e.sum(dim=-1, keepdim=True)
    seen = l > 0
    l_safe = torch.where(seen, l, torch.ones_like(l))
    o = torch.matmul(e / l_safe, v)
    lse = torch.where(seen, m + torch.log(l_safe), torch.full_like(l, float("-inf")))
    return o, lse.squeeze(-1)


@contextlib.contextmanager
def exact_fp32_matmul():
    """fp32 matmuls in fp32 (no TF32) inside the block, restored after."""
    matmul = torch.backends.cuda.matmul
    try:
        old = matmul.allow_tf32
        matmul.allow_tf32 = False
    except (AttributeError, RuntimeError):  # a newer torch that only takes fp32_precision
        old = None
    try:
        yield
    finally:
        if old is not None:
            matmul.allow_tf32 = old


def naive_attention_lowp(q, k, v, dout=None, causal=False, scale=None, window=(-1, -1)):
    """The naive computation in q.dtype, as common/reference.cpp does it: S = Q K^T * scale in
    fp32 rounded to the dtype, softmax in fp32, P rounded, O = P V in fp32 rounded; L in fp32.
    With dout also dQ, dK, dV (each matmul in fp32, rounded) and D = rowsum(dO * O).
    Returns {"O", "L"} (+ {"dQ", "dK", "dV", "D"}) as float32 tensors holding dtype values.
    K, V with fewer heads than q: each query head's dK, dV rounded, the group summed in fp32 and
    rounded (see the module's docstring)."""
    t = q.dtype

    def rnd(x):
        return x.to(t).float()

    hkv = k.shape[-3]
    k, v = expand_kv(k, q.shape[-3]), expand_kv(v, q.shape[-3])
    scale = softmax_scale(q.shape[-1], scale)
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        with torch.no_grad():
            zeros_q = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
            out = {"O": zeros_q,
                   "L": torch.full(q.shape[:-1], float("-inf"), dtype=torch.float32,
                                   device=q.device)}
            if dout is not None:
                zeros_k = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
                out.update({"dQ": zeros_q.clone(), "dK": rnd(sum_over_group(zeros_k, hkv)),
                            "dV": rnd(sum_over_group(zeros_k, hkv)),
                            "D": torch.zeros(q.shape[:-1], dtype=torch.float32,
                                             device=q.device)})
        return out
    with torch.no_grad(), exact_fp32_matmul():
        Q, K, V = q.float(), k.float(), v.float()
        S = rnd(torch.matmul(Q, K.transpose(-2, -1)) * scale)
        if _masked(causal, window):
            S = S.masked_fill(~visible_mask(q.shape[-2], k.shape[-2], causal, window, q.device),
                              float("-inf"))
        m = S.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(S - m)
        l = e.sum(dim=-1, keepdim=True)
        seen = l > 0
        l_safe = torch.where(seen, l, torch.ones_like(l))
        P = rnd(e / l_safe)
        O = rnd(torch.matmul(P, V))
        L = torch.where(seen, m + torch.log(l_safe), torch.full_like(l, float("-inf"))).squeeze(-1)
        out = {"O": O, "L": L}
        if dout is not None:
            dO = dout.float()
            D = (dO * O).sum(dim=-1)
            out["dV"] = rnd(torch.matmul(P.transpose(-2, -1), dO))
            dP = rnd(torch.matmul(dO, V.transpose(-2, -1)))
            dS = rnd(P * (dP - D.unsqueeze(-1)))
            out["dQ"] = rnd(torch.matmul(dS, K) * scale)
            out["dK"] = rnd(torch.matmul(dS.transpose(-2, -1), Q) * scale)
            out["D"] = D
            if hkv != q.shape[-3]:
                out["dK"] = rnd(sum_over_group(out["dK"], hkv))
                out["dV"] = rnd(sum_over_group(out["dV"], hkv))
    return out
