"""bench/compare_serving.py --rounds: the rows of several rounds become one row each, the median of
its rounds, with its rates recomputed and the rounds in its note. A kernel's single timing depends
on where it stands in the order (chapter 09's README); the rounds alternate the order, so a row's
median must come from its own samples only. No torch, no GPU: merge_rounds is plain Python."""
import importlib.util
import os

import pytest

from conftest import REPO_ROOT


@pytest.fixture(scope="module")
def cs():
    path = os.path.join(REPO_ROOT, "bench", "compare_serving.py")
    spec = importlib.util.spec_from_file_location("compare_serving", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its imports are the standard library's; torch comes in main()
    return module


def row(cs, impl, ms, flops=4e12, nbytes=None, note=""):
    del cs.ROWS[:]
    return cs.record("varlen", "a shape", impl, "fwd", ms, flops, nbytes, note)


def test_one_round_comes_back_as_it_is(cs):
    rows = [row(cs, "ours a", 2.0), row(cs, "ours b", None, note="failed: no")]
    assert cs.merge_rounds([rows]) == rows


def test_each_row_is_the_median_of_its_own_rounds(cs):
    # Round 2 meets the kernels in the other order: the merged rows keep the first round's.
    r1 = [row(cs, "ours a", 2.0), row(cs, "ours b", 4.0), row(cs, "peer", 8.0, note="x")]
    r2 = [row(cs, "ours b", 6.0), row(cs, "ours a", 1.0), row(cs, "peer", 10.0, note="x")]
    r3 = [row(cs, "ours a", 3.0), row(cs, "ours b", 5.0), row(cs, "peer", None, note="failed")]
    merged = cs.merge_rounds([r1, r2, r3])
    assert [m["impl"] for m in merged] == ["ours a", "ours b", "peer"]
    a, b, peer = merged
    assert a["ms"] == 2.0 and b["ms"] == 5.0
    assert peer["ms"] == 9.0  # the median of the rounds that timed it
    assert a["tflops"] == pytest.approx(4e12 / 2e-3 / 1e12)
    assert b["tflops"] == pytest.approx(4e12 / 5e-3 / 1e12)
    assert a["note"] == "rounds: 2.0000, 1.0000, 3.0000"
    assert peer["note"] == "x; rounds: 8.0000, 10.0000, -"
    # The rounds' own rows are left as they were.
    assert r1[0]["ms"] == 2.0 and r1[0]["note"] == ""


def test_a_row_no_round_timed_stays_without_rates(cs):
    r1 = [row(cs, "ours a", None, nbytes=1e9, note="failed: refused")]
    r2 = [row(cs, "ours a", None, nbytes=1e9, note="failed: refused")]
    (m,) = cs.merge_rounds([r1, r2])
    assert m["ms"] is None and m["tflops"] is None and m["gbps"] is None
    assert m["note"] == "failed: refused; rounds: -, -"


def test_gb_per_second_follows_the_median(cs):
    r1 = [row(cs, "ours a", 1.0, flops=None, nbytes=2e9)]
    r2 = [row(cs, "ours a", 3.0, flops=None, nbytes=2e9)]
    (m,) = cs.merge_rounds([r1, r2])
    assert m["ms"] == 2.0 and m["gbps"] == pytest.approx(1000.0) and m["tflops"] is None
