"""FlashAttention's Python interface on this repository's kernels: change one import.

    # from flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
    from flash_from_scratch.flash_attn_interface import (flash_attn_func, flash_attn_varlen_func,
                                                         flash_attn_with_kvcache)

The functions take FlashAttention's layouts and argument names (those of flash_attn 2.x):
tokens before heads, q [B, S, H, D] (varlen: [total, H, D]); softmax_scale (None:
1/sqrt(D)); causal aligned bottom-right; window_size=(left, right), -1 unlimited;
deterministic; return_attn_probs / return_softmax_lse for the log-sum-exp L (fp32 [B, H, S],
varlen [H, total]); cache_seqlens, block_table, and k / v appended to the cache in place.
Grouped K/V heads (H a multiple of H_kv) are taken everywhere. The kernels are chosen by the
dispatch (common/dispatch.h), as for attention().

What differs, and why:
  - The kernels keep heads before tokens ([B, H, S, D]; packed batches [H, total, D]). Each call
    transposes q, k, v into that layout and O back (a copy each way; on an H200 about 5% of a
    forward + backward at B 4, H 16, N 4096, D 128). attention() and varlen_attention_packed()
    take the kernels' layout and copy nothing.
  - flash_attn_with_kvcache gathers the keys each sequence holds from FlashAttention's cache
    layout ([B, S_cache, H_kv, D], or pages [num_blocks, page_size, H_kv, D]) into a packed batch
    before the kernel runs: correct for every page size, but a copy of the visible cache per
    call. paged_attention() and append_kv() are the copy-free path on the kernels' page layout
    ([num_pages, H_kv, page_size, D], pages of 16, 64 or 256 keys).
  - Not taken (a clear error, never a silent difference): dropout_p > 0, softcap, alibi_slopes,
    rotary embeddings, cache_batch_idx, cache_leftpad, a block_table in the varlen function.
  - return_attn_probs returns (out, softmax_lse, None): the third value is FlashAttention's
    dropout mask for testing, which without dropout is nothing.
"""
import torch

from . import ops, serving
from .names import AUTO

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_with_kvcache"]


def _refuse(dropout_p=0.0, softcap=0.0, alibi_slopes=None, **others):
    if dropout_p:
        raise ValueError("dropout_p=%r: these kernels have no dropout (0.0 only)" % (dropout_p,))
    if softcap:
        raise ValueError("softcap=%r: these kernels have no logit soft-capping (0.0 only)"
                         % (softcap,))
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes: these kernels have no ALiBi bias (None only)")
    for name, value in others.items():
        if value is not None:
            raise ValueError("%s: not taken by these kernels (None only)" % name)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """Attention of q [B, S_q, H, D] over k, v [B, S_k, H_kv, D] (fp16, bf16 or fp32, CUDA).
    Returns out [B, S_q, H, D]; with return_attn_probs=True (out, softmax_lse fp32 [B, H, S_q],
    None). Differentiable in q, k and v."""
    _refuse(dropout_p, softcap, alibi_slopes)
    o, lse = ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                           causal=causal, scale=softmax_scale, window=window_size,
                           deterministic=deterministic, return_lse=True)
    out = o.transpose(1, 2).contiguous()
    return (out, lse, None) if return_attn_probs else out


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """flash_attn_func on qkv [B, S, 3, H, D]."""
    q, k, v = qkv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """flash_attn_func on q [B, S_q, H, D] and kv [B, S_k, 2, H_kv, D]."""
    k, v = kv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """Attention over a packed batch: q [total_q, H, D], k, v [total_k, H_kv, D], cu_seqlens_*
    int32 [batch + 1]. Returns out [total_q, H, D]; with return_attn_probs=True (out,
    softmax_lse fp32 [H, total_q], None). Differentiable in q, k and v."""
    _refuse(dropout_p, softcap, alibi_slopes, block_table=block_table)
    out, lse = serving.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, causal=causal, window=window_size,
                                        scale=softmax_scale, deterministic=deterministic,
                                        return_lse=True)
    return (out, lse, None) if return_attn_probs else out


def _cache_positions(lengths, width):
    """[B, width] bool: which of the first `width` positions of each sequence hold keys."""
    return torch.arange(width, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """Attention of new queries q [B, S_q, H, D] over a KV cache, FlashAttention's way.

    k_cache, v_cache [B, S_cache, H_kv, D], or with block_table [B, max_blocks] (int32) pages
    [num_blocks, page_size, H_kv, D]. cache_seqlens: int or [B] int32, the keys each sequence
    holds before this call (None: the whole cache). k, v [B, S_new, H_kv, D], when given, are
    written into the cache in place at positions cache_seqlens .. cache_seqlens + S_new - 1
    (FlashAttention's append; cache_seqlens itself is the caller's to advance), and attention
    then sees cache_seqlens + S_new keys. causal aligns the queries to the last keys (bottom
    right). Forward only. Returns out [B, S_q, H, D]; with return_softmax_lse=True also
    softmax_lse fp32 [B, H, S_q]. num_splits is FlashAttention's tuning knob and is ignored
    (the dispatch chooses the kernel)."""
    _refuse(softcap=softcap, alibi_slopes=alibi_slopes, rotary_cos=rotary_cos,
            rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad)
    del rotary_interleaved, num_splits
    if q.dim() != 4:
        raise ValueError("q must be [batch, seq_q, heads, head_dim]; its shape is %s"
                         % (tuple(q.shape),))
    b, sq, h, d = q.shape
    paged = block_table is not None
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError("k_cache and v_cache must be %s of one shape; they are %s and %s" % (
            "[num_blocks, page_size, H_kv, D]" if paged else "[B, S_cache, H_kv, D]",
            tuple(k_cache.shape), tuple(v_cache.shape)))
    width = k_cache.shape[1] * (block_table.shape[1] if paged else 1)  # keys a row can hold
    device = q.device
    if cache_seqlens is None:
        lengths = torch.full((b,), width, dtype=torch.int64, device=device)
    elif isinstance(cache_seqlens, int):
        lengths = torch.full((b,), cache_seqlens, dtype=torch.int64, device=device)
    else:
        lengths = cache_seqlens.to(device=device, dtype=torch.int64)
    with torch.no_grad():
        if (k is None) != (v is None):
            raise ValueError("k and v are appended together: give both or neither")
        s_new = 0 if k is None else k.shape[1]
        if bool((lengths + s_new > width).any()) or bool((lengths < 0).any()):
            raise ValueError("cache_seqlens + the %d new keys must fit the cache's %d keys a "
                             "sequence" % (s_new, width))
        rows = torch.arange(b, device=device).unsqueeze(1)
        if k is not None:
            pos = lengths.unsqueeze(1) + torch.arange(s_new, device=device).unsqueeze(0)
            if paged:
                page = k_cache.shape[1]
                blk = block_table.to(device=device, dtype=torch.int64)[rows, pos // page]
                k_cache[blk, pos % page] = k
                v_cache[blk, pos % page] = v
            else:
                k_cache[rows, pos] = k
                v_cache[rows, pos] = v
        seqlens_k = lengths + s_new
        # The keys each sequence holds, packed in batch order: [total_k, H_kv, D].
        visible = _cache_positions(seqlens_k, width)
        if paged:
            page = k_cache.shape[1]
            pos = torch.arange(width, device=device).unsqueeze(0).expand(b, width)
            blk = block_table.to(device=device, dtype=torch.int64)[rows, pos // page]
            kp, vp = k_cache[blk[visible], (pos % page)[visible]], v_cache[blk[visible],
                                                                            (pos % page)[visible]]
        else:
            kp, vp = k_cache[visible], v_cache[visible]
        cu_k = torch.zeros(b + 1, dtype=torch.int32, device=device)
        cu_k[1:] = torch.cumsum(seqlens_k, 0)
        cu_q = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device=device)
        out, lse = serving.varlen_attention(q.reshape(b * sq, h, d), kp, vp, cu_q, cu_k,
                                            causal=causal, window=window_size,
                                            scale=softmax_scale, kernel=AUTO, kernel_bwd=None,
                                            return_lse=True)
    out = out.reshape(b, sq, h, d)
    if not return_softmax_lse:
        return out
    return out, lse.reshape(h, b, sq).permute(1, 0, 2).contiguous()
