#!/usr/bin/env python3
"""The scripts that compare or check must fail when they compared or checked nothing.

    python3 tests/empty_runs_fail.py

The CPU test EmptyRunsFail runs this. It checks, without torch, a GPU or a build:
* bench/compare_serving.py exits 1 with "nothing to compare" when PyTorch is missing and when
  PyTorch sees no GPU, as bench/compare_sdpa.py does: a run that compared nothing is not a
  comparison. A stand-in `torch` package, first on the path, plays each case, so the check is the
  same on a machine that has torch and a GPU (where the real comparison takes minutes).
* tests/doc_commands.py fails a block that selects no test (gtest's "Running 0 tests", ctest's
  "No tests were found"), since both exit 0, and passes one that ran a test.
* bench/pair_rounds.py exits 1 with "nothing to compare" when no shape has rows of both kernels
  in every round, and on the per-kernel files bench/fair_rounds.sh writes (the groups its
  --rounds prints) gives each kernel's median, the speedup and the per-round spread.
Exit status 0 when every case holds, 1 otherwise; each case prints what it saw.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NO_TORCH = 'raise ImportError("no torch here (a stand-in of tests/empty_runs_fail.py)")\n'
NO_GPU = '''"""A stand-in for PyTorch on a machine with no GPU (tests/empty_runs_fail.py)."""
__version__ = "0.0-stand-in"


class cuda:
    @staticmethod
    def is_available():
        return False
'''


def run(args, pythonpath=None):
    env = dict(os.environ)
    env.pop("FA_LIBRARY", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    r = subprocess.run([sys.executable] + args, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


def check(name, ok, output):
    print("%s: %s" % (name, "ok" if ok else "FAILED"))
    if not ok:
        print("  its output:\n    " + "\n    ".join(output.strip().splitlines()[-20:]))
    return ok


def compare_serving_cases(tmp):
    results = []
    for case, torch_init in (("without PyTorch", NO_TORCH), ("with PyTorch but no GPU", NO_GPU)):
        stub = os.path.join(tmp, case.replace(" ", "_"))
        os.makedirs(os.path.join(stub, "torch"))
        with open(os.path.join(stub, "torch", "__init__.py"), "w") as f:
            f.write(torch_init)
        out_dir = os.path.join(tmp, "out_" + case.replace(" ", "_"))
        code, output = run(["bench/compare_serving.py", "--out", out_dir, "--reps", "1"], stub)
        results.append(check("compare_serving.py %s exits 1 (got %d)" % (case, code),
                             code == 1 and "nothing to compare" in output, output))
    return results


def doc_commands_cases(tmp):
    results = []
    for case, line, want in (
            ("a gtest filter that selects no test", "[==========] Running 0 tests from 0 test suites.", 1),
            ("a ctest selection of no test", "No tests were found!!!", 1),
            ("a gtest run of one test", "[==========] Running 1 test from 1 test suite.", 0)):
        note = os.path.join(tmp, "note_%d.md" % len(results))
        with open(note, "w") as f:
            f.write("A note.\n\n```bash\necho '%s'\n```\n" % line)
        code, output = run(["tests/doc_commands.py", note])
        results.append(check("doc_commands.py on %s exits %d (got %d)" % (case, want, code),
                             code == want, output))
    return results


def bench_json(path, kernel, rows):
    """A stand-in fa_bench JSON: `rows` maps a shape to its time in ms."""
    with open(path, "w") as f:
        name = "attn_bwd/%s/bf16/%s/iterations:1/manual_time"
        json.dump({"benchmarks": [{"name": name % (kernel, s), "real_time": ms, "time_unit": "ms"}
                                  for s, ms in rows.items()]}, f)


def pair_rounds_cases(tmp):
    new, base = "07/new_kernel", "07/base_kernel"
    times = {1: (1.0, 1.2), 2: (1.1, 1.21), 3: (0.9, 1.26)}  # round: (new ms, base ms)
    for r, (n, b) in times.items():
        for k, ms in ((new, n), (base, b)):
            bench_json(os.path.join(tmp, "r%d_bwd_%s.json" % (r, k.replace("/", "_"))), k,
                       {"D64/full/N512": ms})
    groups = subprocess.run(["bash", "bench/fair_rounds.sh", "--rounds", tmp, "bwd", new, base],
                            cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.split()
    code, output = run(["bench/pair_rounds.py", new, base] + groups)
    # medians 1.0 and 1.21: 1.210x; per round 1.2, 1.1, 1.4
    row = "| bf16/D64/full/N512 | 1.000 | 1.210 | 1.210x | 1.100-1.400 |"
    results = [check("pair_rounds.py on fair_rounds.sh's per-kernel files (3 groups)",
                     code == 0 and len(groups) == 3 and row in output, output)]
    code, output = run(["bench/pair_rounds.py", new, "07/absent_kernel"] + groups)
    results.append(check("pair_rounds.py with a kernel in no file exits 1 (got %d)" % code,
                         code == 1 and "nothing to compare" in output, output))
    return results


def main():
    with tempfile.TemporaryDirectory() as tmp:
        results = compare_serving_cases(tmp) + doc_commands_cases(tmp) + pair_rounds_cases(tmp)
    print("%d of %d cases hold" % (sum(results), len(results)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
