#!/usr/bin/env python3
"""Write the student release of the course: the repository with every exercise in place of its
solution, and a check that no solution code leaked into it.

    python3 tests/course/make_release.py OUT_DIR    # write the release (OUT_DIR must not exist
                                                    # or be empty), then check it
    python3 tests/course/make_release.py --self-test
                                                    # write it into a temporary folder and check
                                                    # it (the CPU test StudentReleaseHasNoSolutions)
    cmake --build build --target student_release    # the same into build/student_release

What goes in: the files git lists (tracked ones, and new ones it does not ignore), except
  - every marked solution (a file with an EXERCISE-KERNELS line, common/exercise.h): in its place
    the generated exercise, chapters/NN_*/exercises/<file> written to chapters/NN_*/<file>, so
    every build of the release compiles the student's file under the solution's kernel names;
  - the generated exercises themselves (they now stand where their solutions stood), while the
    rest of each exercises/ folder (HINTS.md, the second tier of hints) stays;
  - what only the instructor has: tests/course/hidden/ (the instructor suite) and this script.
The public tests, the wrong kernels of tests/mutants/, the assignments (tests/course/rubric.json)
and the notes all go in. The ladder diffs (chapters/*/diffs/ and the README blocks) are written
again from the release's own files (chapters/ladder_diffs.py), since the committed ones show the
solutions' lines. A file STUDENT_RELEASE.md at the top says what the tree is.

The check: for every EXERCISE(...) block of every solution, none of its solution lines (ignoring
blank lines, braces, #pragma lines and lines under 10 characters, and lines that also stand
outside the blocks of that solution) appears in the student's file; and no file of the release
holds an EXERCISE(...) or EXERCISE-END marker line (a diff line included), so no marked solution
region survives anywhere.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The generator's markers (common/exercise.cpp).
KERNELS = re.compile(r"^\s*//\s*EXERCISE-KERNELS:\s*(.+)$")
BEGIN = re.compile(r"^(\s*)//\s*EXERCISE\(([^)]+)\):\s*(.*)$")
PLACEHOLDER = re.compile(r"^\s*//\s*EXERCISE-PLACEHOLDER\s*$")
END = re.compile(r"^\s*//\s*EXERCISE-END\s*$")
SOURCE_EXT = (".cu", ".cpp", ".cuh", ".h")

# Instructor-only paths: left out of the release.
INSTRUCTOR_ONLY = ("tests/course/hidden/", "tests/course/make_release.py")
RELEASE_NOTE = "STUDENT_RELEASE.md"
# The generator's first lines, which say where the solution is; the release says something else.
GENERATED_HEADER = re.compile(r"\A// GENERATED from .*?\(preset \"exercises\"\)\.\n", re.S)


def tracked_files(root):
    """The repository's files as git lists them: tracked, and new ones git does not ignore."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"make_release.py: {root} is not a git checkout ({e})")
    files = sorted({f for f in out.decode().split("\0") if f})
    return [f for f in files if os.path.isfile(os.path.join(root, f))]


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def exercise_path_for(solution):
    """chapters/01_x/v3.cu -> chapters/01_x/exercises/v3.cu (common/exercise.h)."""
    folder, name = os.path.split(solution)
    return os.path.join(folder, "exercises", name)


def in_exercises_folder(path):
    return os.path.basename(os.path.dirname(path)) == "exercises"


def marked_solutions(root, files):
    """Files with an EXERCISE-KERNELS line (outside exercises/ folders), sorted."""
    found = []
    for f in files:
        if not f.endswith(SOURCE_EXT) or in_exercises_folder(f):
            continue
        if any(KERNELS.match(line) for line in read(os.path.join(root, f)).splitlines()):
            found.append(f)
    return found


def solution_blocks(text):
    """[(block name, [solution lines])] of a marked solution, and the set of its lines outside
    the solution parts (the placeholders without their comment marker included)."""
    blocks, outside, state = [], set(), "out"
    for line in text.splitlines():
        m = BEGIN.match(line)
        if state == "out" and m:
            blocks.append((m.group(2).strip(), []))
            state = "solution"
        elif PLACEHOLDER.match(line):
            state = "placeholder"
        elif END.match(line):
            state = "out"
        elif state == "solution":
            blocks[-1][1].append(line)
        elif state == "placeholder":
            outside.add(normalise(re.sub(r"^(\s*)// ?", r"\1", line)))
        else:
            outside.add(normalise(line))
    return blocks, outside


def normalise(line):
    return " ".join(line.split())


def significant(line):
    """A solution line worth looking for: not blank, braces, a #pragma or a very short line."""
    s = normalise(line)
    return len(s) >= 10 and not s.startswith("#pragma") and not re.fullmatch(r"[{}();\s]*", s)


def student_text(root, solution):
    """The generated exercise of `solution`, as it stands in the release: at the solution's path,
    saying so, registered under that path; in a header, registered once however many files
    include it."""
    exercise = exercise_path_for(solution)
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


def write_release(root, out):
    files = tracked_files(root)
    solutions = marked_solutions(root, files)
    exercises = {exercise_path_for(s): s for s in solutions}
    listed = set(files)
    missing = [e for e in exercises if e not in listed]
    if missing:
        raise SystemExit("make_release.py: no generated exercise for " + ", ".join(
            exercises[e] for e in missing) + " (run `cmake --build build --target exercises`)")
    if os.path.exists(out) and os.listdir(out):
        raise SystemExit(f"make_release.py: {out} exists and is not empty")
    os.makedirs(out, exist_ok=True)
    copied = 0
    for f in files:
        if f.startswith(INSTRUCTOR_ONLY) or f in exercises:
            continue
        dest = os.path.join(out, f)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if f in solutions:
            with open(dest, "w", encoding="utf-8") as o:
                o.write(student_text(root, f))
        else:
            shutil.copy2(os.path.join(root, f), dest)
        copied += 1
    with open(os.path.join(out, RELEASE_NOTE), "w", encoding="utf-8") as o:
        o.write("# Student release\n\n"
                "This tree is the course repository with every exercise in place of its solution "
                "(written by\n`tests/course/make_release.py`). The files that hold a "
                "`TODO(exercise ...)` block:\n\n" +
                "".join(f"- `{s}` (hints: `{os.path.dirname(exercise_path_for(s))}/HINTS.md`)\n"
                        for s in solutions) +
                "\nEvery build compiles them, so `ctest --test-dir build -L gpu` checks them on a "
                "GPU; the CPU\nexercises are checked by `ctest --test-dir build -L cpu-exercise`. "
                "What to do each week, and which\nGPU it needs: `notes/coursework.md`.\n")
    ladder = os.path.join(out, "chapters", "ladder_diffs.py")
    if os.path.isfile(ladder):  # the diffs of the release's own rungs, not the solutions'
        subprocess.run([sys.executable, ladder], check=True, stdout=subprocess.DEVNULL)
    return solutions, copied


def check_release(root, out, solutions):
    """The leaks, as messages (empty: none)."""
    leaks = []
    checked = 0
    for sol in solutions:
        blocks, outside = solution_blocks(read(os.path.join(root, sol)))
        student = os.path.join(out, sol)
        if not os.path.isfile(student):
            leaks.append(f"{sol}: no student file in the release")
            continue
        have = {normalise(line) for line in read(student).splitlines()}
        for name, lines in blocks:
            for line in lines:
                s = normalise(line)
                if significant(line) and s not in outside:
                    checked += 1
                    if s in have:
                        leaks.append(f"{sol}: a line of block {name} is in the release: {s}")
    for folder, _, names in os.walk(out):
        for n in names:
            path = os.path.join(folder, n)
            rel = os.path.relpath(path, out)
            if os.path.getsize(path) > 8 << 20:
                continue
            with open(path, "rb") as f:
                data = f.read()
            if b"EXERCISE" not in data:
                continue
            for no, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                bare = line[1:] if line[:1] in "+- " else line  # a diff line
                if BEGIN.match(bare) or END.match(bare) or BEGIN.match(line) or END.match(line):
                    leaks.append(f"{rel}:{no}: an EXERCISE marker line (a solution region): "
                                 f"{line.strip()[:80]}")
    return leaks, checked


def main(argv):
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if argv[0] == "--self-test":
        with tempfile.TemporaryDirectory(prefix="student_release_") as tmp:
            return run(os.path.join(tmp, "release"))
    return run(os.path.abspath(argv[0]))


def run(out):
    solutions, copied = write_release(ROOT, out)
    leaks, checked = check_release(ROOT, out, solutions)
    print(f"student release: {copied} files in {out}, {len(solutions)} exercise files in place "
          f"of their solutions; {checked} solution lines looked for")
    for leak in leaks:
        print("LEAK: " + leak)
    if leaks:
        print(f"{len(leaks)} leak(s): the release holds solution code")
        return 1
    print("no solution line and no EXERCISE marker in the release")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
