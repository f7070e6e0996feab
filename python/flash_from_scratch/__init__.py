"""flash_from_scratch: this repository's attention kernels from PyTorch, through ctypes.

    import flash_from_scratch as fa
    fa.list_kernels()                      # the registered kernels (no torch or GPU needed)
    o = fa.attention(q, k, v, causal=True) # 05/v5 forward, 06/v2_mma backward (bf16, fp16)
    fa.check_attention(my_attention)       # your callable vs float64 on ragged shapes
    fa.bench_attention(my_attention)       # its time next to ours and SDPA's

The kernels live in libfa_python.so, built by CMake with every chapter (build/lib/); set
FA_LIBRARY to use another build. Only list_kernels() and the library helpers work without torch;
the rest imports torch when called.
"""
from ._lib import (FlashError, Kernel, LibraryNotFound, NoGpuError, UnsupportedError,
                   describe_gpu, find_library, list_kernels, supported)

__all__ = ["list_kernels", "attention", "check_attention", "bench_attention",
           "reference_attention", "naive_attention_lowp", "describe_gpu", "find_library",
           "supported", "Kernel", "FlashError", "UnsupportedError", "NoGpuError",
           "LibraryNotFound", "DEFAULT_FWD", "DEFAULT_BWD"]

DEFAULT_FWD = "05/v5_fewer_instructions"
DEFAULT_BWD = "06/v2_mma"


def attention(q, k, v, causal=False, scale=None, kernel=DEFAULT_FWD, kernel_bwd=DEFAULT_BWD,
              return_lse=False):
    from .ops import attention as impl
    return impl(q, k, v, causal=causal, scale=scale, kernel=kernel, kernel_bwd=kernel_bwd,
                return_lse=return_lse)


def check_attention(fn, **kwargs):
    from .check import check_attention as impl
    return impl(fn, **kwargs)


def bench_attention(fn, **kwargs):
    from .bench import bench_attention as impl
    return impl(fn, **kwargs)


def reference_attention(q, k, v, causal=False, scale=None):
    from .reference import reference_attention as impl
    return impl(q, k, v, causal=causal, scale=scale)


def naive_attention_lowp(q, k, v, dout=None, causal=False, scale=None):
    from .reference import naive_attention_lowp as impl
    return impl(q, k, v, dout=dout, causal=causal, scale=scale)


for _f, _m in ((attention, "ops"), (check_attention, "check"), (bench_attention, "bench"),
               (reference_attention, "reference"), (naive_attention_lowp, "reference")):
    _f.__doc__ = "See flash_from_scratch.%s.%s (imports torch)." % (_m, _f.__name__)
del _f, _m
