#!/usr/bin/env python3
"""The course's autograder: grade one submission in the instructor's tree (Gradescope's layout by
default, any paths on request). `run_autograder` runs it; README.md (this folder) is the manual.

    autograde.py [--source DIR] [--submission DIR] [--results FILE] [--build DIR] [--no-gpu]
                 [--build-timeout S] [--test-timeout S] [--only IDS] [--jobs N]
    autograde.py --prepare [--source DIR] [--build DIR] ...     # setup.sh: build once, untouched
    autograde.py --zip FILE [--source DIR]                      # the zip to upload to Gradescope

Defaults, Gradescope's: the instructor's tree is the repository this script sits in (on
Gradescope /autograder/source), the submission /autograder/submission, the results
/autograder/results/results.json, the build folder <source>/build-grading. The environment
variables FA_AUTOGRADER_SOURCE, _SUBMISSION, _RESULTS and _BUILD override the defaults, the
options override both.

What a run does:
  1. The submission's files are matched to the exercise files of tests/course/rubric.json, by
     their path in the student release (chapters/05_flash_forward/v1_scalar_fp32.cu) or, for a
     flat upload, by file name; a user_next_rung.cu is matched to its assignment's folder. Other
     files are listed as ignored.
  2. They are placed into a copy of the instructor's tree, BUILD/tree/ (the source tree itself is
     never written): the student release of it (make_release.py: every exercise in place of its
     solution), the instructor's suite added back, and the submitted files at their paths (a file
     left out stays the untouched exercise and scores what it scores: nothing). Files are
     rewritten only when their bytes change, so the next submission rebuilds only what differs;
     the build folder is BUILD/tree/build (with CCACHE_BASEDIR at a folder above both trees,
     the compiler cache serves the sources the instructor's own build/ compiled).
  3. The build (only the test programs the checks run). A submitted file that does not compile
     is put back to its untouched exercise and the build is run again, so that the other
     exercises are still graded; every check of an exercise whose file did not compile scores 0
     with the compiler's message. A build that fails for another reason, or takes longer than
     --build-timeout, scores 0 everywhere with the build's message.
  4. tests/course/grader.py's checks: the public tests, the hidden suite fa_hidden_tests, the CPU
     exercises, the assignments. A test program that runs longer than --test-timeout is killed and
     its check scores 0. Without a GPU (Gradescope) every GPU check is "not graded: no GPU".
  5. results.json (Gradescope's format), each check with its visibility: the hidden suite's
     "after_published", the rest "visible". A copy stays in BUILD/grading/.
Whatever goes wrong, a results.json is written (score 0 and the reason); the exit status is 0
once it is, 2 for a wrong command line (a --build folder that does not exist, without --prepare).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
COURSE = os.path.dirname(HERE)
sys.path.insert(0, COURSE)
import grader  # noqa: E402  (tests/course/grader.py)
import make_release  # noqa: E402  (tests/course/make_release.py)

MAX_MESSAGE = 3000  # characters of a compiler or build message kept per check


def env_or(name, default):
    return os.environ.get("FA_AUTOGRADER_" + name) or default


def exercise_files(source, rubric):
    """{release path: [exercise ids]} of every exercise file of the rubric."""
    files = {}
    for ex in rubric["exercises"]:
        for f in ex.get("files", []):
            files.setdefault(f, []).append(ex["id"])
    return files


SM90A_CHAPTERS = ("07",)  # their next rung is an sm_90a kernel: it goes into sm90a/


def assignment_files(source, rubric):
    """{release path of an assignment's user_next_rung.cu: assignment id} (notes/coursework.md,
    "Build-the-next-rung assignments")."""
    out = {}
    chapters = sorted(os.listdir(os.path.join(source, "chapters")))
    for a in rubric.get("assignments", []):
        folder = next((d for d in chapters if d.startswith(a["chapter"] + "_")), None)
        if folder:
            sub = "sm90a/" if a["chapter"] in SM90A_CHAPTERS else ""
            out[f"chapters/{folder}/{sub}user_next_rung.cu"] = a["id"]
    return out


def match_submission(submission, known):
    """({release path: submitted file}, [notes]): each file of the submission folder matched to
    a known release path, by its path (any leading folders ignored) or by its unique name."""
    by_name = {}
    for k in known:
        by_name.setdefault(os.path.basename(k), []).append(k)
    matched, notes = {}, []
    for folder, _, names in os.walk(submission):
        for n in sorted(names):
            path = os.path.join(folder, n)
            rel = os.path.relpath(path, submission).replace(os.sep, "/")
            target = next((k for k in known if rel == k or rel.endswith("/" + k)), None)
            if target is None and len(by_name.get(n, [])) == 1:
                target = by_name[n][0]
            if target is None:
                why = ("its name fits several exercise files: upload it at its path"
                       if len(by_name.get(n, [])) > 1 else "not an exercise file")
                notes.append(f"ignored: {rel} ({why})")
            elif target in matched:
                notes.append(f"ignored: {rel} (a second file for {target})")
            else:
                matched[target] = path
    return matched, notes


def write_if_changed(path, data):
    """Write bytes only when they differ, so that an unchanged file keeps its time stamp and the
    build does not compile it again."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return True


def untouched(source, release_path):
    """The exercise a student starts from, as the student release has it."""
    return make_release.student_text(source, release_path).encode()


def sync_tree(src, dst, keep=("build",)):
    """Make dst a copy of src: rewrite only the files whose bytes differ (the others keep their
    time stamps), remove what src does not have, except the top-level names in `keep`."""
    for folder, dirs, names in os.walk(src):
        rel = os.path.relpath(folder, src)
        for n in names:
            with open(os.path.join(folder, n), "rb") as f:
                write_if_changed(os.path.normpath(os.path.join(dst, rel, n)), f.read())
    for folder, dirs, names in os.walk(dst, topdown=True):
        rel = os.path.relpath(folder, dst)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in keep]
        for n in names:
            if rel == "." and n in keep:
                continue
            if not os.path.exists(os.path.join(src, rel, n)):
                os.remove(os.path.join(folder, n))
        for d in list(dirs):
            if not os.path.exists(os.path.join(src, rel, d)):
                shutil.rmtree(os.path.join(folder, d))
                dirs.remove(d)


def prepare_tree(source, tree, submitted):
    """The grading tree at `tree`: the student release of `source`, the instructor's suite and the
    submitted files. Returns the release's exercise files."""
    parent = os.path.dirname(tree)
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix="release_") as tmp:
        out = os.path.join(tmp, "tree")
        solutions, _, _ = make_release.write_release(source, out)
        hidden = os.path.join(source, "tests", "course", "hidden")
        if os.path.isdir(hidden):
            shutil.copytree(hidden, os.path.join(out, "tests", "course", "hidden"))
        for f, path in submitted.items():
            with open(path, "rb") as src:
                write_if_changed(os.path.join(out, f), src.read())
        sync_tree(out, tree)
    return solutions


def run(cmd, cwd=None, timeout=None):
    """(exit code or None on timeout, output)."""
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace",
                           timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return None, out


def configure(tree, build, gpu, extra):
    cmd = ["cmake", "-S", tree, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
           f"-DFA_BUILD_BENCHMARKS={'ON' if gpu else 'OFF'}"] + extra
    return run(cmd)


def targets(rubric, gpu):
    """The programs the checks run: without a GPU only those of the CPU checks."""
    names = {c["binary"] for e in rubric["exercises"] for c in e["checks"]
             if gpu or not c.get("gpu", True)}
    if gpu:
        names |= {c["binary"] for a in rubric.get("assignments", []) for c in a["checks"]}
        names.add("fa_bench")
    return sorted(names)


def failing_files(output, candidates):
    """The exercise files a failed build's compiler messages point at ("<path>:<line>:" from gcc,
    "<path>(<line>):" from nvcc; the path absolute, or relative where ccache's base_dir made it
    so: matched by its end, the file's path in the tree)."""
    return [f for f in candidates
            if re.search(r"(?:^|[\s/])" + re.escape(f) + r"[:(]\d+", output, re.M)]


def message_for(output, release_path):
    """The compiler's messages about one file: each line that names it with the excerpt of the
    code printed under it (the compiler's command lines, full of the machine's folders, left
    out), errors first, trimmed."""
    lines = output.splitlines()
    picked = []
    for k, ln in enumerate(lines):
        if release_path not in ln or " -I" in ln or " -o " in ln:
            continue
        block = [ln]
        for nxt in lines[k + 1:k + 4]:  # gcc: "   23 |   code" and "      |   ^"; nvcc: indented
            if nxt.startswith((" ", "\t")) and release_path not in nxt:
                block.append(nxt)
            else:
                break
        picked.append(block)
    picked.sort(key=lambda b: "error" not in b[0].lower())
    text = "\n".join(line for b in picked for line in b) or output
    return text[-MAX_MESSAGE:]


def build_with_fallback(source, build, tree, files, submitted, tgts, jobs, timeout, log):
    """Build; a submitted file that does not compile is replaced by its untouched exercise and
    the build repeated. Returns (ok, {release path: compiler message}, build message)."""
    broken, deadline = {}, time.time() + timeout
    while True:
        left = deadline - time.time()
        if left <= 0:
            return False, broken, f"the build took longer than {timeout} s"
        cmd = ["cmake", "--build", build, "-j", str(jobs), "--target"] + tgts
        rc, out = run(cmd, timeout=left)
        log.write(f"$ {' '.join(cmd)}\n{out}\n")
        if rc == 0:
            return True, broken, ""
        if rc is None:
            return False, broken, f"the build took longer than {timeout} s"
        left_in = [f for f in files if f in submitted and f not in broken]
        bad = failing_files(out, left_in)
        if not bad and left_in:
            # No compiler message names a file (a link error, say): put the submitted files back
            # one at a time until the build passes; the last one put back is the culprit.
            for f in left_in:
                write_if_changed(os.path.join(tree, f), untouched(source, f))
                rc2, out2 = run(cmd, timeout=max(1, deadline - time.time()))
                log.write(f"$ (without {f}) {' '.join(cmd)}\n{out2}\n")
                if rc2 == 0:
                    broken[f] = "the build failed with it (no compiler message names the " \
                                "file: a link error?):\n" + out[-MAX_MESSAGE:]
                    return True, broken, ""
                if rc2 is None:
                    return False, broken, f"the build took longer than {timeout} s"
            return False, broken, "the build failed:\n" + out[-MAX_MESSAGE:]
        if not bad:
            return False, broken, "the build failed:\n" + out[-MAX_MESSAGE:]
        for f in bad:
            broken[f] = message_for(out, f)
            write_if_changed(os.path.join(tree, f), untouched(source, f))


def gradescope_zip(source, out):
    """The autograder zip for Gradescope: the repository, with setup.sh and run_autograder at its
    top (Gradescope unpacks it into /autograder/source and runs those two from there)."""
    files = make_release.tree_files(source)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            if f.startswith(("build", "out/")):
                continue
            z.write(os.path.join(source, f), f)
        for f in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(f)
            info.external_attr = 0o755 << 16
            z.writestr(info, open(os.path.join(HERE, f), "rb").read())
    print(f"wrote {out}: {len(files)} files of {source}, setup.sh and run_autograder at its top")


def grade_submission(args, rubric, log):
    """The Gradescope test list and the run's top-level output."""
    source = args.source
    tree = os.path.join(args.build, "tree")
    build = os.path.join(tree, "build")
    files = exercise_files(source, rubric)
    assignments = assignment_files(source, rubric)
    submitted, notes = ({}, []) if args.prepare else match_submission(
        args.submission, list(files) + list(assignments))
    prepare_tree(source, tree, submitted)
    gpu = not args.no_gpu and grader.have_gpu()
    summary = [f"submission: {len(submitted)} exercise file(s): " +
               (", ".join(sorted(submitted)) or "none")] + notes
    summary.append("GPU: " + ("yes" if gpu else "none here: every GPU check is "
                              f"'{grader.NO_GPU}' (the course grades those on its own machines)"))
    rc, out = configure(tree, build, gpu, args.cmake_arg or [])
    log.write(out)
    if rc != 0:
        raise RuntimeError("cmake could not configure the grading tree:\n" + out[-MAX_MESSAGE:])
    tgts = targets(rubric, gpu)
    ok, broken, why = build_with_fallback(source, build, tree, list(files), submitted, tgts,
                                          args.jobs, args.build_timeout, log)
    for f, msg in broken.items():
        summary.append(f"does not compile: {f} (graded as the untouched exercise)")
    if args.prepare:
        if not ok:
            raise RuntimeError(why)
        return [], summary
    if not ok:
        return [{"name": f"{ex['id']} {ex['title']}: {c['name']}", "score": 0,
                 "max_score": c["points"], "output": "not graded: " + why,
                 "exercise": ex["id"], "check": c["name"], "binary": c["binary"]}
                for ex in rubric["exercises"] for c in ex["checks"]], summary + [
            "the build failed: nothing could be graded"]
    only = {x for x in args.only.split(",") if x} or None
    runner = grader.Runner(build, hide_gpu=not gpu, timeout=args.test_timeout)
    gargs = argparse.Namespace(substitute="")
    tests = grader.grade(gargs, rubric, runner, gpu, only=only)
    rung_of = {a: f for f, a in assignments.items()}
    for t in tests:
        ex = next((e for e in rubric["exercises"] if e["id"] == t["exercise"]), None)
        bad = [f for f in (ex or {}).get("files", []) if f in broken]
        if bad:
            t["score"] = 0
            t["output"] = "\n\n".join(f"does not compile: {f}\n{broken[f]}" for f in bad)
        assignment = next((a for a in rubric.get("assignments", [])
                           if t["exercise"] == "A" + a["chapter"]), None)
        if assignment and rung_of.get(assignment["id"]) in submitted and not gpu:
            # Without a GPU the kernel list is not built: submitted, but graded elsewhere.
            t["output"] = (f"{grader.NO_GPU}: {rung_of[assignment['id']]} was submitted; "
                           f"0 of {t['max_score']} points here")
    return tests, summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_source = os.path.dirname(os.path.dirname(COURSE))
    ap.add_argument("--source", default=env_or("SOURCE", default_source))
    ap.add_argument("--submission", default=env_or("SUBMISSION", "/autograder/submission"))
    ap.add_argument("--results", default=env_or("RESULTS", "/autograder/results/results.json"))
    ap.add_argument("--build", default=env_or("BUILD", ""),
                    help="the grading build folder (default: SOURCE/build-grading)")
    ap.add_argument("--no-gpu", action="store_true", help="grade as if there were no GPU")
    ap.add_argument("--build-timeout", type=int, default=3600)
    ap.add_argument("--test-timeout", type=int, default=600, help="seconds per test program")
    ap.add_argument("--only", default="", help="exercise ids, e.g. cpu-02,05")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--cmake-arg", action="append", help="passed to cmake when configuring")
    ap.add_argument("--prepare", action="store_true",
                    help="configure and build with the untouched exercises (setup.sh)")
    ap.add_argument("--zip", metavar="FILE", help="write the Gradescope autograder zip")
    args = ap.parse_args(argv)
    args.source = os.path.abspath(args.source)
    if args.zip:
        gradescope_zip(args.source, args.zip)
        return 0
    if args.build:
        args.build = os.path.abspath(args.build)
        if not args.prepare and not os.path.isdir(args.build):
            print(f"autograde.py: the build folder {args.build} does not exist "
                  f"(run with --prepare first, as setup.sh does)", file=sys.stderr)
            return 2
    else:
        args.build = os.path.join(args.source, "build-grading")
    grading = os.path.join(args.build, "grading")
    os.makedirs(grading, exist_ok=True)
    started = time.time()
    with open(os.path.join(grading, "log.txt"), "w") as log:
        try:
            rubric = json.load(open(os.path.join(args.source, "tests", "course", "rubric.json")))
            tests, summary = grade_submission(args, rubric, log)
        except Exception as e:  # never a crash: a score of 0 and why
            log.write(traceback.format_exc())
            tests, summary = [], [f"the autograder failed: {e}".rstrip()[:MAX_MESSAGE]]
            if args.prepare:
                print("\n".join(summary), file=sys.stderr)
                return 1
    if args.prepare:
        print("prepared: " + "; ".join(summary))
        return 0
    if tests:
        grader.print_table(tests)
    extra = {"output": "\n".join(summary), "execution_time": round(time.time() - started)}
    for path in (os.path.join(grading, "results.json"), args.results):
        grader.write_results(tests, path, extra)
    print("\n".join(summary))
    print(f"wrote {args.results} (and {os.path.join(grading, 'results.json')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
