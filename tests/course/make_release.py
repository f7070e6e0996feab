#!/usr/bin/env python3
"""Write the student release of the course and check that no exercise's answer is in it.

    python3 tests/course/make_release.py OUT_DIR     # write the release (OUT_DIR must not exist
                                                     # or be empty), then check it
    python3 tests/course/make_release.py --self-test [--walk] [--compile BUILD] [--verbose]
        # write it into a temporary folder and check it; --walk: list the tree without git, as
        # for an archive (the CPU test StudentReleaseHasNoAnswers); --compile: write it into
        # BUILD/student_release_check and also compile, with BUILD's flags, every source the
        # release changed and every source that includes a header it changed
        # (StudentReleaseCompiles, label cpu-long)
    cmake --build build --target student_release     # the same as the first line, into
                                                     # build/student_release

The tree it reads may be a git checkout or a plain copy (a downloaded archive): without git, the
files are those a walk finds, less what .gitignore names (--self-test checks, where git is there,
that both ways list the same files).

What goes in: every file of the tree, except
  - what only the instructor has: tests/course/hidden/ (the instructor suite), the autograder
    (tests/course/autograder/), this script and its templates (tests/course/release/), the answers
    to the notes' questions (notes/answers/), the CPU models of the mutants
    (tests/cpu/test_mutants_cpu.cpp: each spells out the correct arithmetic beside the mistake),
    and the hand-written mutants that tests/mutants/mutants.cpp names on its RELEASE-LEAVES-OUT
    line (their correct twins are exercises' answers; mutants.cpp keeps their launchers, which
    report "unsupported" in a release);
  - every marked solution (a file with an EXERCISE-KERNELS line, common/exercise.h): in its place
    its generated exercise, chapters/NN_*/exercises/<file> written to chapters/NN_*/<file>, so that
    every build of the release compiles the student's file under the solution's kernel names. A
    shared header with an exercise block (v1_fp32_common.cuh) is cut the same way, so every kernel
    that includes it builds on the student's code; so is one of common/device/
    (online_softmax.cuh, whose exercise common/exercise.h generates into the exercises/ folder of
    the chapter that introduces it): the student's version stands in common/device/, and every
    kernel of later chapters that includes it runs the student's code;
  - the generated exercises themselves (they now stand where their solutions stood), while the
    rest of each exercises/ folder (HINTS.md, the second tier of hints) stays.
Rewritten on the way: README.md (its Exercises section is tests/course/release/EXERCISES.md) and
each chapter README's "## Exercise" section (what the student's files are, which tests check
them, what an untouched one does); CMakePresets.json (the default test preset leaves out the label
`exercise`, the exercises' expected failures, and the `exercises` presets are gone: the release IS
the exercise build); tests/mutants/CMakeLists.txt (the one-line mutants of exercise rungs, whose
snippets are answer lines, are gone); the ladder diffs (chapters/*/diffs/, the diffs/ of a README
in a chapter's subfolder, and the README blocks), written again from the release's own files,
without the steps that start at an exercise (they would show its answer as the lines the next rung
adds); and any fenced code block of a Markdown
file that holds an answer; the notes' lines that point at their answers (notes/answers/, left
out). STUDENT_RELEASE.md at the top marks the tree as a release (CMake and
the tests read it).

The check (check_release): every block of every marked solution is cut into statements, each
normalised: comments and preprocessor lines dropped, whitespace ignored, number literals in one
spelling, and the names of variables renamed in order of appearance (v0, v1, ...), so that a copy
with other names or another layout is the same statement; function, member and namespace names,
keywords and types stay; the float and double spellings of a type or a math function are one, and
qualifiers such as const are dropped. Statements shorter than 6 tokens, loop and branch headers,
and those that also stand outside the blocks in the solution are not looked for. A statement found
in a file that comes BEFORE the exercise in the book (common/, an earlier chapter, an earlier rung
of the same chapter in its README's ladder, the chapter's program) is the book's, not the answer's:
the exercise builds on it. Found anywhere else, it is a leak, except in the book's LATER rungs (a
higher rung of the same chapter, its tuning/ steps, a later chapter's sources, and the ladder diffs
between such rungs): they are the book, and they build on the exercise's idea (notes/coursework.md,
"What the release cannot hide"); those are counted and listed with --verbose, never hidden, and so
are the KNOWN_EXCEPTIONS below, each with its reason. The check also fails on an EXERCISE(...) or
EXERCISE-END marker left in any file (a diff line included), on a release README that names a file
the release does not have (exercises/<file>.cu, make_release.py, the instructor suite, the
`exercises` preset), on a solution whose student file is missing, and on a solution that no
exercise of tests/course/rubric.json lists (the autograder maps submitted files through it).
"""
import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join("tests", "course")

# The generator's markers (common/exercise.cpp).
KERNELS = re.compile(r"^\s*//\s*EXERCISE-KERNELS:\s*(.+)$")
BEGIN = re.compile(r"^(\s*)//\s*EXERCISE\(([^)]+)\):\s*(.*)$")
PLACEHOLDER = re.compile(r"^\s*//\s*EXERCISE-PLACEHOLDER\s*$")
END = re.compile(r"^\s*//\s*EXERCISE-END\s*$")
SOURCE_EXT = (".cu", ".cpp", ".cuh", ".h")

INSTRUCTOR_ONLY = ("tests/course/hidden/", "tests/course/autograder/", "tests/course/release/",
                   "tests/course/make_release.py", "notes/answers/",
                   "tests/cpu/test_mutants_cpu.cpp")
MUTANTS_CPP = "tests/mutants/mutants.cpp"
LEAVES_OUT = re.compile(r"^//\s*RELEASE-LEAVES-OUT:\s*(.+)$", re.M)
RELEASE_NOTE = "STUDENT_RELEASE.md"
# The exercise files as the release hands them out, each with the FNV-1a hash of its bytes
# (common/exercise.h, untouched_exercise): a chapter program reports a kernel whose exercise file
# is still these bytes as "not written yet" and does not fail on it, so that the quick start of an
# untouched release passes on a GPU; once the student changes the file, a wrong answer fails it.
HANDED_OUT = "EXERCISES_AS_HANDED_OUT.txt"


def fnv1a64_hex(data):
    """The 64-bit FNV-1a hash of `data` (bytes), in 16 hex digits: fa::fnv1a64_hex."""
    h = 0xcbf29ce484222325
    for c in data:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"
EXERCISE_LABEL = "exercise"
# The generator's first lines, which say where the solution is; the release says something else.
GENERATED_HEADER = re.compile(r"\A// GENERATED from .*?\(preset \"exercises\"\)\.\n", re.S)
# What a release README must not name: files and presets only the course repository has.
INSTRUCTOR_WORDS = ("make_release", "build-exercises", "--preset exercises", "--target exercises",
                    "tests/course/hidden", "fa_hidden_tests", "notes/answers")


# ---- the files of the tree ----------------------------------------------------------------------

def git_files(root):
    """The files git lists (tracked, and new ones it does not ignore), or None without git."""
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted(f for f in set(out.decode().split("\0"))
                  if f and os.path.isfile(os.path.join(root, f)))


def gitignore_rules(root):
    """The patterns of the top .gitignore as (pattern, anchored, directory only)."""
    rules = []
    path = os.path.join(root, ".gitignore")
    if os.path.isfile(path):
        for line in read(path).splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("!"):
                raise SystemExit(f"make_release.py: .gitignore: negated patterns ({line}) are not "
                                 f"understood by the listing without git")
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = line.startswith("/") or "/" in line
            rules.append((line.lstrip("/"), anchored, dir_only))
    return rules


def ignored(rel, is_dir, rules):
    for pattern, anchored, dir_only in rules:
        if dir_only and not is_dir:
            continue
        if anchored:
            if fnmatch.fnmatchcase(rel, pattern):
                return True
        elif fnmatch.fnmatchcase(os.path.basename(rel), pattern):
            return True
    return False


def walked_files(root):
    """The files of a tree that is not a git checkout (an archive): a walk, less .gitignore."""
    rules = gitignore_rules(root)
    found = []
    for folder, dirs, names in os.walk(root):
        rel_folder = os.path.relpath(folder, root)
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        dirs[:] = sorted(d for d in dirs if d != ".git"
                         and not os.path.islink(os.path.join(folder, d))
                         and not ignored(rel_folder + d, True, rules))
        found += [rel_folder + n for n in names if n != ".git"  # a worktree's .git is a file
                  and not ignored(rel_folder + n, False, rules)
                  and os.path.isfile(os.path.join(folder, n))]
    return sorted(found)


def tree_files(root):
    files = git_files(root)
    return files if files is not None else walked_files(root)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


# ---- solutions and their exercises -----------------------------------------------------------

def exercise_path_for(root, solution):
    """chapters/01_x/v3.cu -> chapters/01_x/exercises/v3.cu (common/exercise.h). A shared header
    outside chapters/ (common/device/online_softmax.cuh) has its exercise in the exercises/ folder
    of the chapter that introduces it, the chapter of the first kernel of its EXERCISE-KERNELS
    line: chapters/02_online_softmax/exercises/online_softmax.cuh."""
    folder, name = os.path.split(solution)
    if solution.startswith("chapters/"):
        return os.path.join(folder, "exercises", name)
    kernels = solution_kernels(read(os.path.join(root, solution)))
    number = kernels[0].split("/")[0] if kernels else ""
    chapter = next((d for d in sorted(os.listdir(os.path.join(root, "chapters")))
                    if number and d.startswith(number + "_")), None)
    if chapter is None:
        raise SystemExit(f"make_release.py: {solution}: no chapter folder for the first kernel of "
                         f"its EXERCISE-KERNELS line (its exercise goes there)")
    return os.path.join("chapters", chapter, "exercises", name)


def in_exercises_folder(path):
    return os.path.basename(os.path.dirname(path)) == "exercises"


def marked_solutions(root, files):
    """Files with an EXERCISE-KERNELS line (outside exercises/ folders), sorted."""
    return [f for f in files if f.endswith(SOURCE_EXT) and not in_exercises_folder(f)
            and any(KERNELS.match(line) for line in read(os.path.join(root, f)).splitlines())]


def solution_kernels(text):
    m = next((KERNELS.match(line) for line in text.splitlines() if KERNELS.match(line)), None)
    return [k.strip() for k in m.group(1).split(",") if k.strip()] if m else []


def solution_blocks(text):
    """[(block name, hint, [solution lines])] of a marked solution, and its lines outside the
    solution parts, in order (the placeholders without their comment marker included)."""
    blocks, outside, state = [], [], "out"
    for line in text.splitlines():
        m = BEGIN.match(line)
        if state == "out" and m:
            blocks.append((m.group(2).strip(), m.group(3).strip(), []))
            state = "solution"
        elif PLACEHOLDER.match(line):
            state = "placeholder"
        elif END.match(line):
            state = "out"
        elif state == "solution":
            blocks[-1][2].append(line)
        elif state == "placeholder":
            outside.append(re.sub(r"^(\s*)// ?", r"\1", line))
        else:
            outside.append(line)
    return blocks, outside


def student_text(root, solution):
    """The generated exercise of `solution`, as it stands in the release: at the solution's path,
    saying so, registered under that path; in a header, registered once however many files
    include it."""
    exercise = exercise_path_for(root, solution)
    text = read(os.path.join(root, exercise))
    hints = os.path.join(os.path.dirname(exercise), "HINTS.md")
    header = (f"// The exercise: fill in every TODO(exercise) block. More hints, still without the\n"
              f"// code, in {hints}.\n"
              f"// In this student release the file stands where its solution stands in the course\n"
              f"// repository, so every build compiles it.\n")
    text, n = GENERATED_HEADER.subn(header, text, count=1)
    if n != 1:
        raise SystemExit(f"make_release.py: {exercise} does not start like a generated exercise "
                         f"(run `cmake --build build --target exercises`)")
    text = text.replace(f'"{exercise}"', f'"{solution}"')
    if solution.endswith((".h", ".cuh")):
        # FA_REGISTER defines a static per file that includes the header: two files including it
        # (06's v1_fp32.cu and v1_fp32_atomic_dq.cu) would register it twice, which aborts. An
        # inline variable is initialised once in the whole program.
        ident = re.sub(r"\W", "_", solution)
        text = re.sub(r"^FA_REGISTER\(Exercise, (\{.*\})\);$",
                      lambda m: ("[[maybe_unused]] inline const bool fa_exercise_" + ident +
                                 " =\n    ::fa::register_entry<::fa::Exercise>(::fa::Exercise" +
                                 m.group(1) + ");"), text, count=1, flags=re.M)
    return text


def left_out_mutants(root):
    """The hand-written mutant files mutants.cpp says a release leaves out."""
    path = os.path.join(root, MUTANTS_CPP)
    m = LEAVES_OUT.search(read(path)) if os.path.isfile(path) else None
    return ["tests/mutants/" + f for f in m.group(1).split()] if m else []


def rubric(root):
    return json.loads(read(os.path.join(root, HERE, "rubric.json")))


# ---- the release's own documents ---------------------------------------------------------------

def section_bounds(lines, heading):
    """[start, end) of the section `heading` (a '## ' line) in lines, or None."""
    start = next((i for i, line in enumerate(lines) if line.strip() == heading), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start, end


def replace_section(text, heading, new_lines, where):
    lines = text.split("\n")
    bounds = section_bounds(lines, heading)
    if bounds is None:
        raise SystemExit(f"make_release.py: {where} has no '{heading}' section to rewrite")
    start, end = bounds
    return "\n".join(lines[:start] + new_lines + [""] + lines[end:])


def exercise_rows(root, solutions):
    """What each exercise file is checked by: [(file, blocks, [(check text, label, gpu)])]."""
    rows = []
    data = rubric(root)
    for sol in solutions:
        blocks, _ = solution_blocks(read(os.path.join(root, sol)))
        checks = []
        for ex in data["exercises"]:
            if sol not in ex.get("files", []):
                continue
            for c in ex["checks"]:
                if c["binary"] == "fa_hidden_tests":
                    continue
                gpu = c.get("gpu", True)
                flt = c["filter"].split(":-")[0]
                checks.append((f"`{c['binary']} --gtest_filter='{flt}'`",
                               "gpu-exercise" if gpu else EXERCISE_LABEL, gpu))
        rows.append((sol, [b[0] for b in blocks], checks))
    return rows


def wrap(text):
    return textwrap.fill(text, width=100, break_long_words=False, break_on_hyphens=False)


def chapter_exercise_section(root, chapter, rows, kernels):
    """The '## Exercise' section of a chapter README in the release."""
    # The chapter's exercise files: those whose exercise it holds (a shared header of
    # common/device/ included: the exercise of the chapter that introduces it).
    mine = [r for r in rows if exercise_path_for(root, r[0]).startswith(chapter + "/")]
    hints = sorted({os.path.relpath(os.path.join(os.path.dirname(exercise_path_for(root, s)),
                                                 "HINTS.md"), chapter) for s, _, _ in mine})
    out = ["## Exercise", "",
           wrap("In this student release the exercise files stand where their solutions stand in "
                "the course repository, with the key steps cut out: each cut is a "
                "`// TODO(exercise <block>): <hint>` line followed by a stand-in that compiles. "
                "Every build compiles them under the solution's names, so every program, test "
                "and benchmark runs your code. The second tier of hints (why, and the shape of "
                "the answer, still no code) is in " + ", ".join(f"`{h}`" for h in hints) + "."),
           "", "| file | blocks | checked by (label) | needs |", "| --- | --- | --- | --- |"]
    for sol, blocks, checks in mine:
        rel = os.path.relpath(sol, chapter) if sol.startswith(chapter + "/") else sol
        checked = "; ".join(f"{c} (`{label}`)" for c, label, _ in checks) or (
            "the tests of the kernels that include it")
        needs = "a GPU" if any(g for _, _, g in checks) or not checks else "any machine, no GPU"
        out.append(f"| `{rel}` | " + ", ".join(f"`{b}`" for b in blocks) +
                   f" | {checked} | {needs} |")
    out += ["", wrap("Build once, then run your exercises' tests (label `exercise` for the CPU "
                     "ones, `gpu-exercise` for the GPU ones):"), "", "```bash",
            "cmake --preset default && cmake --build build",
            "ctest --test-dir build -L exercise --output-on-failure", "```", "",
            wrap("Untouched, each of these tests fails and names the file and the next block to "
                 "write: \"TODO in <file>: not implemented\". That is expected: the default test "
                 "preset (the quick start's test command) leaves the label `exercise` out, so the "
                 "rest of the suite passes while you work. A GPU test of an exercise kernel is "
                 "reported as skipped on a machine without a GPU: skipped is not passed.")]
    number = os.path.basename(chapter)[:2]
    built_on = {}
    for sol, names in kernels.items():
        for k in names:
            if k.startswith(number + "/"):
                built_on.setdefault(sol, []).append(k)
    for sol in sorted(built_on):
        home = exercise_path_for(root, sol)
        where = (f"`{os.path.relpath(sol, chapter)}`" if sol.startswith(chapter + "/") else
                 f"`{sol}`" if home.startswith(chapter + "/") else
                 f"`{sol}`, an exercise of chapter {chapter_of(home):02d}")
        out += ["", wrap(f"Built on {where} (they fail with it until it is written): " +
                         ", ".join(f"`{k}`" for k in sorted(built_on[sol])) + ".")]
    return out


def release_readme(root, text, rows):
    """README.md of the release: the course README with its Exercises section replaced."""
    template = read(os.path.join(root, HERE, "release", "EXERCISES.md"))
    table = ["| file | blocks | label | needs |", "| --- | --- | --- | --- |"]
    for sol, blocks, checks in rows:
        gpu = any(g for _, _, g in checks) or not checks
        label = "gpu-exercise" if gpu else EXERCISE_LABEL
        table.append(f"| `{sol}` | " + ", ".join(f"`{b}`" for b in blocks) +
                     f" | `{label}` | {'a GPU' if gpu else 'any machine'} |")
    body = template.replace("{{EXERCISE_TABLE}}", "\n".join(table))
    return replace_section(text, "## Exercises", body.rstrip("\n").split("\n"), "README.md")


def release_presets(text):
    """CMakePresets.json of the release: no exercise presets; the default test preset leaves the
    label `exercise` out (the unfinished exercises fail by design)."""
    data = json.loads(text)
    for key in ("configurePresets", "buildPresets", "testPresets"):
        data[key] = [p for p in data.get(key, []) if p.get("name") != "exercises"]
    for p in data["testPresets"]:
        flt = p.setdefault("filter", {}).setdefault("exclude", {})
        label = flt.get("label", "")
        if EXERCISE_LABEL not in label.split("|"):
            flt["label"] = (label + "|" if label else "") + EXERCISE_LABEL
    return json.dumps(data, indent=2) + "\n"


def release_mutants_cmake(text, solutions):
    """tests/mutants/CMakeLists.txt without the one-line mutants of exercise rungs: a call's
    snippet is a line of the exercise's answer."""
    chapters = dict(re.findall(r"^\s*set\((_ch\d\d)\s+(\S+)\)\s*$", text, re.M))
    out, i, lines = [], 0, text.split("\n")
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith("fa_mutant_from_rung("):
            out.append(line)
            i += 1
            continue
        call, depth, quoted = [], 0, False
        while i < len(lines):
            call.append(lines[i])
            for ch in lines[i]:
                if ch == '"':
                    quoted = not quoted
                elif not quoted:
                    depth += (ch == "(") - (ch == ")")
            i += 1
            if depth <= 0:
                break
        words = shlex.split(" ".join(call).split("(", 1)[1].rsplit(")", 1)[0])
        rung = re.sub(r"\$\{(_ch\d\d)\}", lambda m: chapters.get(m.group(1), m.group(0)), words[2])
        if rung in solutions:
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}# {words[1]}: not in the student release ({rung} is an exercise, "
                       f"and the mutant's line is its answer)")
        else:
            out += call
    return "\n".join(out)


def drop_exercise_steps(readme_text, chapter_folder, solutions):
    """A chapter README without the ladder steps that start at an exercise file."""
    out, skip = [], False
    for line in readme_text.split("\n"):
        m = re.match(r"^<!-- ladder-diff: (\S+) (\S+) -->$", line.strip())
        if m and os.path.normpath(os.path.join(chapter_folder, m.group(1))) in solutions:
            out.append(f"(The step from `{m.group(1)}` to `{m.group(2)}` is left out of the "
                       f"student release: it would show the exercise's answer as the lines the "
                       f"next rung adds.)")
            skip = True
            continue
        if skip:
            if line.strip() == "<!-- end ladder-diff -->":
                skip = False
            continue
        out.append(line)
    return "\n".join(out)


def write_release(root, out, files=None):
    files = tree_files(root) if files is None else files
    solutions = marked_solutions(root, files)
    exercises = {exercise_path_for(root, s): s for s in solutions}
    listed = set(files)
    missing = [e for e in exercises if e not in listed]
    if missing:
        raise SystemExit("make_release.py: no generated exercise for " + ", ".join(
            exercises[e] for e in missing) + " (run `cmake --build build --target exercises`)")
    if os.path.exists(out) and os.listdir(out):
        raise SystemExit(f"make_release.py: {out} exists and is not empty")
    os.makedirs(out, exist_ok=True)
    leave_out = set(left_out_mutants(root))
    kernels = {s: solution_kernels(read(os.path.join(root, s))) for s in solutions}
    rows = exercise_rows(root, solutions)
    copied = 0
    for f in files:
        if f.startswith(INSTRUCTOR_ONLY) or f in exercises or f in leave_out:
            continue
        src, dest = os.path.join(root, f), os.path.join(out, f)
        if f in solutions:
            write(dest, student_text(root, f))
        elif f == "README.md":
            write(dest, release_readme(root, read(src), rows))
        elif re.fullmatch(r"notes/[^/]+\.md", f):
            # The notes point at their answers (notes/answers/, left out) on lines of their own.
            write(dest, "".join(line for line in read(src).splitlines(keepends=True)
                                if "answers/" not in line))
        elif f == "CMakePresets.json":
            write(dest, release_presets(read(src)))
        elif f == "tests/mutants/CMakeLists.txt":
            write(dest, release_mutants_cmake(read(src), set(solutions)))
        elif re.fullmatch(r"chapters/[^/]+/README\.md", f):
            chapter = os.path.dirname(f)
            text = drop_exercise_steps(read(src), chapter, set(solutions))
            # A table row about the course repository's generated exercise file: the release has
            # the student's file where the solution's row already names it.
            text = re.sub(r"^\|\s*`(?:sm90a/)?exercises/[^`]*`\s*\|.*\n", "", text, flags=re.M)
            if any(e.startswith(chapter + "/") for e in exercises):
                text = replace_section(text, "## Exercise",
                                       chapter_exercise_section(root, chapter, rows, kernels), f)
            write(dest, text)
        else:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(src, dest)
        copied += 1
    write(os.path.join(out, RELEASE_NOTE),
          "# Student release\n\n"
          "This tree is a student release of the course: every exercise stands where its "
          "solution stands in the course\nrepository, and the instructor's suite is not here. "
          "What to do, and what an untouched exercise does:\nREADME.md, section "
          "\"Exercises\". The build and the tests read this file to know that the tree is a\n"
          "release.\n")
    handed_out = []
    for s in sorted(solutions):
        with open(os.path.join(out, s), "rb") as f:
            handed_out.append(f"{fnv1a64_hex(f.read())} {s}\n")
    write(os.path.join(out, HANDED_OUT), "".join(handed_out))
    ladder = os.path.join(out, "chapters", "ladder_diffs.py")
    if os.path.isfile(ladder):  # the diffs of the release's own rungs, not the solutions'
        subprocess.run([sys.executable, ladder], check=True, stdout=subprocess.DEVNULL)
    cut = cut_markdown_leaks(root, out, solutions)
    return solutions, copied, cut


# ---- the check ------------------------------------------------------------------------------

TOKEN = re.compile(r"""[A-Za-z_]\w*|0[xX][0-9a-fA-F]+[uUlL]*
                    |(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?[fFuUlL]*
                    |<<=|>>=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|::|\S""", re.X)
KEYWORDS = set("""alignas auto bool break case char const constexpr continue default do double else
    enum false float for if inline int long return short signed sizeof static static_cast struct
    switch template true typename unsigned using void volatile while nullptr int8_t int16_t int32_t
    int64_t uint8_t uint16_t uint32_t uint64_t size_t half __half float2 float4 dim3 INFINITY
    NAN""".split())
MIN_TOKENS = 6
# One spelling for the float and double forms of a type or a math function, so that an answer
# written for the CPU in double is the same statement as one written for the GPU in float.
CANONICAL = {"double": "float", "fmaxf": "max", "fmax": "max", "fminf": "min", "fmin": "min",
             "expf": "exp", "__expf": "exp", "exp2f": "exp2", "logf": "log", "__logf": "log",
             "log2f": "log2", "sqrtf": "sqrt", "fabsf": "abs", "fabs": "abs", "fmaf": "fma",
             "rsqrtf": "rsqrt"}
# Words that change nothing of what a statement computes.
QUALIFIERS = {"const", "constexpr", "volatile", "__restrict__", "__forceinline__", "inline",
              "static"}


def is_name(t):
    return t[0].isalpha() or t[0] == "_"


def number(t):
    s = t.rstrip("fFuUlL")
    try:
        if s.lower().startswith("0x"):
            return str(int(s, 16))
        return repr(float(s)) if re.search(r"[.eE]", s) else str(int(s))
    except ValueError:
        return t


def canonical(toks):
    """Tokens with `std::` dropped and float/double spellings made one (CANONICAL)."""
    out = []
    for i, t in enumerate(toks):
        if t == "std" and i + 1 < len(toks) and toks[i + 1] == "::":
            continue
        if t == "::" and out == [] or (t == "::" and i and toks[i - 1] == "std"):
            continue
        if t in QUALIFIERS:
            continue
        out.append(CANONICAL.get(t, t))
    return out


def tokens(text, diff=False):
    """The tokens of a text: diff markers at line starts dropped when `diff`."""
    out = []
    for line in text.split("\n"):
        if diff and line[:1] in "+- " and not line.startswith(("+++", "---")):
            line = line[1:]
        out += TOKEN.findall(line)
    return canonical(out)


def shape(toks):
    """Tokens with variable names replaced by v0, v1, ... in order of appearance."""
    names, out = {}, []
    for i, t in enumerate(toks):
        if is_name(t):
            prev = toks[i - 1] if i else ""
            nxt = toks[i + 1] if i + 1 < len(toks) else ""
            if t in KEYWORDS or t.startswith("__") or prev in (".", "->", "::") or nxt in (
                    "(", "::") or (nxt == "<" and i + 2 < len(toks)):
                out.append(t)
            else:
                out.append(names.setdefault(t, f"v{len(names)}"))
        elif t[0].isdigit() or (t[0] == "." and len(t) > 1):
            out.append(number(t))
        else:
            out.append(t)
    return out


def statements(lines):
    """The statements of solution lines: comments and preprocessor lines dropped, a statement
    ending at a ';', '{' or '}' at the end of a line outside parentheses."""
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    units, cur, depth = [], [], 0
    for line in text.split("\n"):
        toks = canonical(TOKEN.findall(line))
        for t in toks:
            cur.append(t)
            depth += (t in "([") - (t in ")]")
        if cur and depth <= 0 and toks and toks[-1] in (";", "{", "}"):
            units.append(cur)
            cur, depth = [], 0
    if cur:
        units.append(cur)
    return units


def is_header(unit):
    """A loop or branch header, or braces: not an answer on its own."""
    return unit[-1] == "{" and unit[0] in ("for", "if", "else", "while", "do", "}") or all(
        t in "{}();" for t in unit)


def fingerprints(root, solution):
    """[(block, [unit tokens])] to look for: the solution's statements, less short ones, headers
    and those that also stand outside its blocks."""
    blocks, outside = solution_blocks(read(os.path.join(root, solution)))
    outside_shapes = {" ".join(shape(u)) for u in statements(outside)}
    out = []
    for name, _, lines in blocks:
        units = [u for u in statements(lines) if len(u) >= MIN_TOKENS and not is_header(u)
                 and " ".join(shape(u)) not in outside_shapes]
        out.append((name, units))
    return out


class Text:
    """A text of the release to search: its tokens, and the shape string of its name tokens
    (identifiers as '$') for a fast first pass."""

    def __init__(self, toks):
        self.toks = toks
        self.flat = " " + " ".join("$" if is_name(t) and t not in KEYWORDS else t
                                   for t in toks) + " "
        self.starts = [0]
        for t in toks:
            self.starts.append(self.starts[-1] + len(("$" if is_name(t) and t not in KEYWORDS
                                                      else t)) + 1)

    def holds(self, unit):
        want = shape(unit)
        probe = " " + " ".join("$" if is_name(t) and t not in KEYWORDS else t for t in unit) + " "
        at = self.flat.find(probe)
        index = {s: i for i, s in enumerate(self.starts)} if at >= 0 else None
        while at >= 0:
            i = index.get(at)
            if i is not None and shape(self.toks[i:i + len(unit)]) == want:
                return True
            at = self.flat.find(probe, at + 1)
        return False


def chapter_of(path):
    m = re.match(r"chapters/(\d\d)_[^/]+/", path) or re.match(r"tests/\w+/test_ch(\d\d)_", path)
    return int(m.group(1)) if m else None


def ladder_order(root):
    """{rung file: its place in its chapter's ladder}, from the ladder-diff markers of each
    chapter README (in the order the README walks them; README.md of the tree, not the release,
    which drops the steps that start at an exercise)."""
    order = {}
    for f in sorted(os.listdir(os.path.join(root, "chapters"))):
        readme = os.path.join(root, "chapters", f, "README.md")
        if not os.path.isfile(readme):
            continue
        for a, b in re.findall(r"<!-- ladder-diff: (\S+) (\S+) -->", read(readme)):
            for x in (a, b):
                path = os.path.normpath(os.path.join("chapters", f, x))
                if path.startswith(f"chapters/{f}/") and path not in order:
                    order[path] = len([p for p in order if p.startswith(f"chapters/{f}/")])
    return order


# Files outside the chapters' folders that belong to a chapter's material: the place of that
# chapter in the book.
BOOK_MATERIAL = {
    "tests/cpu/test_fp8.cpp": 7,  # chapter 07's FP8 accuracy rule (notes/fp8_accuracy.md), whose
                                  # CPU model of a tiled FP8 forward has 05's online softmax in it
}
# Files that hold an answer and stay in the release anyway, each with the reason: reported as
# allowed, like the later rungs, never hidden.
KNOWN_EXCEPTIONS = {
    "chapters/user/example_softmax.cuh": "the worked example of chapters/user/ (its README and "
                                         "its tests use it): its merge is the pair merge",
}


def place(path, solution, order, sch):
    """Where a release file stands relative to an exercise's solution in the book: 'before' (the
    exercise builds on it), 'later' (a later rung, which builds on the exercise, or a known
    exception) or 'other'. sch: the solution's chapter (that of its exercise file, for a shared
    header of common/device/)."""
    if path == solution:
        return "other"  # the student's file: its own answer is a leak, even in common/
    if path.startswith("common/"):
        return "before"
    if path in KNOWN_EXCEPTIONS:
        return "later"
    if path in BOOK_MATERIAL:
        return "before" if BOOK_MATERIAL[path] < sch else "later"
    ch = chapter_of(path)
    if ch is None or not path.endswith(SOURCE_EXT) or in_exercises_folder(path):
        return "other"
    if ch != sch:
        return "before" if ch < sch else "later"
    if path.startswith("tests/"):
        return "other"  # a test of the exercise's own chapter: a twin of the answer is a leak
    if os.path.basename(path) == "chapter.cpp":
        return "before"  # the chapter's program: the CPU references the exercise is checked by
    if path in order and solution in order:
        return "before" if order[path] < order[solution] else (
            "later" if order[path] > order[solution] else "other")
    if "/tuning/" in path:
        return "later"  # the measured steps between the chapter's later rungs
    return "other"


def text_files(out, limit=4 << 20):
    """(path relative to out, bytes) of every file of a tree up to `limit` bytes that is text."""
    for folder, _, names in os.walk(out):
        for n in sorted(names):
            path = os.path.join(folder, n)
            if os.path.getsize(path) > limit:
                continue
            with open(path, "rb") as f:
                data = f.read()
            if b"\0" not in data[:4096]:
                yield os.path.relpath(path, out), data


def release_texts(out):
    """{name: (text object, the file whose place it has)}: every text file of the release; a
    ladder diff (a file of diffs/, a README block) has the place of the rung it starts from."""
    texts = {}
    for rel, data in text_files(out):
        text = data.decode("utf-8", "replace")
        # chapters/NN_x/diffs/, or the diffs/ of a README in a chapter's subfolder (a ladder's
        # tuning appendix, chapters/07_flash_hopper/fp8/tuning/diffs/)
        m = re.match(r"(chapters/.+?)/diffs/([^/]+)--([^/]+)\.diff$", rel)
        if m:
            first = text.split("\n", 1)[0]
            a = first[4:].strip() if first.startswith("--- ") else ""
            texts[rel] = (Text(tokens(text, diff=True)),
                          os.path.normpath(os.path.join(m.group(1), a)) if a else rel)
            continue
        if rel.endswith(".md"):
            rest, steps = markdown_ladder_blocks(text, os.path.dirname(rel))
            for k, (block, a) in enumerate(steps):
                texts[f"{rel} (ladder step {k + 1})"] = (Text(tokens(block, diff=True)), a)
            texts[rel] = (Text(tokens(rest)), rel)
            continue
        texts[rel] = (Text(tokens(text)), rel)
    return texts


def markdown_ladder_blocks(text, folder):
    """A README without its generated ladder blocks, and the blocks with the rung each starts
    from."""
    rest, steps, current = [], [], None
    for line in text.split("\n"):
        m = re.match(r"^<!-- ladder-diff: (\S+) (\S+) -->$", line.strip())
        if m:
            current = ([], os.path.normpath(os.path.join(folder, m.group(1))))
            rest.append(line)
            continue
        if current is not None:
            if line.strip() == "<!-- end ladder-diff -->":
                steps.append(("\n".join(current[0]), current[1]))
                current = None
                rest.append(line)
            else:
                current[0].append(line)
            continue
        rest.append(line)
    return "\n".join(rest), steps


def find_leaks(root, out, solutions, texts=None):
    """([leak messages], [allowed carriers], number of statements looked for)."""
    texts = release_texts(out) if texts is None else texts
    order = ladder_order(root)
    leaks, allowed, looked = [], [], 0
    for sol in solutions:
        sch = chapter_of(exercise_path_for(root, sol))
        for block, units in fingerprints(root, sol):
            for unit in units:
                carriers = [(name, where) for name, (t, where) in texts.items() if t.holds(unit)]
                if any(place(where, sol, order, sch) == "before" for _, where in carriers):
                    continue  # the book's, before the exercise: the exercise builds on it
                looked += 1
                shown = " ".join(unit)
                for name, where in carriers:
                    if place(where, sol, order, sch) == "later":
                        why = KNOWN_EXCEPTIONS.get(where, "a later rung")
                        allowed.append(f"{sol} [{block}] in {name} ({why}): {shown}")
                    else:
                        leaks.append(f"{name}: holds a statement of {sol}, block {block}: {shown}")
    return leaks, allowed, looked


def cut_markdown_leaks(root, out, solutions):
    """Replace every fenced code block of a release Markdown file that holds an answer statement
    (outside the ladder blocks) by a note. Returns the blocks cut, as 'file: first line'."""
    units = [(sol, block, u) for sol in solutions for block, us in fingerprints(root, sol)
             for u in us]
    cut = []
    for folder, _, names in os.walk(out):
        for n in names:
            if not n.endswith(".md"):
                continue
            path = os.path.join(folder, n)
            rel = os.path.relpath(path, out)
            lines, changed, i = read(path).split("\n"), False, 0
            result, in_ladder = [], False
            while i < len(lines):
                line = lines[i]
                if re.match(r"^<!-- ladder-diff: ", line.strip()):
                    in_ladder = True
                elif line.strip() == "<!-- end ladder-diff -->":
                    in_ladder = False
                fence = re.match(r"^\s*(`{3,}|~{3,})", line)
                if not fence or in_ladder:
                    result.append(line)
                    i += 1
                    continue
                j = i + 1
                while j < len(lines) and not lines[j].strip().startswith(fence.group(1)):
                    j += 1
                body = lines[i + 1:j]
                text = Text(tokens("\n".join(body), diff=line.strip().endswith("diff")))
                hit = next(((sol, block) for sol, block, u in units if text.holds(u)), None)
                if hit:
                    note = (f"(cut from the student release: this code is the answer to block "
                            f"{hit[1]} of {hit[0]})")
                    result += [line, note, lines[j] if j < len(lines) else line]
                    cut.append(f"{rel}: a code block (block {hit[1]} of {hit[0]})")
                    changed = True
                else:
                    result += lines[i:j + 1]
                i = j + 1
            if changed:
                write(path, "\n".join(result))
    return cut


def check_release(root, out, solutions):
    """The problems of a written release, as messages (empty: none)."""
    problems = []
    graded = {f for e in rubric(root)["exercises"] for f in e.get("files", [])}
    for sol in solutions:
        if not os.path.isfile(os.path.join(out, sol)):
            problems.append(f"{sol}: no student file in the release")
        if sol not in graded:
            problems.append(f"{sol}: no exercise of tests/course/rubric.json lists it in its "
                            f"files (the autograder would not know it)")
    leaks, allowed, looked = find_leaks(root, out, solutions)
    problems += ["LEAK: " + leak for leak in leaks]
    for rel, data in text_files(out, 8 << 20):
        n = os.path.basename(rel)
        text = data.decode("utf-8", "replace")
        if b"EXERCISE" in data:
            for no, line in enumerate(text.splitlines(), 1):
                bare = line[1:] if line[:1] in "+- " else line  # a diff line
                if any(p.match(x) for p in (BEGIN, END) for x in (bare, line)):
                    problems.append(f"{rel}:{no}: an EXERCISE marker line (a solution region): "
                                    f"{line.strip()[:80]}")
        if n == "README.md":
            for word in INSTRUCTOR_WORDS:
                if word in text:
                    problems.append(f"{rel}: names `{word}`, which the release does not have")
            for m in re.finditer(r"`((?:[\w./-]+/)?exercises/[\w.]+\.(?:cu|cuh|cpp|h))`", text):
                target = os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1)))
                if not (os.path.isfile(os.path.join(out, target)) or
                        os.path.isfile(os.path.join(out, m.group(1)))):
                    problems.append(f"{rel}: names `{m.group(1)}`, not in the release")
    return problems, allowed, looked


# ---- compiling what the release changed ---------------------------------------------------------

def includes(text):
    return re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M)


def changed_sources(root, out, files):
    """The sources of the release whose text differs from the tree's, and those that include
    (directly or through other headers) a header that differs."""
    changed = {f for f in files if f.endswith(SOURCE_EXT) and os.path.isfile(os.path.join(out, f))
               and read(os.path.join(out, f)) != read(os.path.join(root, f))}
    headers = {f for f in changed if f.endswith((".h", ".cuh"))}
    sources = [f for f in files
               if f.endswith((".cu", ".cpp")) and os.path.isfile(os.path.join(out, f))]
    by_name = {}
    for f in files:  # the release's headers (a generated exercise is not one of them)
        if f.endswith((".h", ".cuh")) and os.path.isfile(os.path.join(out, f)):
            by_name.setdefault(os.path.basename(f), []).append(f)

    def reaches(src, seen):
        for inc in includes(read(os.path.join(out, src))):
            local = os.path.normpath(os.path.join(os.path.dirname(src), inc))
            cands = [local] if local in by_name.get(os.path.basename(inc), []) else by_name.get(
                os.path.basename(inc), [])
            for h in cands:
                if h in seen:
                    continue
                seen.add(h)
                if h in headers or reaches(h, seen):
                    return True
        return False

    return sorted({f for f in changed if f.endswith((".cu", ".cpp"))} |
                  {s for s in sources if reaches(s, set())})


def compile_release(root, out, files, build):
    """Compile each changed source of the release with the flags BUILD uses for it (its
    compile_commands.json), the tree's paths replaced by the release's and FA_STUDENT_RELEASE
    defined, as a release's build defines it (tests/mutants/CMakeLists.txt); the sources that read
    FA_STUDENT_RELEASE are compiled too. Returns the failures."""
    db_path = os.path.join(build, "compile_commands.json")
    if not os.path.isfile(db_path):
        return [f"{db_path} is missing: configure the build first"]
    db = {os.path.realpath(e["file"]): e for e in json.loads(read(db_path))}
    real_root, real_out, failures = os.path.realpath(root), os.path.realpath(out), []
    real_build = os.path.realpath(build)
    todo = sorted(set(changed_sources(root, out, files)) | {
        f for f in files if f.endswith((".cu", ".cpp")) and os.path.isfile(os.path.join(out, f))
        and "FA_STUDENT_RELEASE" in read(os.path.join(out, f))})
    takes_value = ("-o", "-MF", "-MT", "-MQ")
    with tempfile.TemporaryDirectory(prefix="release_objects_") as objects:
        for k, src in enumerate(todo):
            entry = db.get(os.path.realpath(os.path.join(root, src)))
            if entry is None:
                print(f"  {src}: not compiled by {build} (another architecture or option): skipped")
                continue
            args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
            cmd, i = [], 0
            while i < len(args):
                a = args[i]
                if a in takes_value:  # the object and the dependency file: ours, or none
                    if a == "-o":
                        cmd += ["-o", os.path.join(objects, f"{k}.o")]
                    i += 2
                    continue
                if a in ("-MD", "-MMD") or a.startswith(("-MF", "-MT", "-MQ")):
                    i += 1
                    continue
                # The tree's paths become the release's, except those of the build folder
                # (generated files, downloaded libraries).
                a = a.replace(real_build, "\0").replace(real_root, real_out)
                cmd.append(a.replace("\0", real_build))
                i += 1
            cmd.insert(1 if os.path.basename(cmd[0]) != "ccache" else 2, "-DFA_STUDENT_RELEASE=1")
            # The release's build folder stands where the tree's does, so that with CCACHE_BASEDIR
            # the relative paths, and the compiler cache's keys, are the same on the next run.
            cwd = os.path.realpath(entry["directory"]).replace(real_build, os.path.join(
                real_out, os.path.relpath(real_build, real_root)))
            os.makedirs(cwd, exist_ok=True)
            print(f"  [{k + 1}/{len(todo)}] {src}", flush=True)
            p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
            if p.returncode != 0:
                failures.append(f"{src} does not compile in the release:\n"
                                f"{(p.stdout + p.stderr)[-3000:]}")
    return failures


# ---- the command line -----------------------------------------------------------------------

def listing_problems(root):
    """Where git is there: the listing without git (as from an archive) must equal git's."""
    with_git = git_files(root)
    if with_git is None:
        return [], "not a git checkout: the files are listed by a walk, as for an archive"
    walked = walked_files(root)
    only_git = sorted(set(with_git) - set(walked))
    only_walk = sorted(set(walked) - set(with_git))
    problems = [f"git lists {f}, the walk without git does not" for f in only_git[:20]]
    problems += [f"the walk without git lists {f}, git does not" for f in only_walk[:20]]
    return problems, f"the listing without git equals git's ({len(with_git)} files)"


def run(out, verbose=False, compile_build=None, use_walk=False):
    problems, note = listing_problems(ROOT)
    print("listing: " + note)
    files = walked_files(ROOT) if use_walk else tree_files(ROOT)
    solutions, copied, cut = write_release(ROOT, out, files)
    found, allowed, looked = check_release(ROOT, out, solutions)
    problems += found
    print(f"student release: {copied} files in {out}, {len(solutions)} exercise files in place of "
          f"their solutions; {looked} answer statements looked for in every file")
    for c in cut:
        print("cut: " + c)
    print(f"{len(allowed)} statements found only in the book's later rungs (allowed; --verbose "
          f"lists them)")
    if verbose:
        for a in allowed:
            print("  later rung: " + a)
    if compile_build:
        todo = changed_sources(ROOT, out, files)
        print(f"compiling the {len(todo)} sources the release changed, with the flags of "
              f"{compile_build}")
        problems += compile_release(ROOT, out, files, compile_build)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s): the release is not fit to hand out")
        return 1
    print("no answer statement, no EXERCISE marker and no instructor-only name in the release")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", help="the folder to write the release into")
    ap.add_argument("--self-test", action="store_true",
                    help="write the release into a temporary folder and check it")
    ap.add_argument("--compile", metavar="BUILD",
                    help="also compile what the release changed, with BUILD's flags")
    ap.add_argument("--walk", action="store_true",
                    help="list the tree's files without git, as for an archive")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test == bool(args.out):
        ap.print_usage()
        return 2
    if args.self_test and args.compile:
        # Under the build folder, so that its own build folder stands where the tree's does.
        out = os.path.join(os.path.abspath(args.compile), "student_release_check")
        shutil.rmtree(out, ignore_errors=True)
        return run(out, args.verbose, os.path.abspath(args.compile), args.walk)
    if args.self_test:
        with tempfile.TemporaryDirectory(prefix="student_release_") as tmp:
            return run(os.path.join(tmp, "release"), args.verbose, args.compile, args.walk)
    return run(os.path.abspath(args.out), args.verbose, args.compile, args.walk)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
