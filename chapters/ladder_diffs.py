#!/usr/bin/env python3
"""Write each main-path step of a chapter's ladder into its README as a diff.

A chapter's main path is a row of whole files (v2_mma.cu, v3_...cu, ...), each the one before plus
one idea. The README says which steps to show with a marker line per step:

    <!-- ladder-diff: v2_mma.cu v3_warp_layout.cu -->

(paths relative to the chapter's folder). This script writes, after each marker, the unified diff
of the two files in a collapsed block, with its size, up to the line

    <!-- end ladder-diff -->

so the diff a reader sees is always the diff of today's files. `--check` changes nothing and
exits 1, naming the stale blocks, when a README is not what this script would write (the CPU test
LadderDiffsInSync runs it); without it the READMEs are rewritten in place.

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


def step_block(folder, a, b):
    """The generated lines for the step a -> b (without the marker and end lines)."""
    pa, pb = os.path.join(folder, a), os.path.join(folder, b)
    for p in (pa, pb):
        if not os.path.isfile(p):
            raise SystemExit(f"{os.path.relpath(p, HERE)}: named by a ladder-diff marker, not found")
    with open(pa, encoding="utf-8") as fa, open(pb, encoding="utf-8") as fb:
        la, lb = fa.read().splitlines(), fb.read().splitlines()
    diff = list(difflib.unified_diff(la, lb, fromfile=a, tofile=b, lineterm="", n=3))
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    summary = (f"<details><summary><code>diff {a} {b}</code>: {added} lines added, "
               f"{removed} removed (of {len(lb)})</summary>")
    # A line of the diff that is itself a fence would end the block early: fence with more
    # backticks than any line holds.
    longest = max([len(m) for d in diff for m in re.findall(r"`+", d)] + [2])
    fence = "`" * max(3, longest + 1)
    return [summary, "", fence + "diff", *diff, fence, "", "</details>"]


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


def main(argv):
    check = "--check" in argv
    stale, steps = [], 0
    for readme in sorted(glob.glob(os.path.join(HERE, "*", "README.md"))):
        folder = os.path.dirname(readme)
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        new = regenerate(text, folder)
        steps += sum(1 for line in text.split("\n") if MARKER.match(line.strip()))
        if new != text:
            stale.append(os.path.relpath(readme, os.path.dirname(HERE)))
            if not check:
                with open(readme, "w", encoding="utf-8") as f:
                    f.write(new)
    if check and stale:
        print("stale ladder diffs in: " + ", ".join(stale))
        print("run `python3 chapters/ladder_diffs.py` and commit the READMEs")
        return 1
    verb = "checked" if check else ("rewrote " + ", ".join(stale) if stale else "up to date")
    print(f"ladder diffs: {steps} steps, {verb}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
