"""flash_from_scratch: this repository's attention kernels from PyTorch.

    import flash_from_scratch as fa
    o = fa.attention(q, k, v, causal=True)  # the fastest kernels here for the problem (dispatch)
    print(*fa.explain(q, k, v, causal=True), sep="\\n")  # which ones, and the run that chose them
    fa.list_kernels()                       # the registered kernels (no torch or GPU needed)
    fa.check_attention(my_attention)        # your callable vs float64 on ragged shapes
    fa.bench_attention(my_attention)        # its time next to ours and SDPA's

    from flash_from_scratch.flash_attn_interface import flash_attn_func   # FlashAttention's API

Every kernel has a torch.library operator (torch.ops.flash_from_scratch.*, ops.py), so models
that call attention() compile with torch.compile(fullgraph=True); in eager mode attention() runs
the same work without the operator's per-call host cost. Chapter 09 (serving):
attention(..., window=(left, right)) and grouped K/V heads (k, v with fewer heads than q);
varlen_attention (FlashAttention's varlen interface), paged_attention and append_kv over a paged
KV cache; list_serving_kernels() lists their kernels.

The kernels live in libfa_python.so: `pip install --no-build-isolation .` in the repository
builds it for the local GPU and installs it inside the package; a checkout's build/lib/ is used
when the package is imported from the checkout; FA_LIBRARY names another. Without torch only the
library helpers work (list_kernels(), list_serving_kernels(), dispatch_table(), pick(), ...).
"""
from ._lib import (DispatchRule, FlashError, Kernel, LibraryNotFound, NoGpuError, Pick,
                   ServingKernel, UnsupportedError, describe_gpu, dispatch_table, find_library,
                   list_kernels, list_serving_kernels, pick, supported)
from .fp8 import (DEFAULT_FP8_FWD, Fp8Kernel, attention_fp8, default_fp8_kernel, dequantize_fp8,
                  hadamard_rotate, list_fp8_kernels, quantize_fp8, supported_fp8)
from .names import (APPEND_KV, AUTO, DEFAULT_BWD, DEFAULT_FWD, FP32_BWD, FP32_FWD,
                    HOPPER_PAGED_PREFILL, HOPPER_VARLEN_FWD, PAGED_DECODE, PAGED_PREFILL,
                    VARLEN_BWD, VARLEN_FWD, VARLEN_WINDOW_BWD, VARLEN_WINDOW_FWD)

__all__ = ["list_kernels", "list_serving_kernels", "attention", "explain", "pick",
           "dispatch_table", "varlen_attention", "varlen_attention_packed", "paged_attention",
           "append_kv", "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "check_attention", "bench_attention", "reference_attention", "naive_attention_lowp",
           "describe_gpu", "find_library", "supported", "Kernel", "ServingKernel", "Pick",
           "DispatchRule", "FlashError", "UnsupportedError", "NoGpuError", "LibraryNotFound",
           "AUTO", "DEFAULT_FWD", "DEFAULT_BWD", "FP32_FWD", "FP32_BWD", "VARLEN_FWD",
           "VARLEN_WINDOW_FWD", "VARLEN_BWD", "VARLEN_WINDOW_BWD", "HOPPER_VARLEN_FWD",
           "PAGED_DECODE", "PAGED_PREFILL", "HOPPER_PAGED_PREFILL", "APPEND_KV", "attention_fp8", "quantize_fp8",
           "dequantize_fp8", "hadamard_rotate", "list_fp8_kernels", "supported_fp8", "Fp8Kernel",
           "DEFAULT_FP8_FWD", "default_fp8_kernel"]

try:
    import torch as _torch  # noqa: F401
except ImportError:  # the library helpers above still work; the rest says what to install
    _torch = None

if _torch is not None:
    # Importing ops and serving registers the operators with torch.library.
    from .bench import bench_attention
    from .check import check_attention
    from .flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func,
                                       flash_attn_qkvpacked_func, flash_attn_varlen_func,
                                       flash_attn_with_kvcache)
    from .ops import attention, explain
    from .reference import naive_attention_lowp, reference_attention
    from .serving import append_kv, paged_attention, varlen_attention, varlen_attention_packed
else:
    def _needs_torch(name):
        def missing(*args, **kwargs):
            raise ImportError("flash_from_scratch.%s needs PyTorch: python3 -m pip install torch "
                              "(pytorch.org gives the command for your CUDA version)" % name)
        missing.__name__ = name
        return missing

    for _name in ("attention", "explain", "varlen_attention", "varlen_attention_packed",
                  "paged_attention", "append_kv", "flash_attn_func", "flash_attn_kvpacked_func",
                  "flash_attn_qkvpacked_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
                  "check_attention", "bench_attention", "reference_attention",
                  "naive_attention_lowp"):
        globals()[_name] = _needs_torch(_name)
    del _name
