"""The ctypes layer on any machine (no torch, no GPU needed): the package imports, finds or
clearly misses the library, lists the kernels and refuses in the harness's words."""
import os
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, fa, library_or_skip


def test_package_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; import flash_from_scratch as fa; "
            "print(fa.DEFAULT_FWD)")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "05/v5_fewer_instructions"


def test_example_without_torch_says_what_to_install():
    """The README's example script on a machine without torch: a message and exit 1, no traceback."""
    example = os.path.join(PYTHON_DIR, "examples", "naive_attention.py")
    code = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = [%r]; "
            "runpy.run_path(%r, run_name='__main__')" % (example, example))
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    assert "pip install torch" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_missing_library_says_what_to_do(monkeypatch):
    monkeypatch.setenv("FA_LIBRARY", "/nonexistent/libfa_python.so")
    with pytest.raises(fa.LibraryNotFound, match="FA_LIBRARY=/nonexistent/libfa_python.so"):
        fa.find_library()
    monkeypatch.delenv("FA_LIBRARY")
    monkeypatch.setattr(fa._lib, "REPO_ROOT", "/nonexistent")
    with pytest.raises(fa.LibraryNotFound, match="cmake --build --preset default"):
        fa.find_library()


def test_list_kernels():
    library_or_skip()
    kernels = fa.list_kernels()
    names = {(k.kind, k.name) for k in kernels}
    for want in [("fwd", fa.DEFAULT_FWD), ("bwd", fa.DEFAULT_BWD), ("fwd", "05/v1_scalar_fp32"),
                 ("bwd", "06/v1_fp32")]:
        assert want in names
    v1 = next(k for k in kernels if k.name == "05/v1_scalar_fp32")
    assert v1.dtypes == ("fp32",) and 64 in v1.head_dims and v1.min_sm == 70
    atomic = next(k for k in kernels if k.name == "06/v1_fp32_atomic_dq")
    assert atomic.kind == "bwd" and not atomic.deterministic
    assert all(k.kind in ("fwd", "bwd") and k.dtypes and k.head_dims for k in kernels)


def test_unknown_kernel_lists_the_registered_ones():
    library_or_skip()
    err = fa.supported("fwd", "05/nope", "bf16", 64)
    assert isinstance(err, ValueError)
    assert "no kernel named '05/nope'; registered here:\n  " in str(err)
    assert "\n  05/v1_scalar_fp32" in str(err)


def test_unsupported_in_the_harness_words():
    library_or_skip()
    err = fa.supported("fwd", "05/v1_scalar_fp32", "bf16", 64)
    if fa.describe_gpu().startswith("no GPU"):
        assert isinstance(err, fa.NoGpuError) and "no GPU: " in str(err)
    else:
        assert isinstance(err, fa.UnsupportedError)
        assert str(err) == "05/v1_scalar_fp32: this kernel has no bf16 D=64 version"
