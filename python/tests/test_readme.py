"""The README's "From PyTorch" section, run. tests/cpu/test_readme_commands.cpp checks its cmake
line and leaves python3 lines alone; they are run here: each `PYTHONPATH=python python3 ...` line
(except the one that runs this suite, which would run itself) from the repository root, and the
python block. Lines that import torch skip without torch or a GPU."""
import os
import re
import subprocess

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
    lines = [ln.strip() for b in blocks("bash") for ln in b.splitlines()]
    return [ln for ln in lines if ln.startswith("PYTHONPATH=python python3")
            and "-m pytest" not in ln]


def test_section_has_commands():
    assert len(shell_lines()) >= 2 and len(blocks("python")) == 1


@pytest.mark.parametrize("line", shell_lines())
def test_shell_line_runs(line):
    library_or_skip()
    if "-c" not in line.split():  # a script: the example imports torch and wants a GPU
        torch_cuda_or_skip()
    r = subprocess.run(["/bin/sh", "-c", line], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, "%s\n%s\n%s" % (line, r.stdout[-3000:], r.stderr[-3000:])
    print("\n$ %s\n%s" % (line, r.stdout))  # shown with pytest -s (bench/device_run.sh python)


def test_python_block_runs():
    torch = torch_cuda_or_skip()
    scope = {}
    exec(compile(blocks("python")[0], "README.md (From PyTorch)", "exec"), scope)
    assert scope["o"].shape == (2, 8, 1000, 64)
    assert all(torch.isfinite(t.grad).all() for t in (scope["q"], scope["k"], scope["v"]))
