"""The README's "From PyTorch" section, run. tests/cpu/test_readme_commands.cpp leaves python3
lines alone; they are run here, in order, as a reader would: the `pip install` line into a
folder of this test's (--target: the test must not install into the Python it runs on), with the
library the build already made (FA_PREBUILT_LIBRARY: the CUDA code is not compiled twice; the
build from source is what bench/device_run.sh's stage `pip` times), then each `python3` line with
that folder on PYTHONPATH and no FA_LIBRARY, the installed package alone (except the one that
runs this suite, which would run itself), and the python block. Lines that import torch skip
without torch or a GPU."""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, library_or_skip, torch_cuda_or_skip


def section():
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
        text = f.read()
    start = text.index("## From PyTorch")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def blocks(lang):
    return re.findall(r"```%s\n(.*?)```" % lang, section(), re.S)


def shell_lines():
    lines = [ln.split("  #")[0].strip() for b in blocks("bash") for ln in b.splitlines()]
    return [ln for ln in lines if ln.startswith("python3") and "-m pytest" not in ln]


def test_section_has_commands():
    lines = shell_lines()
    assert len(lines) >= 3 and len(blocks("python")) == 1
    assert lines[0] == "python3 -m pip install --no-build-isolation ."


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The README's pip line, into a folder of the test's; returns the folder."""
    lib = library_or_skip()
    for module in ("pip", "setuptools"):
        r = subprocess.run([sys.executable, "-c", "import " + module], capture_output=True)
        if r.returncode != 0:
            pytest.skip("%s is not installed for %s" % (module, sys.executable))
    site = str(tmp_path_factory.mktemp("site"))
    line = shell_lines()[0].replace("python3", sys.executable, 1)
    env = {k: v for k, v in os.environ.items() if k not in ("FA_LIBRARY", "PYTHONPATH")}
    env["FA_PREBUILT_LIBRARY"] = lib
    r = subprocess.run(line + " --no-deps --no-index --target " + site, shell=True, cwd=REPO_ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, "%s\n%s\n%s" % (line, r.stdout[-3000:], r.stderr[-3000:])
    return site


@pytest.mark.parametrize("line", shell_lines()[1:])
def test_shell_line_runs(line, installed):
    if "-c" not in line.split():  # a script: the example imports torch and wants a GPU
        torch_cuda_or_skip()
    env = {k: v for k, v in os.environ.items() if k not in ("FA_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = installed
    r = subprocess.run(line.replace("python3", sys.executable, 1), shell=True, cwd=REPO_ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, "%s\n%s\n%s" % (line, r.stdout[-3000:], r.stderr[-3000:])
    print("\n$ %s\n%s" % (line, r.stdout))  # shown with pytest -s (bench/device_run.sh python)


def test_python_block_runs():
    torch = torch_cuda_or_skip()
    scope = {}
    exec(compile(blocks("python")[0], "README.md (From PyTorch)", "exec"), scope)
    assert scope["o"].shape == (2, 8, 1000, 64)
    assert any(x.startswith("forward: ") for x in scope["fa"].explain(
        scope["q"], scope["k"], scope["v"], causal=True))
    assert all(torch.isfinite(t.grad).all() for t in (scope["q"], scope["k"], scope["v"]))
