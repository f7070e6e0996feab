#!/usr/bin/env python3
"""Run the commands a note shows, the ones that need no GPU, from the repository root.

Each fenced code block of the given Markdown files is one shell script (heredocs and
continuation lines stay whole). A block that needs the GPU machine (its text runs `ncu`,
`bench/device_run.sh` or a program of build/bin/) is listed as such and not run: those ran on the
GPU, as notes/measured/README.md records. Every other block runs under `bash -e -o pipefail` and
must exit 0, and must not have run a test selection that holds no test (a gtest filter or a ctest
-R that matches nothing exits 0 and checks nothing); its output is printed so a failure shows what
went wrong.

    python3 tests/doc_commands.py notes/profiling.md

The CPU test DocCommands.<note> runs this for the notes whose commands are meant to be copied.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDS_GPU = re.compile(r"(^|\s)ncu\s|bench/device_run\.sh|build/bin/")
# What gtest and ctest print when a filter selects nothing (both then exit 0).
NO_TEST = re.compile(r"\[=+\] Running 0 tests? from|^No tests were found", re.MULTILINE)


def blocks(path):
    """(first line number, text) of every fenced block of a Markdown file."""
    out, cur, start = [], None, 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                if cur is None:
                    cur, start = [], n + 1
                else:
                    out.append((start, "".join(cur)))
                    cur = None
            elif cur is not None:
                cur.append(line)
    return out


def main(paths):
    failures = ran = skipped = 0
    for path in paths:
        for line, text in blocks(os.path.join(ROOT, path)):
            where = f"{path}:{line}"
            if not text.strip():
                continue
            if NEEDS_GPU.search(text):
                skipped += 1
                print(f"{where}: needs the GPU machine, not run here")
                continue
            ran += 1
            r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=ROOT,
                               capture_output=True, text=True)
            status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
            if r.returncode == 0 and NO_TEST.search(r.stdout + r.stderr):
                status = "FAILED (it selects no test: a filter that matches nothing checks nothing)"
            print(f"{where}: {status}")
            if status != "ok":
                failures += 1
                print(text + r.stdout[-4000:] + r.stderr[-4000:])
    print(f"{ran} blocks run, {failures} failed; {skipped} need a GPU")
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
