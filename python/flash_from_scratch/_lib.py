"""ctypes binding of libfa_python.so (python/capi/fa_python.h). Needs neither torch nor a GPU.

The library is found through, in order: the environment variable FA_LIBRARY (a path to the .so),
then the build folders of this checkout (build/lib, build-*/lib, newest first).
"""
import ctypes
import glob
import os
from collections import namedtuple

API_VERSION = 1  # FA_PY_API_VERSION

# Return codes of the C ABI.
OK, USAGE, UNSUPPORTED, NO_GPU, ERROR = 0, 1, 2, 3, 4

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def candidate_paths():
    """Where the library is looked for, in order."""
    env = os.environ.get("FA_LIBRARY")
    if env:
        return [env]
    found = glob.glob(os.path.join(REPO_ROOT, "build*", "lib", LIBRARY_NAME))
    default = os.path.join(REPO_ROOT, "build", "lib", LIBRARY_NAME)
    # build/ first (the README's preset), then the others, newest first.
    rest = sorted((p for p in found if p != default), key=os.path.getmtime, reverse=True)
    return [default] + rest


def find_library():
    """The path of libfa_python.so, or raises LibraryNotFound saying how to build it."""
    paths = candidate_paths()
    for p in paths:
        if os.path.isfile(p):
            return p
    if os.environ.get("FA_LIBRARY"):
        raise LibraryNotFound("FA_LIBRARY=%s: no such file" % os.environ["FA_LIBRARY"])
    raise LibraryNotFound(
        "%s is not built: run `cmake --preset default && cmake --build --preset default` in %s "
        "(it lands in build/lib), or set FA_LIBRARY to its path" % (LIBRARY_NAME, REPO_ROOT))


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
    version = handle.fa_py_api_version()
    if version != API_VERSION:
        raise LibraryNotFound("%s has C ABI version %d, this package expects %d: rebuild it"
                              % (path, version, API_VERSION))
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


def supported(kind, name, dtype, head_dim):
    """None when kernel `name` can run dtype ('fp32', 'fp16', 'bf16') at head_dim on this
    machine; otherwise the exception a launch would raise (not raised)."""
    code = lib().fa_py_supported(kind.encode(), name.encode(), dtype.encode(), int(head_dim))
    if code == OK:
        return None
    try:
        raise_for(code, name)
    except Exception as e:  # returned, not raised
        return e


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
