"""Shared fixtures. Tests that need torch, a CUDA GPU or the built library skip with the reason
when one is missing (CI: no GPU, no torch); test_library.py runs without torch."""
import os
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(PYTHON_DIR)
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

import flash_from_scratch as fa  # noqa: E402  (pure Python: imports without torch)


def out_dir():
    """Where tests write plots and tables: $FA_PYTHON_OUT, default python/out/."""
    d = os.environ.get("FA_PYTHON_OUT") or os.path.join(PYTHON_DIR, "out")
    os.makedirs(d, exist_ok=True)
    return d


def library_or_skip():
    try:
        return fa.find_library()
    except fa.LibraryNotFound as e:
        pytest.skip(str(e))


def torch_cuda_or_skip():
    """torch, when it is installed and sees a CUDA GPU and the library is built; else skip."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    library_or_skip()
    return torch


def kernels_or_empty():
    """The registered kernels, or [] when the library is not built (at collection time)."""
    try:
        return fa.list_kernels()
    except fa.LibraryNotFound:
        return []


@pytest.fixture
def torch_cuda():
    return torch_cuda_or_skip()


@pytest.fixture
def emulated(monkeypatch):
    """torch on CPU with the library replaced by emulated.EmulatedLibrary; returns (torch,
    emulation). The kernels' device check is widened to CPU tensors for the test."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from emulated import EmulatedLibrary
    from flash_from_scratch import _common, _lib
    emu = EmulatedLibrary(torch)
    monkeypatch.setattr(_lib, "lib", lambda: emu)
    monkeypatch.setattr(_common, "KERNEL_DEVICES", ("cuda", "cpu"))
    _common.forget_choices()
    yield torch, emu
    _common.forget_choices()
