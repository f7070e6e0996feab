"""References for checking attention in PyTorch, after common/reference.cpp.

reference_attention: float64, the exact answer (the "math path": plain matmul / exp / sum, no
fused kernel), differentiable. naive_attention_lowp: the same computation done the
straightforward way in the inputs' low precision, whose error against float64 sets the
FlashAttention tolerance (notes/conventions.md); it mirrors attention_forward_lowp_head and
attention_backward_lowp_head step for step. Both follow the conventions: bottom-right causal
masks; a row that sees no key has O = 0 and L = -inf and contributes no gradient.
"""
import contextlib
import math

import torch


def default_scale(head_dim):
    return 1.0 / math.sqrt(head_dim)


def causal_mask(seq_q, seq_k, device):
    """True where query i may NOT see key j: j > i + (seq_k - seq_q) (bottom-right aligned)."""
    i = torch.arange(seq_q, device=device).unsqueeze(1)
    j = torch.arange(seq_k, device=device).unsqueeze(0)
    return j > i + (seq_k - seq_q)


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


def reference_attention(q, k, v, causal=False, scale=None):
    """(O, L) in float64 from q [B, H, Nq, D], k, v [B, H, Nk, D] (any float dtype, any device).
    Differentiable with respect to q, k, v, without NaN for rows that see no key."""
    q, k, v = q.double(), k.double(), v.double()
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
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


def naive_attention_lowp(q, k, v, dout=None, causal=False, scale=None):
    """The naive computation in q.dtype, as common/reference.cpp does it: S = Q K^T * scale in
    fp32 rounded to the dtype, softmax in fp32, P rounded, O = P V in fp32 rounded; L in fp32.
    With dout also dQ, dK, dV (each matmul in fp32, rounded) and D = rowsum(dO * O).
    Returns {"O", "L"} (+ {"dQ", "dK", "dV", "D"}) as float32 tensors holding dtype values."""
    t = q.dtype

    def rnd(x):
        return x.to(t).float()

    scale = default_scale(q.shape[-1]) if scale is None else float(scale)
    with torch.no_grad(), exact_fp32_matmul():
        Q, K, V = q.float(), k.float(), v.float()
        S = rnd(torch.matmul(Q, K.transpose(-2, -1)) * scale)
        if causal:
            S = S.masked_fill(causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
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
    return out
