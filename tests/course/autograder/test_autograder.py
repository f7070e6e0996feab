#!/usr/bin/env python3
"""The autograder end to end, on the CPU (the ctest test AutograderEndToEnd, label cpu-long).

    python3 tests/course/autograder/test_autograder.py --reference-build build

Three submissions of the CPU pair-merge exercise (cpu-02, chapters/02_online_softmax/
online_cpu.cpp) go through autograde.py exactly as Gradescope runs it, with the paths moved
under REFERENCE_BUILD/autograder_e2e/ (the submissions, the grading build and the results):
  - correct: the solution itself, uploaded flat (the file alone): full marks for cpu-02, and only
    for cpu-02 (every other exercise is graded as its untouched exercise: 0, the TODO message);
  - wrong: the solution with the merge's rescale left out: cpu-02's merge checks score 0 with the
    failing tests' reports;
  - not compiling: the solution with a line that is not C++: cpu-02 scores 0 with the compiler's
    message, and the rest is still graded.
Each results.json must be Gradescope's format with a visibility on every check ("after_published"
for the hidden suite's), and no run may leave a file in the repository. The first run builds the
grading tree (autograde.py: the student release plus the instructor's suite; with CCACHE_BASEDIR
above both trees the sources the reference build compiled come from the compiler cache); the
others rebuild one file.
Also checked: grader.py and autograde.py exit 2 for a --build folder that does not exist.

    python3 tests/course/autograder/test_autograder.py --reference-build build --gpu

is the GPU path (README.md, "The GPU half"), on a machine with a GPU (bench/device_run.sh, stage
autograde_gpu): the same three submissions of a GPU exercise, 01's warp reductions
(chapters/01_safe_softmax/v3_warp_shuffle_vec4.cu; the wrong one sums over 16 lanes of 32), graded
with the GPU checks, public and hidden, under REFERENCE_BUILD/autograder_e2e_gpu/. Only that
exercise and cpu-02 (untouched) are graded (autograde.py --only), to keep the run short.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
# The submitted exercise, its file, a line of its answer, that line made wrong, and a line of the
# file after which a line that is not C++ is put: without a GPU (Gradescope) and with one.
CPU_CASE = dict(exercise="cpu-02", file="chapters/02_online_softmax/online_cpu.cpp",
                answer="a.l * rescale(a.m, m) + b.l * rescale(b.m, m)", wrong="a.l + b.l",
                before_junk="MaxSum empty_state() {")
GPU_CASE = dict(exercise="01", file="chapters/01_safe_softmax/v3_warp_shuffle_vec4.cu",
                answer="offset > 0; offset /= 2) v +=", wrong="offset > 1; offset /= 2) v +=",
                before_junk="__device__ __forceinline__ float warp_sum(float v) {")
EXERCISE, FILE, ANSWER = CPU_CASE["exercise"], CPU_CASE["file"], CPU_CASE["answer"]


def cache_value(build, name):
    try:
        text = open(os.path.join(build, "CMakeCache.txt")).read()
    except OSError:
        return None
    m = re.search(rf"^{name}:\w+=(.*)$", text, re.M)
    return m.group(1) if m else None


def grade(work, name, text, reference_build, gpu=False):
    """Run the autograder on a submission of one file; returns (exit code, results, output)."""
    sub = os.path.join(work, "submissions", name)
    shutil.rmtree(sub, ignore_errors=True)
    os.makedirs(sub)
    with open(os.path.join(sub, os.path.basename(FILE)), "w") as f:
        f.write(text)
    results = os.path.join(work, "results", name, "results.json")
    cmd = [sys.executable, os.path.join(HERE, "autograde.py"), "--source", SOURCE,
           "--submission", sub, "--results", results, "--build", os.path.join(work, "build"),
           "--jobs", os.environ.get("FA_AUTOGRADER_JOBS", "2")]
    cmd += ["--only", f"{EXERCISE},cpu-02"] if gpu else ["--no-gpu"]
    for var in ("CMAKE_CUDA_ARCHITECTURES", "CMAKE_CUDA_COMPILER", "CMAKE_CXX_COMPILER"):
        value = cache_value(reference_build, var)
        if value:
            cmd.append(f"--cmake-arg=-D{var}={value}")
    os.makedirs(os.path.join(work, "build"), exist_ok=True)
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    print(p.stdout[-4000:] + p.stderr[-4000:], flush=True)
    data = None
    if os.path.isfile(results):
        with open(results) as f:
            data = json.load(f)
    return p.returncode, data, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference-build", required=True,
                    help="the build whose folder holds the test's files and whose settings it uses")
    ap.add_argument("--gpu", action="store_true",
                    help="the GPU path: a GPU exercise's submissions, graded with the GPU")
    args = ap.parse_args()
    global EXERCISE, FILE, ANSWER
    case = GPU_CASE if args.gpu else CPU_CASE
    EXERCISE, FILE, ANSWER = case["exercise"], case["file"], case["answer"]
    reference = os.path.abspath(args.reference_build)
    work = os.path.join(reference, "autograder_e2e_gpu" if args.gpu else "autograder_e2e")
    os.makedirs(work, exist_ok=True)
    errors = []

    def expect(cond, what):
        if not cond:
            errors.append(what)
            print("FAIL: " + what, flush=True)

    before = set(os.listdir(SOURCE))
    # A --build folder that does not exist is a usage error, not a score of 0.
    missing = os.path.join(work, "no_such_build")
    for cmd in ([sys.executable, os.path.join(os.path.dirname(HERE), "grader.py"), "--build",
                 missing],
                [sys.executable, os.path.join(HERE, "autograde.py"), "--build", missing,
                 "--submission", work, "--results", os.path.join(work, "unused.json")]):
        rc = subprocess.run(cmd, capture_output=True, text=True).returncode
        expect(rc == 2, f"{os.path.basename(cmd[1])} --build <missing folder> exits {rc}, not 2")

    solution = open(os.path.join(SOURCE, FILE)).read()
    for line in (ANSWER, case["before_junk"]):
        if solution.count(line) != 1:
            print(f"{FILE} no longer holds `{line}` once: update this test's submissions")
            return 1
    rubric = json.load(open(os.path.join(SOURCE, "tests", "course", "rubric.json")))
    ex = next(e for e in rubric["exercises"] if e["id"] == EXERCISE)
    full = sum(c["points"] for c in ex["checks"])

    def mine(data):
        return [t for t in data["tests"] if t["name"].startswith(EXERCISE + " ")]

    def common_checks(name, data):
        expect(data is not None, f"{name}: no results.json")
        if data is None:
            return False
        expect(isinstance(data.get("score"), (int, float)) and data.get("tests"),
               f"{name}: results.json has no score or no tests")
        for t in data["tests"]:
            missing_keys = {"name", "score", "max_score", "output", "visibility"} - set(t)
            expect(not missing_keys, f"{name}: {t.get('name')} lacks {sorted(missing_keys)}")
            want = "after_published" if ": hidden: " in t["name"] else "visible"
            expect(t.get("visibility") == want,
                   f"{name}: {t['name']}: visibility {t.get('visibility')}, expected {want}")
            gpu_check = "not graded: no GPU" in t["output"]
            expect(not gpu_check or t["score"] == 0, f"{name}: {t['name']} scored without a GPU")
            expect(not (args.gpu and gpu_check and t["name"].startswith(EXERCISE + " ")),
                   f"{name}: {t['name']} was not graded on this machine's GPU")
        expect(len(mine(data)) == len(ex["checks"]), f"{name}: not every check of {EXERCISE}")
        others = [t for t in data["tests"] if t["name"].startswith("cpu-")
                  and not t["name"].startswith(EXERCISE + " ")]
        expect(others and all(t["score"] == 0 and "TODO" in t["output"] for t in others),
               f"{name}: the exercises not submitted must score 0 with their TODO message")
        return True

    # 1. The solution, uploaded as a flat file: full marks for the exercise, nothing else.
    rc, data, out = grade(work, "correct", solution, reference, args.gpu)
    expect(rc == 0, f"correct: the autograder exited {rc}")
    if common_checks("correct", data):
        expect(all(t["score"] == t["max_score"] for t in mine(data)),
               f"correct: {EXERCISE} did not score full marks: " +
               "; ".join(t["output"][:300] for t in mine(data) if t["score"] != t["max_score"]))
        expect(data["score"] == full, f"correct: total {data['score']}, expected {full}")

    # 2. The merge without the rescale: the merge's checks fail, with the tests' reports.
    wrong = solution.replace(ANSWER, case["wrong"])
    rc, data, out = grade(work, "wrong", wrong, reference, args.gpu)
    expect(rc == 0, f"wrong: the autograder exited {rc}")
    if common_checks("wrong", data):
        expect(data["score"] < full and any(t["score"] == 0 and "FAILED" in t["output"]
                                            for t in mine(data)),
               f"wrong: {EXERCISE} was not marked down with the failing tests' output")

    # 3. A file that does not compile: 0 and the compiler's message, the rest still graded.
    broken = solution.replace(case["before_junk"], case["before_junk"] + "\n  this is not C++;")
    rc, data, out = grade(work, "not_compiling", broken, reference, args.gpu)
    expect(rc == 0, f"not compiling: the autograder exited {rc}")
    if common_checks("not compiling", data):
        expect(all(t["score"] == 0 and "does not compile" in t["output"] and
                   os.path.basename(FILE) in t["output"] for t in mine(data)),
               f"not compiling: {EXERCISE}'s checks must be 0 with the compiler's message")
        expect("does not compile" in data.get("output", ""),
               "not compiling: the run's output does not say which file did not compile")

    after = set(os.listdir(SOURCE))
    expect(after <= before, f"the runs left files in the repository: {sorted(after - before)}")
    print("autograder end to end:", "FAILED" if errors else "ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
