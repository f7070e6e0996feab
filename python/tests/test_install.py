"""`pip install` of the package (pyproject.toml, setup.py), then the installed package used from a
directory outside the repository, with no PYTHONPATH into it and no FA_LIBRARY: it must find the
library it installed. Here the library is the one the build already made (FA_PREBUILT_LIBRARY,
so the CUDA code is not compiled twice); the build-from-source path (setup.py runs CMake) is
what bench/device_run.sh's stage `pip` times on the GPU. With torch and a GPU, an attention call
through the installed package is compared with PyTorch's SDPA."""
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, library_or_skip

USE = r"""
import os, sys
import flash_from_scratch as fa
site = sys.argv[1]
assert fa.find_library().startswith(site), fa.find_library()
assert any(k.name == "05/v5_fewer_instructions" for k in fa.list_kernels())
from flash_from_scratch import _tolerances  # check.py's numbers: the header pip copied in
assert _tolerances.header_path().startswith(site), _tolerances.header_path()
assert _tolerances.TOL["kFlashFwdFactor"] == 2.0, _tolerances.TOL
print("library", os.path.relpath(fa.find_library(), site))
try:
    import torch
except ImportError:
    torch = None
if torch is not None and torch.cuda.is_available():
    q, k, v = (torch.randn(2, 4, 300, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = fa.attention(q, k, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=True)
    err = (o.float() - ref).abs().max().item()
    assert err < 0.05, err
    print("attention ok", fa.explain(q, k, v, causal=True, brief=True), "max err %.3g" % err)
"""


def test_pip_install_then_use_from_elsewhere(tmp_path):
    lib = library_or_skip()
    for module in ("pip", "setuptools"):
        r = subprocess.run([sys.executable, "-c", "import " + module], capture_output=True)
        if r.returncode != 0:
            pytest.skip("%s is not installed for %s" % (module, sys.executable))
    site = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k not in ("FA_LIBRARY", "PYTHONPATH")}
    env["FA_PREBUILT_LIBRARY"] = lib
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-deps", "--no-cache-dir", "--no-index", "--target", str(site),
                        REPO_ROOT], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (site / "flash_from_scratch" / "lib" / "libfa_python.so").is_file()
    assert (site / "flash_from_scratch" / "tolerances.h").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("FA_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-c", USE, str(site)], cwd=str(elsewhere), env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    print(r.stdout)
