"""ctypes binding of libfa_python.so (python/capi/fa_python.h). Needs neither torch nor a GPU.

The library is found through, in order: the environment variable FA_LIBRARY (a path to the .so),
the copy `pip install` put inside the package (flash_from_scratch/lib/), then the build folders
of a checkout the package is imported from (build/lib, build-*/lib, newest first).
"""
import ctypes
import glob
import os
from collections import namedtuple

API_VERSION = 5  # FA_PY_API_VERSION

# Return codes of the C ABI.
OK, USAGE, UNSUPPORTED, NO_GPU, ERROR = 0, 1, 2, 3, 4

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(PACKAGE_DIR))  # when imported from a checkout
LIBRARY_NAME = "libfa_python.so"


class FlashError(RuntimeError):
    """A CUDA error or another failure inside the library (its message keeps file:line)."""


class UnsupportedError(FlashError):
    """The kernel has no version for this dtype, head dim, GPU or shape; or there is no GPU."""


class NoGpuError(UnsupportedError):
    """No usable CUDA device (the harness's 'no GPU: ...')."""


class LibraryNotFound(FlashError):
    """libfa_python.so is not built, or not where FA_LIBRARY says."""


Kernel = namedtuple("Kernel", "kind name dtypes head_dims min_sm deterministic about")
Kernel.__doc__ = ("A registered attention kernel: kind 'fwd' or 'bwd', dtypes like ('fp32',), "
                  "head_dims like (32, 64), min_sm 80 for sm_80, deterministic (no atomics).")

ServingKernel = namedtuple("ServingKernel", "kind name dtypes head_dims min_sm gqa window decoding "
                                            "deterministic page_sizes forward about")
ServingKernel.__doc__ = (
    "A registered chapter 09 kernel: kind 'varlen_fwd', 'varlen_bwd', 'paged_fwd' or 'append'; "
    "gqa (takes fewer K/V heads), window (takes a sliding window), decoding (written for short "
    "seq_q), deterministic, page_sizes (paged_fwd: the page sizes it has versions for), forward "
    "(varlen_bwd: the forward kernel it pairs with).")

SERVING_KINDS = ("varlen_fwd", "varlen_bwd", "paged_fwd", "append")


def candidate_paths():
    """Where the library is looked for, in order."""
    env = os.environ.get("FA_LIBRARY")
    if env:
        return [env]
    installed = os.path.join(PACKAGE_DIR, "lib", LIBRARY_NAME)
    found = glob.glob(os.path.join(REPO_ROOT, "build*", "lib", LIBRARY_NAME))
    default = os.path.join(REPO_ROOT, "build", "lib", LIBRARY_NAME)
    # build/ first (the README's preset), then the others, newest first.
    rest = sorted((p for p in found if p != default), key=os.path.getmtime, reverse=True)
    return [installed, default] + rest


def find_library():
    """The path of libfa_python.so, or raises LibraryNotFound saying how to build it."""
    paths = candidate_paths()
    for p in paths:
        if os.path.isfile(p):
            return p
    if os.environ.get("FA_LIBRARY"):
        raise LibraryNotFound("FA_LIBRARY=%s: no such file" % os.environ["FA_LIBRARY"])
    raise LibraryNotFound(
        "%s is not built: `pip install --no-build-isolation .` in the repository builds and "
        "installs it with the package; or run `cmake --preset default && cmake --build --preset "
        "default` in %s (it lands in build/lib), or set FA_LIBRARY to its path"
        % (LIBRARY_NAME, REPO_ROOT))


_lib = None


def lib():
    """The loaded library (loaded once), with its function signatures declared."""
    global _lib
    if _lib is not None:
        return _lib
    path = find_library()
    try:
        handle = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryNotFound("cannot load %s: %s" % (path, e)) from e
    c_str, i64, vp, fp = ctypes.c_char_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p
    handle.fa_py_api_version.restype = ctypes.c_int
    handle.fa_py_api_version.argtypes = []
    # Checked first: an older library lacks the newer entry points declared below.
    version = handle.fa_py_api_version()
    if version != API_VERSION:
        raise LibraryNotFound("%s has C ABI version %d, this package expects %d: rebuild it"
                              % (path, version, API_VERSION))
    handle.fa_py_last_error.restype = c_str
    handle.fa_py_last_error.argtypes = []
    handle.fa_py_list_kernels.restype = c_str
    handle.fa_py_list_kernels.argtypes = []
    handle.fa_py_describe_gpu.restype = c_str
    handle.fa_py_describe_gpu.argtypes = []
    handle.fa_py_supported.restype = ctypes.c_int
    handle.fa_py_supported.argtypes = [c_str, c_str, c_str, i64]
    shape = [i64, i64, i64, i64, i64, c_str, ctypes.c_float, ctypes.c_int, ctypes.c_int, vp]
    handle.fa_py_attention_fwd.restype = ctypes.c_int
    handle.fa_py_attention_fwd.argtypes = [c_str, vp, vp, vp, vp, fp] + shape
    handle.fa_py_attention_bwd.restype = ctypes.c_int
    handle.fa_py_attention_bwd.argtypes = [c_str, vp, vp, vp, vp, vp, fp, vp, vp, vp, fp, fp
                                           ] + shape
    handle.fa_py_attention_bwd_gqa.restype = ctypes.c_int
    handle.fa_py_attention_bwd_gqa.argtypes = [c_str, vp, vp, vp, vp, vp, fp, vp, vp, vp, fp, fp,
                                               i64, i64, i64] + shape[2:]
    handle.fa_py_attention_fwd_gqa.restype = ctypes.c_int
    handle.fa_py_attention_fwd_gqa.argtypes = [c_str, vp, vp, vp, vp, fp, i64, i64, i64, i64, i64,
                                               i64, c_str, ctypes.c_float, ctypes.c_int,
                                               ctypes.c_int, vp]
    handle.fa_py_list_serving_kernels.restype = c_str
    handle.fa_py_list_serving_kernels.argtypes = []
    handle.fa_py_supported_ex.restype = ctypes.c_int
    handle.fa_py_supported_ex.argtypes = [c_str, c_str, c_str, i64, ctypes.c_int, ctypes.c_int, i64]
    # Host arrays go in as c_void_p (the address of a ctypes int64 array), like device pointers.
    varlen_tail = [vp, vp, vp, vp, i64, i64, i64, i64, c_str, ctypes.c_float, ctypes.c_int, i64,
                   i64, ctypes.c_int, vp]
    handle.fa_py_varlen_fwd.restype = ctypes.c_int
    handle.fa_py_varlen_fwd.argtypes = [c_str, vp, vp, vp, vp, fp] + varlen_tail
    handle.fa_py_varlen_bwd.restype = ctypes.c_int
    handle.fa_py_varlen_bwd.argtypes = [c_str, vp, vp, vp, vp, vp, fp, vp, vp, vp, fp, fp
                                        ] + varlen_tail
    handle.fa_py_paged_fwd.restype = ctypes.c_int
    handle.fa_py_paged_fwd.argtypes = [c_str, vp, vp, vp, vp, fp, vp, vp, vp, i64, i64, i64, i64,
                                       i64, i64, i64, i64, c_str, ctypes.c_float, ctypes.c_int,
                                       ctypes.c_int, vp]
    handle.fa_py_paged_append.restype = ctypes.c_int
    handle.fa_py_paged_append.argtypes = [c_str, vp, vp, vp, vp, vp, vp, vp, i64, i64, i64, i64,
                                          i64, i64, i64, c_str, ctypes.c_int, vp]
    handle.fa_py_pick.restype = ctypes.c_int
    handle.fa_py_pick.argtypes = [c_str, c_str, i64, i64, i64, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int, i64, ctypes.c_int, ctypes.c_int]
    handle.fa_py_pick_result.restype = c_str
    handle.fa_py_pick_result.argtypes = []
    handle.fa_py_dispatch_table.restype = c_str
    handle.fa_py_dispatch_table.argtypes = []
    handle.path = path
    _lib = handle
    return _lib


def raise_for(code, what=""):
    """Raises the exception of a nonzero return code, with the library's message."""
    if code == OK:
        return
    msg = lib().fa_py_last_error().decode("utf-8", "replace")
    if what:
        msg = "%s: %s" % (what, msg)
    if code == USAGE:
        raise ValueError(msg)
    if code == NO_GPU:
        raise NoGpuError(msg)
    if code == UNSUPPORTED:
        raise UnsupportedError(msg)
    raise FlashError(msg)


def list_kernels():
    """Every registered attention kernel, forward ('fwd') then backward ('bwd'), by name."""
    out = []
    for line in lib().fa_py_list_kernels().decode("utf-8").splitlines():
        kind, name, dtypes, dims, min_sm, det, about = line.split("\t", 6)
        out.append(Kernel(kind, name, tuple(dtypes.split(",")),
                          tuple(int(d) for d in dims.split(",") if d), int(min_sm), det == "1",
                          about))
    return out


def describe_gpu():
    """The GPU the library sees, as the chapter programs print it."""
    return lib().fa_py_describe_gpu().decode("utf-8", "replace")


def list_serving_kernels():
    """Every registered chapter 09 kernel (ServingKernel): varlen forward and backward, paged
    forward, append; [] when none is registered in this build."""
    out = []
    for line in lib().fa_py_list_serving_kernels().decode("utf-8").splitlines():
        kind, name, dtypes, dims, min_sm, flags, pages, forward, about = line.split("\t", 8)
        flags = set(f for f in flags.split(",") if f)
        out.append(ServingKernel(kind, name, tuple(dtypes.split(",")),
                                 tuple(int(d) for d in dims.split(",") if d), int(min_sm),
                                 "gqa" in flags, "window" in flags, "decoding" in flags,
                                 "nondeterministic" not in flags,
                                 tuple(int(p) for p in pages.split(",") if p), forward, about))
    return out


def supported(kind, name, dtype, head_dim, gqa=False, window=False, page_size=0):
    """None when kernel `name` of `kind` ('fwd', 'bwd', 'varlen_fwd', 'varlen_bwd', 'paged_fwd',
    'append') can run dtype ('fp32', 'fp16', 'bf16') at head_dim on this machine, with grouped
    K/V heads (gqa), a sliding window (window) and pages of page_size keys when those are asked
    for; otherwise the exception a launch would raise (not raised)."""
    code = lib().fa_py_supported_ex(kind.encode(), name.encode(), dtype.encode(), int(head_dim),
                                    int(bool(gqa)), int(bool(window)), int(page_size))
    if code == OK:
        return None
    try:
        raise_for(code, name)
    except Exception as e:  # returned, not raised
        return e


Pick = namedtuple("Pick", "kernel kind sm conditions why measured passed_over")
Pick.__doc__ = ("The dispatch's choice (common/dispatch.h): the kernel and its registry kind, the GPU "
                "(sm) it was chosen for, the table row that chose it (conditions, why) and the log "
                "that measured it (measured, a path in the repository), and the rows above it whose "
                "kernel could not run the problem (passed_over, 'kernel: reason' strings).")

DispatchRule = namedtuple("DispatchRule", "op kernel conditions why measured")


def pick(op, dtype, head_dim, seq_q=0, seq_k=0, causal=False, window=False, gqa=False,
         page_size=0, deterministic=False, sm=0):
    """The dispatch's Pick for a problem: op 'fwd', 'bwd', 'varlen_fwd', 'varlen_bwd' or
    'paged_fwd'; sm the GPU to choose for (90 for an H100), 0 for this machine's. Raises
    UnsupportedError (NoGpuError for sm 0 on a machine without a GPU) when nothing runs it."""
    h = lib()
    code = h.fa_py_pick(op.encode(), dtype.encode(), int(head_dim), int(seq_q), int(seq_k),
                        int(bool(causal)), int(bool(window)), int(bool(gqa)), int(page_size),
                        int(bool(deterministic)), int(sm))
    raise_for(code, "dispatch")
    kernel, kind, got_sm, conditions, why, measured, passed = (
        h.fa_py_pick_result().decode("utf-8").split("\t", 6))
    return Pick(kernel, kind, int(got_sm), conditions, why, measured,
                tuple(x for x in passed.split("; ") if x))


def dispatch_table():
    """The dispatch's rows, in the order they are read (DispatchRule)."""
    return [DispatchRule(*line.split("\t", 4))
            for line in lib().fa_py_dispatch_table().decode("utf-8").splitlines()]


class HostInt64:
    """An int64 array in host memory for the C ABI's host_* arguments (kept alive by this
    object; .ptr is its address)."""

    def __init__(self, values):
        values = [int(x) for x in values]
        self.values = values
        self.array = (ctypes.c_int64 * max(len(values), 1))(*values)
        self.ptr = ctypes.addressof(self.array)

    def __len__(self):
        return len(self.values)


def attention_fwd(name, q, k, v, o, lse, batch, heads, seq_q, seq_k, head_dim, dtype, scale,
                  causal, device, stream):
    """Launches forward kernel `name` on device pointers (ints); raises on refusal."""
    code = lib().fa_py_attention_fwd(name.encode(), q, k, v, o, lse, batch, heads, seq_q, seq_k,
                                     head_dim, dtype.encode(), float(scale), int(bool(causal)),
                                     int(device), stream)
    raise_for(code, name)


def attention_bwd(name, q, k, v, o, dout, lse, dq, dk, dv, delta, workspace, batch, heads, seq_q,
                  seq_k, head_dim, dtype, scale, causal, device, stream):
    """Launches backward kernel `name` on device pointers (ints); raises on refusal."""
    code = lib().fa_py_attention_bwd(name.encode(), q, k, v, o, dout, lse, dq, dk, dv, delta,
                                     workspace, batch, heads, seq_q, seq_k, head_dim,
                                     dtype.encode(), float(scale), int(bool(causal)), int(device),
                                     stream)
    raise_for(code, name)


def attention_bwd_gqa(name, q, k, v, o, dout, lse, dq, dk, dv, delta, workspace, batch, heads,
                      heads_kv, seq_q, seq_k, head_dim, dtype, scale, causal, device, stream):
    """Launches fixed-length backward kernel `name` with K, V, dK, dV of heads_kv heads (the
    kernel sums dK, dV over each group); raises on refusal."""
    code = lib().fa_py_attention_bwd_gqa(name.encode(), q, k, v, o, dout, lse, dq, dk, dv, delta,
                                         workspace, batch, heads, heads_kv, seq_q, seq_k,
                                         head_dim, dtype.encode(), float(scale),
                                         int(bool(causal)), int(device), stream)
    raise_for(code, name)


def attention_fwd_gqa(name, q, k, v, o, lse, batch, heads, heads_kv, seq_q, seq_k, head_dim,
                      dtype, scale, causal, device, stream):
    """Launches fixed-length forward kernel `name` with K/V of heads_kv heads; raises on refusal."""
    code = lib().fa_py_attention_fwd_gqa(name.encode(), q, k, v, o, lse, batch, heads, heads_kv,
                                         seq_q, seq_k, head_dim, dtype.encode(), float(scale),
                                         int(bool(causal)), int(device), stream)
    raise_for(code, name)


def varlen_fwd(name, q, k, v, o, lse, cu_q, cu_k, host_cu_q, host_cu_k, heads, heads_kv,
               head_dim, dtype, scale, causal, window_left, window_right, device, stream):
    """Launches varlen forward kernel `name`: device pointers (ints), host_cu_q / host_cu_k
    HostInt64 of batch + 1 offsets; raises on refusal."""
    code = lib().fa_py_varlen_fwd(name.encode(), q, k, v, o, lse, cu_q, cu_k, host_cu_q.ptr,
                                  host_cu_k.ptr, len(host_cu_q) - 1, heads, heads_kv, head_dim,
                                  dtype.encode(), float(scale), int(bool(causal)),
                                  int(window_left), int(window_right), int(device), stream)
    raise_for(code, name)


def varlen_bwd(name, q, k, v, o, dout, lse, dq, dk, dv, delta, workspace, cu_q, cu_k, host_cu_q,
               host_cu_k, heads, heads_kv, head_dim, dtype, scale, causal, window_left,
               window_right, device, stream):
    """Launches varlen backward kernel `name` (workspace zeroed by the caller); raises on
    refusal."""
    code = lib().fa_py_varlen_bwd(name.encode(), q, k, v, o, dout, lse, dq, dk, dv, delta,
                                  workspace, cu_q, cu_k, host_cu_q.ptr, host_cu_k.ptr,
                                  len(host_cu_q) - 1, heads, heads_kv, head_dim, dtype.encode(),
                                  float(scale), int(bool(causal)), int(window_left),
                                  int(window_right), int(device), stream)
    raise_for(code, name)


def paged_fwd(name, q, k_pages, v_pages, o, lse, block_table, seqlens_k, host_seqlens_k, heads,
              heads_kv, seq_q, head_dim, page_size, num_pages, max_pages, dtype, scale, causal,
              device, stream):
    """Launches paged forward kernel `name`; host_seqlens_k a HostInt64 of batch lengths."""
    code = lib().fa_py_paged_fwd(name.encode(), q, k_pages, v_pages, o, lse, block_table,
                                 seqlens_k, host_seqlens_k.ptr, len(host_seqlens_k), heads,
                                 heads_kv, seq_q, head_dim, page_size, num_pages, max_pages,
                                 dtype.encode(), float(scale), int(bool(causal)), int(device),
                                 stream)
    raise_for(code, name)


def paged_append(name, k_new, v_new, k_pages, v_pages, block_table, seqlens_k, host_seqlens_k,
                 heads_kv, seq_q, head_dim, page_size, num_pages, max_pages, dtype, device,
                 stream):
    """Launches append kernel `name` (in place on the pages); raises on refusal."""
    code = lib().fa_py_paged_append(name.encode(), k_new, v_new, k_pages, v_pages, block_table,
                                    seqlens_k, host_seqlens_k.ptr, len(host_seqlens_k), heads_kv,
                                    seq_q, head_dim, page_size, num_pages, max_pages,
                                    dtype.encode(), int(device), stream)
    raise_for(code, name)
