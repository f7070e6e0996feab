"""flash_from_scratch: this repository's attention kernels from PyTorch, through ctypes.

    import flash_from_scratch as fa
    fa.list_kernels()                      # the registered kernels (no torch or GPU needed)
    o = fa.attention(q, k, v, causal=True) # 05/v5 forward, 06/v2_mma backward (bf16, fp16)
    fa.check_attention(my_attention)       # your callable vs float64 on ragged shapes
    fa.bench_attention(my_attention)       # its time next to ours and SDPA's

Chapter 09 (serving): attention(..., window=(left, right)) and grouped K/V heads (k, v with fewer
heads than q); varlen_attention (FlashAttention's varlen interface), paged_attention and
append_kv over a paged KV cache; list_serving_kernels() lists their kernels.

The kernels live in libfa_python.so, built by CMake with every chapter (build/lib/); set
FA_LIBRARY to use another build. Only list_kernels(), list_serving_kernels() and the library
helpers work without torch; the rest imports torch when called.
"""
from ._lib import (FlashError, Kernel, LibraryNotFound, NoGpuError, ServingKernel,
                   UnsupportedError, describe_gpu, find_library, list_kernels,
                   list_serving_kernels, supported)
from .fp8 import (DEFAULT_FP8_FWD, Fp8Kernel, attention_fp8, default_fp8_kernel, dequantize_fp8,
                  hadamard_rotate, list_fp8_kernels, quantize_fp8, supported_fp8)
from .names import (APPEND_KV, AUTO, DEFAULT_BWD, DEFAULT_FWD, FP32_BWD, FP32_FWD,
                    HOPPER_VARLEN_FWD, PAGED_DECODE, PAGED_PREFILL, VARLEN_BWD, VARLEN_FWD,
                    VARLEN_WINDOW_BWD, VARLEN_WINDOW_FWD)

__all__ = ["list_kernels", "list_serving_kernels", "attention", "varlen_attention",
           "varlen_attention_packed", "paged_attention", "append_kv", "check_attention",
           "bench_attention", "reference_attention", "naive_attention_lowp", "describe_gpu",
           "find_library", "supported", "Kernel", "ServingKernel", "FlashError",
           "UnsupportedError", "NoGpuError", "LibraryNotFound", "AUTO", "DEFAULT_FWD",
           "DEFAULT_BWD", "FP32_FWD", "FP32_BWD", "VARLEN_FWD", "VARLEN_WINDOW_FWD",
           "VARLEN_BWD", "VARLEN_WINDOW_BWD", "HOPPER_VARLEN_FWD", "PAGED_DECODE",
           "PAGED_PREFILL", "APPEND_KV", "attention_fp8", "quantize_fp8", "dequantize_fp8",
           "hadamard_rotate", "list_fp8_kernels", "supported_fp8", "Fp8Kernel",
           "DEFAULT_FP8_FWD", "default_fp8_kernel"]


def attention(q, k, v, causal=False, scale=None, kernel=AUTO, kernel_bwd=AUTO, return_lse=False,
              window=(-1, -1)):
    from .ops import attention as impl
    return impl(q, k, v, causal=causal, scale=scale, kernel=kernel, kernel_bwd=kernel_bwd,
                return_lse=return_lse, window=window)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     causal=False, window=(-1, -1), scale=None, kernel=AUTO, kernel_bwd=AUTO,
                     return_lse=False):
    from .serving import varlen_attention as impl
    return impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                window=window, scale=scale, kernel=kernel, kernel_bwd=kernel_bwd,
                return_lse=return_lse)


def varlen_attention_packed(q, k, v, plan, causal=False, window=(-1, -1), scale=None,
                            kernel=AUTO, kernel_bwd=AUTO, return_lse=False):
    from .serving import varlen_attention_packed as impl
    return impl(q, k, v, plan, causal=causal, window=window, scale=scale, kernel=kernel,
                kernel_bwd=kernel_bwd, return_lse=return_lse)


def paged_attention(q, k_pages, v_pages, block_table, seqlens_k, causal=False, scale=None,
                    kernel=AUTO, return_lse=False):
    from .serving import paged_attention as impl
    return impl(q, k_pages, v_pages, block_table, seqlens_k, causal=causal, scale=scale,
                kernel=kernel, return_lse=return_lse)


def append_kv(k_new, v_new, k_pages, v_pages, block_table, seqlens_k, kernel=APPEND_KV):
    from .serving import append_kv as impl
    return impl(k_new, v_new, k_pages, v_pages, block_table, seqlens_k, kernel=kernel)


def check_attention(fn, **kwargs):
    from .check import check_attention as impl
    return impl(fn, **kwargs)


def bench_attention(fn, **kwargs):
    from .bench import bench_attention as impl
    return impl(fn, **kwargs)


def reference_attention(q, k, v, causal=False, scale=None, window=(-1, -1)):
    from .reference import reference_attention as impl
    return impl(q, k, v, causal=causal, scale=scale, window=window)


def naive_attention_lowp(q, k, v, dout=None, causal=False, scale=None, window=(-1, -1)):
    from .reference import naive_attention_lowp as impl
    return impl(q, k, v, dout=dout, causal=causal, scale=scale, window=window)


for _f, _m in ((attention, "ops"), (varlen_attention, "serving"),
               (varlen_attention_packed, "serving"), (paged_attention, "serving"),
               (append_kv, "serving"), (check_attention, "check"), (bench_attention, "bench"),
               (reference_attention, "reference"), (naive_attention_lowp, "reference")):
    _f.__doc__ = "See flash_from_scratch.%s.%s (imports torch)." % (_m, _f.__name__)
del _f, _m
