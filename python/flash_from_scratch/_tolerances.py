"""The tolerances of every correctness check, read from common/tolerances.h, the header the C++
harnesses include: one set of numbers for both. Needs neither torch nor the library.

The header is found inside the package (`pip install` copies it there, setup.py) or, imported
from a checkout, at common/tolerances.h. Its values are lines `constexpr double kName = value;`;
a header without one of the names below is an error, not a silent default.
"""
import os
import re

from ._lib import PACKAGE_DIR, REPO_ROOT

HEADER = "tolerances.h"
NAMES = ("kFp32OAtol", "kFp32ORtol", "kFp32LAtol", "kFp32LRtol", "kFp32GradAtol", "kFp32GradRtol",
         "kFp32DeltaAtol", "kFp32DeltaRtol", "kFlashFwdFactor", "kFlashBwdFactor", "kFlashFloor",
         "kGemmAtolPerSqrtK", "kGemmRtol", "kGemmFlashFactor", "kSoftmaxAtol", "kSoftmaxRtol")
_VALUE = re.compile(r"^\s*constexpr\s+double\s+(k\w+)\s*=\s*([-+0-9.eE]+)\s*;", re.MULTILINE)


def header_path():
    """The tolerances.h this package reads: its own copy, else the checkout's."""
    for path in (os.path.join(PACKAGE_DIR, HEADER), os.path.join(REPO_ROOT, "common", HEADER)):
        if os.path.isfile(path):
            return path
    raise FileNotFoundError("%s: neither in the package (%s) nor in a checkout (%s)"
                            % (HEADER, PACKAGE_DIR, os.path.join(REPO_ROOT, "common")))


def parse(text):
    """{name: value} of every `constexpr double kName = value;` line of the header's text."""
    return {name: float(value) for name, value in _VALUE.findall(text)}


def load(path=None):
    path = path or header_path()
    with open(path) as f:
        values = parse(f.read())
    missing = [n for n in NAMES if n not in values]
    if missing:
        raise ValueError("%s lacks %s" % (path, ", ".join(missing)))
    return values


TOL = load()
