#!/usr/bin/env python3
"""Write each main-path step of a chapter's ladder into its README as a diff.

A chapter's main path is a row of whole files (v2_mma.cu, v3_...cu, ...), each the one before plus
one idea. The README says which steps to show with a marker line per step:

    <!-- ladder-diff: v2_mma.cu v3_warp_layout.cu -->

(paths relative to the README's folder). This script writes the unified diff of the two files to
the diffs/ folder beside the README (diffs/<a>--<b>.diff, which GitHub shows in colour) and, after
each marker, a line with its size and a link to it, up to the line

    <!-- end ladder-diff -->

A step of at most INLINE_LINES changed lines is also shown in the README itself, in a collapsed
block; a longer one only through its link, so that the chapter stays readable. The diff a reader
sees is always the diff of today's files: `--check` changes nothing and exits 1, naming what is
stale (a README block, a diff file, a diff file no marker asks for), when the tree is not what
this script would write (the CPU test LadderDiffsInSync runs it); without it the READMEs and the
diffs/ folders are rewritten in place. A README in a chapter's subfolder (a ladder of its own, or
a tuning appendix showing its steps: chapters/07_flash_hopper/fp8/tuning/README.md) is read the
same way, its diffs in its own diffs/ folder.

    python3 chapters/ladder_diffs.py            # regenerate every chapter README's diffs
    python3 chapters/ladder_diffs.py --check    # what CI runs
"""
import difflib
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MARKER = re.compile(r"^<!-- ladder-diff: (\S+) (\S+) -->$")
END = "<!-- end ladder-diff -->"


INLINE_LINES = 80  # changed lines (added + removed) up to which a step is shown inline too


def diff_name(a, b):
    """diffs/<a>--<b>.diff for the step a -> b (a folder in a path becomes part of the name; a
    step from another chapter, ../NN_x/file, is named NN_x_file, so that no name starts with a dot
    and the check for stale files sees every diff)."""
    def stem(p):
        while p.startswith("../"):
            p = p[3:]
        return os.path.splitext(p)[0].replace("/", "_")
    return f"diffs/{stem(a)}--{stem(b)}.diff"


def step_diff(folder, a, b):
    """The unified diff of the step a -> b, as lines."""
    pa, pb = os.path.join(folder, a), os.path.join(folder, b)
    for p in (pa, pb):
        if not os.path.isfile(p):
            raise SystemExit(f"{os.path.relpath(p, HERE)}: named by a ladder-diff marker, not found")
    with open(pa, encoding="utf-8") as fa, open(pb, encoding="utf-8") as fb:
        la, lb = fa.read().splitlines(), fb.read().splitlines()
    return list(difflib.unified_diff(la, lb, fromfile=a, tofile=b, lineterm="", n=3)), len(lb)


def step_block(folder, a, b):
    """The generated README lines for the step a -> b (without the marker and end lines)."""
    diff, total = step_diff(folder, a, b)
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    name = diff_name(a, b)
    summary = (f"[`diff {a} {b}`]({name}): {added} lines added, {removed} removed "
               f"(of {total})")
    if added + removed > INLINE_LINES:
        return [summary]
    # A line of the diff that is itself a fence would end the block early: fence with more
    # backticks than any line holds.
    longest = max([len(m) for d in diff for m in re.findall(r"`+", d)] + [2])
    fence = "`" * max(3, longest + 1)
    return [f"<details><summary>{summary}</summary>", "", fence + "diff", *diff, fence, "",
            "</details>"]


def regenerate(text, folder):
    """README text with every ladder-diff block rewritten."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = MARKER.match(line.strip())
        i += 1
        if not m:
            continue
        # Drop the old generated block, if any, up to and including its end line.
        j = i
        while j < len(lines) and lines[j].strip() != END and not MARKER.match(lines[j].strip()):
            j += 1
        if j < len(lines) and lines[j].strip() == END:
            i = j + 1
        out.extend(step_block(folder, m.group(1), m.group(2)))
        out.append(END)
    return "\n".join(out)


def write_if_changed(path, text, check, stale):
    """Record path as stale when its text differs; write it unless checking."""
    old = open(path, encoding="utf-8").read() if os.path.isfile(path) else None
    if old != text:
        stale.append(os.path.relpath(path, os.path.dirname(HERE)))
        if not check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)


def main(argv):
    check = "--check" in argv
    stale, steps = [], 0
    for readme in sorted(glob.glob(os.path.join(HERE, "*", "**", "README.md"), recursive=True)):
        folder = os.path.dirname(readme)
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        pairs = [MARKER.match(line.strip()).groups() for line in text.split("\n")
                 if MARKER.match(line.strip())]
        steps += len(pairs)
        write_if_changed(readme, regenerate(text, folder), check, stale)
        wanted = set()
        for a, b in pairs:
            name = os.path.join(folder, diff_name(a, b))
            wanted.add(name)
            write_if_changed(name, "\n".join(step_diff(folder, a, b)[0]) + "\n", check, stale)
        for old in glob.glob(os.path.join(folder, "diffs", "*.diff")):
            if old not in wanted:  # a step no marker asks for any more
                stale.append(os.path.relpath(old, os.path.dirname(HERE)) + " (no marker)")
                if not check:
                    os.remove(old)
    if check and stale:
        print("stale ladder diffs in: " + ", ".join(stale))
        print("run `python3 chapters/ladder_diffs.py` and commit the READMEs and diffs/")
        return 1
    verb = "checked" if check else ("rewrote " + ", ".join(stale) if stale else "up to date")
    print(f"ladder diffs: {steps} steps, {verb}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
