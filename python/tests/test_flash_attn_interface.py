"""flash_from_scratch.flash_attn_interface: FlashAttention's functions and conventions (tokens
before heads, softmax_scale, window_size, the LSE's layouts, cache_seqlens, block_table, k / v
appended to the cache in place) against float64 references written from those conventions.

On the emulated library (torch, no GPU) the layouts and the cache bookkeeping are checked
exactly; on the GPU the kernels are held to the repository's rule (2x a same-precision naive
implementation, 3x for gradients; flash_from_scratch.check.compare).
"""
import pytest

from conftest import torch_cuda_or_skip

SEED = 20261201
D = 64  # a head dim every kind of kernel takes (chapter 09's: 64 and 128)


def _interface():
    from flash_from_scratch import flash_attn_interface
    return flash_attn_interface


def _ref(torch, q, k, v, causal, scale, window):
    """float64 (O [B, S_q, H, D], L [B, H, S_q]) from FlashAttention-layout tensors."""
    from flash_from_scratch.reference import reference_attention
    o, lse = reference_attention(q.double().transpose(1, 2), k.double().transpose(1, 2),
                                 v.double().transpose(1, 2), causal, scale, window)
    return o.transpose(1, 2), lse


def _rnd(torch, g, shape, dtype, device):
    return (torch.randn(*shape, generator=g) + 0.5).to(device=device, dtype=dtype)


CASES = [  # (H, H_kv, S_q, S_k, causal, window, softmax_scale)
    (4, 4, 17, 17, False, (-1, -1), None),
    (4, 2, 17, 40, True, (-1, -1), 0.2),
    (4, 1, 33, 33, True, (7, 0), None),
    (4, 4, 20, 20, False, (3, 5), None),
]


def _check_func(torch, device, dtype, close):
    fai = _interface()
    g = torch.Generator().manual_seed(SEED)
    for h, hkv, sq, sk, causal, window, scale in CASES:
        q = _rnd(torch, g, (2, sq, h, D), dtype, device).requires_grad_()
        k = _rnd(torch, g, (2, sk, hkv, D), dtype, device).requires_grad_()
        v = _rnd(torch, g, (2, sk, hkv, D), dtype, device).requires_grad_()
        out, lse, none = fai.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                             window_size=window, return_attn_probs=True)
        assert none is None and out.shape == q.shape and out.is_contiguous()
        assert lse.shape == (2, h, sq) and lse.dtype == torch.float32
        assert fai.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                   window_size=window).shape == q.shape
        do = _rnd(torch, g, q.shape, dtype, device)
        grads = torch.autograd.grad(out, (q, k, v), do)
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ro, rl = _ref(torch, q64, k64, v64, causal, scale, window)
        refs = torch.autograd.grad(ro, (q64, k64, v64), do.double())
        close("out", out, ro, q, k, v, causal, scale, window, None)
        fin = torch.isfinite(rl)
        assert torch.equal(torch.isinf(lse.cpu()), torch.isinf(rl.cpu()))
        assert torch.allclose(lse.double()[fin], rl[fin], atol=2e-2 if dtype != torch.float32
                              else 1e-5)
        for name, got, want in zip(("dq", "dk", "dv"), grads, refs):
            assert got.shape == want.shape
            close(name, got, want, q, k, v, causal, scale, window, do)


def _check_varlen(torch, device, dtype, tol):
    fai = _interface()
    g = torch.Generator().manual_seed(SEED)
    lens_q, lens_k = [5, 0, 17, 1], [9, 3, 17, 1]
    cu_q = torch.tensor([0, 5, 5, 22, 23], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 9, 12, 29, 30], dtype=torch.int32, device=device)
    q = _rnd(torch, g, (23, 4, D), dtype, device)
    k, v = _rnd(torch, g, (30, 2, D), dtype, device), _rnd(torch, g, (30, 2, D), dtype, device)
    out, lse, _ = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                             causal=True, window_size=(4, 0),
                                             return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (4, 23)
    for b in range(4):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        ro, rl = _ref(torch, q[qs].unsqueeze(0), k[ks].unsqueeze(0), v[ks].unsqueeze(0), True,
                      None, (4, 0))
        assert torch.allclose(out[qs].double(), ro[0], atol=tol)


def _check_kvcache(torch, device, dtype, tol):
    """Appends, then attends, paged and not: the cache holds the new keys where FlashAttention
    puts them, nothing else changed, and the output is attention over cache_seqlens + new keys."""
    fai = _interface()
    g = torch.Generator().manual_seed(SEED)
    b, sq, h, hkv, d, s_cache = 3, 2, 4, 2, D, 48
    lengths = torch.tensor([10, 0, 37], dtype=torch.int32, device=device)
    for paged in (False, True):
        full_k = _rnd(torch, g, (b, s_cache, hkv, d), dtype, device)
        full_v = _rnd(torch, g, (b, s_cache, hkv, d), dtype, device)
        k_new, v_new = (_rnd(torch, g, (b, sq, hkv, d), dtype, device) for _ in range(2))
        q = _rnd(torch, g, (b, sq, h, d), dtype, device)
        if paged:  # pages of 8 keys in a shuffled pool, the table mapping each row's blocks
            page, nblk = 8, s_cache // 8
            perm = torch.randperm(b * nblk, generator=g).to(device)
            table = perm.view(b, nblk).to(torch.int32)
            k_cache = torch.empty(b * nblk, page, hkv, d, dtype=dtype, device=device)
            v_cache = torch.empty_like(k_cache)
            k_cache[perm] = full_k.reshape(b * nblk, page, hkv, d)
            v_cache[perm] = full_v.reshape(b * nblk, page, hkv, d)
        else:
            table, k_cache, v_cache = None, full_k.clone(), full_v.clone()
        out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                               cache_seqlens=lengths, block_table=table,
                                               causal=True, return_softmax_lse=True)
        assert out.shape == q.shape and lse.shape == (b, h, sq)
        # The cache after the append, read back in FlashAttention's layout.
        after_k = (k_cache[table.long()].reshape(b, s_cache, hkv, d) if paged else k_cache)
        for i in range(b):
            n = int(lengths[i])
            want = full_k[i].clone()
            want[n:n + sq] = k_new[i]
            assert torch.equal(after_k[i], want), "sequence %d's cache after the append" % i
            ro, _ = _ref(torch, q[i:i + 1], want[:n + sq].unsqueeze(0),
                         torch.cat([full_v[i, :n], v_new[i]]).unsqueeze(0), True, None, (-1, -1))
            assert torch.allclose(out[i].double(), ro[0], atol=tol), (out[i].double() - ro[0]).abs().max()
    with pytest.raises(ValueError, match="must fit the cache"):
        fai.flash_attn_with_kvcache(q, full_k, full_v, k=k_new, v=v_new,
                                    cache_seqlens=torch.full((b,), s_cache - 1, dtype=torch.int32,
                                                             device=device))


def test_refusals_say_what_is_not_taken(emulated):
    torch, _ = emulated
    fai = _interface()
    q = torch.randn(1, 4, 2, D)
    for kwargs, match in (({"dropout_p": 0.1}, "no dropout"), ({"softcap": 30.0}, "soft-capping"),
                          ({"alibi_slopes": torch.ones(2)}, "ALiBi")):
        with pytest.raises(ValueError, match=match):
            fai.flash_attn_func(q, q, q, **kwargs)
    with pytest.raises(ValueError, match="rotary_cos: not taken"):
        fai.flash_attn_with_kvcache(q, q, q, rotary_cos=torch.ones(1))


def _exact(torch):
    def close(name, got, want, *args):
        assert torch.allclose(got.double(), want, atol=1e-4), (name, (got.double() - want).abs().max())
    return close


def test_flash_attn_func_emulated(emulated):
    torch, _ = emulated
    _check_func(torch, "cpu", torch.float32, _exact(torch))


def test_flash_attn_varlen_func_emulated(emulated):
    torch, _ = emulated
    _check_varlen(torch, "cpu", torch.float32, 1e-5)


def test_flash_attn_with_kvcache_emulated(emulated):
    torch, _ = emulated
    _check_kvcache(torch, "cpu", torch.float32, 1e-5)


# ---- On the GPU: the kernels, held to the repository's rule -------------------------------------

def _rule(torch, dtype):
    from flash_from_scratch.check import compare
    from flash_from_scratch.reference import naive_attention_lowp
    keys = {"out": "O", "dq": "dQ", "dk": "dK", "dv": "dV"}

    def close(name, got, want, q, k, v, causal, scale, window, do):
        qh, kh, vh = (t.detach().transpose(1, 2) for t in (q, k, v))
        dh = None if do is None else do.transpose(1, 2)
        naive = naive_attention_lowp(qh, kh, vh, dout=dh, causal=causal, scale=scale,
                                     window=window)[keys[name]].transpose(1, 2)
        c = compare(keys[name], got, want, naive, dtype)
        assert c["ok"], "%s: max error %.3g > %s" % (name, c["max_err"], c["tolerance"])
    return close


def test_flash_attn_func_gpu():
    torch = torch_cuda_or_skip()
    for dtype in (torch.bfloat16, torch.float16):
        _check_func(torch, "cuda", dtype, _rule(torch, dtype))


def test_flash_attn_varlen_func_gpu():
    torch = torch_cuda_or_skip()
    _check_varlen(torch, "cuda", torch.bfloat16, 3e-2)


def test_flash_attn_with_kvcache_gpu():
    torch = torch_cuda_or_skip()
    _check_kvcache(torch, "cuda", torch.bfloat16, 3e-2)
