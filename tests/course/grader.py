#!/usr/bin/env python3
"""Grades the exercises and the build-the-next-rung assignments of a build.

    python3 tests/course/grader.py --build build [--out FILE]

For each exercise of tests/course/rubric.json it runs the checks (a test binary of the build with a
GoogleTest filter: the public GPU tests, the hidden suite fa_hidden_tests, the CPU exercise tests),
reads their results (--gtest_output=json), prints a score table per exercise and writes a
Gradescope results.json (by default build/grading/results.json, inside the build folder):
{"score", "max_score", "tests": [{"name", "score", "max_score", "output", "visibility"}]}, where a
check of the hidden suite has the visibility "after_published" (a student sees its name and
result once the instructor publishes the grades) and the others "visible". A build folder that
does not exist, or has no bin/, is an error (exit 2), not a score of 0.

A check scores its points when every test it selects passed and at least one ran; otherwise 0.
Without a GPU the GPU checks are reported "not graded: no GPU" with 0 points, never full marks.
An assignment (<chapter>/user_next_rung) that is not registered scores 0 ("not submitted"); its
speed points need its correctness checks passed and fa_bench's time within the rubric's threshold
of the reference rung, both timed in the same run.

Other modes:
  --substitute "05/v1_scalar_fp32=mutant/05_causal_off_by_one,..."   grade a mutant in place of a
        kernel (FA_GRADE_SUBSTITUTE for the hidden suite; the public tests know no substitution).
  --assignment-as 05=05/v3_fa2_warp_layout   grade a registered kernel as an assignment's submission.
  --test-without-gpu   the grader's CPU test: GPU hidden from the test binaries; CPU checks must
        score full marks (the solutions; in an exercise build: 0, the TODOs), GPU checks "not graded".
  --self-test          on a GPU: the solutions score full marks, and each mutant (tests/mutants/),
        substituted for the exercise kernel of its chapter and type, loses points in the hidden
        checks. --with-assignments also grades each assignment's reference rung as its submission
        (full marks, speed included). Exit 77 (skipped) without a GPU.
"""
import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NO_GPU = "not graded: no GPU"
MAX_OUTPUT = 4000  # characters of test output kept per check


def param_name(kernel):
    """A registry name as a GoogleTest parameter name: '05/v1_scalar_fp32' -> '05_v1_scalar_fp32'."""
    return re.sub(r"[^A-Za-z0-9]", "_", kernel)


def filter_matches(gtest_filter, name):
    """GoogleTest's filter: 'pos1:pos2-neg1:neg2' with * and ? wildcards."""
    pos, _, neg = gtest_filter.partition("-")
    pos = pos.split(":") if pos else ["*"]
    neg = neg.split(":") if neg else []

    def any_of(patterns):
        return any(p and fnmatch.fnmatchcase(name, p.replace("[", "[[]")) for p in patterns)

    return any_of(pos) and not any_of(neg)


def have_gpu():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        return out.returncode == 0 and "GPU" in out.stdout
    except (OSError, subprocess.SubprocessError):
        return False


class Runner:
    """Runs test binaries of one build and returns each test's status and output."""

    def __init__(self, build, hide_gpu=False, substitute="", verbose=False, timeout=1200):
        self.build = build
        self.bin = os.path.join(build, "bin")
        self.timeout = timeout  # seconds per test program: a hung kernel fails its check
        self.hide_gpu = hide_gpu
        self.substitute = substitute
        self.verbose = verbose

    def env(self, gpu):
        env = dict(os.environ)
        env["FA_GRADE_SUBSTITUTE"] = self.substitute
        if gpu and self.hide_gpu:
            env["CUDA_VISIBLE_DEVICES"] = ""  # the CUDA runtime then sees no device
        return env

    def exists(self, binary):
        return os.path.isfile(os.path.join(self.bin, binary))

    def run_tests(self, binary, gtest_filter, gpu=True):
        """{test name: {"result": PASSED|FAILED|SKIPPED|CRASHED, "output": str}}, or a str error."""
        exe = os.path.join(self.bin, binary)
        if not os.path.isfile(exe):
            return f"{binary} is not built (cmake --build <build> --target {binary})"
        with tempfile.TemporaryDirectory() as tmp:
            js = os.path.join(tmp, "out.json")
            cmd = [exe, f"--gtest_filter={gtest_filter}", f"--gtest_output=json:{js}"]
            if self.verbose:
                print("  $", " ".join(cmd), file=sys.stderr)
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, env=self.env(gpu),
                                   timeout=self.timeout, errors="replace")
                stdout, rc = p.stdout + p.stderr, p.returncode
            except subprocess.TimeoutExpired as e:
                stdout = (e.stdout or b"").decode(errors="replace") if isinstance(
                    e.stdout, bytes) else (e.stdout or "")
                stdout += f"\n(killed after {self.timeout} s: a hung kernel?)"
                rc = -1
            results = parse_stdout(stdout)
            if os.path.isfile(js):
                with open(js) as f:
                    for suite in json.load(f).get("testsuites", []):
                        for t in suite.get("testsuite", []):
                            name = suite["name"] + "." + t["name"]
                            r = results.setdefault(name, {"output": ""})
                            if t.get("result") == "SKIPPED":
                                r["result"] = "SKIPPED"
                            elif t.get("failures"):
                                r["result"] = "FAILED"
                                if not r["output"]:
                                    r["output"] = "\n".join(x.get("failure", "")
                                                            for x in t["failures"])
                            elif t.get("status") == "RUN":
                                r["result"] = "PASSED"
            for name, r in results.items():
                if "result" not in r:  # started and never finished: the process died in it
                    r["result"] = "CRASHED"
                    why = "was killed (timeout)" if rc == -1 else f"ended (exit code {rc})"
                    r["output"] += f"\n(the test program {why} inside this test)"
            return results


def parse_stdout(text):
    """Each test's output, from GoogleTest's '[ RUN      ] name' to its result line."""
    results, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^\[ RUN      \] (\S+)", line)
        if m:
            current = m.group(1)
            results[current] = {"output": ""}
            continue
        m = re.match(r"^\[ +(OK|FAILED|SKIPPED) +\] (\S+)", line)
        if m and m.group(2) in results and current == m.group(2):
            results[current]["result"] = {"OK": "PASSED"}.get(m.group(1), m.group(1))
            current = None
            continue
        if current is not None:
            results[current]["output"] += line + "\n"
    return results


def grade_check(runner, check, gpu_present, kernel_map=None):
    """One rubric check -> (score, max, output)."""
    pts = check["points"]
    gpu = check.get("gpu", True)
    flt = check["filter"]
    for old, new in (kernel_map or {}).items():
        flt = flt.replace(param_name(old), param_name(new))
    if gpu and not gpu_present:
        # Run anyway (fast: every GPU test skips), so that a broken filter still shows; the score
        # is 0 whatever happens.
        res = runner.run_tests(check["binary"], flt, gpu=True)
        what = res if isinstance(res, str) else f"{len(res)} tests selected"
        return 0, pts, f"{NO_GPU}: 0 of {pts} points; run the grader on a GPU machine ({what})"
    res = runner.run_tests(check["binary"], flt, gpu=gpu)
    if isinstance(res, str):
        return 0, pts, "not graded: " + res
    res = {k: v for k, v in res.items() if filter_matches(flt, k)}
    if not res:
        return 0, pts, f"no test matched the filter {flt} (is the kernel registered?)"
    counts = {}
    for r in res.values():
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    summary = ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items()))
    bad = {k: v for k, v in res.items() if v["result"] in ("FAILED", "CRASHED")}
    skipped = {k: v for k, v in res.items() if v["result"] == "SKIPPED"}
    if bad:
        out = [f"{len(bad)} of {len(res)} tests failed ({summary}):"]
        for k, v in bad.items():
            out.append(f"--- {k} {v['result']}\n{v['output'].strip()}")
        return 0, pts, trim("\n".join(out))
    if skipped:
        k, v = next(iter(skipped.items()))
        why = v["output"].strip().splitlines()[-1:] or ["(no reason given)"]
        gpu_words = ("no GPU", "no CUDA", "no NVIDIA", "needs sm_", "no suitable GPU")
        label = NO_GPU if any(w.lower() in v["output"].lower() for w in gpu_words) else (
            "not graded: skipped")
        return 0, pts, f"{label}: {len(skipped)} of {len(res)} tests skipped ({summary}); {k}: " \
                       f"{why[0]}"
    return pts, pts, f"passed: {len(res)} tests"


def trim(text):
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + "\n... (cut)"


def registered_kernels(runner):
    exe = os.path.join(runner.bin, "fa_hidden_tests")
    if not os.path.isfile(exe):
        return None
    p = subprocess.run([exe, "--fa_list_kernels"], capture_output=True, text=True,
                       env=runner.env(False), timeout=300)
    return set(p.stdout.split())


def bench_ms(runner, names, gpu_present, template):
    """fa_bench's median ms of each kernel's benchmark, timed in one run: {kernel: ms or str}."""
    exe = os.path.join(runner.bin, "fa_bench")
    if not os.path.isfile(exe):
        return {n: "fa_bench is not built" for n in names}
    bench_names = {n: template.format(kernel=n) for n in names}
    esc = lambda s: re.sub(r"([.^$|()\[\]{}*+?\\])", r"\\\1", s)
    flt = "^(" + "|".join(esc(b) for b in set(bench_names.values())) + ")(/|$)"
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "bench.json")
        cmd = [exe, f"--benchmark_filter={flt}", "--benchmark_format=json",
               f"--benchmark_out={js}"]
        subprocess.run(cmd, capture_output=True, text=True, env=runner.env(True), timeout=1800)
        if not os.path.isfile(js):
            return {n: "fa_bench wrote no results" for n in names}
        with open(js) as f:
            rows = json.load(f).get("benchmarks", [])
    out = {}
    for n, b in bench_names.items():
        row = next((r for r in rows if r["name"] == b or r["name"].startswith(b + "/")), None)
        if row is None:
            out[n] = f"no benchmark {b} (does the kernel take this dtype and head dim?)"
        elif row.get("error_occurred"):
            out[n] = f"{b}: {row.get('error_message', 'error')}"
        else:
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[row.get("time_unit", "ms")]
            out[n] = row["real_time"] * scale
    return out


def grade(args, rubric, runner, gpu_present, only=None, assignment_as=None, assignments=True):
    """Grades everything; returns the Gradescope test list with an 'exercise' key per entry."""
    tests = []
    subs = dict(x.split("=", 1) for x in args.substitute.split(",") if "=" in x)
    for ex in rubric["exercises"]:
        if only and ex["id"] not in only:
            continue
        for chk in ex["checks"]:
            t0 = time.time()
            s, m, out = grade_check(runner, chk, gpu_present)
            progress(f"{ex['id']} {chk['name']}", s, m, t0)
            tests.append({"name": f"{ex['id']} {ex['title']}: {chk['name']}", "score": s,
                          "max_score": m, "output": out, "exercise": ex["id"],
                          "check": chk["name"], "binary": chk["binary"],
                          "execution_time": round(time.time() - t0, 1)})
    kernels = None
    for a in rubric.get("assignments", []) if assignments else []:
        if only and a["id"] not in only and a["chapter"] not in only:
            continue
        as_kernel = (assignment_as or {}).get(a["chapter"])
        if kernels is None:
            kernels = registered_kernels(runner) or set()
        submitted = a["kernel"] in kernels or as_kernel or a["kernel"] in subs
        checks = a["checks"] + [{"name": f"speed: at least {a['speed_threshold']:.2f}x the "
                                         f"reference {a['reference']}",
                                 "points": a["speed_points"], "speed": True}]
        passed_all = True
        for chk in checks:
            name = f"assignment {a['id']}: {chk['name']}"
            entry = {"name": name, "max_score": chk["points"], "exercise": "A" + a["chapter"],
                     "check": chk["name"], "binary": chk.get("binary", "fa_bench")}
            if not submitted:
                entry.update(score=0, output=f"not submitted: no kernel registered as "
                                             f"{a['kernel']} (notes/coursework.md)")
            elif chk.get("speed"):
                entry.update(score=0, output=speed_check(runner, a, chk, gpu_present, passed_all,
                                                         as_kernel))
                if entry["output"].startswith("passed"):
                    entry["score"] = chk["points"]
            else:
                # A registered kernel graded as the submission: the public tests select it by its
                # own name, the hidden suite runs it under the assignment's (FA_GRADE_SUBSTITUTE).
                kmap, arunner = None, runner
                if as_kernel and chk["binary"] == "fa_hidden_tests":
                    arunner = Runner(runner.build, runner.hide_gpu,
                                     ",".join(x for x in (runner.substitute,
                                                          f"{a['kernel']}={as_kernel}") if x),
                                     runner.verbose, runner.timeout)
                elif as_kernel:
                    kmap = {a["kernel"]: as_kernel}
                s, m, out = grade_check(arunner, chk, gpu_present, kmap)
                entry.update(score=s, output=out)
                passed_all = passed_all and s == m
                progress(name, s, m, None)
            tests.append(entry)
    return tests


def progress(what, score, max_score, t0):
    took = f" ({time.time() - t0:.0f} s)" if t0 else ""
    print(f"  {what}: {score:g} of {max_score:g}{took}", file=sys.stderr, flush=True)


def speed_check(runner, a, chk, gpu_present, correct, as_kernel):
    if not gpu_present:
        return f"{NO_GPU}: 0 of {chk['points']} points"
    if not correct:
        return "not timed: the correctness checks did not all pass"
    student = as_kernel or a["kernel"]
    ms = bench_ms(runner, [student, a["reference"]], gpu_present, a["benchmark"])
    s, r = ms[student], ms[a["reference"]]
    if isinstance(s, str) or isinstance(r, str):
        return "not timed: " + (s if isinstance(s, str) else r)
    ratio = r / s
    verdict = "passed" if ratio >= a["speed_threshold"] else "too slow"
    return (f"{verdict}: {a['benchmark'].format(kernel=student)} {s:.4f} ms, reference "
            f"{a['reference']} {r:.4f} ms in the same run: {ratio:.2f}x of its speed "
            f"(threshold {a['speed_threshold']:.2f})")


def print_table(tests, file=sys.stdout):
    per = {}
    for t in tests:
        e = per.setdefault(t["exercise"], [0, 0, set()])
        e[0] += t["score"]
        e[1] += t["max_score"]
        if t["score"] < t["max_score"]:
            e[2].add(t["output"].split(":")[0].split("\n")[0][:40])
    print(f"{'exercise':<10} {'score':>7} {'max':>5}  notes", file=file)
    for ex, (s, m, notes) in per.items():
        print(f"{ex:<10} {s:>7g} {m:>5g}  {'; '.join(sorted(notes))}", file=file)
    tot = sum(t["score"] for t in tests)
    mx = sum(t["max_score"] for t in tests)
    print(f"{'total':<10} {tot:>7g} {mx:>5g}", file=file)


def visibility(test):
    """Gradescope's visibility of a check: the hidden suite's only once grades are published."""
    hidden = test.get("binary") == "fa_hidden_tests" or test.get("check", "").startswith("hidden")
    return "after_published" if hidden else "visible"


def write_results(tests, path, extra=None):
    out = {"score": sum(t["score"] for t in tests),
           "max_score": sum(t["max_score"] for t in tests)}
    out.update(extra or {})
    out["tests"] = [dict({k: v for k, v in t.items() if k not in ("exercise", "check", "binary")},
                         visibility=t.get("visibility") or visibility(t)) for t in tests]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


def exercise_build(build):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            return re.search(r"^FA_BUILD_EXERCISES:\w+=(ON|1|TRUE)$", f.read(), re.M) is not None
    except OSError:
        return False


def test_without_gpu(args, rubric):
    """The grader's CPU test: fast, in the default label, CI included."""
    runner = Runner(args.build, hide_gpu=True, verbose=args.verbose)
    tests = grade(args, rubric, runner, gpu_present=False)
    print_table(tests)
    errors = []
    exercises = exercise_build(args.build)
    by_check = {}
    for ex in rubric["exercises"]:
        for c in ex["checks"]:
            by_check[(ex["id"], c["name"])] = c
    for t in tests:
        c = by_check.get((t["exercise"], t["check"]))
        if c is None:  # an assignment: nothing is submitted in the repository
            if "not submitted" not in t["output"] and not t["output"].startswith(NO_GPU):
                errors.append(f"{t['name']}: expected 'not submitted' or '{NO_GPU}': {t['output']}")
            if t["score"] != 0:
                errors.append(f"{t['name']}: scored {t['score']} without a submission")
        elif c.get("gpu", True):
            if t["score"] != 0 or not t["output"].startswith(NO_GPU):
                errors.append(f"{t['name']}: a GPU check without a GPU must be '{NO_GPU}' with 0 "
                              f"points, got {t['score']}: {t['output'][:300]}")
        elif exercises:
            if t["score"] != 0:
                errors.append(f"{t['name']}: the untouched exercise scored {t['score']}")
            elif "TODO" not in t["output"]:
                print(f"note: {t['name']}: failed without a 'TODO ... not implemented' message")
        elif t["score"] != t["max_score"]:
            errors.append(f"{t['name']}: the solution scored {t['score']} of {t['max_score']}: "
                          f"{t['output'][:1500]}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "results.json")
        write_results(tests, path)
        with open(path) as f:
            res = json.load(f)
        if not res["tests"] or any(set(x) < {"name", "score", "max_score", "output"}
                                   for x in res["tests"]):
            errors.append("results.json lacks tests or their name/score/max_score/output")
        if res["score"] >= res["max_score"]:
            errors.append("full marks without a GPU")
        for x in res["tests"]:
            want = "after_published" if ": hidden: " in x["name"] else "visible"
            if x.get("visibility") != want:
                errors.append(f"results.json: {x['name']}: visibility {x.get('visibility')}, "
                              f"expected {want}")
    cpu_points, all_points = cpu_share(rubric)
    print(f"points graded without a GPU: {cpu_points} of {all_points}")
    if 2 * cpu_points <= all_points:
        errors.append(f"only {cpu_points} of {all_points} points grade without a GPU: the CPU "
                      f"exercises must carry more than half (rubric.json)")
    errors += check_substitution_and_mutants(args, rubric, runner)
    for e in errors:
        print("ERROR:", e)
    print("grader without a GPU:", "FAILED" if errors else "ok",
          f"({len(tests)} checks, {'exercise' if exercises else 'solution'} build)")
    return 1 if errors else 0


def cpu_share(rubric):
    """(points of the checks that need no GPU, all points), the assignments' included."""
    cpu = sum(c["points"] for e in rubric["exercises"] for c in e["checks"]
              if not c.get("gpu", True))
    total = sum(c["points"] for e in rubric["exercises"] for c in e["checks"])
    total += sum(sum(c["points"] for c in a["checks"]) + a["speed_points"]
                 for a in rubric.get("assignments", []))
    return cpu, total


def mutant_exercise(rubric, mtype, mname):
    """The exercise a mutant imitates: its chapter (mutant/<chapter>_...) and kernel type."""
    chapter = mname.split("/", 1)[-1][:2]
    return next((e for e in rubric["exercises"]
                 if e["id"] == chapter and e.get("type") == mtype), None)


def check_substitution_and_mutants(args, rubric, runner):
    """Without a GPU: substitution selects the hidden tests, and every mutant has its exercise."""
    errors = []
    mutants = list_mutants(runner)
    if not mutants:
        errors.append("fa_hidden_tests --fa_list_mutants listed no mutant")
    for mtype, mname in mutants:
        if mname not in rubric.get("mutants_not_graded", {}) and not mutant_exercise(
                rubric, mtype, mname):
            errors.append(f"{mname} ({mtype}): no exercise of its chapter and type in the rubric")
    if not os.path.isfile(os.path.join(runner.bin, "fa_hidden_tests")):
        return errors + ["fa_hidden_tests is not built"]
    graded = next((m for t, m in mutants if t == "attn_fwd" and mutant_exercise(rubric, t, m)),
                  None)
    if graded:
        ex = mutant_exercise(rubric, "attn_fwd", graded)
        a = next(x for x in rubric["assignments"] if x["chapter"] == "05")
        sub = f"{ex['kernels'][0]}={graded},{a['kernel']}={a['reference']}"
        env = dict(os.environ, FA_GRADE_SUBSTITUTE=sub, CUDA_VISIBLE_DEVICES="")
        p = subprocess.run([os.path.join(runner.bin, "fa_hidden_tests"), "--gtest_list_tests"],
                           capture_output=True, text=True, env=env, timeout=300)
        for want in (param_name(a["kernel"]), param_name(ex["kernels"][0])):
            if want not in p.stdout:
                errors.append(f"FA_GRADE_SUBSTITUTE={sub}: no hidden test of {want}")
    print(f"mutants: {len(mutants)} listed, each with its exercise; substitution selects its tests")
    return errors


def list_mutants(runner):
    exe = os.path.join(runner.bin, "fa_hidden_tests")
    if not os.path.isfile(exe):
        return []
    p = subprocess.run([exe, "--fa_list_mutants"], capture_output=True, text=True, timeout=300)
    return [tuple(line.split(None, 1)) for line in p.stdout.splitlines() if line.strip()]


def self_test(args, rubric):
    """On a GPU: solutions full marks; every mutant loses points where it is substituted."""
    if not have_gpu():
        print("no GPU: the grader's self-test needs one (skipped)")
        return 77
    errors = []
    runner = Runner(args.build, verbose=args.verbose, timeout=args.timeout)
    print("== the solutions", flush=True)
    assignment_as = ({a["chapter"]: a["reference"] for a in rubric.get("assignments", [])}
                     if args.with_assignments else None)
    tests = grade(args, rubric, runner, True, assignment_as=assignment_as,
                  assignments=args.with_assignments)
    print_table(tests)
    sys.stdout.flush()
    for t in tests:
        if t["score"] != t["max_score"]:
            errors.append(f"solution: {t['name']}: {t['score']} of {t['max_score']}: "
                          f"{t['output'][:1500]}")
    print("== the mutants, each in place of the exercise kernel of its chapter")
    skip = rubric.get("mutants_not_graded", {})
    for mtype, mname in list_mutants(runner):
        if mname in skip:
            print(f"{mname:<40} not graded here: {skip[mname]}")
            continue
        ex = mutant_exercise(rubric, mtype, mname)
        if ex is None:
            errors.append(f"{mname}: no exercise of its chapter takes a {mtype} kernel")
            continue
        sub = ",".join(f"{k}={mname}" for k in ex["kernels"])
        # A mutant that hangs (a missing barrier arrive) is killed after args.mutant_timeout s.
        mrunner = Runner(args.build, substitute=sub, verbose=args.verbose,
                         timeout=args.mutant_timeout)
        lost, not_graded, t0 = [], [], time.time()
        for chk in ex["checks"]:
            if chk["binary"] != "fa_hidden_tests":
                continue  # the public tests run the registered kernel, never a substitute
            s, m, out = grade_check(mrunner, chk, True)
            if out.startswith("not graded"):  # e.g. a Hopper mutant on another GPU: no verdict
                not_graded.append(out.splitlines()[0][:120])
            elif s < m:
                lost.append(chk["name"])
                if not args.all_checks:
                    break  # one lost check is the verdict; --all-checks lists every one
        if not lost and not_graded:
            print(f"{mname:<40} not graded on this machine: {not_graded[0]}")
            continue
        verdict = "caught by " + "; ".join(lost) if lost else "NOT CAUGHT"
        print(f"{mname:<40} in place of {ex['kernels'][0]:<24} {verdict} "
              f"({time.time() - t0:.0f} s)", flush=True)
        if not lost:
            errors.append(f"{mname}: full marks in the hidden checks of exercise {ex['id']}")
    for e in errors:
        print("ERROR:", e)
    print("grader self-test:", "FAILED" if errors else "ok")
    return 1 if errors else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the build folder (default: build)")
    ap.add_argument("--rubric", default=os.path.join(HERE, "rubric.json"))
    ap.add_argument("--out", help="Gradescope results (default: BUILD/grading/results.json)")
    ap.add_argument("--substitute", default="",
                    help="kernel=mutant,... : run a mutant in place of a kernel (hidden suite)")
    ap.add_argument("--assignment-as", default="",
                    help="chapter=kernel,... : grade a registered kernel as that assignment")
    ap.add_argument("--only", default="", help="exercise ids or assignment chapters, e.g. 05,07")
    ap.add_argument("--no-gpu", action="store_true", help="hide the GPU from the test binaries")
    ap.add_argument("--test-without-gpu", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--with-assignments", action="store_true")
    ap.add_argument("--all-checks", action="store_true",
                    help="self-test: run every hidden check of each mutant, not up to the first "
                         "that catches it")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per test program")
    ap.add_argument("--mutant-timeout", type=int, default=60,
                    help="self-test: seconds per test program running a mutant")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if not os.path.isdir(args.build) or not os.path.isdir(os.path.join(args.build, "bin")):
        what = "does not exist" if not os.path.isdir(args.build) else "has no bin/ folder"
        print(f"grader.py: the build folder {args.build} {what}: configure and build first "
              f"(cmake --preset default && cmake --build build)", file=sys.stderr)
        return 2
    args.out = args.out or os.path.join(args.build, "grading", "results.json")
    with open(args.rubric) as f:
        rubric = json.load(f)
    if args.test_without_gpu:
        return test_without_gpu(args, rubric)
    if args.self_test:
        return self_test(args, rubric)
    runner = Runner(args.build, hide_gpu=args.no_gpu, substitute=args.substitute,
                    verbose=args.verbose, timeout=args.timeout)
    gpu_present = not args.no_gpu and have_gpu()
    if not gpu_present:
        print(f"no GPU here: every GPU check is reported '{NO_GPU}' with 0 points")
    only = {x for x in args.only.split(",") if x} or None
    assignment_as = dict(x.split("=", 1) for x in args.assignment_as.split(",") if "=" in x)
    tests = grade(args, rubric, runner, gpu_present, only=only, assignment_as=assignment_as)
    print_table(tests)
    write_results(tests, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
