"""The dispatch from Python (common/dispatch.h through the C ABI): fa.pick, fa.dispatch_table
and fa.explain. pick(..., sm=90) chooses for an H100/H200 whether or not one is here, so these
run on any machine with the library built; tests/cpu/test_dispatch.cpp checks the table itself."""
import os

import pytest

from conftest import REPO_ROOT, fa, library_or_skip


def hopper_kernels_built():
    return any(k.name == "07/v5_persistent" for k in fa.list_kernels())


def test_protocol_shapes_pick_chapter_07_on_hopper():
    library_or_skip()
    if not hopper_kernels_built():
        pytest.skip("this build targets no sm_90: no chapter 07 kernels")
    for d in (64, 128, 256):
        for causal in (False, True):
            f = fa.pick("fwd", "bf16", d, 4096, 4096, causal=causal, sm=90)
            b = fa.pick("bwd", "bf16", d, 4096, 4096, causal=causal, sm=90)
            assert f.kernel.startswith("07/") and f.kind == "fwd", f
            assert b.kernel.startswith("07/bwd_") and b.kind == "bwd", b
            for p in (f, b):
                assert os.path.isfile(os.path.join(REPO_ROOT, p.measured)), p.measured


def test_head_dims_between_instances_round_up_on_hopper():
    """D 80, 96 and 192 (multiples of 8 between chapter 07's instances 64, 128, 256) and the D 32
    backward run in the Hopper kernels, rounded up inside (the forward at D 80, 96 and 192 on
    07/t52's own instances 96 and 192, in its step t56); D 59 and 111 (off the step of 8) go to chapter 05's t15 and 06's t17."""
    library_or_skip()
    if not hopper_kernels_built():
        pytest.skip("this build targets no sm_90: no chapter 07 kernels")
    for d in (80, 96, 192):
        f = fa.pick("fwd", "bf16", d, 4096, 4096, causal=True, sm=90)
        b = fa.pick("bwd", "bf16", d, 4096, 4096, causal=True, sm=90)
        assert f.kernel == "07/t56_wide_o_stores", f  # the wide K/V tiles, O in 16-byte stores
        # D 96's backward instance runs full rows and causal ones up to 2048 keys.
        assert b.kernel == ("07/bwd_v6_head_groups" if d <= 96 else "07/bwd_t53_d256_halves"), b
        full = fa.pick("bwd", "bf16", d, 4096, 4096, causal=False, sm=90)
        assert full.kernel == ("07/bwd_t55_d96" if d <= 96 else "07/bwd_t53_d256_halves"), full
    b32 = fa.pick("bwd", "bf16", 32, 4096, 4096, causal=True, sm=90)
    assert b32.kernel == "07/bwd_t48_dq_in_turns", b32
    # Off the step of 8 (no TMA: rows not 16-byte aligned): chapter 05's and 06's element copies.
    assert fa.pick("fwd", "bf16", 59, 4096, 4096, sm=90).kernel == "05/t15_any_head_dim"
    assert fa.pick("bwd", "bf16", 111, 4096, 4096, sm=90).kernel == "06/t17_any_head_dim"


def test_packed_batches_on_hopper():
    """Packed batches on Hopper: chapter 09's persistent rungs (07/t52 walking the batch; from
    D 104 with its units dealt heaviest first); a window goes to the persistent rung with the
    window."""
    library_or_skip()
    if not hopper_kernels_built():
        pytest.skip("this build targets no sm_90: no chapter 07 or 09 Hopper kernels")
    v3, v6 = "09/hopper_v3_varlen_persistent", "09/hopper_v6_varlen_heaviest_first"
    for d, want in ((40, v3), (80, v3), (96, v3), (160, v6), (256, v6), (104, v6), (128, v6)):
        for causal in (False, True):
            p = fa.pick("varlen_fwd", "bf16", d, 4096, 4096, causal=causal, sm=90)
            assert p.kernel == want, (d, causal, p)
    # The window has its own rung.
    w = fa.pick("varlen_fwd", "bf16", 64, 4096, 4096, causal=True, window=True, sm=90)
    assert w.kernel == "09/hopper_v5_window_single_units", w


def test_each_row_names_its_log():
    library_or_skip()
    rows = fa.dispatch_table()
    assert len(rows) > 10
    for r in rows:
        assert r.op in ("fwd", "bwd", "varlen_fwd", "varlen_bwd", "paged_fwd"), r
        assert r.measured.startswith("notes/measured/") and r.why, r


def test_refusals():
    library_or_skip()
    with pytest.raises(fa.UnsupportedError, match="no registered kernel runs fwd bf16 D264"):
        fa.pick("fwd", "bf16", 264, 4096, 4096, sm=80)
    with pytest.raises(fa.UnsupportedError, match="no registered kernel runs bwd bf16 D264"):
        fa.pick("bwd", "bf16", 264, 4096, 4096, sm=80)
    with pytest.raises(ValueError, match="op must be fwd, bwd"):
        fa.pick("sideways", "bf16", 128, sm=90)
    if fa.describe_gpu().startswith("no GPU"):
        with pytest.raises(fa.NoGpuError, match="no GPU"):
            fa.pick("fwd", "bf16", 128, 4096, 4096)


def test_explain_for_another_gpu():
    """fa.explain on meta tensors (shapes only) for an sm_90 GPU: the kernel and its row, the
    reason and the log, for both directions; grouped heads say how the backward runs."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    library_or_skip()
    q = torch.empty(2, 8, 4096, 128, dtype=torch.bfloat16, device="meta")
    k = torch.empty(2, 2, 4096, 128, dtype=torch.bfloat16, device="meta")
    lines = fa.explain(q, k, k, causal=True, sm=90)
    assert lines[0].startswith("forward: ") and "on sm_90]" in lines[0], lines
    assert any(x.startswith("  measured: notes/measured/") for x in lines), lines
    assert any(x.startswith("backward: ") for x in lines), lines
    assert lines[-1].startswith("grouped heads in the backward"), lines
    grouped_rows = ("backward: 07/bwd_v6_head_groups", "backward: 07/bwd_t48_dq_in_turns",
                    "backward: 07/bwd_v1_tma_wgmma")
    if any(x.startswith(grouped_rows) for x in lines):  # their grouped rows
        assert "sums dK, dV over each group itself" in lines[-1], lines
    brief = fa.explain(q, q, q, causal=False, sm=80, brief=True)
    # An A100: 06/v5's 171 KiB a block do not fit its 163 KiB, so its backward is 06/v4.
    assert brief == ["forward: 05/v4_swizzled_pipelined", "backward: 06/v4_bc128_tuned"], brief
    assert fa.explain(q, q, q, kernel="05/v2_mma", kernel_bwd=None) == ["forward: 05/v2_mma (named)"]
