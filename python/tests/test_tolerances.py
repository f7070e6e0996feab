"""common/tolerances.h is the one place the checks' numbers are written: the C++ harnesses include
it, check.py reads it (_tolerances.py). These tests hold the two readings together: every value
of the header is one the Python parser reads, and what it reads is what a C++ compiler makes of
the same lines. No torch, no GPU; the compiler test needs a C++ compiler (g++ or c++)."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO_ROOT
from flash_from_scratch import _tolerances

HEADER = os.path.join(REPO_ROOT, "common", "tolerances.h")


def test_the_package_reads_the_checkouts_header():
    assert os.path.samefile(_tolerances.header_path(), HEADER)
    assert _tolerances.TOL == _tolerances.load(HEADER)


def test_every_constexpr_of_the_header_is_read():
    text = open(HEADER).read()
    code = re.sub(r"//.*", "", text)  # the comments name the form too
    declared = re.findall(r"\bconstexpr\b[^;]*;", code)
    read = _tolerances.parse(text)
    # A value the parser cannot read (an expression, another type) would leave check.py and the
    # harness with different numbers: the header must keep to `constexpr double kName = number;`.
    assert len(read) == len(declared), (sorted(read), declared)
    assert sorted(read) == sorted(_tolerances.NAMES)
    assert all(v > 0 for v in read.values())


def test_the_compiler_reads_the_same_numbers(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    names = _tolerances.NAMES
    src = tmp_path / "print.cpp"
    src.write_text('#include <cstdio>\n#include "tolerances.h"\nint main() {\n%s  return 0;\n}\n'
                   % "".join('  std::printf("%s %%.17g\\n", fa::tol::%s);\n' % (n, n)
                             for n in names))
    exe = tmp_path / "print"
    subprocess.run([cxx, "-std=c++17", "-I", os.path.dirname(HEADER), str(src), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    compiled = {name: float(value) for name, value in (line.split() for line in out.splitlines())}
    assert compiled == _tolerances.load(HEADER)


def test_check_py_uses_the_header():
    pytest.importorskip("torch", reason="check.py imports torch")
    from flash_from_scratch import check
    tol = _tolerances.TOL
    assert check.FP32_TOL["O"] == (tol["kFp32OAtol"], tol["kFp32ORtol"])
    assert check.FP32_TOL["L"] == (tol["kFp32LAtol"], tol["kFp32LRtol"])
    assert check.FP32_TOL["dK"] == (tol["kFp32GradAtol"], tol["kFp32GradRtol"])
    assert check.FLASH_TOL["O"] == (tol["kFlashFwdFactor"], tol["kFlashFloor"])
    assert check.FLASH_TOL["dV"] == (tol["kFlashBwdFactor"], tol["kFlashFloor"])
