"""Builds libfa_python.so with CMake and installs it inside the package (pyproject.toml has the
rest of the package's description).

    pip install --no-build-isolation .        # configure + build for the local GPU, install

What the build does, and how to steer it (environment variables):
  FA_BUILD_DIR=<dir>      the CMake build folder (default: build-python/ in the repository). A
                          second install reuses it and rebuilds only what changed.
  CMAKE_ARGS="-D..."      extra configure arguments, e.g. "-DCMAKE_CUDA_ARCHITECTURES=90"
                          (default: the local GPU's, or sm_90 without one; CMakeLists.txt).
  FA_BUILD_JOBS=<n>       parallel compile jobs (default: every core).
  FA_PREBUILT_LIBRARY=<libfa_python.so>   install this library instead of building one (what CI
                          does with the library its test build made, so the CUDA code is compiled
                          once).
Only the library and what it links are built (-DFA_BUILD_TESTS=OFF -DFA_BUILD_BENCHMARKS=OFF):
the tests and benchmarks need GoogleTest and Google Benchmark, the package does not.
"""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libfa_python.so"


class BuildWithLibrary(build_py):
    """build_py, then libfa_python.so built (or taken prebuilt) into flash_from_scratch/lib/, and
    common/tolerances.h copied beside the modules: check.py reads its numbers from it
    (_tolerances.py), and an installed package has no checkout to find it in."""

    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "flash_from_scratch")
        shutil.copy2(os.path.join(ROOT, "common", "tolerances.h"), package)
        target = os.path.join(package, "lib")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(self.library(), os.path.join(target, LIBRARY))

    def library(self):
        prebuilt = os.environ.get("FA_PREBUILT_LIBRARY")
        if prebuilt:
            if not os.path.isfile(prebuilt):
                sys.exit("FA_PREBUILT_LIBRARY=%s: no such file" % prebuilt)
            print("flash_from_scratch: installing the prebuilt %s" % prebuilt)
            return prebuilt
        build = os.path.abspath(os.environ.get("FA_BUILD_DIR") or os.path.join(ROOT, "build-python"))
        for tool in ("cmake", "nvcc"):
            if shutil.which(tool) is None and not (tool == "nvcc" and os.path.exists(
                    "/usr/local/cuda/bin/nvcc")):
                sys.exit("flash_from_scratch needs %s to build its kernels (the CUDA Toolkit and "
                         "CMake >= 3.25; README.md, Quick start)" % tool)
        configure = ["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                     "-DFA_BUILD_TESTS=OFF", "-DFA_BUILD_BENCHMARKS=OFF"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        jobs = os.environ.get("FA_BUILD_JOBS") or str(os.cpu_count() or 1)
        compile_ = ["cmake", "--build", build, "--target", "fa_python", "-j", jobs]
        for cmd in (configure, compile_):
            print("flash_from_scratch:", " ".join(shlex.quote(c) for c in cmd), flush=True)
            subprocess.check_call(cmd)
        return os.path.join(build, "lib", LIBRARY)


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


# setuptools' own build folder goes inside build-python/, away from CMake's build/ of the README.
setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution,
      options={"build": {"build_base": os.path.join("build-python", "setuptools")}})
